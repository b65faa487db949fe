#!/usr/bin/env bash
# One GPU call for the training ops and the trainer: the CUDA server built by
# nvcc with every op, the conformance suite, a quick verify of every op, and
# the whole-step check of char on the cuda backend. Expects bin/vkern,
# bin/vkern.test and bin/gpt.test (go test -c) built on the host.
set -uo pipefail
out=${OUT:-/tmp/vkern-out}
mkdir -p "$out"
export VKERN_CACHE=${VKERN_CACHE:-/tmp/vkern-cache}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
start=$(date +%s)
bin/vkern build --backend cuda 2>&1 | tail -40
echo "build: $(( $(date +%s) - start )) s"
bin/vkern.test -test.run 'TestCUDABackendConformance' -test.v 2>&1 | grep -E "^(--- |ok|FAIL|PASS)|^    --- FAIL|Error" | tail -40
echo "conformance: $(( $(date +%s) - start )) s"
bin/vkern verify --backend cuda --quick --json "$out/quick.json" 2>/dev/null | tail -26
echo "verify: $(( $(date +%s) - start )) s"
bin/gpt.test -test.run 'TestAStepOnCUDA' -test.v 2>&1 | tee "$out/char-wholestep-cuda.txt" | tail -8
echo "whole step: $(( $(date +%s) - start )) s"
