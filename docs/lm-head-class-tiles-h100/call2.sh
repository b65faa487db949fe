#!/usr/bin/env bash
# 2026-11-27, fifth session, call 2: the class tiles' second planted
# defect, replaced (call 1's put rows at another class's shift, where the
# 16-byte stores fault: a failed run, not an incorrect one); the shifting
# producer's three-slot form (ded112c), verified for the first time; and
# Nsight Compute of the head's dx at 50257 on that producer (WideS3,
# VKERN_GEMM_SHIFT=1) and at 50304 on WideS, through vkern bench (its
# kernel server a child process: --target-processes all).
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call2
LIMIT=500
source bench/call-lib.sh
step "build"
build_server bin/vkern || exit 1
step "planted defects of the class tiles"
run defects timeout 200 ./bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/Hopper_class' -test.v
grep -E '^(    --- |--- |ok|FAIL$)|caught|want incorrect' "$out/defects.txt" | tail -8
step "verify: the shifting producer, three raw slots"
run verify-shift-linear timeout 100 env VKERN_GEMM_SHIFT=1 bin/vkern verify --backend cuda --op linear --shape 16390x520x1001 --dist integer --dist normal --dist special
grep -E 'PASSED|FAILED|INCORRECT' "$out/verify-shift-linear.txt" | tail -1
run verify-shift-grad-w timeout 100 env VKERN_GEMM_SHIFT=1 bin/vkern verify --backend cuda --op linear_grad_w --shape 4096x512x16385:accumulate=0 --dist integer --dist normal --dist special
grep -E 'PASSED|FAILED|INCORRECT' "$out/verify-shift-grad-w.txt" | tail -1
ncu_bench wides3-dx-50257 1 linear 16384x768x50257:bias=0
ncu_bench wides-dx-50304 0 linear 16384x768x50304:bias=0
