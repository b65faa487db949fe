#!/usr/bin/env bash
# One call on a GPU machine: the verifier's f16 rounding checks on the cuda
# backend (issue: rounding and limits). Expects bin/vkern and bin/vkern.test
# (CGO_ENABLED=0 go build -o bin/vkern ./cmd/vkern;
#  CGO_ENABLED=0 go test -c -o bin/vkern.test .). Writes reports and logs
# under $OUT and prints a short summary last.
#
#   1. the planted rounding defects of cuda_test.go (toward zero and half
#      away from zero, in the Hopper GEMM epilogue and the row store);
#   2. vkern verify at the default shapes (every op, every distribution,
#      the rounding distribution and the reductions of 4100 terms included);
#   3. the three GEMMs at 4096³ (sampled), whose reports give the bounds'
#      tightening against the order-free γ(K)·S.
set -uo pipefail
out=${OUT:-/tmp/vkern-out}
mkdir -p "$out"
export VKERN_CACHE=${VKERN_CACHE:-/tmp/vkern-cache}
step() { printf '\n=== %s\n' "$*"; }

step device; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
step "planted rounding defects"
bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/(Hopper:_staged_f16|Hopper:_edge-tile_f16|f16_row)' -test.v \
  >"$out/planted-rounding.txt" 2>&1
grep -E '^(--- |    --- |ok|FAIL|PASS)|caught by|cases caught' "$out/planted-rounding.txt" | cut -c1-300
step "verify, default shapes"
bin/vkern verify --backend cuda --json "$out/default.json" --md "$out/default.md" 2>/dev/null | tail -12
step "verify, 4096³"
bin/vkern verify --backend cuda --op gemm,gemm_grad_a,gemm_grad_b --shape 4096x4096x4096 \
  --dist uniform --dist normal --dist rounding --json "$out/gemm-4096.json" --md "$out/gemm-4096.md" 2>/dev/null | tail -9
python3 - "$out/gemm-4096.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("dot_accumulation", r["arithmetic"]["dot_accumulation"])
for c in r["cases"]:
    t = c.get("bound_tightening")
    if t:
        print(f'{c["op"]:12} {c["dist"]:8} bound tightening geomean {t["geomean"]:.1f}x least {t["least"]:.1f}x '
              f'over {t["elements"]} elements; worst err/bnd {c["max_error_over_bound"]}')
PY
