#!/usr/bin/env bash
# attention.cu's variant 14 (branch attention-ftz): exp2_tile as
# ex2.approx.ftz alone, without variant 10's test of the warp's smallest
# argument; the oracle allows the flushed results (2⁻¹²⁶). On an H200 (the
# H100 kind was not lent on 2026-11-28); each figure a ratio within this
# call.
#   - bench/exp2_check.cu: exp2f against the instruction at every float
#     (the same bits at and above −126; flushes to 0 below, where exp2f is
#     under 2⁻¹²⁶);
#   - the attention lab from main's sources (bin/labsrc-base) and from this
#     branch's, ptxas's registers; each at B = 16 and 32, two rounds in turn;
#   - the kernel server: vkern verify of attention and attention_grad at the
#     default shapes (Hopper and mma.sync) and, time allowing, at
#     16x1024x768x12 (Hopper).
# Run from the repository root after `bash bench/prep-call.sh main`.
set -uo pipefail
NAME=call1
LIMIT=330
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
step "builds: the server, two labs and exp2_check in parallel"
build_server bin/vkern > "$out/server-status.txt" 2>&1 &
server_pid=$!
lab() {  # lab NAME SRC
  timeout 200 nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -I"$2" \
    -o /tmp/lab-$1 bench/attention_lab.cu > "$out/lab-$1-build.txt" 2>&1 || echo "lab $1: build FAILED"
}
lab base bin/labsrc-base & base_pid=$!
lab ftz bin/labsrc & ftz_pid=$!
timeout 200 nvcc -std=c++17 -O3 -arch=sm_90 -Ibench -o /tmp/exp2_check bench/exp2_check.cu > "$out/exp2-build.txt" 2>&1 ||
  echo "exp2_check: build FAILED"
[ -x /tmp/exp2_check ] && run exp2-check timeout 60 /tmp/exp2_check && cat "$out/exp2-check.txt"
wait $base_pid $ftz_pid
server_ok=1
wait $server_pid || server_ok=0
[ -s "$out/server-status.txt" ] && { server_ok=0; cat "$out/server-status.txt"; }
for v in base ftz; do
  grep -A3 -E "Compiling entry function.*(forward_hopper|backward_dkdv_hopper|backward_dq_hopper)" \
    "$out/lab-$v-build.txt" | grep -E "registers|spill" | tr -s ' ' | sed "s/^/$v: /" | tee -a "$out/ptxas.txt" | paste -sd ' ' |
    cut -c1-330
done
step "lab: two builds in turn, two rounds"
for round in 1 2; do
  for v in base ftz; do
    for b in 16 32; do
      [ -x /tmp/lab-$v ] || continue
      timeout 60 /tmp/lab-$v $b 1024 768 12 > "$out/lab-$v-$b-$round.txt" 2>&1 || echo "lab $v B=$b round $round: rc $?"
      printf '%-4s B=%-3s r%s %s\n' $v $b $round \
        "$(grep -E '^(forward|backward), (wgmma|4 warps|mma.sync)|^bits' "$out/lab-$v-$b-$round.txt" | tr -s ' ' |
          sed -E 's/ [0-9.]+$//' | paste -sd ';')" | tee -a "$out/lab-table.txt"
    done
  done
done
(( server_ok )) || exit 1
step "verify"
export VERIFY_TIMEOUT=60
verify verify-attn --op attention,attention_grad
VKERN_ATTENTION=mma verify verify-attn-mma --op attention,attention_grad
if [ "$(left)" -gt 125 ]; then
  VERIFY_TIMEOUT=$(( $(left) - 10 )) verify verify-attn-gpt2 --op attention,attention_grad --shape 16x1024x768x12
else
  echo "verify at 16x1024x768x12: skipped, $(left) s left"
fi
