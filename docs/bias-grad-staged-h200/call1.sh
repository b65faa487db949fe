#!/usr/bin/env bash
# bias_grad's staged spans (variant 9, kernels/cuda/bias_grad.cu): span_sums's
# jobs and order of additions, dy brought into 192 KiB of shared memory by
# cp.async, a whole job in flight a block. On an H200 (2026-11-28, the
# nineteenth session; no H100 was lent), each figure a ratio within this
# call. This call:
#   - staged_span_sums's and span_sums's registers after the build;
#   - starts bias_grad's planted CUDA defects (two of them the staged
#     kernel's) in the background;
#   - verifies bias_grad staged (the default) at its default shapes and at
#     GPT-2's three, 4100x1000 (two spans, the second 232 columns; 33 groups,
#     the last of 4 rows), 1100x768, 3000x1536, 13000x40 and 7x4099, every
#     distribution; again with VKERN_BIAS_GRAD_STAGED=0 (variant 8);
#   - times bias_grad staged and not at GPT-2's three shapes, two rounds
#     alternating, with the copy bandwidth and `db.add_(dy.sum(0))`.
# Run from the repository root with bin/ from `bash bench/prep-call.sh` and
# ../shared/bench/anchors.py copied to .anchors/anchors.py.
set -uo pipefail
NAME=call1
LIMIT=${LIMIT:-400}
source bench/call-lib.sh
shapes=(16384x768 16384x2304 16384x3072)
d=(--dist integer --dist normal --dist uniform --dist wide --dist special)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "build"
build_server bin/vkern || exit 1
kernel_resources staged_span_sums && cat "$out/resources-staged_span_sums.txt"
kernel_resources span_sums && cat "$out/resources-span_sums.txt"
step "planted defects (background), verify"
defects_start '^bias_grad'
export VERIFY_TIMEOUT=100
more=(--shape 16384x768 --shape 16384x2304 --shape 16384x3072 --shape 4100x1000 --shape 1100x768 --shape 3000x1536
  --shape 13000x40 --shape 7x4099)
verify verify-staged --op bias_grad "${d[@]}"
verify verify-staged-more --op bias_grad "${more[@]}" "${d[@]}"
VKERN_BIAS_GRAD_STAGED=0 verify verify-spans-more --op bias_grad "${more[@]}" "${d[@]}"
defects_wait
step "anchors and bench"
{ python3 .anchors/anchors.py && python3 bench/op_anchors.py "${shapes[@]/#/bias_grad=}"; } > "$out/anchors.jsonl" 2> "$out/anchors.stderr" ||
  echo "anchors: FAILED"
for v in 1 0 1 0; do
  r=1; [ -f "$out/bench-staged$v-1-bias_grad.json" ] && r=2
  VKERN_BIAS_GRAD_STAGED=$v bench_ops "staged$v-$r" bin/vkern "$out/anchors.jsonl" bias_grad "${shapes[@]}"
done
tables
floor_shares
