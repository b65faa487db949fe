#!/usr/bin/env bash
# 2026-11-27, fifth session, call 3: call 2's Nsight Compute step again,
# with VKERN_CUDA_ARCH=90a so that vkern skips its GPU probe (under ncu the
# probe, a child process, did not answer within its minute in call 2):
# the head's dx at 50257 on the shifting producer (WideS3,
# VKERN_GEMM_SHIFT=1) and at 50304 on WideS.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call3
LIMIT=400
source bench/call-lib.sh
export VKERN_CUDA_ARCH=90a
step "build"
build_server bin/vkern || exit 1
ncu_bench wides3-dx-50257 1 linear 16384x768x50257:bias=0
ncu_bench wides-dx-50304 0 linear 16384x768x50304:bias=0
