#!/usr/bin/env bash
# layernorm_grad's variant 4 (branch ln-grad-smem, opt-in with
# VKERN_LAYERNORM_GRAD_SHARED=1): each warp's column sums (dw, db and, with
# dx_sum, dxs) in shared memory rather than registers, for the 162
# registers a thread took at C = 768 with dx_sum. First nvcc build.
#   - the rows kernels' registers (cuobjdump);
#   - verify with variant 4 on: the default shapes and GPT-2's (every
#     distribution), then the default shapes without it;
#   - the three planted defects of variant 4 (a setup edit switches it on);
#   - layernorm_grad at GPT-2's four shapes against PyTorch and the copy
#     floor (bench/cuda-train-ops-run.sh's bench part, OPS=layernorm_grad),
#     without and with variant 4, then without again;
#   - a GPT-2 step (B 16, T 1024) with variant 4, against PyTorch eager and
#     torch.compile, then without it against the same anchors.
# Run from the repository root with bin/ from `bash bench/prep-call.sh` and
# ../shared/bench/anchors.py copied to .anchors/anchors.py (carried).
set -uo pipefail
NAME=call1
LIMIT=560
source bench/call-lib.sh
d=(--dist integer --dist normal --dist uniform --dist wide --dist special)
step "build"
build_server bin/vkern || exit 1
server=$(find "$VKERN_CACHE" -name server -type f | head -1)
cuobjdump --dump-resource-usage "$server" > "$out/resources.txt" 2>&1
python3 - "$out/resources.txt" <<'PY' | tee "$out/rows-resources.txt" | grep -E 'Li24E' | head -12
import re, subprocess, sys
name = None
for line in open(sys.argv[1]):
    m = re.search(r"Function (\S*layernorm_grad_rows\S*):", line)
    if m:
        name = m.group(1)
        continue
    if name and "REG:" in line:
        t = re.search(r"layernorm_grad_rowsILi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELb(\d)ELb(\d)E", name)
        print("T RPB E VW kSum kShared", "Li%sE" % t.group(3) if t else "", t.groups() if t else name[:80],
              " ".join(x for x in line.split() if x.split(":")[0] in ("REG", "STACK", "LOCAL", "SHARED")))
        name = None
PY
step "verify"
export VERIFY_TIMEOUT=120
VKERN_LAYERNORM_GRAD_SHARED=1 verify verify-shared --op layernorm_grad "${d[@]}"
grep -q PASSED "$out/verify-shared.txt" || { echo "stopping: variant 4 did not pass"; exit 1; }
VKERN_LAYERNORM_GRAD_SHARED=1 verify verify-shared-gpt2 --op layernorm_grad --shape 16384x768 \
  --shape 16384x768:residual=1 --shape 16384x768:dx_sum=1 --shape 16384x768:residual=1,dx_sum=1 "${d[@]}"
verify verify-default --op layernorm_grad
step "planted defects of variant 4"
run defects timeout 200 ./bin/vkern.test \
  -test.run "TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^layernorm_grad_variant_4" -test.v
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt" | tail -5
step "bench: registers, variant 4, registers"
for tag in regs shared regs2; do
  [ "$(left)" -gt 200 ] || break
  sh=0; [ "$tag" = shared ] && sh=1
  VKERN_LAYERNORM_GRAD_SHARED=$sh OUT=$out/ln-$tag OPS=layernorm_grad bash bench/cuda-train-ops-run.sh bench \
    > "$out/ln-$tag.txt" 2>&1 || echo "ln-$tag: FAILED"
  echo "--- $tag"; grep '^layernorm_grad' "$out/ln-$tag/table.txt"
done
step "training step, gpt2"
train=(--batch 16 --steps 30 --warmup 10)
VKERN_LAYERNORM_GRAD_SHARED=1 OUT=$out/train MODELS=gpt2 bash bench/cuda-train-bench.sh "${train[@]}" > "$out/train.txt" 2>&1
tail -4 "$out/train.txt"
[ "$(left)" -gt 40 ] && bin/vkern bench --suite train --backend cuda --model gpt2 "${train[@]}" \
  --anchors "$out/train/train-anchors.jsonl" --json "$out/train-regs.json" > "$out/train-regs.txt" 2>&1 &&
  grep -E 'gpt2' "$out/train-regs.txt" | head -3
