#!/usr/bin/env bash
# Branch dw-bn192 with WideS192 the default where bn192_pays (after call 1:
# 0.127 ms against WideS's 0.159 at the MLP's weight gradients), and
# VKERN_GEMM_BN192=0 the way back to WideS.
#   - verify, by default: the gemm family at its default shapes, and
#     linear_grad_w at GPT-2's four weight gradients (the MLP's two, the
#     attention's qkv, 16384x768x2304, and its projection, 16384x768x768,
#     which bn192_pays also gives WideS192), normal and integer;
#   - the m64n192 planted defect, now without a setup edit: by default;
#   - time linear_grad_w at the four with and without WideS192, two rounds
#     in alternating order, with PyTorch's dW.add_ before and after;
#   - a GPT-2 training step (B 16, T 1024) against PyTorch eager and
#     torch.compile (bench/cuda-train-bench.sh), then the same step with
#     VKERN_GEMM_BN192=0 and by default again, against the same anchors.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call2
LIMIT=560
source bench/call-lib.sh
shapes=(16384x3072x768 16384x768x3072 16384x768x2304 16384x768x768)
step "build"
build_server bin/vkern || exit 1
step "verify"
verify verify-gemm-family --op linear,linear_grad_w,linear_nt,linear_grad_x,gemm,gemm_grad_a,gemm_grad_b
shape_args=(); for s in "${shapes[@]}"; do shape_args+=(--shape "$s"); done
verify verify-gpt2-dw --op linear_grad_w "${shape_args[@]}" --dist normal --dist integer
step "anchors and bench"
python3 bench/op_anchors.py "${shapes[@]/#/linear_grad_w=}" > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
for round in 1 2; do
  if [ "$round" = 1 ]; then
    bench_ops "bn192-$round" bin/vkern "$out/anchors.jsonl" linear_grad_w "${shapes[@]}"
    VKERN_GEMM_BN192=0 bench_ops "wide-$round" bin/vkern "$out/anchors.jsonl" linear_grad_w "${shapes[@]}"
  else
    VKERN_GEMM_BN192=0 bench_ops "wide-$round" bin/vkern "$out/anchors.jsonl" linear_grad_w "${shapes[@]}"
    bench_ops "bn192-$round" bin/vkern "$out/anchors.jsonl" linear_grad_w "${shapes[@]}"
  fi
done
python3 bench/op_anchors.py "${shapes[@]/#/linear_grad_w=}" > "$out/anchors-after.jsonl" 2> "$out/anchors-after.stderr" || echo "anchors: FAILED"
tables
step "planted defect of WideS192, by default"
run defects timeout 200 ./bin/vkern.test \
  -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^Hopper_m64n192' -test.v
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt" | tail -3
step "training step, gpt2"
train=(--batch 16 --steps 30 --warmup 10)
OUT=$out/train MODELS=gpt2 bash bench/cuda-train-bench.sh "${train[@]}" > "$out/train.txt" 2>&1
tail -6 "$out/train.txt"
for v in 0 default; do
  [ "$(left)" -gt 30 ] || break
  if [ "$v" = 0 ]; then export VKERN_GEMM_BN192=0; else unset VKERN_GEMM_BN192; fi
  bin/vkern bench --suite train --backend cuda --model gpt2 "${train[@]}" --anchors "$out/train/train-anchors.jsonl" \
    --json "$out/train-bn192-$v.json" > "$out/train-bn192-$v.txt" 2>&1 || echo "train $v: FAILED"
  echo "VKERN_GEMM_BN192=$v"; grep -E 'gpt2' "$out/train-bn192-$v.txt" | head -4
done
