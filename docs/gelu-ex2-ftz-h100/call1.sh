#!/usr/bin/env bash
# Branch gelu-ex2-ftz, not yet run: gelu.cuh's 2^z by ex2.approx.ftz.f32
# instead of exp2f (its comment says why the results agree and what the
# ncu counts suggest it saves). Needs two builds of the CLI here:
#   bash bench/prep-call.sh                      # bin/ from this branch
#   git worktree add /tmp/vk-main main && (cd /tmp/vk-main &&
#     CGO_ENABLED=0 go build -o "$OLDPWD/bin-main/vkern" ./cmd/vkern)
# and the call carries ["bin", "bin-main", ".anchors"] (.anchors/anchors.py
# from ../shared/bench). It:
#   - dumps the SASS of exp2f and of ex2.approx.ftz.f32 on sm_90a, to
#     confirm what the first costs;
#   - builds both servers at once;
#   - verifies the branch: gelu, gelu_grad, linear and linear_grad_x at
#     their default shapes and GPT-2's GELU shapes, every distribution;
#   - runs the planted defects of cuda/gelu.cuh;
#   - times linear 16384x3072x768:gelu=1, linear_grad_x
#     16384x768x3072:gelu=1 and gelu_grad 50331648 with both binaries,
#     alternating, against PyTorch (bench/op_anchors.py);
#   - times a GPT-2 step with each binary against the same anchors.
set -uo pipefail
NAME=call1
LIMIT=560
source bench/call-lib.sh
d=(--dist integer --dist normal --dist uniform --dist wide --dist special)
step "SASS of the two exponentials"
cat > /tmp/ex2.cu <<'CU'
__global__ void with_exp2f(const float* x, float* y) { y[threadIdx.x] = exp2f(x[threadIdx.x]); }
__global__ void with_ftz(const float* x, float* y) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x[threadIdx.x]));
  y[threadIdx.x] = r;
}
CU
nvcc -arch=sm_90a -cubin -o /tmp/ex2.cubin /tmp/ex2.cu > "$out/ex2-build.txt" 2>&1 &&
  cuobjdump -sass /tmp/ex2.cubin > "$out/ex2-sass.txt" 2>&1
grep -E 'Function|MUFU|FMUL|FSETP|FFMA' "$out/ex2-sass.txt" | head -12
step "build both servers"
build_server bin-main/vkern & main_build=$!
build_server bin/vkern || exit 1
wait $main_build || exit 1
step "verify the branch"
export VERIFY_TIMEOUT=120
verify verify-elementwise --op gelu,gelu_grad "${d[@]}"
verify verify-linear --op linear,linear_grad_x "${d[@]}"
verify verify-gpt2 --op linear_grad_x --shape 16384x768x3072:gelu=1 --dist normal --dist special
step "planted defects of the GELU"
run defects timeout 200 ./bin/vkern.test \
  -test.run "TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^gelu" -test.v
grep -E '^(--- |ok|FAIL$|PASS$)' "$out/defects.txt" | tail -3
grep -c -- '--- PASS' "$out/defects.txt"
step "anchors and bench"
python3 bench/op_anchors.py linear=16384x3072x768:gelu=1 linear_grad_x=16384x768x3072:gelu=1 gelu_grad=50331648 \
  > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
for round in 1 2; do
  for b in ftz main; do
    bin=bin/vkern; [ $b = main ] && bin=bin-main/vkern
    bench_ops "$b-$round" "$bin" "$out/anchors.jsonl" linear 16384x3072x768:gelu=1
    bench_ops "$b-$round" "$bin" "$out/anchors.jsonl" linear_grad_x 16384x768x3072:gelu=1
    bench_ops "$b-$round" "$bin" "$out/anchors.jsonl" gelu_grad 50331648
  done
done
tables
step "training step, gpt2"
train=(--batch 16 --steps 30 --warmup 10)
OUT=$out/train MODELS=gpt2 bash bench/cuda-train-bench.sh "${train[@]}" > "$out/train.txt" 2>&1
tail -4 "$out/train.txt"
[ "$(left)" -gt 40 ] && bin-main/vkern bench --suite train --backend cuda --model gpt2 "${train[@]}" \
  --anchors "$out/train/train-anchors.jsonl" --json "$out/train-main.json" > "$out/train-main.txt" 2>&1 &&
  grep -E 'gpt2' "$out/train-main.txt" | head -3
