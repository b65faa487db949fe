#!/usr/bin/env bash
# Branch dw-bias-fast, not yet run: kSums (linear_grad_w's db in the
# Hopper kernel, VKERN_GEMM_FUSED_DB=1) with plain shared-memory loads,
# eight rows in flight before their adds (call 1's asm volatile loads,
# one at a time, made the product 3.7-5x slower).
#   - verify with VKERN_GEMM_FUSED_DB=1: call 1's kSums shapes, every
#     distribution, and GPT-2's c_fc and c_attn dW with db (normal);
#     by default: linear_grad_w's default shapes;
#   - the planted defects of kSums (switched on by a setup edit) and of
#     the default way (bias_grad's kernel after the product), before the
#     bench;
#   - time linear_grad_w at c_fc's and c_attn's shapes with db, by default
#     and with kSums, two rounds alternating, against PyTorch's dW.add_(…)
#     and db.add_(dy.sum(0)) (bench/op_anchors.py with bias=1), and the
#     products without db;
#   - a GPT-2 step (B 16, T 1024) against PyTorch eager and torch.compile
#     (bench/cuda-train-bench.sh), then with VKERN_GEMM_FUSED_DB=1 against
#     the same anchors.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call2
LIMIT=560
source bench/call-lib.sh
d=(--dist integer --dist normal --dist uniform --dist wide --dist special)
step "build"
build_server bin/vkern || exit 1
# The product kernels' registers, stack and local memory: the summing
# warps run under setmaxnreg's 40 registers, so a kSums instance (an
# Epilogue whose last flag is true) with local memory spills.
server=$(find "$VKERN_CACHE" -name server -type f | head -1)
cuobjdump --dump-resource-usage "$server" > "$out/resources.txt" 2>&1
python3 - "$out/resources.txt" <<'PY' | tee "$out/wgmma-resources.txt" | tail -12
import re, sys
name = None
for line in open(sys.argv[1]):
    m = re.search(r"Function (\S*product_wgmma\S*):", line)
    if m:
        name = m.group(1)
        continue
    if name and "REG:" in line:
        print(name[-60:], " ".join(t for t in line.split() if t.split(":")[0] in ("REG", "STACK", "LOCAL")))
        name = None
PY
step "verify"
export VERIFY_TIMEOUT=90
VKERN_GEMM_FUSED_DB=1 verify verify-ksums --op linear_grad_w --shape 1000x64x64:bias=1 --shape 520x768x256:bias=1 \
  --shape 512x3072x768:bias=1 --shape 512x3072x768:bias=1,accumulate=0 --shape 512x2304x768:bias=1 \
  --shape 256x2048x4096:bias=1 "${d[@]}"
grep -q PASSED "$out/verify-ksums.txt" || { echo "stopping: kSums did not pass"; exit 1; }
VKERN_GEMM_FUSED_DB=1 verify verify-ksums-gpt2 --op linear_grad_w --shape 16384x768x3072:bias=1 \
  --shape 16384x768x2304:bias=1,accumulate=0 --dist normal
verify verify-default --op linear_grad_w
step "planted defects of linear_grad_w's db"
run defects timeout 200 ./bin/vkern.test \
  -test.run "TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^(Hopper_column_sums|linear_grad_w's_db)" -test.v
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt" | tail -7
step "anchors and bench"
s=(16384x768x3072:bias=1 16384x768x2304:bias=1 16384x768x3072 16384x768x2304)
python3 bench/op_anchors.py "${s[@]/#/linear_grad_w=}" > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
for round in 1 2; do
  if [ "$round" = 1 ]; then
    VKERN_GEMM_FUSED_DB=1 bench_ops "ksums-$round" bin/vkern "$out/anchors.jsonl" linear_grad_w "${s[@]}"
    bench_ops "default-$round" bin/vkern "$out/anchors.jsonl" linear_grad_w "${s[@]}"
  else
    bench_ops "default-$round" bin/vkern "$out/anchors.jsonl" linear_grad_w "${s[@]}"
    VKERN_GEMM_FUSED_DB=1 bench_ops "ksums-$round" bin/vkern "$out/anchors.jsonl" linear_grad_w "${s[@]}"
  fi
done
tables
step "training step, gpt2"
train=(--batch 16 --steps 30 --warmup 10)
OUT=$out/train MODELS=gpt2 bash bench/cuda-train-bench.sh "${train[@]}" > "$out/train.txt" 2>&1
tail -5 "$out/train.txt"
[ "$(left)" -gt 40 ] && VKERN_GEMM_FUSED_DB=1 bin/vkern bench --suite train --backend cuda --model gpt2 "${train[@]}" \
  --anchors "$out/train/train-anchors.jsonl" --json "$out/train-ksums.json" > "$out/train-ksums.txt" 2>&1 &&
  grep -E 'gpt2' "$out/train-ksums.txt" | head -3
