#!/usr/bin/env bash
# Branch beside, 2026-11-28, the fifth call on an nvidia-h200, with what
# was left of the session's device time: linear_grad_w's db by bias_grad's
# tiles instead of its cooperative spans, which beside the main lane wait
# for a whole GPU's blocks (call 4: gpt2 31.65 and 31.34 ms a step with
# VKERN_BIAS_GRAD_SPANS=0, 31.87 and 31.96 without).
#   - verify linear_grad_w with bias at the default shapes and at GPT-2's
#     c_fc and c_attn shapes (sampled), and the beside test;
#   - gpt2 (B 16), 6 steps with VKERN_BESIDE=0 and by default: the same
#     losses, norms and checkpoint bytes;
#   - gpt2 steps, VKERN_BESIDE=0 against the default, alternating, as
#     time allows.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call5
LIMIT=${LIMIT:-260}
source bench/call-lib.sh
step "build"
build_server bin/vkern || exit 1
step "verify and the beside test"
VERIFY_TIMEOUT=60 verify verify-bias --op linear_grad_w --shape 1x1x1:bias=1 --shape 17x31x129:bias=1 \
  --shape 4100x40x40:bias=1,accumulate=0 --shape 130x96x200:bias=1 --shape 2100x1000x40:bias=1 \
  --shape 1000x768x256:bias=1 --shape 4096x2304x768:bias=1,accumulate=0
VERIFY_TIMEOUT=60 verify verify-gpt2 --op linear_grad_w --shape 16384x3072x768:bias=1 \
  --shape 16384x2304x768:bias=1,accumulate=0 --dist normal
run tests timeout 60 ./bin/vkern.test -test.v -test.run '^TestCUDARunsLinearGradWBeside$'
grep -E '^(\s*--- (PASS|FAIL|SKIP)|ok|FAIL|PASS)' "$out/tests.txt"
step "gpt2, 6 steps: VKERN_BESIDE=0, then the default"
args=(train --backend cuda --model gpt2 --batch 16 --steps 6 --warmup 2 --data kernels --eval-every 1000 --sample 0)
VKERN_BESIDE=0 run train-one ./bin/vkern "${args[@]}" --out /tmp/gpt2-one --json "$out/train-one.json"
run train-beside ./bin/vkern "${args[@]}" --out /tmp/gpt2-beside --json "$out/train-beside.json"
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
step "gpt2 steps, alternating"
one() {
  local tag=$1; shift
  [ "$(left)" -gt 15 ] || { echo "$tag: no time left"; return; }
  env "$@" ./bin/vkern bench --suite train --backend cuda --model gpt2 --batch 16 --steps 30 --warmup 10 \
    --json "$out/step-$tag.json" > "$out/step-$tag.txt" 2>&1
  printf '%-12s %s\n' "$tag" "$(grep -E '^train_' "$out/step-$tag.txt" | head -1)"
}
one one-1 VKERN_BESIDE=0
one beside-1
one beside-2
one one-2 VKERN_BESIDE=0
