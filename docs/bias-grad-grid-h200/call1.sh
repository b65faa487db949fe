#!/usr/bin/env bash
# bias_grad's spans finished after a grid-wide barrier (variant 8,
# kernels/cuda/bias_grad.cu, branch bias-grad-grid), on an H200: the H100
# kind was not lent on 2026-11-28, so these figures are the H200's, each a
# ratio within this call (the H100's version of this call, never run, is
# in git history as docs/bias-grad-variants-h100/call7.sh). This call:
#   - the registers of span_sums and column_sums after the build;
#   - verifies bias_grad with spans (the default) at its default shapes
#     (2100x1000 takes them) and at GPT-2's three, 4100x1000, 1100x768,
#     3000x1536, 13000x40, 4100x40 and 7x4099, every distribution; again
#     with VKERN_BIAS_GRAD_SPANS=0; and linear_grad_w at its default shapes;
#   - runs bias_grad's planted CUDA defects (two of them the spans');
#   - times bias_grad with and without spans at GPT-2's three shapes, two
#     rounds alternating, with the copy bandwidth and `db.add_(dy.sum(0))`;
#   - times a gpt2 step with spans, then without, against the same anchors.
# Run from the repository root with bin/ from `bash bench/prep-call.sh` and
# ../shared/bench/anchors.py copied to .anchors/anchors.py.
set -uo pipefail
NAME=call1
LIMIT=580
source bench/call-lib.sh
shapes=(16384x768 16384x2304 16384x3072)
d=(--dist integer --dist normal --dist uniform --dist wide --dist special)
step "build"
build_server bin/vkern || exit 1
kernel_resources span_sums && cat "$out/resources-span_sums.txt"
kernel_resources column_sums && cat "$out/resources-column_sums.txt"
step "verify"
export VERIFY_TIMEOUT=120
more=(--shape 16384x768 --shape 16384x2304 --shape 16384x3072 --shape 4100x1000 --shape 1100x768 --shape 3000x1536
  --shape 13000x40 --shape 4100x40 --shape 7x4099)
verify verify-spans --op bias_grad "${d[@]}"
verify verify-spans-more --op bias_grad "${more[@]}" "${d[@]}"
VKERN_BIAS_GRAD_SPANS=0 verify verify-tiles-more --op bias_grad "${more[@]}" "${d[@]}"
verify verify-linear-grad-w --op linear_grad_w "${d[@]}"
step "planted defects of bias_grad"
run defects timeout 200 ./bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^bias_grad' -test.v
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt" | tail -9
step "anchors and bench"
{ python3 .anchors/anchors.py && python3 bench/op_anchors.py "${shapes[@]/#/bias_grad=}"; } > "$out/anchors.jsonl" 2> "$out/anchors.stderr" ||
  echo "anchors: FAILED"
for v in 1 0 1 0; do
  r=1; [ -f "$out/bench-spans$v-1-bias_grad.json" ] && r=2
  VKERN_BIAS_GRAD_SPANS=$v bench_ops "spans$v-$r" bin/vkern "$out/anchors.jsonl" bias_grad "${shapes[@]}"
done
tables
floor_shares
step "training step, gpt2"
[ "$(left)" -gt 150 ] || exit 0
train_steps bin/vkern VKERN_BIAS_GRAD_SPANS=0
