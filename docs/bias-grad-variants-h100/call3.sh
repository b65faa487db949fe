#!/usr/bin/env bash
# Call 2 put bias_grad's kernel at 16.2 µs under Nsight Compute at
# 16384x768 (DRAM 1.56 TB/s), a one-pass read of the same bytes at 11.5
# (2.21 TB/s), and its reads and group sums alone at 17.8 µs a launch
# against 19.9 with the finish. Every launch form tried reads dy in runs of
# 512 bytes a row per block. This call times bench/bias_grad_lab.cu's
# span_sums, blocks that read whole 1536-byte runs, against the kernel's
# sums alone, at GPT-2's three shapes. Run from the repository root with
# bin/ from `bash bench/prep-call.sh` (bin/labsrc).
set -uo pipefail
NAME=call3
LIMIT=200
source bench/call-lib.sh
step "build the lab"
timeout 150 nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Ibin/labsrc -Ibench \
  -o /tmp/bias_grad_lab bench/bias_grad_lab.cu > "$out/lab-build.txt" 2>&1 || { tail -30 "$out/lab-build.txt"; exit 1; }
step "times"
for n in 768 2304 3072 768; do
  run "lab-$n" timeout 60 /tmp/bias_grad_lab 16384 $n
  cat "$out/lab-$n.txt"
done
