#!/usr/bin/env bash
# 2026-11-27, sixth session, call 1: the first nvcc build of b3b072a (the
# row-class tiles' rules in one place: tile_grid, tiles_serve, class_maps,
# sm90_tiles_ran) and of wgmma.cuh's shared m64n256 accumulator lists,
# verified; then Nsight Compute of the head's dx from L's row classes
# (Tiles::kClassL, 16384x768x50257) against the aligned product at 50304,
# through bench/gemm_lab.cu (-DVKERN_GEMM_LAB_FEW, built with ptxas's
# report, in the background while the server verifies).
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call1
LIMIT=560
source bench/call-lib.sh
step "build (the lab in the background)"
( timeout 300 nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -DVKERN_GEMM_LAB_FEW -Xptxas -v -Ibin/labsrc \
    -o /tmp/gemm_lab bench/gemm_lab.cu -lcublas > "$out/lab-build.txt" 2>&1; echo "lab build rc=$?" >> "$out/lab-build.txt" ) &
lab=$!
build_server bin/vkern || exit 1
grep -iE 'serializ|Potential' "$out/build-vkern.txt" | sort | uniq -c | head
v() { local n=$1; shift; run "$n" timeout 200 bin/vkern verify --backend cuda "$@"; grep -E 'PASSED|FAILED|INCORRECT' "$out/$n.txt" | tail -1; }
step "verify: the gemm family at its default shapes"
v verify-gemm-family --op linear,linear_grad_w,linear_nt,linear_grad_x,gemm,gemm_grad_a,gemm_grad_b
step "verify: the row-class paths"
v verify-class-nt --op linear_nt --shape 4096x1001x512 --dist integer --dist normal --dist special
v verify-class-l --op linear --shape 16390x520x1001 --shape 16384x768x50257:bias=0 --dist integer --dist normal --dist special
step "planted defects of the row-class tiles"
run defects timeout 150 ./bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/Hopper_(class|row_classes)' -test.v
grep -E '^(    --- |--- |ok|FAIL$)' "$out/defects.txt" | tail -8
step "the lab"
wait $lab
tail -1 "$out/lab-build.txt"
grep -iE 'serializ|Potential' "$out/lab-build.txt" | sort | uniq -c | head
[ -x /tmp/gemm_lab ] || exit 1
GEMM_LAB_ONLY="V dx head,dx head" timeout 60 /tmp/gemm_lab 6 > "$out/lab-times.txt" 2>&1; cat "$out/lab-times.txt" | grep -vE '^sm90' | tail -6
for r in "classl:V dx head" "aligned:dx head"; do
  tag=${r%%:*} case=${r#*:}
  [ "$(left)" -gt 60 ] || break
  step "ncu: $tag ($case)"
  GEMM_LAB_ONLY="$case" timeout $(( $(left) - 30 )) ncu --clock-control none --set full --import-source no -k regex:product_wgmma \
    --launch-skip 2 -c 1 -f -o /tmp/$tag /tmp/gemm_lab 6 > "$out/ncu-$tag-run.txt" 2>&1; echo "rc=$?"
  [ -f /tmp/$tag.ncu-rep ] || continue
  ncu --import /tmp/$tag.ncu-rep --page details > "$out/ncu-$tag-details.txt" 2>&1
  ncu -i /tmp/$tag.ncu-rep --page source --print-source sass --csv > /tmp/$tag-sass.csv 2>&1
  python3 bench/ncu_sass_summary.py /tmp/$tag-sass.csv > "$out/ncu-$tag-sass-summary.txt" 2>&1
  grep -E '^    (Duration|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|DRAM Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Registers Per Thread)' "$out/ncu-$tag-details.txt" | head -12
  tail -14 "$out/ncu-$tag-sass-summary.txt"
done
