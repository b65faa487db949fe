#!/usr/bin/env bash
# 2026-11-28, call 9: main after WideSRL3's removal, whose kernel sources
# are b81d0f5's (542b7be's rows_aligned16 and d0ab120's cluster defect,
# never yet built by nvcc): the gemm family at its default shapes, L in
# row classes and the forward's class tiles at odd shapes and at the head,
# and every planted defect of the Hopper GEMM (names starting "Hopper"),
# with the GPU to themselves.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call9
LIMIT=500
source bench/call-lib.sh
step "build"
build_server bin/vkern || exit 1
step "verify"
verify verify-gemm-family --op linear,linear_grad_w,linear_nt,linear_grad_x,gemm,gemm_grad_a,gemm_grad_b
VERIFY_TIMEOUT=200 verify verify-class-l-linear --op linear --shape 16390x520x1001 --shape 4100x1000x1003:bias=0 \
  --shape 4103x1024x4097 --shape 16384x768x50257:bias=0 --dist integer --dist normal --dist special
verify verify-class-nt --op linear_nt --shape 4096x1001x512 --shape 1024x50257x768:bias=0 --dist integer --dist normal --dist special
step "planted defects of the Hopper GEMM"
run defects timeout $(( $(left) - 10 )) ./bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^Hopper' -test.v
grep -E '^(    --- FAIL|--- |ok|FAIL$|PASS$)' "$out/defects.txt" | tail -6
echo "defects caught: $(grep -c '^    --- PASS' "$out/defects.txt") of $(grep -c '^=== RUN   TestPlantedDefectsInTheCUDAKernelsAreIncorrect/' "$out/defects.txt")"
