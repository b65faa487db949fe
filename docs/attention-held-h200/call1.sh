#!/usr/bin/env bash
# attention.cu's variant 12 (branch attention-held): the Hopper kernels'
# item-fixed A tiles (Q in the forward, Q and dY in the dq kernel, K and V
# in the dk/dv kernel) held as register fragments, so that S and dP read
# only B from shared memory. On an H200 (the H100 kind was not lent on
# 2026-11-28): each figure is a ratio within this call.
#   - the attention lab from main's sources (bin/labsrc-base) and from this
#     branch's with VKERN_ATTENTION_HELD = 7 (all, the default), 1
#     (forward), 3 (forward, dq) and 5 (forward, dk/dv), ptxas's registers
#     and spills for each; then each run at B = 16 and 32, two rounds in
#     turn: forward and backward ms, and the outputs' hashes;
#   - the kernel server (VKERN_ATTENTION_HELD = 7): vkern verify of
#     attention and attention_grad at the default shapes (Hopper and
#     mma.sync) and at 16x1024x768x12; the planted attention defects;
#   - vkern bench of both ops at 16x1024x768x12 against
#     scaled_dot_product_attention (flash and cuDNN backends) in this call.
# Run from the repository root after `bash bench/prep-call.sh main`, with
# ../shared/bench/anchors.py copied to .anchors/anchors.py.
set -uo pipefail
NAME=call1
LIMIT=575
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
step "builds: the server, and five labs in parallel"
build_server bin/vkern > "$out/server-status.txt" 2>&1 &
server_pid=$!
lab() {  # lab NAME SRC [FLAG...]
  local name=$1 src=$2; shift 2
  timeout 300 nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -I"$src" "$@" \
    -o /tmp/lab-$name bench/attention_lab.cu > "$out/lab-$name-build.txt" 2>&1 || echo "lab $name: build FAILED"
}
labs=(base held7 held1 held3 held5)
lab_pids=()
lab base bin/labsrc-base & lab_pids+=($!)
lab held7 bin/labsrc & lab_pids+=($!)
lab held1 bin/labsrc -DVKERN_ATTENTION_HELD=1 & lab_pids+=($!)
lab held3 bin/labsrc -DVKERN_ATTENTION_HELD=3 & lab_pids+=($!)
lab held5 bin/labsrc -DVKERN_ATTENTION_HELD=5 & lab_pids+=($!)
wait "${lab_pids[@]}"
cat "$out/server-status.txt"
for v in "${labs[@]}"; do
  grep -A3 -E "Compiling entry function.*(forward_hopper|backward_dkdv_hopper|backward_dq_hopper)" \
    "$out/lab-$v-build.txt" | grep -E "entry|registers|spill" |
    sed -E "s/^/$v: /; s/Compiling entry function '_ZN[^']*(forward_hopper|backward_dkdv_hopper|backward_dq_hopper)[^']*'/\1/" |
    tee -a "$out/ptxas.txt" | grep -E "registers|spill" | tr -s ' ' | paste -sd ' ' | cut -c1-400
done
step "lab: five builds in turn, two rounds"
: > "$out/lab-table.txt"
for round in 1 2; do
  for v in "${labs[@]}"; do
    for b in 16 32; do
      [ "$(left)" -gt 330 ] || continue
      [ -x /tmp/lab-$v ] || continue
      timeout 60 /tmp/lab-$v $b 1024 768 12 > "$out/lab-$v-$b-$round.txt" 2>&1 || echo "lab $v B=$b round $round: rc $?"
      printf '%-6s B=%-3s r%s %s\n' $v $b $round \
        "$(grep -E '^(forward|backward), wgmma|^bits' "$out/lab-$v-$b-$round.txt" | tr -s ' ' | paste -sd ';')" |
        tee -a "$out/lab-table.txt"
    done
  done
done
if ! wait $server_pid || [ -s "$out/server-status.txt" ]; then
  echo "server build failed: no verify or bench"; exit 1
fi
step "verify"
export VERIFY_TIMEOUT=90
verify verify-attn --op attention,attention_grad
VKERN_ATTENTION=mma verify verify-attn-mma --op attention,attention_grad
VERIFY_TIMEOUT=130 verify verify-attn-gpt2 --op attention,attention_grad --shape 16x1024x768x12
step "planted attention defects"
[ "$(left)" -gt 150 ] &&
  run defects timeout 120 ./bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^attention' -test.v
grep -cE '^    --- PASS' "$out/defects.txt"; grep -E '^    --- FAIL|^(ok|FAIL)' "$out/defects.txt" | head
step "anchors and bench"
[ "$(left)" -gt 70 ] || exit 0
python3 bench/op_anchors.py attention=16x1024x768x12 attention_backward=16x1024x768x12 > "$out/anchors.jsonl" \
  2> "$out/anchors.stderr" || echo "anchors: FAILED"
bench_ops held7 bin/vkern "$out/anchors.jsonl" attention,attention_grad 16x1024x768x12
grep -h '"impl"' "$out/anchors.jsonl" | python3 -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l); print(f"anchor {r[\"op\"]:<28} {r[\"median_ms\"]:.4f} ms  {r[\"impl\"][:70]}")'
tables
