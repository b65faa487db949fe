#!/usr/bin/env bash
# Branch dw-bias, not yet run: linear_grad_w with bias=1 (db += dy's
# column sums), formed in the Hopper kernel of plain tiles by the producer
# warpgroup's warps 1-3 as dy's stages pass (gemm_sm90.cu, kSums), else by
# bias_grad's kernel after the product; VKERN_GEMM_FUSED_DB=0 takes the
# second way always. The first nvcc build of kSums.
#   - verify, by default: linear_grad_w at its default shapes (four with
#     bias=1), and shapes that take kSums, every distribution: 1000x64x64
#     (NarrowS, a partial last stage), 520x768x256 (two row tiles: only
#     the first sums), 512x3072x768 with and without accumulation
#     (WideS192), 512x2304x768 (MediumS), 256x2048x4096 (WideS: warp 1
#     sums two panels); GPT-2's c_fc and c_attn dW with db, normal
#     (sampled; db checked whole); two shapes with VKERN_GEMM_FUSED_DB=0;
#   - time linear_grad_w at GPT-2's c_fc and c_attn shapes with and
#     without bias=1, fused and not, and bias_grad alone at their widths
#     (no anchors: the ratios are among these).
# The planted defects of kSums and of the fallback are left for a later
# call (this one had 283 s of device time).
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call1
LIMIT=200
source bench/call-lib.sh
: > "$out/none.jsonl"
step "build"
build_server bin/vkern || exit 1
step "verify"
d=(--dist integer --dist normal --dist uniform --dist wide --dist special)
export VERIFY_TIMEOUT=60
verify verify-default --op linear_grad_w
grep -q PASSED "$out/verify-default.txt" || { echo "stopping: the default shapes did not pass"; exit 1; }
verify verify-ksums --op linear_grad_w --shape 1000x64x64:bias=1 --shape 520x768x256:bias=1 \
  --shape 512x3072x768:bias=1 --shape 512x3072x768:bias=1,accumulate=0 --shape 512x2304x768:bias=1 \
  --shape 256x2048x4096:bias=1 "${d[@]}"
verify verify-gpt2 --op linear_grad_w --shape 16384x768x3072:bias=1 --shape 16384x768x2304:bias=1,accumulate=0 --dist normal
VKERN_GEMM_FUSED_DB=0 verify verify-unfused --op linear_grad_w --shape 1000x64x64:bias=1 --shape 512x3072x768:bias=1 "${d[@]}"
step "bench"
s=(16384x768x3072 16384x768x3072:bias=1 16384x768x2304 16384x768x2304:bias=1)
bench_ops fused bin/vkern "$out/none.jsonl" linear_grad_w "${s[@]}"
VKERN_GEMM_FUSED_DB=0 bench_ops unfused bin/vkern "$out/none.jsonl" linear_grad_w "${s[@]}"
bench_ops alone bin/vkern "$out/none.jsonl" bias_grad 16384x3072 16384x2304
bench_ops fused2 bin/vkern "$out/none.jsonl" linear_grad_w "${s[@]}"
tables
