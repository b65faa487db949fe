#!/usr/bin/env bash
# attention.cu's variant 18 (branch attention-overlap): forward_hopper
# issues the next key tile's S before this tile's softmax. Written on
# 2026-11-28 for the next call (not yet run, and not yet built by nvcc);
# meant for nvidia-h100-x1; run on an nvidia-h200, the only kind lent
# that day.
#   - the attention lab from main's sources (bin/labsrc-base) and from this
#     branch's (bin/labsrc), the branch also at three blocks an SM
#     (new3: -DVKERN_ATTENTION_HOPPER_FORWARD_MIN_BLOCKS=3); ptxas's
#     registers, spills and stack (a stack frame in forward_hopper means
#     the pair lambda was not inlined); each at B = 16 and 32, two rounds
#     in turn; all three must hash the same (the arithmetic is variant
#     17's);
#   - the kernel server: vkern verify of attention at the default shapes
#     and at 16x1024x768x12; every planted CUDA defect of attention's
#     forward;
#   - vkern bench of attention at 16x1024x768x12 against
#     scaled_dot_product_attention (flash and cuDNN) in this call.
# Run from the repository root after `bash bench/prep-call.sh main`, with
# ../shared/bench/anchors.py copied to .anchors/anchors.py.
set -uo pipefail
NAME=call1
LIMIT=560
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "builds: the server and three labs in parallel"
build_server bin/vkern > "$out/server-status.txt" 2>&1 &
server_pid=$!
export ATTENTION_LAB_FLAGS_new3=-DVKERN_ATTENTION_HOPPER_FORWARD_MIN_BLOCKS=3
attention_labs base=bin/labsrc-base new=bin/labsrc new3=bin/labsrc
server_ok=1
wait $server_pid || server_ok=0
[ -s "$out/server-status.txt" ] && { server_ok=0; cat "$out/server-status.txt"; }
step "lab: three builds in turn, two rounds"
attention_rounds 2 base new new3
(( server_ok )) || exit 1
step "batches replayed as graphs (replay_test.go)"
run replay timeout 120 ./bin/vkern.test -test.run 'TestCUDAReplaysARepeatedBatch|TestCUDARefusesAnUnknownGraphsSetting' -test.v
grep -E '^(=== RUN|--- |    --- |ok|FAIL|PASS)' "$out/replay.txt"
step "verify"
export VERIFY_TIMEOUT=60
verify verify-attn --op attention
VERIFY_TIMEOUT=90 verify verify-attn-gpt2 --op attention --shape 16x1024x768x12
step "planted defects of attention's forward"
[ "$(left)" -gt 160 ] &&
  run defects timeout 150 ./bin/vkern.test -test.run "TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^attention's" -test.v
echo "caught: $(grep -cE '^    --- PASS' "$out/defects.txt")"; grep -E '^    --- FAIL|^(ok|FAIL)' "$out/defects.txt" | head
step "anchors and bench"
[ "$(left)" -gt 50 ] || exit 0
python3 bench/op_anchors.py attention=16x1024x768x12 > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
bench_ops new bin/vkern "$out/anchors.jsonl" attention 16x1024x768x12
tables
step "table"
cat "$out/ptxas.txt" "$out/lab-table.txt"
