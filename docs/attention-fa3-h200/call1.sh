#!/usr/bin/env bash
# attention.cu's variant 19 (branch attention-fa3): forward_hopper in
# FlashAttention-3's order within a warpgroup (S of tile kt and P·V of
# tile kt − 1 issued together, the softmax beside P·V, o rescaled after
# it). Written on 2026-11-28 for one call on an nvidia-h200 (no H100 was
# lent that day); not yet built by nvcc.
#   - the attention lab from main's sources (bin/labsrc-base) and this
#     branch's (bin/labsrc), built in parallel with both kernel servers:
#     ptxas's registers, spills, stack and any wgmma serialization
#     warning; each lab at B = 16 and 32, two rounds in turn; the wgmma
#     outputs' hashes (the bits should be main's);
#   - vkern verify of attention at the default shapes (the Hopper path,
#     and mma.sync with VKERN_ATTENTION=mma: online_softmax is now
#     softmax_steps) and at 16x1024x768x12; every planted CUDA defect of
#     attention's forward;
#   - vkern bench of attention against scaled_dot_product_attention
#     (flash and cuDNN) in this call;
#   - the gpt2 step (B 16, T 1024) against PyTorch eager and
#     torch.compile, as time allows.
# Run from the repository root after `bash bench/prep-call.sh main`, with
# ../shared/bench/anchors.py copied to .anchors/anchors.py.
set -uo pipefail
NAME=call1
LIMIT=560
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "builds: the server and both labs in parallel"
build_server bin/vkern > "$out/server-status.txt" 2>&1 &
server_pid=$!
attention_labs base=bin/labsrc-base new=bin/labsrc
server_ok=1
wait $server_pid || server_ok=0
[ -s "$out/server-status.txt" ] && { server_ok=0; cat "$out/server-status.txt"; }
step "lab: two builds in turn, two rounds"
attention_rounds 2 base new
(( server_ok )) || exit 1
step "verify"
export VERIFY_TIMEOUT=60
verify verify-attn --op attention
VKERN_ATTENTION=mma verify verify-attn-mma --op attention
VERIFY_TIMEOUT=90 verify verify-attn-gpt2 --op attention --shape 16x1024x768x12
step "planted defects of attention's forward"
[ "$(left)" -gt 300 ] &&
  run defects timeout 150 ./bin/vkern.test -test.run "TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^attention's" -test.v
echo "caught: $(grep -cE '^    --- PASS' "$out/defects.txt")"; grep -E '^    --- FAIL|^(ok|FAIL)' "$out/defects.txt" | head
step "anchors and bench"
[ "$(left)" -gt 200 ] || exit 0
python3 bench/op_anchors.py attention=16x1024x768x12 > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
bench_ops new bin/vkern "$out/anchors.jsonl" attention 16x1024x768x12
tables
step "gpt2 step"
[ "$(left)" -gt 120 ] && train_steps
step "table"
cat "$out/ptxas.txt" "$out/lab-table.txt"
