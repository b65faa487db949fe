#!/usr/bin/env bash
# WideSP's first build (branch gelu-epilogue): the GELU backward's product
# (linear_grad_x with gelu = 1) with pre's tile copied into shared memory
# under the tile's products (gemm_sm90.cu, Config::kPreTile), where WideS
# read pre from global memory behind the last product.
#   - the wgmma kernels' registers and local memory (WideSP's instance);
#   - verify: the shapes that take WideSP (one depth step, four, edge
#     tiles), one that falls back to WideS (3001 columns), the defaults,
#     and GPT-2's c_proj dx (sampled);
#   - its three planted defects;
#   - linear_grad_x at GPT-2's shape, with and without the GELU, by default
#     and with VKERN_GEMM_PRE_TILE=0, two rounds alternating, against
#     PyTorch (bench/op_anchors.py);
#   - a GPT-2 step (B 16, T 1024) against PyTorch eager and torch.compile,
#     then with VKERN_GEMM_PRE_TILE=0 against the same anchors.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call1
LIMIT=540
source bench/call-lib.sh
d=(--dist integer --dist normal --dist uniform --dist wide --dist special)
step "build"
build_server bin/vkern || exit 1
server=$(find "$VKERN_CACHE" -name server -type f | head -1)
cuobjdump --dump-resource-usage "$server" > "$out/resources.txt" 2>&1
python3 - "$out/resources.txt" <<'PY' | tee "$out/wgmma-resources.txt" | grep -E 'Lb0ELb1E|LOCAL:[1-9]' | head -8
import re, sys
name = None
for line in open(sys.argv[1]):
    m = re.search(r"Function (\S*product_wgmma\S*):", line)
    if m:
        name = m.group(1)
        continue
    if name and "REG:" in line:
        print(name[:90], " ".join(t for t in line.split() if t.split(":")[0] in ("REG", "STACK", "LOCAL")))
        name = None
PY
step "verify"
export VERIFY_TIMEOUT=120
verify verify-pre-tile --op linear_grad_x --shape 4096x64x3072:gelu=1 --shape 4096x200x3072:gelu=1 \
  --shape 4096x192x3072:gelu=1 --shape 4100x192x3000:gelu=1 --shape 4096x768x3001:gelu=1 "${d[@]}"
grep -q PASSED "$out/verify-pre-tile.txt" || { echo "stopping: WideSP did not pass"; exit 1; }
verify verify-gpt2 --op linear_grad_x --shape 16384x768x3072:gelu=1 --dist normal
verify verify-default --op linear_grad_x
step "planted defects of the pre tiles"
run defects timeout 200 ./bin/vkern.test \
  -test.run "TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^Hopper_pre_tiles" -test.v
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt" | tail -5
step "anchors and bench"
s=(16384x768x3072:gelu=1 16384x768x3072)
python3 bench/op_anchors.py "${s[@]/#/linear_grad_x=}" > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
bench_ops "pre-tile-1" bin/vkern "$out/anchors.jsonl" linear_grad_x "${s[@]}"
VKERN_GEMM_PRE_TILE=0 bench_ops "wides-1" bin/vkern "$out/anchors.jsonl" linear_grad_x "${s[@]}"
VKERN_GEMM_PRE_TILE=0 bench_ops "wides-2" bin/vkern "$out/anchors.jsonl" linear_grad_x "${s[@]}"
bench_ops "pre-tile-2" bin/vkern "$out/anchors.jsonl" linear_grad_x "${s[@]}"
tables
step "training step, gpt2"
train=(--batch 16 --steps 30 --warmup 10)
OUT=$out/train MODELS=gpt2 bash bench/cuda-train-bench.sh "${train[@]}" > "$out/train.txt" 2>&1
tail -5 "$out/train.txt"
[ "$(left)" -gt 40 ] && VKERN_GEMM_PRE_TILE=0 bin/vkern bench --suite train --backend cuda --model gpt2 "${train[@]}" \
  --anchors "$out/train/train-anchors.jsonl" --json "$out/train-wides.json" > "$out/train-wides.txt" 2>&1 &&
  grep -E 'gpt2' "$out/train-wides.txt" | head -3
