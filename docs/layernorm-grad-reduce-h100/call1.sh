#!/usr/bin/env bash
# layernorm_grad's variant 5 (branch ln-grad-reduce): the parameter sums'
# kernel (layernorm_grad_params) a block per (32 columns, output) with
# four loads in flight a thread, the same order of additions. First nvcc
# build. Then, as time allows, Nsight Compute of WideS's GELU backward
# (docs/gelu-pre-tile-h100 asks for it), through bench/gemm_lab.cu built
# beside the server.
#   - verify layernorm_grad: the default shapes and GPT-2's four, every
#     distribution;
#   - its planted defects (every one of layernorm_grad's on CUDA);
#   - layernorm_grad at GPT-2's shapes against PyTorch and the copy floor
#     (bench/cuda-train-ops-run.sh's bench part, OPS=layernorm_grad), twice;
#   - a GPT-2 step (B 16, T 1024) against PyTorch eager and torch.compile;
#   - ncu of the lab's "dx fc.proj gelu" and "fwd fc" (variant 6, WideS).
# Run from the repository root with bin/ from `bash bench/prep-call.sh` and
# ../shared/bench/anchors.py copied to .anchors/anchors.py (carried).
set -uo pipefail
NAME=call1
LIMIT=450
source bench/call-lib.sh
d=(--dist integer --dist normal --dist uniform --dist wide --dist special)
step "build (the lab beside it)"
build_lab & lab=$!
build_server bin/vkern || exit 1
step "verify"
export VERIFY_TIMEOUT=120
verify verify-default --op layernorm_grad "${d[@]}"
verify verify-gpt2 --op layernorm_grad --shape 16384x768 --shape 16384x768:residual=1 --shape 16384x768:dx_sum=1 \
  --shape 16384x768:residual=1,dx_sum=1 "${d[@]}"
step "planted defects of layernorm_grad"
run defects timeout 200 ./bin/vkern.test \
  -test.run "TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^layernorm_grad" -test.v
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt" | tail -14
step "bench, twice"
for tag in 1 2; do
  OUT=$out/ln-$tag OPS=layernorm_grad bash bench/cuda-train-ops-run.sh bench > "$out/ln-$tag.txt" 2>&1 || echo "ln-$tag: FAILED"
  echo "--- $tag"; grep '^layernorm_grad' "$out/ln-$tag/table.txt"
done
step "training step, gpt2"
OUT=$out/train MODELS=gpt2 bash bench/cuda-train-bench.sh --batch 16 --steps 30 --warmup 10 > "$out/train.txt" 2>&1
tail -4 "$out/train.txt"
wait $lab
if grep -q "lab build rc=0" "$out/lab-build.txt"; then
  ncu_lab gelu-bwd "dx fc.proj gelu"
  ncu_lab plain-fc "fwd fc"
else
  echo "lab build: FAILED"; tail -5 "$out/lab-build.txt"
fi
