#!/usr/bin/env bash
# 2026-11-27, third session, call 8: Nsight Compute of WideSL (branch
# lm-head-in-place at 827653f, its fastest form: 16-byte cp.async copies,
# per-tile walks; 3.79 ms at the head's dx in calls 5 and 6) against WideS
# on the padded-size product, through bench/gemm_lab.cu built from that
# commit's sources (bin/labsrc-widesl) with VKERN_GEMM_LAB_FEW (a
# worktree-only patch: variants 6, 8, 9 and 10 alone, to build in time).
# Outputs tarred into $OUT/call8.tar.gz.
set -uo pipefail
out=/tmp/call8
mkdir -p "$out"
start=$(date +%s)
step() { printf '\n=== %s (at %d s)\n' "$*" $(( $(date +%s) - start )); }
finish() { tar -czf "${OUT:-/tmp}/call8.tar.gz" -C /tmp call8; step done; }
trap finish EXIT
step "build the lab"
if ! timeout 250 nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -DVKERN_GEMM_LAB_FEW -Ibin/labsrc-widesl \
    -o /tmp/gemm_lab bench/gemm_lab.cu -lcublas > "$out/build.txt" 2>&1; then
  echo "build FAILED"; tail -20 "$out/build.txt"; exit 1
fi
step "ncu: WideSL at V dx head (16384x768x50257)"
GEMM_LAB_ONLY="V dx head" timeout 80 ncu --clock-control none --set full --import-source no -k regex:product_wgmma --launch-skip 2 -c 1 -f -o /tmp/widesl /tmp/gemm_lab 10 \
  > "$out/ncu-widesl-run.txt" 2>&1; echo "rc=$?"; grep -E '^V dx|^case' "$out/ncu-widesl-run.txt"
step "ncu: WideS at dx head (16384x768x50304)"
GEMM_LAB_ONLY="dx head" timeout 60 ncu --clock-control none --set full --import-source no -k regex:product_wgmma --launch-skip 2 -c 1 -f -o /tmp/wides /tmp/gemm_lab 6 \
  > "$out/ncu-wides-run.txt" 2>&1; echo "rc=$?"; grep -E '^dx|^case' "$out/ncu-wides-run.txt"
for r in widesl wides; do
  [ -f /tmp/$r.ncu-rep ] || continue
  ncu --import /tmp/$r.ncu-rep --page details > "$out/ncu-$r-details.txt" 2>&1
  ncu -i /tmp/$r.ncu-rep --page source --print-source sass --csv > /tmp/$r-sass.csv 2>&1
  python3 bench/ncu_sass_summary.py /tmp/$r-sass.csv > "$out/ncu-$r-sass-summary.txt" 2>&1
  echo "== $r"
  grep -E '^    (Duration|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|DRAM Throughput|Issue Slots Busy|Executed Ipc Active|No Eligible|Warp Cycles Per Issued|Registers Per Thread)' "$out/ncu-$r-details.txt" | head -14
  tail -12 "$out/ncu-$r-sass-summary.txt"
done
