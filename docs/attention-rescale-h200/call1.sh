#!/usr/bin/env bash
# attention.cu's variant 13 (branch attention-rescale): online_softmax
# skips the rescale of o and l in a warp none of whose rows' maxima rose
# (exp2f(0) = 1: the same bits). On an H200 (the H100 kind was not lent on
# 2026-11-28); each figure a ratio within this call. Also the data for the
# next attention work: Nsight Compute on main's three Hopper kernels, and
# the gpt2 step profiled op by op (this branch's server).
#   - the attention lab from main's sources (bin/labsrc-base) and from this
#     branch's, ptxas's registers; each run at B = 16 and 32, two rounds in
#     turn (forward and backward ms; the outputs' hashes must be equal);
#   - the kernel server: vkern verify of attention and attention_grad at the
#     default shapes (Hopper and mma.sync), the planted defects of the
#     forward (attention's, not attention_grad's);
#   - ncu --set full on main's forward_hopper, backward_dkdv_hopper and
#     backward_dq_hopper (the lab at B = 16), each summarized by
#     bench/ncu_sass_summary.py;
#   - TestProfileStep: gpt2 at B = 16, call by call.
# Run from the repository root after `bash bench/prep-call.sh main`.
set -uo pipefail
NAME=call1
LIMIT=560
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
step "builds: the server and two labs in parallel"
build_server bin/vkern > "$out/server-status.txt" 2>&1 &
server_pid=$!
lab() {  # lab NAME SRC [FLAG...]
  local name=$1 src=$2; shift 2
  timeout 300 nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -I"$src" "$@" \
    -o /tmp/lab-$name bench/attention_lab.cu > "$out/lab-$name-build.txt" 2>&1 || echo "lab $name: build FAILED"
}
labs=(base skip)
lab base bin/labsrc-base & base_pid=$!
lab skip bin/labsrc & skip_pid=$!
wait $base_pid $skip_pid
server_ok=1
wait $server_pid || server_ok=0
[ -s "$out/server-status.txt" ] && { server_ok=0; cat "$out/server-status.txt"; }
for v in "${labs[@]}"; do
  grep -A3 -E "Compiling entry function.*(forward_hopper|backward_dkdv_hopper|backward_dq_hopper|forward_mma)" \
    "$out/lab-$v-build.txt" | grep -E "entry|registers|spill" |
    sed -E "s/^/$v: /; s/Compiling entry function '_ZN[^']*(forward_hopper|backward_dkdv_hopper|backward_dq_hopper|forward_mma)[^']*'/\1/" \
    >> "$out/ptxas.txt"
done
grep -E "registers|spill stores" "$out/ptxas.txt" | tr -s ' ' | cut -c1-120
step "lab: two builds in turn, two rounds"
for round in 1 2; do
  for v in "${labs[@]}"; do
    for b in 16 32; do
      [ -x /tmp/lab-$v ] || continue
      timeout 60 /tmp/lab-$v $b 1024 768 12 > "$out/lab-$v-$b-$round.txt" 2>&1 || echo "lab $v B=$b round $round: rc $?"
      printf '%-5s B=%-3s r%s %s\n' $v $b $round \
        "$(grep -E '^(forward|backward), wgmma|^forward, 4 warps|^bits' "$out/lab-$v-$b-$round.txt" | tr -s ' ' | paste -sd ';')" |
        tee -a "$out/lab-table.txt"
    done
  done
done
if (( server_ok )); then
  step "verify"
  export VERIFY_TIMEOUT=90
  verify verify-attn --op attention,attention_grad
  VKERN_ATTENTION=mma verify verify-attn-mma --op attention,attention_grad
  step "planted defects of attention's forward"
  run defects timeout 150 ./bin/vkern.test -test.run "TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^attention's" -test.v
  echo "caught: $(grep -cE '^    --- PASS' "$out/defects.txt")"; grep -E '^    --- FAIL|^(ok|FAIL)' "$out/defects.txt" | head
fi
step "Nsight Compute on main's Hopper kernels"
for k in forward_hopper backward_dkdv_hopper backward_dq_hopper; do
  [ "$(left)" -gt 150 ] || break
  timeout 90 ncu --clock-control none --set full --import-source no -k "regex:$k" --launch-skip 1 -c 1 \
    -f -o "$out/ncu-$k" /tmp/lab-base 16 1024 768 12 > "$out/ncu-$k-run.txt" 2>&1 || echo "ncu $k: rc $?"
  if [ -f "$out/ncu-$k.ncu-rep" ]; then
    ncu -i "$out/ncu-$k.ncu-rep" --page details > "$out/ncu-$k-details.txt" 2>&1
    ncu -i "$out/ncu-$k.ncu-rep" --page source --print-source sass --csv > "$out/ncu-$k-sass.csv" 2>&1
    python3 bench/ncu_sass_summary.py "$out/ncu-$k-sass.csv" > "$out/ncu-$k-sass-summary.txt" 2>&1
    rm -f "$out/ncu-$k.ncu-rep"
    grep -E "^    (Duration|Registers Per Thread|Achieved Occupancy|Issue Slots Busy|No Eligible|Executed Instructions  )" \
      "$out/ncu-$k-details.txt" | tr -s ' ' | sed "s/^/$k: /"
  fi
done
if (( server_ok )) && [ "$(left)" -gt 60 ]; then
  step "gpt2 step, call by call"
  run profile-gpt2-b16 env VKERN_PROFILE=cuda VKERN_PROFILE_MODEL=gpt2 VKERN_PROFILE_B=16 \
    ./bin/gpt.test -test.run 'TestProfileStep$' -test.v
  grep -E "^(attention|linear|kernels)" "$out/profile-gpt2-b16.txt" | head -8
fi
step "table"
cat "$out/lab-table.txt"
