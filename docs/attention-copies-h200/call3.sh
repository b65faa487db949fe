#!/usr/bin/env bash
# The rest of what attention's variants 14-17 owe, and the data for the
# next attention work. Written and run on 2026-11-28, on an H200 (no H100
# was lent that day):
#   - vkern train --verify-every 10 on a real gpt2 run (B = 16, 10 steps;
#     step 0 checked against the float64 oracles, sampled where large;
#     about 280 s);
#   - Nsight Compute (--set full, the clocks left alone) on main's three
#     Hopper kernels in the attention lab at B = 16, each summarized by
#     bench/ncu_sass_summary.py (the code by execution count).
# Here: bash bench/prep-call.sh, bin/corpus.txt (the first 20 MB of the Go
# sources), then with bin/ carried: bash docs/attention-copies-h200/call3.sh
set -uo pipefail
NAME=call3
LIMIT=570
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "builds: the server and the lab in parallel"
timeout 300 nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -Ibin/labsrc \
  -o /tmp/lab bench/attention_lab.cu > "$out/lab-build.txt" 2>&1 &
lab_pid=$!
build_server bin/vkern || exit 1
wait $lab_pid || echo "lab build: FAILED"
step "vkern train --verify-every 10: gpt2, B 16, 10 steps"
run verify-every-gpt2 timeout $(( $(left) - 100 )) bin/vkern train --backend cuda --model gpt2 --data bin/corpus.txt \
  --batch 16 --steps 10 --verify-every 10 --eval-every 1000 --sample 0 --out "$out/run-verify-gpt2"
rm -rf "$out/run-verify-gpt2"
grep -E 'verif|vkern train:|median' "$out/verify-every-gpt2.txt" | tail -6
step "Nsight Compute on the Hopper kernels"
for k in forward_hopper backward_dkdv_hopper backward_dq_hopper; do
  [ "$(left)" -gt 45 ] && [ -x /tmp/lab ] || break
  timeout $(( $(left) - 15 )) ncu --clock-control none --set full --import-source no -k "regex:$k" --launch-skip 1 -c 1 \
    -f -o "/tmp/ncu-$k" /tmp/lab 16 1024 768 12 > "$out/ncu-$k-run.txt" 2>&1 || echo "ncu $k: rc $?"
  [ -f "/tmp/ncu-$k.ncu-rep" ] || continue
  ncu -i "/tmp/ncu-$k.ncu-rep" --page details > "$out/ncu-$k-details.txt" 2>&1
  ncu -i "/tmp/ncu-$k.ncu-rep" --page source --print-source sass --csv > "/tmp/ncu-$k-sass.csv" 2>&1
  python3 bench/ncu_sass_summary.py "/tmp/ncu-$k-sass.csv" > "$out/ncu-$k-sass-summary.txt" 2>&1
  grep -E "^    (Duration|Registers Per Thread|Achieved Occupancy|Issue Slots Busy|No Eligible|Executed Instructions  )" \
    "$out/ncu-$k-details.txt" | tr -s ' ' | sed "s/^/$k: /"
done
