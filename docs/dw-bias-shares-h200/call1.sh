#!/usr/bin/env bash
# Branch dw-bias-shares, written on 2026-11-28 for one call on an
# nvidia-h200 (no H100 was lent that day): linear_grad_w's db formed inside
# the Hopper kernel (kSums, VKERN_GEMM_FUSED_DB=1) with every row tile
# summing its share of a column tile's columns, eight depth rows' loads in
# flight, where the first row tile summed them all one load at a time
# (3.7 times the product's time on the H100, docs/dw-bias-h100).
#   - the product kernels' registers, stack and local memory (the summers
#     run under setmaxnreg's 40 registers);
#   - verify with VKERN_GEMM_FUSED_DB=1 at shapes that take kSums (a
#     partial stage, WideS192 in 6 row tiles, WideS in 32 and in 1, every
#     distribution) while the planted defects of db run beside it;
#   - linear_grad_w at GPT-2's c_fc and c_attn shapes with db, kSums
#     against the default (bias_grad's kernel after the product), two
#     rounds alternating, the products without db and PyTorch's
#     dW.add_(…), db.add_(dy.sum(0)) (bench/op_anchors.py) in the call;
#   - a gpt2 step (B 16, T 1024) by default and with kSums against the same
#     PyTorch anchors (bench/cuda-train-bench.sh);
#   - verify of GPT-2's two shapes with db, sampled, as time allows.
# Run from the repository root with bin/ from `bash bench/prep-call.sh` and
# .anchors/anchors.py.
set -uo pipefail
NAME=call1
LIMIT=570
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
d=(--dist integer --dist normal --dist uniform --dist wide --dist special)
step "build"
build_server bin/vkern || exit 1
server=$(find "$VKERN_CACHE" -name server -type f | head -1)
cuobjdump --dump-resource-usage "$server" > "$out/resources.txt" 2>&1
python3 - "$out/resources.txt" <<'PY' | tee "$out/wgmma-resources.txt" | grep -E 'LOCAL:[1-9]|STACK:[1-9]' | head
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
echo "product_wgmma instances: $(wc -l < "$out/wgmma-resources.txt"), with stack or local memory: $(grep -cE 'LOCAL:[1-9]|STACK:[1-9]' "$out/wgmma-resources.txt")"
step "verify kSums, the planted defects of db beside it"
timeout 200 ./bin/vkern.test -test.run "TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^(Hopper_column_sums|linear_grad_w's_db)" \
  -test.v > "$out/defects.txt" 2>&1 &
defects=$!
export VERIFY_TIMEOUT=120
VKERN_GEMM_FUSED_DB=1 verify verify-ksums --op linear_grad_w --shape 1000x64x64:bias=1 --shape 520x768x256:bias=1 \
  --shape 512x3072x768:bias=1 --shape 512x3072x768:bias=1,accumulate=0 --shape 512x2304x768:bias=1 \
  --shape 256x2048x4096:bias=1 --shape 64x65536x128:bias=1 "${d[@]}"
VKERN_GEMM_FUSED_DB=1 verify verify-ksums-defaults --op linear_grad_w
wait $defects
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt"
echo "caught: $(grep -cE '^    --- PASS' "$out/defects.txt")"
grep -q PASSED "$out/verify-ksums.txt" || { echo "stopping: kSums did not pass"; exit 1; }
step "anchors and bench, two rounds alternating"
s=(16384x3072x768:bias=1 16384x2304x768:bias=1 16384x3072x768 16384x2304x768)
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
step "training step, gpt2: default, then kSums"
train_steps bin/vkern VKERN_GEMM_FUSED_DB=1
step "verify kSums at GPT-2's shapes, sampled"
[ "$(left)" -gt 100 ] && VKERN_GEMM_FUSED_DB=1 VERIFY_TIMEOUT=$(( $(left) - 10 )) verify verify-ksums-gpt2 \
  --op linear_grad_w --shape 16384x3072x768:bias=1 --shape 16384x2304x768:bias=1,accumulate=0 --dist normal
step "table"
cat "$out/table.txt"
tail -4 "$out/train.txt"; grep -E 'gpt2|torch.compile' "$out/train-again.txt" | head -3
