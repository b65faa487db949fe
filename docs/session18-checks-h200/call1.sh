#!/usr/bin/env bash
# 2026-11-28 (eighteenth session), on an nvidia-h200 (no H100 was lent),
# the last call of the session, on main after the review mends:
#   - build (the stored-dS layout's static_assert, first seen by nvcc);
#   - TestCUDAAttentionGradFromStoredDS, both paths (Hopper variant 20 and
#     mma.sync variant 5), at the quick shapes and gpt2's;
#   - gpt2's step call by call (gpt's TestProfileStep), for the next
#     session's choice of work.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`
# (bin/vkern, bin/vkern.test and bin/gpt.test).
set -uo pipefail
NAME=call1
LIMIT=${LIMIT:-300}
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "build"
build_server bin/vkern || exit 1
step "the stored-dS test, both paths"
run stored timeout 120 ./bin/vkern.test -test.v -test.run '^TestCUDAAttentionGradFromStoredDS$'
grep -E '^\s*--- (PASS|FAIL|SKIP)|^(ok|FAIL|PASS)' "$out/stored.txt"
step "gpt2's step, call by call"
[ "$(left)" -gt 60 ] &&
  run profile-gpt2-b16 timeout $(( $(left) - 10 )) env VKERN_PROFILE=cuda VKERN_PROFILE_MODEL=gpt2 VKERN_PROFILE_B=16 \
    ./bin/gpt.test -test.run 'TestProfileStep$' -test.v
grep -E '^(attention|kernels|linear|cross_entropy|layernorm)' "$out/profile-gpt2-b16.txt" | head -12
