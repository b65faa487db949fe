#!/usr/bin/env bash
# Branch dw-bn192, not yet run: WideS192, 128 × 192 tiles, for the weight
# gradients of GPT-2's MLP (768 × 3072 and 3072 × 768 outputs: 72 tiles of
# 128 × 256 for 132 multiprocessors, 96 of 128 × 192), opt-in with
# VKERN_GEMM_BN192=1 (gemm.cuh, bn192_pays).
#   - verify with it: the gemm family at its default shapes (none of which
#     takes it: a check that nothing else changed); shapes that take it,
#     every distribution: linear_grad_w 512x3072x768, gemm_grad_b
#     1024x768x3072 (MN-major L and R), linear 768x3072x768 plain, with
#     the GELU and with the residual, linear_nt 768x3072x768, gemm_grad_a
#     768x512x3072 and linear_grad_x 768x768x3072:gelu=1 (K-major R, the
#     bias, the staged quads), gemm 700x3000x768 (partial tiles); and
#     GPT-2's two MLP weight gradients (normal);
#   - its planted defect (the m64n192 product's accumulate predicate), and
#     main's "pad_rows loses each row's last element", now on the low half
#     of a pair (its first form changed nothing at odd row lengths);
#   - time linear_grad_w at 16384x3072x768 and 16384x768x3072 with and
#     without it, two rounds in alternating order, with PyTorch's dW.add_
#     before and after.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call1
LIMIT=540
source bench/call-lib.sh
shapes=(16384x3072x768 16384x768x3072)
step "build"
build_server bin/vkern || exit 1
step "verify"
VKERN_GEMM_BN192=1 verify verify-gemm-family --op linear,linear_grad_w,linear_nt,linear_grad_x,gemm,gemm_grad_a,gemm_grad_b
VKERN_GEMM_BN192=1 verify verify-bn192 --op linear_grad_w --shape 512x3072x768 --shape 512x3072x768:accumulate=0 \
  --dist integer --dist normal --dist special
VKERN_GEMM_BN192=1 verify verify-bn192-grad-b --op gemm_grad_b --shape 1024x768x3072 --dist integer --dist normal --dist special
d=(--dist integer --dist normal --dist special)
VKERN_GEMM_BN192=1 verify verify-bn192-linear --op linear --shape 768x3072x768 --shape 768x3072x768:gelu=1 \
  --shape 768x3072x768:residual=1 "${d[@]}"
VKERN_GEMM_BN192=1 verify verify-bn192-linear-nt --op linear_nt --shape 768x3072x768 "${d[@]}"
VKERN_GEMM_BN192=1 verify verify-bn192-grad-a --op gemm_grad_a --shape 768x512x3072 "${d[@]}"
VKERN_GEMM_BN192=1 verify verify-bn192-grad-x --op linear_grad_x --shape 768x768x3072:gelu=1 "${d[@]}"
VKERN_GEMM_BN192=1 verify verify-bn192-edges --op gemm --shape 700x3000x768 "${d[@]}"
VKERN_GEMM_BN192=1 verify verify-bn192-gpt2 --op linear_grad_w --shape 16384x3072x768 --shape 16384x768x3072 --dist normal
step "planted defects of WideS192 and pad_rows"
run defects timeout 200 ./bin/vkern.test \
  -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^(Hopper_m64n192|pad_rows_loses)' -test.v
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt" | tail -5
step "anchors and bench"
python3 bench/op_anchors.py "${shapes[@]/#/linear_grad_w=}" > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
for round in 1 2; do
  [ "$(left)" -gt 60 ] || break
  if [ "$round" = 1 ]; then
    VKERN_GEMM_BN192=1 bench_ops "bn192-$round" bin/vkern "$out/anchors.jsonl" linear_grad_w "${shapes[@]}"
    bench_ops "wide-$round" bin/vkern "$out/anchors.jsonl" linear_grad_w "${shapes[@]}"
  else
    bench_ops "wide-$round" bin/vkern "$out/anchors.jsonl" linear_grad_w "${shapes[@]}"
    VKERN_GEMM_BN192=1 bench_ops "bn192-$round" bin/vkern "$out/anchors.jsonl" linear_grad_w "${shapes[@]}"
  fi
done
python3 bench/op_anchors.py "${shapes[@]/#/linear_grad_w=}" > "$out/anchors-after.jsonl" 2> "$out/anchors-after.stderr" || echo "anchors: FAILED"
tables
