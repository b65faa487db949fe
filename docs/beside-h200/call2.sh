#!/usr/bin/env bash
# Branch beside, 2026-11-28, the second call on an nvidia-h200: call 1
# passed the tests and the planted defects but ran out of time in
# --verify-every's float64 check of a whole gpt2 step (about 300 s; it
# re-runs the step's calls one at a time, so it says nothing of the lanes).
#   - gpt2, 6 steps (B 16) on one stream and beside: the same losses and
#     norms, bit for bit, and the same checkpoint bytes;
#   - gpt2 steps (B 16, T 1024), two rounds alternating: one stream,
#     beside, beside with the main lane's GEMMs on their persistent grid
#     (VKERN_BESIDE_GEMM_UNITS=0), beside at normal priority;
#   - PyTorch's anchors and vkern's steps against them, beside, as time
#     allows.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call2
LIMIT=560
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "build"
build_server bin/vkern || exit 1
step "gpt2, 6 steps: one stream, then beside"
train=(train --backend cuda --model gpt2 --batch 16 --steps 6 --warmup 2 --data kernels --eval-every 1000 --sample 0)
VKERN_BESIDE=0 run train-one ./bin/vkern "${train[@]}" --out /tmp/run-one --json "$out/train-one.json"
VKERN_BESIDE=1 VKERN_GRAPHS_LOG=$out/train-beside-graphs.log run train-beside ./bin/vkern "${train[@]}" \
  --out /tmp/run-beside --json "$out/train-beside.json"
python3 - "$out/train-one.json" "$out/train-beside.json" <<'PY' | tee "$out/parity.txt"
import json, sys
def steps(p):
    return [(s["step"], s["loss"], s.get("grad_norm"), s.get("val_loss")) for s in json.load(open(p))["steps"]]
a, b = steps(sys.argv[1]), steps(sys.argv[2])
for x, y in zip(a, b):
    print(x, y, "same" if x == y else "DIFFERENT")
print("losses and norms:", "the same bits" if a == b and len(a) == 6 else "NOT the same")
PY
for f in model.safetensors optimizer.safetensors; do
  cmp -s "/tmp/run-one/$f" "/tmp/run-beside/$f" && echo "$f: the same bytes" || echo "$f: DIFFERENT"
done | tee -a "$out/parity.txt"
tail -3 "$out/train-beside-graphs.log"
step "gpt2 steps, two rounds alternating"
bench=(bench --suite train --backend cuda --model gpt2 --batch 16 --steps 30 --warmup 10)
one() {
  local tag=$1; shift
  [ "$(left)" -gt 40 ] || { echo "$tag: no time left"; return; }
  local t0=$(date +%s)
  env "$@" ./bin/vkern "${bench[@]}" --json "$out/step-$tag.json" > "$out/step-$tag.txt" 2>&1
  printf '%-14s %3d s  %s\n' "$tag" $(( $(date +%s) - t0 )) "$(grep -E '^train_gpt2' "$out/step-$tag.txt" | head -1)"
}
for round in 1 2; do
  if [ "$round" = 1 ]; then order=(one beside persistent normal); else order=(normal persistent beside one); fi
  for v in "${order[@]}"; do
    case $v in
      one) one "one-$round" VKERN_BESIDE=0 ;;
      beside) one "beside-$round" VKERN_BESIDE=1 ;;
      persistent) one "persistent-$round" VKERN_BESIDE=1 VKERN_BESIDE_GEMM_UNITS=0 ;;
      normal) one "normal-$round" VKERN_BESIDE=1 VKERN_BESIDE_PRIORITY=normal ;;
    esac
  done
done
step "PyTorch anchors, and vkern's step beside against them"
if [ "$(left)" -gt 150 ]; then
  VKERN_BESIDE=1 OUT=$out/train MODELS=gpt2 timeout $(( $(left) - 10 )) bash bench/cuda-train-bench.sh --batch 16 \
    --steps 30 --warmup 10 > "$out/train.txt" 2>&1
  tail -4 "$out/train.txt"
fi
step "table"
for f in "$out"/step-*.txt; do printf '%-20s %s\n' "$(basename "$f" .txt)" "$(grep -E '^train_gpt2' "$f" | head -1)"; done
tail -3 "$out/parity.txt"
