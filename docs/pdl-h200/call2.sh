#!/usr/bin/env bash
# 2026-11-28, the session's third call, on an nvidia-h200: call 1's
# programmatic edges with every kernel only waiting (no
# griddepcontrol.launch_dependents: a grid may launch once the blocks of
# the one before have exited). Call 1's early signal made the steps 3–6%
# slower.
#   - the replay and beside tests, with the graphs' log;
#   - gpt2 (B 16), 6 steps with VKERN_PDL=0 and by default: the same bits;
#   - gpt2 and char steps, VKERN_PDL=0 against the default, alternating.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call2
LIMIT=${LIMIT:-400}
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "build"
build_server bin/vkern || exit 1
step "tests"
VKERN_GRAPHS_LOG="$out/tests-graphs.log" run tests timeout 150 ./bin/vkern.test -test.v \
  -test.run '^(TestCUDARunsLinearGradWBeside|TestCUDAReplaysARepeatedBatch)$'
grep -E '^\s*--- (PASS|FAIL|SKIP)|^(ok|FAIL|PASS)' "$out/tests.txt"
step "gpt2, 6 steps: VKERN_PDL=0, then the default"
args=(train --backend cuda --model gpt2 --batch 16 --steps 6 --warmup 2 --data kernels --eval-every 1000 --sample 0)
VKERN_PDL=0 run train-plain ./bin/vkern "${args[@]}" --out /tmp/gpt2-plain --json "$out/train-plain.json"
VKERN_GRAPHS_LOG="$out/train-pdl-graphs.log" run train-pdl ./bin/vkern "${args[@]}" --out /tmp/gpt2-pdl --json "$out/train-pdl.json"
grep -E '^(graphs|lanes|programmatic):|refused' "$out/train-pdl-graphs.log" | head -8
python3 - "$out/train-plain.json" "$out/train-pdl.json" <<'PY' | tee "$out/parity.txt"
import json, sys
def steps(p):
    return [(s["step"], s["loss"], s.get("grad_norm"), s.get("val_loss")) for s in json.load(open(p))["steps"]]
a, b = steps(sys.argv[1]), steps(sys.argv[2])
print("gpt2 losses and norms:", "the same bits" if a == b and len(a) == 6 else "NOT the same", a[-1] if a else None)
PY
for f in model.safetensors optimizer.safetensors; do
  cmp -s "/tmp/gpt2-plain/$f" "/tmp/gpt2-pdl/$f" && echo "gpt2 $f: the same bytes" || echo "gpt2 $f: DIFFERENT"
done | tee -a "$out/parity.txt"
step "steps, alternating"
one() {
  local tag=$1 model=$2 batch=$3; shift 3
  [ "$(left)" -gt 15 ] || { echo "$tag: no time left"; return; }
  env "$@" ./bin/vkern bench --suite train --backend cuda --model "$model" --batch "$batch" --steps 30 --warmup 10 \
    --json "$out/step-$tag.json" > "$out/step-$tag.txt" 2>&1
  printf '%-16s %s\n' "$tag" "$(grep -E '^train_' "$out/step-$tag.txt" | head -1)"
}
one gpt2-plain-1 gpt2 16 VKERN_PDL=0
one gpt2-pdl-1 gpt2 16
one gpt2-pdl-2 gpt2 16
one gpt2-plain-2 gpt2 16 VKERN_PDL=0
one char-plain-1 char 64 VKERN_PDL=0
one char-pdl-1 char 64
one char-pdl-2 char 64
one char-plain-2 char 64 VKERN_PDL=0
one gpt2-pdl-3 gpt2 16
one gpt2-plain-3 gpt2 16 VKERN_PDL=0
