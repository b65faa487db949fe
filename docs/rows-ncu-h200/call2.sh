#!/usr/bin/env bash
# Call 2 (2026-11-28, nineteenth session): call 1's profiles again, the
# server built for sm_90a before ncu starts. In call 1 the first profile's
# vkern built its own server under `ncu --target-processes all` (the
# VKERN_CUDA_ARCH=90a build is a different cache entry from the probed
# one): ncu died of a segmentation fault, the build it had started held the
# entry's lock, and the next profile waited on that lock until its timeout.
#   - (issue 11's shortfalls first) cross_entropy_rows at 16384x50304 (the step's shape), softmax_rows
#     at 8192x50257, layernorm_grad_rows and layernorm_grad_params at
#     16384x768:residual=1,dx_sum=1 (the step's), bias_grad's span_sums at
#     16384x768;
#   - each: the details page (duration, throughputs, occupancy, stall
#     reasons) and the SASS summary (bench/ncu_sass_summary.py).
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call2
LIMIT=${LIMIT:-540}
source bench/call-lib.sh
export VKERN_CUDA_ARCH=90a VKERN_START_TIMEOUT=3m  # one build, with and without ncu; no GPU probe under ncu
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "build (sm_90a)"
build_server bin/vkern || exit 1
profile() {
  local tag=$1 kernel=$2 op=$3 shape=$4
  [ "$(left)" -gt 80 ] || { echo "$tag: no time left"; return; }
  step "ncu: $tag ($kernel, $op $shape)"
  timeout $(( $(left) - 30 )) ncu --target-processes all --clock-control none --set full \
    --import-source no -k "regex:$kernel" --launch-skip 2 -c 1 -f -o "/tmp/$tag" \
    bin/vkern bench --suite ops --backend cuda --op "$op" --shape "$shape" --runs 3 > "$out/ncu-$tag-run.txt" 2>&1
  echo "rc=$?"
  [ -f "/tmp/$tag.ncu-rep" ] || { tail -3 "$out/ncu-$tag-run.txt"; return; }
  ncu_report "$tag"
}
profile lngrad-rows layernorm_grad_rows layernorm_grad 16384x768:residual=1,dx_sum=1
profile lngrad-params layernorm_grad_params layernorm_grad 16384x768:residual=1,dx_sum=1
profile biasgrad span_sums bias_grad 16384x768
profile ce cross_entropy_rows cross_entropy 16384x50304:grad_scale=1024
profile softmax softmax_rows softmax 8192x50257
