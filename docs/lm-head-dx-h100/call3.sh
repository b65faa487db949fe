#!/usr/bin/env bash
# 2026-11-27, sixth session, call 3: the tensor maps' L2 promotion per
# operand (VKERN_GEMM_PROMOTION_L, _R; 256 B by default). Call 2 found the
# head's dx from L's row classes 2.17 → 1.88 ms with no promotion on every
# map, its DRAM reads 4.1 → 3.0 GB. Which operand's maps it is, and what
# it does to the aligned products and to the forward's class tiles:
#   - bench/gemm_lab.cu (variant 6) at the head's dx and forward, 50257
#     and 50304, per setting;
#   - vkern bench of the same four products, default and L none in turn,
#     twice, with cuBLAS in the same call.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call3
LIMIT=560
source bench/call-lib.sh
step "build (the lab in the background)"
build_lab &
lab=$!
build_server bin/vkern || exit 1
step "anchors and bench"
python3 bench/op_anchors.py linear=16384x768x50304:bias=0 linear_nt=16384x50304x768 > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
for round in 1 2; do
  bench_ops "default-$round" bin/vkern "$out/anchors.jsonl" linear 16384x768x50257:bias=0 16384x768x50304:bias=0
  bench_ops "default-$round" bin/vkern "$out/anchors.jsonl" linear_nt 16384x50257x768 16384x50304x768
  VKERN_GEMM_PROMOTION_L=none bench_ops "lnone-$round" bin/vkern "$out/anchors.jsonl" linear 16384x768x50257:bias=0 16384x768x50304:bias=0
  VKERN_GEMM_PROMOTION_L=none bench_ops "lnone-$round" bin/vkern "$out/anchors.jsonl" linear_nt 16384x50257x768 16384x50304x768
done
tables
step "the lab"
wait $lab
tail -1 "$out/lab-build.txt"
[ -x /tmp/gemm_lab ] || exit 1
cases="V dx head,dx head,V fwd head,fwd head"
for round in 1 2; do
  lab_times default "$cases"
  lab_times L-none "$cases" VKERN_GEMM_PROMOTION_L=none
  lab_times L-64 "$cases" VKERN_GEMM_PROMOTION_L=64
  lab_times L-128 "$cases" VKERN_GEMM_PROMOTION_L=128
  lab_times R-none "$cases" VKERN_GEMM_PROMOTION_R=none
  lab_times L-none-R-128 "$cases" VKERN_GEMM_PROMOTION_L=none VKERN_GEMM_PROMOTION_R=128
  lab_times both-none "$cases" VKERN_GEMM_PROMOTION_L=none VKERN_GEMM_PROMOTION_R=none
done
