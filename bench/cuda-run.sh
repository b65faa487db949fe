#!/usr/bin/env bash
# One call on a GPU machine: verify the cuda backend, then time it against the
# PyTorch anchors measured in the same run. Expects the vkern binary in bin/
# (built with CGO_ENABLED=0 go build -o bin/vkern ./cmd/vkern) and anchors.py
# at $ANCHORS (default .anchors/anchors.py, a copy of ../shared/bench/anchors.py).
# Writes reports and JSON under $OUT and prints a short table last.
set -uo pipefail
out=${OUT:-/tmp/vkern-out}
anchors=${ANCHORS:-.anchors/anchors.py}
mkdir -p "$out"
export VKERN_CACHE=${VKERN_CACHE:-/tmp/vkern-cache}
vk=bin/vkern
step() { printf '\n=== %s\n' "$*"; }

step device; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
step doctor; $vk doctor | cut -c1-160
step "verify --quick"
$vk verify --backend cuda --quick --json "$out/verify-quick.json" --md "$out/verify-quick.md" 2>/dev/null | tail -9
step "verify (default shapes)"
$vk verify --backend cuda --json "$out/verify-default.json" --md "$out/verify-default.md" 2>/dev/null | tail -9
step "verify (edge shapes)"
$vk verify --backend cuda --op gemm,gemm_grad_a,gemm_grad_b --shape 1x1x1 --shape 17x4099x31 2>/dev/null | tail -6
$vk verify --backend cuda --op softmax,softmax_grad --shape 1x1 --shape 7x4099 --shape 32768x1024 2>/dev/null | tail -6
step anchors
python3 "$anchors" --gemm 1024x1024x1024 4096x4096x4096 > "$out/anchors.jsonl" && cat "$out/anchors.jsonl"
for n in 1024 4096; do
  step "bench core n=$n"
  $vk bench --suite core --backend cuda --n $n --anchors "$out/anchors.jsonl" --json "$out/bench-$n.json" 2>/dev/null
done
