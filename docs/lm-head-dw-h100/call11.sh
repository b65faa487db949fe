#!/usr/bin/env bash
# Branch dw-depth-classes, not yet run: kDepthClassL in the depth's order
# (eight class boxes a stage, WideDC), opt-in with VKERN_GEMM_DEPTH_CLASSES=1.
#   - verify it at odd depth, with accumulation and another shift pattern,
#     all three distributions (call 10's class-major order failed special),
#     and at the head (boxes from column −48 included: every first tile);
#   - the head's dW with it, in WideDCS too (the staged epilogue in three
#     stages; VKERN_GEMM_DEPTH_CLASSES=2), with the padded copy, and at
#     50304, twice, with cuBLAS before and after;
#   - its five planted defects;
#   - first, the gemm family at its default shapes and L's row classes
#     (WideSR), whose stage layout now comes from RawBoxes as WideDC's does.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call11
LIMIT=520
source bench/call-lib.sh
step "build"
build_server bin/vkern || exit 1
step "verify"
verify verify-gemm-family --op linear,linear_grad_w,linear_nt,linear_grad_x,gemm,gemm_grad_a,gemm_grad_b
verify verify-class-l --op linear --shape 16390x520x1001 --shape 4103x1024x4097 --dist integer --dist normal --dist special
VKERN_GEMM_DEPTH_CLASSES=1 verify verify-depth-classes --op linear_grad_w --shape 2051x768x4097 \
  --shape 1025x520x4097:accumulate=1 --shape 1024x520x4099 --dist integer --dist normal --dist special
VKERN_GEMM_DEPTH_CLASSES=2 verify verify-depth-classes-staged --op linear_grad_w --shape 2051x768x4097 \
  --shape 1025x520x4097:accumulate=1 --dist integer --dist normal --dist special
VKERN_GEMM_DEPTH_CLASSES=1 VERIFY_TIMEOUT=120 verify verify-head-dw --op linear_grad_w --shape 16384x768x50257 \
  --shape 16384x768x50257:accumulate=0 --dist normal
step "anchors and bench"
python3 bench/op_anchors.py linear_grad_w=16384x768x50304 > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
for round in 1 2; do
  [ "$(left)" -gt 220 ] || break
  VKERN_GEMM_DEPTH_CLASSES=1 bench_ops "classes-$round" bin/vkern "$out/anchors.jsonl" linear_grad_w 16384x768x50257
  VKERN_GEMM_DEPTH_CLASSES=2 bench_ops "staged-$round" bin/vkern "$out/anchors.jsonl" linear_grad_w 16384x768x50257
  bench_ops "padded-$round" bin/vkern "$out/anchors.jsonl" linear_grad_w 16384x768x50257 16384x768x50304
done
python3 bench/op_anchors.py linear_grad_w=16384x768x50304 > "$out/anchors-after.jsonl" 2> "$out/anchors-after.stderr" || echo "anchors: FAILED"
tables
step "planted defects of the depth's row classes"
run defects timeout $(( $(left) - 10 )) ./bin/vkern.test \
  -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^Hopper_depth_classes' -test.v
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt" | tail -7
