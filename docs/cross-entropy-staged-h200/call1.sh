#!/usr/bin/env bash
# 2026-11-28, the first call of the session, on an nvidia-h200 (no H100 was
# lent): cross_entropy's rows staged in shared memory (variant 3), and the
# first nvcc build of main's c31b6b9 and 43c2b92.
#   - the beside and replay tests, and the conformance suite for
#     cross_entropy and the linear ops (pad_scratch, now a ScratchBuffer);
#   - the planted cross_entropy defects, the staged kernel's four among them
#     (in the background);
#   - verify cross_entropy at its default shapes and at 2048 rows of 50,304
#     and 50,257 (staged, rows at every lead, every 4th row ignored);
#   - vkern bench of cross_entropy at GPT-2's shapes and the issue's,
#     staged against VKERN_CROSS_ENTROPY_STAGED=0 (registers), alternating,
#     with anchors.py's copy rate and F.cross_entropy in the same call;
#   - gpt2 (B 16), 6 steps each way: the same losses, norms and checkpoint
#     bytes (the two kernels add in the same order);
#   - gpt2 steps each way, alternating, as time allows.
# Run from the repository root with bin/ from `bash bench/prep-call.sh` and
# ../shared/bench/anchors.py copied to .anchors/anchors.py.
set -uo pipefail
NAME=call1
LIMIT=${LIMIT:-570}
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "build"
build_server bin/vkern || exit 1
step "planted defects (background), tests"
timeout 300 ./bin/vkern.test -test.run "TestPlantedDefectsInTheCUDAKernelsAreIncorrect/(cross_entropy|unaligned_rows'_last)" \
  -test.v > "$out/defects.txt" 2>&1 &
defects=$!
run tests timeout 150 ./bin/vkern.test -test.v \
  -test.run '^(TestCUDARunsLinearGradWBeside|TestCUDARefusesAnUnknownBesideOp|TestCUDAReplaysARepeatedBatch)$'
grep -E '^\s*--- (PASS|FAIL|SKIP)|^(ok|FAIL|PASS)' "$out/tests.txt"
run conformance timeout 150 ./bin/vkern.test -test.v \
  -test.run '^TestCUDABackendConformance$/^(cross_entropy|linear|linear_nt|linear_grad_w|linear_grad_x)$'
grep -E '^(    )?--- (PASS|FAIL|SKIP)|^(ok|FAIL|PASS)' "$out/conformance.txt"
step "verify"
VERIFY_TIMEOUT=150 verify verify-ce --op cross_entropy
VERIFY_TIMEOUT=120 verify verify-ce-2048 --op cross_entropy --shape 2048x50304 --shape 2048x50257:ignore_index=-100
step "anchors and bench"
shapes=(16384x50304 8192x50304 8192x50257 4096x50257)
{ python3 .anchors/anchors.py && python3 bench/op_anchors.py "${shapes[@]/#/cross_entropy_fwd_bwd=}"; } > "$out/anchors.jsonl" 2> "$out/anchors.stderr" ||
  echo "anchors: FAILED"
for round in 1 2; do
  VKERN_CROSS_ENTROPY_STAGED=0 bench_ops "registers-$round" bin/vkern "$out/anchors.jsonl" cross_entropy "${shapes[@]}"
  bench_ops "staged-$round" bin/vkern "$out/anchors.jsonl" cross_entropy "${shapes[@]}"
done
tables
floor_shares
step "gpt2, 6 steps: registers, then staged"
args=(train --backend cuda --model gpt2 --batch 16 --steps 6 --warmup 2 --data kernels --eval-every 1000 --sample 0)
VKERN_CROSS_ENTROPY_STAGED=0 run train-registers ./bin/vkern "${args[@]}" --out /tmp/gpt2-registers --json "$out/train-registers.json"
run train-staged ./bin/vkern "${args[@]}" --out /tmp/gpt2-staged --json "$out/train-staged.json"
python3 - "$out/train-registers.json" "$out/train-staged.json" <<'PY' | tee "$out/parity.txt"
import json, sys
def steps(p):
    return [(s["step"], s["loss"], s.get("grad_norm"), s.get("val_loss")) for s in json.load(open(p))["steps"]]
a, b = steps(sys.argv[1]), steps(sys.argv[2])
print("gpt2 losses and norms:", "the same bits" if a == b and len(a) == 6 else "NOT the same", a[-1] if a else None)
PY
for f in model.safetensors optimizer.safetensors; do
  cmp -s "/tmp/gpt2-registers/$f" "/tmp/gpt2-staged/$f" && echo "gpt2 $f: the same bytes" || echo "gpt2 $f: DIFFERENT"
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
one registers-1 VKERN_CROSS_ENTROPY_STAGED=0
one staged-1
one staged-2
one registers-2 VKERN_CROSS_ENTROPY_STAGED=0
