#!/usr/bin/env bash
# One call on a GPU machine: everything the CUDA issue asks vkern verify to
# pass on the GPU: every op and distribution at the default shapes, the edge
# shapes, and the large shapes (large GEMMs are checked by sampling plus
# Freivalds projections; the report says so). Expects bin/vkern.
set -uo pipefail
out=${OUT:-/tmp/vkern-out}
mkdir -p "$out"
export VKERN_CACHE=${VKERN_CACHE:-/tmp/vkern-cache}
vk="bin/vkern verify --backend cuda"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$vk --json "$out/default.json" --md "$out/default.md" 2>/dev/null | tail -9
$vk --op gemm,gemm_grad_a,gemm_grad_b --shape 1x1x1 --shape 17x4099x31 --shape 4097x4099x4101 --shape 8192x8192x8192 \
  --json "$out/gemm-shapes.json" --md "$out/gemm-shapes.md" 2>/dev/null | tail -7
$vk --op softmax,softmax_grad --shape 1x1 --shape 7x4099 --shape 8192x50304 --shape 32768x1024 \
  --shape 16x13 --shape 16x1001 --shape 16x50257 --shape 9x100001 --shape 8x524289 --shape 4096x50257 \
  --json "$out/softmax-shapes.json" --md "$out/softmax-shapes.md" 2>/dev/null | tail -6
$vk --op cross_entropy --shape 1x1 --shape 7x4099 --shape 32768x1024 --shape 64x100000 --shape 8192x50304 \
  --shape 8192x50304:ignore_index=-100 --shape 16x13 --shape 16x1001 --shape 9x100001 --shape 4096x50257 --json "$out/ce-shapes.json" --md "$out/ce-shapes.md" 2>/dev/null | tail -5
