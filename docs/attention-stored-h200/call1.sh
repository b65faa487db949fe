#!/usr/bin/env bash
# 2026-11-28 (eighteenth session), on an nvidia-h200 (no H100 was lent):
# attention_grad's variant 20, the Hopper dk/dv kernel storing each pair's
# dS and backward_dq_stored summing dq from them (VKERN_ATTENTION_DQ=stored),
# against variant 17's dq kernel, which computes S, dP and dS again (unset),
# in the same server.
#   - ptxas's registers, stack and spills of both backward_dkdv_hopper
#     instances and of backward_dq_stored;
#   - the planted stored-dS defects, the new Hopper one among them
#     (background), and the conformance suite of attention_grad, stored;
#   - verify attention_grad, stored, at the default shapes, at heads of 64
#     (the Hopper path) and at GPT-2's shape (sampled);
#   - vkern bench of attention_grad at 16x1024x768x12, each setting in turn,
#     twice;
#   - gpt2 (B 16), 6 steps each way (dq's products are summed by other
#     instructions, so the bits may differ: the losses are printed);
#   - gpt2 steps, alternating, as time allows.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call1
LIMIT=${LIMIT:-540}
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "build"
build_server bin/vkern || exit 1
kernel_resources backward_dkdv_hopper
cat "$out/resources-backward_dkdv_hopper.txt"
kernel_resources backward_dq_stored
cat "$out/resources-backward_dq_stored.txt"
step "planted defects (background), conformance"
timeout 300 ./bin/vkern.test -test.run "TestPlantedDefectsInTheCUDAKernelsAreIncorrect/attention_grad's_(stored|Hopper_dS)" \
  -test.v > "$out/defects.txt" 2>&1 &
defects=$!
VKERN_ATTENTION_DQ=stored run conformance timeout 150 ./bin/vkern.test -test.v \
  -test.run '^TestCUDABackendConformance$/^attention_grad$'
grep -E '^(    )?--- (PASS|FAIL|SKIP)|^(ok|FAIL|PASS)' "$out/conformance.txt"
step "verify"
VKERN_ATTENTION_DQ=stored VERIFY_TIMEOUT=150 verify verify-stored --op attention_grad
VKERN_ATTENTION_DQ=stored VERIFY_TIMEOUT=120 verify verify-stored-hopper --op attention_grad \
  --shape 1x192x256x4 --shape 2x1024x768x12 --shape 3x200x512x8
VKERN_ATTENTION_DQ=stored VERIFY_TIMEOUT=150 verify verify-stored-gpt2 --op attention_grad --shape 16x1024x768x12 --dist normal
step "bench"
for round in 1 2; do
  bench_ops "recompute-$round" bin/vkern /dev/null attention_grad 16x1024x768x12
  VKERN_ATTENTION_DQ=stored bench_ops "stored-$round" bin/vkern /dev/null attention_grad 16x1024x768x12
done
grep -h attention_grad "$out"/bench-*-attention_grad.txt | grep -v timing
step "gpt2, 6 steps each way"
gpt2_parity recompute "VKERN_ATTENTION_DQ=recompute" stored "VKERN_ATTENTION_DQ=stored"
python3 - "$out/train-recompute.json" "$out/train-stored.json" <<'PY' | tee -a "$out/parity.txt"
import json, sys
for p in sys.argv[1:]:
    s = json.load(open(p))["steps"]
    print(p.split("/")[-1], [(x["step"], round(x["loss"], 6), round(x.get("grad_norm") or 0, 6)) for x in s])
PY
wait $defects
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt"
echo "defects caught: $(grep -cE '^    --- PASS' "$out/defects.txt"), missed: $(grep -cE '^    --- FAIL' "$out/defects.txt")"
step "gpt2 steps, alternating"
gpt2_step recompute-1
gpt2_step stored-1 VKERN_ATTENTION_DQ=stored
gpt2_step stored-2 VKERN_ATTENTION_DQ=stored
gpt2_step recompute-2
