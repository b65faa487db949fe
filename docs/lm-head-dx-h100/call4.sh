#!/usr/bin/env bash
# 2026-11-27, sixth session, call 4: the raw boxes' maps (kClassL, kShiftL)
# without L2 promotion, the other maps at 256 B as before (calls 2 and 3
# set it through a variable; this build has it fixed).
#   - verify L in row classes at odd K and at the head's dx, and its two
#     planted defects;
#   - vkern bench of the head's dx at 50257 and 50304, twice, and of dW
#     (linear_grad_w) at 50257 with the padded copy (default) and with the
#     shifting producer (VKERN_GEMM_SHIFT=1, whose raw boxes lost their
#     promotion too), with cuBLAS in the same call.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call4
LIMIT=560
source bench/call-lib.sh
step "build"
build_server bin/vkern || exit 1
step "verify: L in row classes"
verify verify-class-l-linear --op linear --shape 16390x520x1001 --shape 4100x1000x1003:bias=0 --shape 4103x1024x4097 \
  --shape 16384x768x50257:bias=0 --dist integer --dist normal --dist special
verify verify-class-l-gemm --op gemm --shape 4096x512x4099 --shape 4101x768x2053 --dist integer --dist normal --dist special
step "anchors and bench"
python3 bench/op_anchors.py linear=16384x768x50304:bias=0 linear_grad_w=16384x768x50304 > "$out/anchors.jsonl" 2> "$out/anchors.stderr" \
  || echo "anchors: FAILED"
for round in 1 2; do
  bench_ops "new-$round" bin/vkern "$out/anchors.jsonl" linear 16384x768x50257:bias=0 16384x768x50304:bias=0
  bench_ops "padded-$round" bin/vkern "$out/anchors.jsonl" linear_grad_w 16384x768x50257 16384x768x50304
  VKERN_GEMM_SHIFT=1 bench_ops "shift-$round" bin/vkern "$out/anchors.jsonl" linear_grad_w 16384x768x50257
done
tables
step "planted defects of L in row classes"
[ "$(left)" -gt 100 ] && run defects timeout $(( $(left) - 10 )) ./bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/Hopper_row_classes' -test.v
grep -E '^(    --- |--- |ok|FAIL$)' "$out/defects.txt" | tail -4
