#!/usr/bin/env bash
# One call on a GPU machine: PyTorch anchors, then vkern's ops suite on the
# cuda backend, in the same run. Expects bin/vkern and a copy of
# ../shared/bench/anchors.py at $ANCHORS (default .anchors/anchors.py).
set -uo pipefail
out=${OUT:-/tmp/vkern-out}
anchors=${ANCHORS:-.anchors/anchors.py}
mkdir -p "$out"
export VKERN_CACHE=${VKERN_CACHE:-/tmp/vkern-cache}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 "$anchors" --gemm 1024x1024x1024 4096x4096x4096 8192x8192x8192 8192x4096x11008 4097x4099x4101 \
  --softmax 8192x32768 8192x50304 32768x1024 1x1 7x4099 > "$out/anchors.jsonl"
bin/vkern bench --suite ops --backend cuda --anchors "$out/anchors.jsonl" \
  --json "$out/bench-ops.json" --svg "$out/bench-ops.svg" 2>/dev/null
