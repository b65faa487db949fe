#!/usr/bin/env bash
# 2026-11-28, on an nvidia-h200 (no H100 was lent): layernorm_grad's rows
# kernel asking L2 for each thread's next row (variant 6), against
# VKERN_LAYERNORM_PREFETCH=0 in the same server; and the first nvcc build of
# 6d6456e (find_op_named, which VKERN_BESIDE's parsing uses).
#   - the beside tests (VKERN_BESIDE's names) and the conformance suite for
#     layernorm_grad; its planted CUDA defects (background);
#   - verify layernorm_grad at its default shapes, and at 16384x768 as
#     gpt2 runs it;
#   - vkern bench of layernorm_grad in its four forms at 16384x768, with
#     and without the prefetch, alternating, with anchors.py's copy rate;
#   - gpt2 (B 16), 6 steps each way: the same losses, norms and bytes;
#   - gpt2 steps each way, alternating, as time allows.
# Run from the repository root with bin/ from `bash bench/prep-call.sh` and
# ../shared/bench/anchors.py copied to .anchors/anchors.py.
set -uo pipefail
NAME=call1
LIMIT=${LIMIT:-540}
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "build"
build_server bin/vkern || exit 1
step "planted defects (background), tests"
timeout 240 ./bin/vkern.test -test.run "TestPlantedDefectsInTheCUDAKernelsAreIncorrect/layernorm_grad" \
  -test.v > "$out/defects.txt" 2>&1 &
defects=$!
run tests timeout 120 ./bin/vkern.test -test.v \
  -test.run '^(TestCUDARunsLinearGradWBeside|TestCUDARefusesAnUnknownBesideOp)$'
grep -E '^\s*--- (PASS|FAIL|SKIP)|^(ok|FAIL|PASS)' "$out/tests.txt"
run conformance timeout 120 ./bin/vkern.test -test.v -test.run '^TestCUDABackendConformance$/^layernorm_grad$'
grep -E '^(    )?--- (PASS|FAIL|SKIP)|^(ok|FAIL|PASS)' "$out/conformance.txt"
step "verify"
VERIFY_TIMEOUT=120 verify verify-ln --op layernorm_grad
VERIFY_TIMEOUT=120 verify verify-ln-gpt2 --op layernorm_grad --shape 16384x768:residual=1,dx_sum=1 --shape 16384x768 --dist normal
step "anchors and bench"
shapes=(16384x768 16384x768:residual=1 16384x768:dx_sum=1 16384x768:residual=1,dx_sum=1)
python3 .anchors/anchors.py > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
for round in 1 2; do
  VKERN_LAYERNORM_PREFETCH=0 bench_ops "plain-$round" bin/vkern "$out/anchors.jsonl" layernorm_grad "${shapes[@]}"
  bench_ops "prefetch-$round" bin/vkern "$out/anchors.jsonl" layernorm_grad "${shapes[@]}"
done
floor_shares
step "gpt2, 6 steps: without, then with the prefetch"
args=(train --backend cuda --model gpt2 --batch 16 --steps 6 --warmup 2 --data kernels --eval-every 1000 --sample 0)
VKERN_LAYERNORM_PREFETCH=0 run train-plain ./bin/vkern "${args[@]}" --out /tmp/gpt2-plain --json "$out/train-plain.json"
run train-prefetch ./bin/vkern "${args[@]}" --out /tmp/gpt2-prefetch --json "$out/train-prefetch.json"
python3 - "$out/train-plain.json" "$out/train-prefetch.json" <<'PY' | tee "$out/parity.txt"
import json, sys
def steps(p):
    return [(s["step"], s["loss"], s.get("grad_norm"), s.get("val_loss")) for s in json.load(open(p))["steps"]]
a, b = steps(sys.argv[1]), steps(sys.argv[2])
print("gpt2 losses and norms:", "the same bits" if a == b and len(a) == 6 else "NOT the same", a[-1] if a else None)
PY
for f in model.safetensors optimizer.safetensors; do
  cmp -s "/tmp/gpt2-plain/$f" "/tmp/gpt2-prefetch/$f" && echo "gpt2 $f: the same bytes" || echo "gpt2 $f: DIFFERENT"
done | tee -a "$out/parity.txt"
wait $defects
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt"
echo "defects caught: $(grep -cE '^    --- PASS' "$out/defects.txt"), missed: $(grep -cE '^    --- FAIL' "$out/defects.txt")"
step "gpt2 steps, alternating"
one() {
  local tag=$1; shift
  [ "$(left)" -gt 15 ] || { echo "$tag: no time left"; return; }
  env "$@" ./bin/vkern bench --suite train --backend cuda --model gpt2 --batch 16 --steps 30 --warmup 10 \
    --json "$out/step-$tag.json" > "$out/step-$tag.txt" 2>&1
  printf '%-14s %s\n' "$tag" "$(grep -E '^train_' "$out/step-$tag.txt" | head -1)"
}
one plain-1 VKERN_LAYERNORM_PREFETCH=0
one prefetch-1
one prefetch-2
one plain-2 VKERN_LAYERNORM_PREFETCH=0
