#!/usr/bin/env bash
# bias_grad's spans finished in slices of 32 columns (variant 10,
# kernels/cuda/bias_grad.cu; $VKERN_BIAS_GRAD_NARROW_SLICES=1) against 96
# (variant 8, main's), in one server. Written 2026-11-28 in the nineteenth
# session, for the next call; not yet run (nor built by nvcc). This call:
#   - starts bias_grad's planted CUDA defects with narrow slices, in the
#     background;
#   - span_sums's registers (168 keeps two blocks an SM);
#   - verifies bias_grad with narrow slices at its default shapes and at
#     GPT-2's three, 4100x1000, 1100x768, 3000x1536, 13000x40 and 7x4099,
#     every distribution, and at the latter without them (span_sums now
#     takes its slice width at run time);
#   - times both at GPT-2's three shapes, two rounds alternating, with the
#     copy bandwidth and `db.add_(dy.sum(0))`.
# Run from the repository root with bin/ from `bash bench/prep-call.sh` and
# ../shared/bench/anchors.py copied to .anchors/anchors.py.
set -uo pipefail
NAME=call1
LIMIT=${LIMIT:-360}
source bench/call-lib.sh
shapes=(16384x768 16384x2304 16384x3072)
d=(--dist integer --dist normal --dist uniform --dist wide --dist special)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "build"
build_server bin/vkern || exit 1
# 168 registers a thread is the most that keeps two blocks of 192 threads an
# SM: more would halve the resident grid (the jobs of 2304 and 3072 columns).
kernel_resources span_sums && cat "$out/resources-span_sums.txt"
step "planted defects (background), verify"
defects_start '^bias_grad' VKERN_BIAS_GRAD_NARROW_SLICES=1
export VERIFY_TIMEOUT=100
more=(--shape 16384x768 --shape 16384x2304 --shape 16384x3072 --shape 4100x1000 --shape 1100x768 --shape 3000x1536
  --shape 13000x40 --shape 7x4099)
VKERN_BIAS_GRAD_NARROW_SLICES=1 verify verify-narrow --op bias_grad "${d[@]}"
VKERN_BIAS_GRAD_NARROW_SLICES=1 verify verify-narrow-more --op bias_grad "${more[@]}" "${d[@]}"
verify verify-wide-more --op bias_grad "${more[@]}" "${d[@]}"  # span_sums now takes its slice width at run time
defects_wait
step "anchors and bench"
{ python3 .anchors/anchors.py && python3 bench/op_anchors.py "${shapes[@]/#/bias_grad=}"; } > "$out/anchors.jsonl" 2> "$out/anchors.stderr" ||
  echo "anchors: FAILED"
for v in 1 0 1 0; do
  r=1; [ -f "$out/bench-narrow$v-1-bias_grad.json" ] && r=2
  VKERN_BIAS_GRAD_NARROW_SLICES=$v bench_ops "narrow$v-$r" bin/vkern "$out/anchors.jsonl" bias_grad "${shapes[@]}"
done
tables
floor_shares
