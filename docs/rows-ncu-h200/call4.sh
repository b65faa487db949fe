#!/usr/bin/env bash
# Call 4 (written 2026-11-28 in the nineteenth session, for the next call;
# not yet run): the row kernels' profiles of calls 1-3, with Nsight Compute
# as the kernel server's parent ($VKERN_SERVER_WRAPPER, 14bfcc0; call-lib's
# ncu_server) instead of `ncu --target-processes all bin/vkern …`, under
# which neither vkern's GPU probe nor its server ever started. bias_grad
# first, the smallest: if it fails, ncu-biasgrad-log.txt and -run.txt say
# how (its start is given 2 minutes, so that a second try fits), and it is
# tried once more with ncu's frontend and target connected over TCP, which
# then stays set for the other profiles; if that fails too, the call stops
# there. Each profile: the third launch of the kernel (two skipped), the
# details page and the SASS summary (ncu_report).
#   - span_sums, bias_grad 16384x768 (issue 11's shortfall: 0.36 of the
#     floor on an H200);
#   - layernorm_grad_rows and layernorm_grad_params at
#     16384x768:residual=1,dx_sum=1 (the gpt2 step's; 0.50 of the floor);
#   - cross_entropy_rows at 16384x50304 and softmax_rows at 8192x50257
#     (0.78 and 0.79 of the floor).
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call4
LIMIT=${LIMIT:-540}
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
ncu --version | tail -1 | tee "$out/ncu-version.txt"
step "build"
build_server bin/vkern || exit 1
bench=(bin/vkern bench --suite ops --backend cuda --runs 3)
VKERN_START_TIMEOUT=2m ncu_server biasgrad span_sums 1 "${bench[@]}" --op bias_grad --shape 16384x768
if [ ! -f /tmp/biasgrad.ncu-rep ]; then
  # ncu's documented fix for connection problems between its frontend and
  # the target (Nsight Compute CLI, "Environment Variables").
  export NV_COMPUTE_PROFILER_LOCAL_CONNECTION_OVERRIDE=tcp
  ncu_server biasgrad-tcp span_sums 1 "${bench[@]}" --op bias_grad --shape 16384x768
  [ -f /tmp/biasgrad-tcp.ncu-rep ] || exit 0
fi
ncu_server lngrad 'layernorm_grad_rows|layernorm_grad_params' 2 "${bench[@]}" --op layernorm_grad \
  --shape 16384x768:residual=1,dx_sum=1
ncu_server ce cross_entropy_rows 1 "${bench[@]}" --op cross_entropy --shape 16384x50304:grad_scale=1024
ncu_server softmax softmax_rows 1 "${bench[@]}" --op softmax --shape 8192x50257
