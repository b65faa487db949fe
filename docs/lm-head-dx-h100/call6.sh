#!/usr/bin/env bash
# 2026-11-27, sixth session, call 6: the session's final build, where L in
# row classes runs in clusters of 2 sharing R (WideSR now derives from
# WideC2S) and its raw boxes have no L2 promotion.
#   - verify: the gemm family at its default shapes; L in row classes at
#     odd K and at the head's dx; its two planted defects;
#   - the head's dx at 50257 and 50304, three times, with cuBLAS before
#     and after.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call6
LIMIT=450
source bench/call-lib.sh
step "build"
build_server bin/vkern || exit 1
step "verify"
verify verify-gemm-family --op linear,linear_grad_w,linear_nt,linear_grad_x,gemm,gemm_grad_a,gemm_grad_b
verify verify-class-l-linear --op linear --shape 16390x520x1001 --shape 4100x1000x1003:bias=0 --shape 4103x1024x4097 \
  --shape 16384x768x50257:bias=0 --dist integer --dist normal --dist special
verify verify-class-l-gemm --op gemm --shape 4096x512x4099 --shape 4101x768x2053 --dist integer --dist normal --dist special
step "anchors and bench"
python3 bench/op_anchors.py linear=16384x768x50304:bias=0 > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
for round in 1 2 3; do
  bench_ops "vkern-$round" bin/vkern "$out/anchors.jsonl" linear 16384x768x50257:bias=0 16384x768x50304:bias=0
done
python3 bench/op_anchors.py linear=16384x768x50304:bias=0 > "$out/anchors-after.jsonl" 2> "$out/anchors-after.stderr" || echo "anchors: FAILED"
tables
step "planted defects of L in row classes"
[ "$(left)" -gt 100 ] && run defects timeout $(( $(left) - 10 )) ./bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/Hopper_row_classes' -test.v
grep -E '^(    --- |--- |ok|FAIL$)' "$out/defects.txt" | tail -4
