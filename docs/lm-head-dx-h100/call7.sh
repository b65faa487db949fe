#!/usr/bin/env bash
# 2026-11-27, sixth session, call 7: what holds the head's dx now (the
# final build: L's row classes in clusters of 2, raw boxes without L2
# promotion), through bench/gemm_lab.cu (-DVKERN_GEMM_LAB_FEW):
#   - the lab at the head's dx (50257) and the aligned product (50304) with
#     the kernels' L2 group of tile rows (8) and with 16 and 32, twice;
#   - Nsight Compute (--set full) of both products.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call7
LIMIT=420
source bench/call-lib.sh
step "build the lab"
build_lab
grep -q "lab build rc=0" "$out/lab-build.txt" || { echo "build FAILED"; tail -20 "$out/lab-build.txt"; exit 1; }
step "the lab"
cases="V dx head,dx head"
for round in 1 2; do
  lab_times "group-8-$round" "$cases" GEMM_LAB_GROUP=0
  lab_times "group-16-$round" "$cases" GEMM_LAB_GROUP=16
  lab_times "group-32-$round" "$cases" GEMM_LAB_GROUP=32
done
ncu_lab classl "V dx head"
ncu_counts classl
ncu_lab aligned "dx head"
ncu_counts aligned
