#!/usr/bin/env bash
# Branch beside, 2026-11-28, the fourth call on an nvidia-h200: a side
# entry forks from the latest main entry it conflicts with (beside.h),
# where calls 1–3's forked from the main lane's work so far. GPT-2's weight
# gradients can then start beside the dx products before them: c_proj's dW
# beside its own dx, whose output it does not read.
#   - both servers built: this tree's (bin/vkern) and 7917823's, as merged
#     before (bin/vkern-base);
#   - the beside and replay tests on this tree's;
#   - gpt2 (B 16), 6 steps with VKERN_BESIDE=0 and by default: the same
#     losses, norms and checkpoint bytes;
#   - gpt2 (B 16) and char (B 64) steps, two rounds alternating, 7917823
#     against this tree, and gpt2 with bias_grad's tiles instead of its
#     cooperative spans (VKERN_BIAS_GRAD_SPANS=0), which a side lane may
#     start sooner.
# Run from the repository root with bin/ from `bash bench/prep-call.sh 7917823`.
set -uo pipefail
NAME=call4
LIMIT=430
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "build both"
build_server bin/vkern || exit 1
build_server bin/vkern-base || exit 1
step "tests"
run tests timeout 100 ./bin/vkern.test -test.v -test.run '^(TestCUDARunsLinearGradWBeside|TestCUDAReplaysARepeatedBatch)$'
grep -E '^(\s*--- (PASS|FAIL|SKIP)|ok|FAIL|PASS)' "$out/tests.txt"
step "gpt2, 6 steps: VKERN_BESIDE=0, then the default"
args=(train --backend cuda --model gpt2 --batch 16 --steps 6 --warmup 2 --data kernels --eval-every 1000 --sample 0)
VKERN_BESIDE=0 run train-one ./bin/vkern "${args[@]}" --out /tmp/gpt2-one --json "$out/train-one.json"
VKERN_GRAPHS_LOG=$out/train-graphs.log run train-beside ./bin/vkern "${args[@]}" --out /tmp/gpt2-beside \
  --json "$out/train-beside.json"
python3 - "$out/train-one.json" "$out/train-beside.json" <<'PY' | tee "$out/parity.txt"
import json, sys
def steps(p):
    return [(s["step"], s["loss"], s.get("grad_norm"), s.get("val_loss")) for s in json.load(open(p))["steps"]]
a, b = steps(sys.argv[1]), steps(sys.argv[2])
print("gpt2 losses and norms:", "the same bits" if a == b and len(a) == 6 else "NOT the same", a[-1])
PY
for f in model.safetensors optimizer.safetensors; do
  cmp -s "/tmp/gpt2-one/$f" "/tmp/gpt2-beside/$f" && echo "gpt2 $f: the same bytes" || echo "gpt2 $f: DIFFERENT"
done | tee -a "$out/parity.txt"
tail -1 "$out/train-graphs.log"
step "steps, two rounds alternating: 7917823 (base) against this tree (fork)"
one() {
  local tag=$1 bin=$2 model=$3 batch=$4
  shift 4
  [ "$(left)" -gt 25 ] || { echo "$tag: no time left"; return; }
  env "$@" "$bin" bench --suite train --backend cuda --model "$model" --batch "$batch" --steps 30 --warmup 10 \
    --json "$out/step-$tag.json" > "$out/step-$tag.txt" 2>&1
  printf '%-16s %s\n' "$tag" "$(grep -E '^train_' "$out/step-$tag.txt" | head -1)"
}
for round in 1 2; do
  for m in gpt2:16 char:64; do
    model=${m%:*} batch=${m#*:}
    if [ "$round" = 1 ]; then
      one "$model-base-$round" bin/vkern-base "$model" "$batch"
      one "$model-fork-$round" bin/vkern "$model" "$batch"
    else
      one "$model-fork-$round" bin/vkern "$model" "$batch"
      one "$model-base-$round" bin/vkern-base "$model" "$batch"
    fi
    # bias_grad's cooperative spans wait for a whole GPU's blocks: beside
    # the main lane, the tiles may start sooner (other bits, both lanes).
    [ "$model" = gpt2 ] && one "$model-tiles-$round" bin/vkern "$model" "$batch" VKERN_BIAS_GRAD_SPANS=0
  done
done
step "table"
for f in "$out"/step-*.txt; do printf '%-22s %s\n' "$(basename "$f" .txt)" "$(grep -E '^train_' "$f" | head -1)"; done
cat "$out/parity.txt"
