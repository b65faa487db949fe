#!/usr/bin/env bash
# One call on a GPU machine: the server suite on the cuda backend, with a bare
# CUDA launch + synchronise measured in the same run as the anchor of run_tiny.
# Expects bin/vkern (CGO_ENABLED=0 go build -o bin/vkern ./cmd/vkern).
set -uo pipefail
out=${OUT:-/tmp/vkern-out}
mkdir -p "$out"
export VKERN_CACHE=${VKERN_CACHE:-/tmp/vkern-cache}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
bin/vkern verify --backend cuda --quick 2>/dev/null | tail -8
nvcc -O3 -o /tmp/launch_anchor bench/cuda_launch_anchor.cu && /tmp/launch_anchor | tee "$out/launch-anchor.jsonl"
bin/vkern bench --suite server --backend cuda --json "$out/bench-server-cuda.json" 2>/dev/null
/tmp/launch_anchor | tee -a "$out/launch-anchor.jsonl"
