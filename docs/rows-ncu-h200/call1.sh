#!/usr/bin/env bash
# Written 2026-11-28 at the end of the eighteenth session, for the next
# call (not yet run): Nsight Compute of the row kernels the gpt2 step spends
# most on after the GEMMs and attention, to say what holds each below the
# copy floor (issue 11's layernorm_grad and bias_grad shortfalls, and
# cross_entropy and softmax at 0.78-0.83 on an H200).
#   - cross_entropy_rows at 16384x50304 (the step's shape), softmax_rows
#     at 8192x50257, layernorm_grad_rows and layernorm_grad_params at
#     16384x768:residual=1,dx_sum=1 (the step's), bias_grad's span_sums at
#     16384x768;
#   - each: the details page (duration, throughputs, occupancy, stall
#     reasons) and the SASS summary (bench/ncu_sass_summary.py).
# VKERN_CUDA_ARCH=90a: under `ncu --target-processes all` the server's GPU
# probe did not answer within its minute (docs/cross-entropy-ftz-h200).
# First, since 02f3d53 (the row kernels' EX2 switch picks its kernel once)
# had not been built by nvcc: the build, softmax's and cross_entropy's
# conformance, verify and planted defects (the defects finish before ncu
# starts, so nothing shares the GPU with a profile), and the stored-dS
# attention_grad test in its new form (16x1024x768x12 by default, 2x256 by
# the MMA path).
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call1
LIMIT=${LIMIT:-540}
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "build"
build_server bin/vkern || exit 1
step "planted defects (background), conformance, verify, stored dS"
defects_start 'softmax|cross_entropy'
run conformance timeout 150 ./bin/vkern.test -test.v -test.run '^TestCUDABackendConformance$/^(softmax|cross_entropy)$'
grep -E '^(    )?--- (PASS|FAIL|SKIP)|^(ok|FAIL|PASS)' "$out/conformance.txt"
VERIFY_TIMEOUT=100 verify verify-softmax --op softmax
VERIFY_TIMEOUT=100 verify verify-ce --op cross_entropy
VKERN_SOFTMAX_FTZ=0 VKERN_CROSS_ENTROPY_FTZ=0 VERIFY_TIMEOUT=100 verify verify-exp2f --op softmax --op cross_entropy
run stored-ds timeout 150 ./bin/vkern.test -test.v -test.run '^TestCUDAAttentionGradFromStoredDS$'
grep -E '^(    )?--- (PASS|FAIL|SKIP)|^(ok|FAIL|PASS)' "$out/stored-ds.txt"
defects_wait
profile() {
  local tag=$1 kernel=$2 op=$3 shape=$4
  [ "$(left)" -gt 80 ] || { echo "$tag: no time left"; return; }
  step "ncu: $tag ($kernel, $op $shape)"
  VKERN_CUDA_ARCH=90a timeout $(( $(left) - 30 )) ncu --target-processes all --clock-control none --set full \
    --import-source no -k "regex:$kernel" --launch-skip 2 -c 1 -f -o "/tmp/$tag" \
    bin/vkern bench --suite ops --backend cuda --op "$op" --shape "$shape" --runs 3 > "$out/ncu-$tag-run.txt" 2>&1
  echo "rc=$?"
  [ -f "/tmp/$tag.ncu-rep" ] || { tail -3 "$out/ncu-$tag-run.txt"; return; }
  ncu_report "$tag"
}
profile ce cross_entropy_rows cross_entropy 16384x50304:grad_scale=1024
profile softmax softmax_rows softmax 8192x50257
profile lngrad-rows layernorm_grad_rows layernorm_grad 16384x768:residual=1,dx_sum=1
profile lngrad-params layernorm_grad_params layernorm_grad 16384x768:residual=1,dx_sum=1
profile biasgrad span_sums bias_grad 16384x768
