#!/usr/bin/env bash
# One call on a GPU machine: the kernel server on the cuda backend, with a
# bare CUDA launch + synchronise (bench/cuda_launch_anchor.cu) measured
# between the cases as the anchor of the tiny RUN. Four quick samples of the
# round trips, each between two anchors, then the whole server suite between
# two more. Expects bin/vkern (CGO_ENABLED=0 go build -o bin/vkern ./cmd/vkern).
set -uo pipefail
out=${OUT:-/tmp/vkern-out}
mkdir -p "$out"
export VKERN_CACHE=${VKERN_CACHE:-/tmp/vkern-cache}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
bin/vkern verify --backend cuda --quick 2>/dev/null | tail -3
nvcc -O3 -o /tmp/launch_anchor bench/cuda_launch_anchor.cu || exit 1
anchor() {
  /tmp/launch_anchor | tee -a "$out/launch-anchor.jsonl" |
    python3 -c "import json, sys; print('anchor launch+sync %.2f us' % (json.load(sys.stdin)['median_ms'] * 1e3))"
}
for i in 1 2 3 4; do
  anchor
  bin/vkern bench --suite server --backend cuda --quick 2>/dev/null |
    grep -E '^(ping|ping_pipes|run_tiny|run_tiny_untimed|run_tiny_untimed_pipes|run_batch100_overhead_per_op) '
done
anchor
bin/vkern bench --suite server --backend cuda --json "$out/bench-server-cuda.json" 2>/dev/null
anchor
