#!/usr/bin/env bash
# 2026-11-28, call 10 (the session's third), branch dw-depth-classes: the
# head's dW (linear_grad_w 16384x768x50257, x the logits gradient) read
# in place by the depth's row classes (Tiles::kDepthClassL, WideDC), not
# yet built by nvcc.
#   - verify the new path: odd depth (uneven classes), accumulate, another
#     shift pattern, and the head itself;
#   - the head's dW with it, with the padded copy (VKERN_GEMM_DEPTH_CLASSES=0)
#     and at 50304, twice, with cuBLAS before and after;
#   - the planted defects of the row-class paths: L's row classes and the
#     class tiles (main's, whose cluster defect has not finished a run yet)
#     and the four new ones.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call10
LIMIT=515
source bench/call-lib.sh
step "build"
build_server bin/vkern || exit 1
step "verify"
verify verify-depth-classes --op linear_grad_w --shape 2051x768x4097 --shape 1025x520x4097:accumulate=1 \
  --shape 1024x520x4099 --dist integer --dist normal --dist special
VERIFY_TIMEOUT=120 verify verify-head-dw --op linear_grad_w --shape 16384x768x50257 --shape 16384x768x50257:accumulate=1 \
  --dist normal
step "anchors and bench"
python3 bench/op_anchors.py linear_grad_w=16384x768x50304 > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
for round in 1 2; do
  [ "$(left)" -gt 200 ] || break
  bench_ops "classes-$round" bin/vkern "$out/anchors.jsonl" linear_grad_w 16384x768x50257 16384x768x50304
  VKERN_GEMM_DEPTH_CLASSES=0 bench_ops "padded-$round" bin/vkern "$out/anchors.jsonl" linear_grad_w 16384x768x50257
done
python3 bench/op_anchors.py linear_grad_w=16384x768x50304 > "$out/anchors-after.jsonl" 2> "$out/anchors-after.stderr" || echo "anchors: FAILED"
tables
step "planted defects of the row-class paths"
run defects timeout $(( $(left) - 10 )) ./bin/vkern.test \
  -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^Hopper_(row_classes|class_tiles|depth_classes)' -test.v
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt" | tail -12
