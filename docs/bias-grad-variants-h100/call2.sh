#!/usr/bin/env bash
# Call 1 found bias_grad's time at 16384x768 the same under four launch
# forms (17.7-18.0 µs), and Nsight Compute under `vkern bench` still did
# not start the server. This call times the kernel alone in
# bench/bias_grad_lab.cu, beside its reads and group sums without the
# finish, a one-pass read of the same bytes, a copy and an empty kernel,
# at GPT-2's three shapes, then profiles the kernel and the read at 768
# with Nsight Compute in the lab. Run from the repository root with bin/
# from `bash bench/prep-call.sh` (bin/labsrc).
set -uo pipefail
NAME=call2
LIMIT=300
source bench/call-lib.sh
step "build the lab"
timeout 200 nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Ibin/labsrc -Ibench \
  -o /tmp/bias_grad_lab bench/bias_grad_lab.cu > "$out/lab-build.txt" 2>&1 || { tail -30 "$out/lab-build.txt"; exit 1; }
step "times"
for n in 768 2304 3072; do
  run "lab-$n" timeout 60 /tmp/bias_grad_lab 16384 $n
  cat "$out/lab-$n.txt"
done
# The sixth column_sums launch is bias_grad's own; read_bytes's 494th is
# the first at 4 blocks an SM (each form launches 44 + 200 times).
for k in column_sums:5 read_bytes:493; do
  skip=${k#*:} k=${k%:*}
  [ "$(left)" -gt 60 ] || break
  step "ncu: $k at 16384x768"
  timeout $(( $(left) - 30 )) ncu --clock-control none --set full --import-source no -k "regex:$k" \
    --launch-skip "$skip" -c 1 -f -o "/tmp/ncu-$k" /tmp/bias_grad_lab 16384 768 > "$out/ncu-$k-run.txt" 2>&1
  echo "rc=$?"
  [ -f "/tmp/ncu-$k.ncu-rep" ] && ncu_report "ncu-$k" && ncu_counts "ncu-$k"
done
