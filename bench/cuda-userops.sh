#!/usr/bin/env bash
# examples/userops on a GPU machine: ops declared outside vkern (rmsnorm,
# rmsnorm_grad, swiglu) verified on the cuda backend, then held to the
# conformance suite and their planted CUDA defects, each of which must be
# reported incorrect. Two steps:
#
#   bash bench/cuda-userops.sh build   # here, with Go: bin/userops and bin/userops.test
#   bash bench/cuda-userops.sh         # there, from the repository root, nvcc on PATH
#
# The binaries are static (CGO_ENABLED=0) and carry the kernel sources.
set -uo pipefail
if [ "${1:-}" = build ]; then
  set -e
  cd "$(dirname "$0")/../examples/userops"
  CGO_ENABLED=0 go build -o ../../bin/userops .
  CGO_ENABLED=0 go test -c -o ../../bin/userops.test .
  ls -l ../../bin/userops ../../bin/userops.test
  exit 0
fi
out=${OUT:-/tmp/vkern-out}
mkdir -p "$out"
export VKERN_CACHE=${VKERN_CACHE:-/tmp/vkern-cache}
ops=rmsnorm,rmsnorm_grad,swiglu
status=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
bin/userops doctor | grep -E '^(ok|declared) ' || status=1
# Every distribution at the default shapes, then the benchmark shapes.
bin/userops verify --backend cuda --op $ops --json "$out/userops-verify.json" --md "$out/userops-verify.md" 2>/dev/null | tail -8 || status=1
bin/userops verify --backend cuda --op $ops --shape 16384x4096 --shape 8192x11008 \
  --json "$out/userops-verify-large.json" --md "$out/userops-verify-large.md" 2>/dev/null | tail -6 || status=1
# The conformance suite and the planted defects (one server build each, in
# parallel); -test.v shows which case caught each defect.
bin/userops.test -test.run 'CUDA' -test.v 2>&1 | tee "$out/userops-cuda-tests.txt" |
  grep -E '^(--- |    --- |PASS|FAIL|ok)' || status=1
grep -q '^--- FAIL' "$out/userops-cuda-tests.txt" && status=1
grep -q -- '--- SKIP' "$out/userops-cuda-tests.txt" && { echo "cuda tests skipped: is nvcc on PATH and the GPU visible?"; status=1; }
exit $status
