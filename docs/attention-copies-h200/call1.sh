#!/usr/bin/env bash
# attention.cu's variants 15-17 (branch attention-copies): copy_rows_sw's
# offsets stepped 16 rows at a time and whole tiles copied with no tests
# (15), the route's scans without a branch a word (16), both the same bits
# as main by construction, and the forward's finish by a reciprocal (17:
# other bits, within the bound). Written on 2026-11-28 for the next call
# (not yet run); it also runs what variant 14 (merged that day on an
# H200's lab and verify) still owes: the planted attention defects and the
# attention ops against SDPA. Meant for nvidia-h100-x1; where only an H200
# is lent, run it as is and name the folder's device in its README.
#   - the attention lab from main's sources (bin/labsrc-base), from variant
#     15's and 16's commits (bin/labsrc-v15, bin/labsrc-v16) and from this
#     branch's (bin/labsrc), ptxas's registers and spills
#     (backward_dkdv_hopper sits at its 168-register cap); each at B = 16
#     and 32, two rounds in turn; base, v15 and v16 must hash the same;
#   - the kernel server: vkern verify of attention and attention_grad at the
#     default shapes (Hopper and mma.sync) and at 16x1024x768x12;
#   - every planted CUDA defect of attention and attention_grad;
#   - vkern bench of both ops at 16x1024x768x12 against
#     scaled_dot_product_attention (flash and cuDNN) in this call.
# Run from the repository root after `bash bench/prep-call.sh main`, with
# ../shared/bench/anchors.py copied to .anchors/anchors.py, and the two
# middle labs' sources from worktrees of their commits: for each of v15
# (c48c8f3) and v16 (867ba04), `git worktree add /tmp/wt COMMIT; (cd
# /tmp/wt && go run ./bench/labsrc $PWD/bin/labsrc-vNN); git worktree
# remove /tmp/wt` from the repository root.
set -uo pipefail
NAME=call1
LIMIT=570
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
step "builds: the server and four labs in parallel"
build_server bin/vkern > "$out/server-status.txt" 2>&1 &
server_pid=$!
labs=(base v15 v16 new)
attention_labs base=bin/labsrc-base v15=bin/labsrc-v15 v16=bin/labsrc-v16 new=bin/labsrc
server_ok=1
wait $server_pid || server_ok=0
[ -s "$out/server-status.txt" ] && { server_ok=0; cat "$out/server-status.txt"; }
step "lab: four builds in turn, two rounds"
attention_rounds 2 "${labs[@]}"
(( server_ok )) || exit 1
step "verify"
export VERIFY_TIMEOUT=60
verify verify-attn --op attention,attention_grad
VKERN_ATTENTION=mma verify verify-attn-mma --op attention,attention_grad
VERIFY_TIMEOUT=120 verify verify-attn-gpt2 --op attention,attention_grad --shape 16x1024x768x12
step "planted defects of attention and attention_grad"
[ "$(left)" -gt 220 ] &&
  run defects timeout 200 ./bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^attention' -test.v
echo "caught: $(grep -cE '^    --- PASS' "$out/defects.txt")"; grep -E '^    --- FAIL|^(ok|FAIL)' "$out/defects.txt" | head
step "anchors and bench"
[ "$(left)" -gt 60 ] || exit 0
python3 bench/op_anchors.py attention=16x1024x768x12 attention_backward=16x1024x768x12 > "$out/anchors.jsonl" \
  2> "$out/anchors.stderr" || echo "anchors: FAILED"
bench_ops new bin/vkern "$out/anchors.jsonl" attention,attention_grad 16x1024x768x12
tables
step "table"
cat "$out/lab-table.txt"
