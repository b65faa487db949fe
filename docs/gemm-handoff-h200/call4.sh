#!/usr/bin/env bash
# 2026-11-28, on an nvidia-h200 (no H100 was lent): main with layernorm's
# forward two rows a warp (variant 2) and the hand-off taken out again.
#   - every planted layernorm defect (background), the one call 3 could not
#     build (its text named x.w, now x[k].w) among them;
#   - the conformance suite and verify of layernorm;
#   - gpt2 steps (B 16) with VKERN_LAYERNORM_PAIRS=0 and unset, alternating,
#     three rounds;
#   - the gpt2 step against PyTorch's eager and torch.compile steps
#     (bench/cuda-train-bench.sh) in the same call.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call4
LIMIT=${LIMIT:-330}
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "build"
build_server bin/vkern || exit 1
step "planted layernorm defects (background), conformance, verify"
timeout 240 ./bin/vkern.test -test.run "TestPlantedDefectsInTheCUDAKernelsAreIncorrect/layernorm" \
  -test.v > "$out/defects.txt" 2>&1 &
defects=$!
run conformance-layernorm timeout 120 ./bin/vkern.test -test.v -test.run '^TestCUDABackendConformance$/^layernorm$'
grep -E '^(    )?--- (PASS|FAIL|SKIP)|^(ok|FAIL|PASS)' "$out/conformance-layernorm.txt" | tail -2
VERIFY_TIMEOUT=120 verify verify-layernorm --op layernorm --shape 1001x768 --shape 16384x768 --shape 7x769 \
  --shape 64x768
wait $defects
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt" | grep -v -- "--- PASS: .*layernorm_grad" | head -20
echo "defects caught: $(grep -cE '^    --- PASS' "$out/defects.txt"), missed: $(grep -cE '^    --- FAIL' "$out/defects.txt")"
step "gpt2 steps, alternating"
one() {
  local tag=$1; shift
  [ "$(left)" -gt 100 ] || { echo "$tag: no time left"; return; }
  env "$@" ./bin/vkern bench --suite train --backend cuda --model gpt2 --batch 16 --steps 30 --warmup 10 \
    --json "$out/step-$tag.json" > "$out/step-$tag.txt" 2>&1
  printf '%-14s %s\n' "$tag" "$(grep -E '^train_' "$out/step-$tag.txt" | head -1)"
}
one one-row-1 VKERN_LAYERNORM_PAIRS=0
one pairs-1
one pairs-2
one one-row-2 VKERN_LAYERNORM_PAIRS=0
one one-row-3 VKERN_LAYERNORM_PAIRS=0
one pairs-3
step "against PyTorch"
train_steps
