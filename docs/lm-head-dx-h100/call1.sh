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
build_lab -Xptxas -v &
lab=$!
build_server bin/vkern || exit 1
grep -iE 'serializ|Potential' "$out/build-vkern.txt" | sort | uniq -c | head
VERIFY_TIMEOUT=200
step "verify: the gemm family at its default shapes"
verify verify-gemm-family --op linear,linear_grad_w,linear_nt,linear_grad_x,gemm,gemm_grad_a,gemm_grad_b
step "verify: the row-class paths"
verify verify-class-nt --op linear_nt --shape 4096x1001x512 --dist integer --dist normal --dist special
verify verify-class-l --op linear --shape 16390x520x1001 --shape 16384x768x50257:bias=0 --dist integer --dist normal --dist special
step "planted defects of the row-class tiles"
run defects timeout 150 ./bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/Hopper_(class|row_classes)' -test.v
grep -E '^(    --- |--- |ok|FAIL$)' "$out/defects.txt" | tail -8
step "the lab"
wait $lab
tail -1 "$out/lab-build.txt"
grep -iE 'serializ|Potential' "$out/lab-build.txt" | sort | uniq -c | head
[ -x /tmp/gemm_lab ] || exit 1
GEMM_LAB_ONLY="V dx head,dx head" timeout 60 /tmp/gemm_lab 6 > "$out/lab-times.txt" 2>&1; cat "$out/lab-times.txt" | grep -vE '^sm90' | tail -6
ncu_lab classl "V dx head"
ncu_lab aligned "dx head"
