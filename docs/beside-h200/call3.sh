#!/usr/bin/env bash
# Branch beside, 2026-11-28, the third call on an nvidia-h200: the lanes as
# they will merge, linear_grad_w beside by default (VKERN_BESIDE unset), the
# side stream at the default priority and the main lane's GEMMs on their
# persistent grid (call 2 measured neither knob to matter; both are gone).
#   - the beside and replay tests again, on this build;
#   - gpt2 (B 16) and char (B 64), 6 steps each, with VKERN_BESIDE=0 and by
#     default: the same losses, norms and checkpoint bytes;
#   - steps of both, two rounds alternating, VKERN_BESIDE=0 against the
#     default;
#   - PyTorch's anchors and vkern's default steps against them (gpt2 at
#     B 16, char at B 64), as time allows.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call3
LIMIT=520
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "build"
build_server bin/vkern || exit 1
step "tests"
run tests timeout 120 ./bin/vkern.test -test.v \
  -test.run '^(TestCUDARunsLinearGradWBeside|TestCUDARefusesAnUnknownBesideOp|TestCUDAReplaysARepeatedBatch)$'
grep -E '^(\s*--- (PASS|FAIL|SKIP)|ok|FAIL|PASS)' "$out/tests.txt"
step "6 steps each: VKERN_BESIDE=0, then the default"
parity() {
  local model=$1 batch=$2
  local args=(train --backend cuda --model "$model" --batch "$batch" --steps 6 --warmup 2 --data kernels --eval-every 1000 --sample 0)
  VKERN_BESIDE=0 run "train-$model-one" ./bin/vkern "${args[@]}" --out "/tmp/$model-one" --json "$out/train-$model-one.json"
  VKERN_GRAPHS_LOG=$out/train-$model-graphs.log run "train-$model-beside" ./bin/vkern "${args[@]}" \
    --out "/tmp/$model-beside" --json "$out/train-$model-beside.json"
  python3 - "$model" "$out/train-$model-one.json" "$out/train-$model-beside.json" <<'PY' | tee -a "$out/parity.txt"
import json, sys
def steps(p):
    return [(s["step"], s["loss"], s.get("grad_norm"), s.get("val_loss")) for s in json.load(open(p))["steps"]]
a, b = steps(sys.argv[2]), steps(sys.argv[3])
print(sys.argv[1], "losses and norms:", "the same bits" if a == b and len(a) == 6 else "NOT the same", a[-1])
PY
  for f in model.safetensors optimizer.safetensors; do
    cmp -s "/tmp/$model-one/$f" "/tmp/$model-beside/$f" && echo "$model $f: the same bytes" || echo "$model $f: DIFFERENT"
  done | tee -a "$out/parity.txt"
  tail -1 "$out/train-$model-graphs.log"
}
parity gpt2 16
parity char 64
step "steps, two rounds alternating"
one() {
  local tag=$1 model=$2 batch=$3; shift 3
  [ "$(left)" -gt 30 ] || { echo "$tag: no time left"; return; }
  env "$@" ./bin/vkern bench --suite train --backend cuda --model "$model" --batch "$batch" --steps 30 --warmup 10 \
    --json "$out/step-$tag.json" > "$out/step-$tag.txt" 2>&1
  printf '%-16s %s\n' "$tag" "$(grep -E '^train_' "$out/step-$tag.txt" | head -1)"
}
for round in 1 2; do
  for m in gpt2:16 char:64; do
    model=${m%:*} batch=${m#*:}
    if [ "$round" = 1 ]; then
      one "$model-one-$round" "$model" "$batch" VKERN_BESIDE=0
      one "$model-beside-$round" "$model" "$batch"
    else
      one "$model-beside-$round" "$model" "$batch"
      one "$model-one-$round" "$model" "$batch" VKERN_BESIDE=0
    fi
  done
done
step "PyTorch anchors, and vkern's default steps against them"
for m in gpt2:16 char:64; do
  model=${m%:*} batch=${m#*:}
  [ "$(left)" -gt 90 ] || { echo "$model: no time left for the anchors"; continue; }
  OUT=$out/train-$model MODELS=$model timeout $(( $(left) - 10 )) bash bench/cuda-train-bench.sh --batch "$batch" \
    --steps 30 --warmup 10 > "$out/train-$model.txt" 2>&1
  cat "$out/train-$model/table.txt" 2>/dev/null || tail -5 "$out/train-$model.txt"
done
step "table"
for f in "$out"/step-*.txt; do printf '%-24s %s\n' "$(basename "$f" .txt)" "$(grep -E '^train_' "$f" | head -1)"; done
cat "$out/parity.txt"
