#!/usr/bin/env bash
# 2026-11-28 (eighteenth session), on an nvidia-h200 (no H100 was lent):
# softmax's row kernel with its exponentials by the EX2 instruction alone
# (variant 3) against exp2f (VKERN_SOFTMAX_FTZ=0) in the same server, the
# row_exp helper now in rows.cuh for cross_entropy too; then the gpt2 step
# of main against PyTorch in the same call.
#   - the planted softmax and cross_entropy defects, the two EX2 ones among
#     them (background), and the conformance suite of both ops;
#   - verify softmax at its default shapes and at GPT-2's vocabularies,
#     both settings, and cross_entropy at its defaults;
#   - vkern bench of softmax at the issue's shapes, each setting in turn,
#     twice, and of cross_entropy at GPT-2's, with anchors.py's copy rate;
#   - gpt2 (B 16) against PyTorch eager and torch.compile, as time allows.
# Run from the repository root with bin/ from `bash bench/prep-call.sh` and
# ../shared/bench/anchors.py copied to .anchors/anchors.py.
set -uo pipefail
NAME=call1
LIMIT=${LIMIT:-540}
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "build"
build_server bin/vkern || exit 1
kernel_resources softmax_rows
grep -E '^512,1,128,8,' "$out/resources-softmax_rows.txt"
step "planted defects (background), conformance"
timeout 300 ./bin/vkern.test -test.run "TestPlantedDefectsInTheCUDAKernelsAreIncorrect/(softmax|cross_entropy)" \
  -test.v > "$out/defects.txt" 2>&1 &
defects=$!
run conformance timeout 150 ./bin/vkern.test -test.v -test.run '^TestCUDABackendConformance$/^(softmax|cross_entropy)$'
grep -E '^(    )?--- (PASS|FAIL|SKIP)|^(ok|FAIL|PASS)' "$out/conformance.txt"
step "verify"
VERIFY_TIMEOUT=100 verify verify-softmax --op softmax
VERIFY_TIMEOUT=100 verify verify-softmax-vocab --op softmax --shape 2048x50304 --shape 2048x50257
VKERN_SOFTMAX_FTZ=0 VERIFY_TIMEOUT=100 verify verify-softmax-exp2f --op softmax
VERIFY_TIMEOUT=100 verify verify-ce --op cross_entropy
step "anchors and bench"
shapes=(4096x50257 8192x50257 8192x50304 8192x32768)
python3 .anchors/anchors.py > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
for round in 1 2; do
  VKERN_SOFTMAX_FTZ=0 bench_ops "exp2f-$round" bin/vkern "$out/anchors.jsonl" softmax "${shapes[@]}"
  bench_ops "ftz-$round" bin/vkern "$out/anchors.jsonl" softmax "${shapes[@]}"
done
bench_ops "main" bin/vkern "$out/anchors.jsonl" cross_entropy 16384x50304:grad_scale=1024
floor_shares
wait $defects
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt"
echo "defects caught: $(grep -cE '^    --- PASS' "$out/defects.txt"), missed: $(grep -cE '^    --- FAIL' "$out/defects.txt")"
step "gpt2 against PyTorch"
if [ "$(left)" -gt 200 ]; then train_steps; else echo "gpt2 against PyTorch: no time left ($(left) s)"; fi
