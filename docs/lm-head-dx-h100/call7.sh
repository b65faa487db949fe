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
if ! timeout 250 nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -DVKERN_GEMM_LAB_FEW -Ibin/labsrc \
    -o /tmp/gemm_lab bench/gemm_lab.cu -lcublas > "$out/lab-build.txt" 2>&1; then
  echo "build FAILED"; tail -20 "$out/lab-build.txt"; exit 1
fi
step "the lab"
lab_run() {  # TAG ENV...: vkern's µs at the head's dx, 50257 and 50304, and cuBLAS's at 50304
  local tag=$1; shift
  env "$@" GEMM_LAB_ONLY="V dx head,dx head" timeout 60 /tmp/gemm_lab 6 > "$out/lab-$tag.txt" 2>&1
  printf '%-10s' "$tag"
  awk '/^V dx head/ { t = $5; sub("us", "", t); printf "  V dx head %.0f", t / $NF }
       /^dx head/ { t = $4; sub("us", "", t); printf "  dx head %.0f  cuBLAS dx head %.0f", t / $NF, t }' "$out/lab-$tag.txt"
  echo
}
for round in 1 2; do
  lab_run "group-8-$round" GEMM_LAB_GROUP=0
  lab_run "group-16-$round" GEMM_LAB_GROUP=16
  lab_run "group-32-$round" GEMM_LAB_GROUP=32
done
for r in "classl:V dx head" "aligned:dx head"; do
  tag=${r%%:*} case=${r#*:}
  [ "$(left)" -gt 50 ] || break
  step "ncu: $tag ($case)"
  GEMM_LAB_ONLY="$case" timeout $(( $(left) - 25 )) ncu --clock-control none --set full --import-source no -k regex:product_wgmma \
    --launch-skip 2 -c 1 -f -o /tmp/$tag /tmp/gemm_lab 6 > "$out/ncu-$tag-run.txt" 2>&1; echo "rc=$?"
  [ -f /tmp/$tag.ncu-rep ] || continue
  ncu --import /tmp/$tag.ncu-rep --page details > "$out/ncu-$tag-details.txt" 2>&1
  ncu --import /tmp/$tag.ncu-rep --page raw --csv > /tmp/$tag-raw.csv 2>&1
  python3 - /tmp/$tag-raw.csv > "$out/ncu-$tag-counts.txt" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head, units, vals = rows[0], rows[1], rows[2]
want = ["gpu__time_duration.sum", "dram__bytes_read.sum", "lts__t_sectors_srcunit_tex_op_read.sum",
        "lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum", "lts__t_sectors.sum", "lts__t_bytes.sum",
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", "lts__throughput.avg.pct_of_peak_sustained_elapsed"]
for name in want:
    if name in head:
        i = head.index(name)
        print(f"{name:<72} {vals[i]:>16} {units[i]}")
PY
  ncu -i /tmp/$tag.ncu-rep --page source --print-source sass --csv > /tmp/$tag-sass.csv 2>&1
  python3 bench/ncu_sass_summary.py /tmp/$tag-sass.csv > "$out/ncu-$tag-sass-summary.txt" 2>&1
  grep -E '^    (Duration|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|L2 Hit Rate)' "$out/ncu-$tag-details.txt" | head -6
  cat "$out/ncu-$tag-counts.txt"
  sed -n '/stall reasons/,$p' "$out/ncu-$tag-sass-summary.txt" | head -6
  head -8 "$out/ncu-$tag-sass-summary.txt"
done
