#!/usr/bin/env bash
# Branch beside, written on 2026-11-28 for one call on an nvidia-h200 (no
# H100 was lent that day): the cuda server runs linear_grad_w entries on a
# second stream beside the rest of a batch (kernels/cuda/beside.h, Lanes in
# device.cu; VKERN_BESIDE=1), where GPT-2's weight gradients fill 72 to 108
# of the 132 multiprocessors. Also main's unbuilt code (02e08a3's kSums
# refactor, 876accb's overrun defect), which this branch carries.
#   - the planted defects of db and the Hopper column sums, in the
#     background while the tests run;
#   - TestCUDARunsLinearGradWBeside (beside against one stream, bit for
#     bit, graphs on and off; the log's counts of entries beside and
#     waits), the refusal of an unknown op, and the replay test;
#   - a gpt2 run of 6 steps on one stream and beside: the same losses and
#     norms, bit for bit, and --verify-every 3 beside;
#   - gpt2 steps (B 16, T 1024), two rounds alternating: one stream,
#     beside, beside with the main lane's GEMMs on their persistent grid
#     (VKERN_BESIDE_GEMM_UNITS=0), beside at normal priority;
#   - PyTorch's anchors and vkern's default step, as time allows.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call1
LIMIT=570
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "build"
build_server bin/vkern || exit 1
step "planted defects (background), beside tests"
timeout 240 ./bin/vkern.test -test.run "TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^(Hopper_column_sums|linear_grad_w's_db)" \
  -test.v > "$out/defects.txt" 2>&1 &
defects=$!
run tests timeout 200 ./bin/vkern.test -test.v \
  -test.run '^(TestCUDARunsLinearGradWBeside|TestCUDARefusesAnUnknownBesideOp|TestCUDAReplaysARepeatedBatch)$'
grep -E '^(=== RUN|\s*--- (PASS|FAIL|SKIP)|ok|FAIL|PASS)' "$out/tests.txt" | grep -v '=== RUN'
step "gpt2, 6 steps: one stream, then beside (with --verify-every 3)"
train=(train --backend cuda --model gpt2 --batch 16 --steps 6 --warmup 2 --data kernels --eval-every 1000 --sample 0)
VKERN_BESIDE=0 run train-one ./bin/vkern "${train[@]}" --out /tmp/run-one --json "$out/train-one.json"
VKERN_BESIDE=1 run train-beside ./bin/vkern "${train[@]}" --out /tmp/run-beside --json "$out/train-beside.json" \
  --verify-every 3
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
wait $defects
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt"
echo "defects caught: $(grep -cE '^    --- PASS' "$out/defects.txt"), missed: $(grep -cE '^    --- FAIL' "$out/defects.txt")"
step "gpt2 steps, two rounds alternating"
bench=(bench --suite train --backend cuda --model gpt2 --batch 16 --steps 30 --warmup 10)
one() {
  local tag=$1; shift
  [ "$(left)" -gt 45 ] || { echo "$tag: no time left"; return; }
  env "$@" ./bin/vkern "${bench[@]}" --json "$out/step-$tag.json" > "$out/step-$tag.txt" 2>&1
  printf '%-22s %s\n' "$tag" "$(grep -E '^train_gpt2' "$out/step-$tag.txt" | head -1)"
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
step "PyTorch anchors and the default step"
if [ "$(left)" -gt 200 ]; then
  OUT=$out/train MODELS=gpt2 timeout $(( $(left) - 15 )) bash bench/cuda-train-bench.sh --batch 16 --steps 30 --warmup 10 \
    > "$out/train.txt" 2>&1
  tail -4 "$out/train.txt"
fi
step "table"
for f in "$out"/step-*.txt; do printf '%-28s %s\n' "$(basename "$f" .txt)" "$(grep -E '^train_gpt2' "$f" | head -1)"; done
cat "$out/parity.txt" | tail -3
