#!/usr/bin/env bash
# 2026-11-27, fifth session, call 4: call 3 again, with VKERN_START_TIMEOUT=3m
# (new in this tree: under ncu the kernel server took longer than the 10 s
# default to send HELLO in call 3). Call 3: call 2's Nsight Compute step again,
# with VKERN_CUDA_ARCH=90a so that vkern skips its GPU probe (under ncu the
# probe, a child process, did not answer within its minute in call 2):
# the head's dx at 50257 on the shifting producer (WideS3,
# VKERN_GEMM_SHIFT=1) and at 50304 on WideS.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call4
LIMIT=400
source bench/call-lib.sh
export VKERN_CUDA_ARCH=90a VKERN_START_TIMEOUT=3m
step "build"
build_server bin/vkern || exit 1
ncu_op() { # tag shift shape
  local tag=$1 shift=$2 shape=$3
  [ "$(left)" -gt 90 ] || return
  step "ncu: $tag"
  VKERN_GEMM_SHIFT=$shift timeout $(( $(left) - 40 )) ncu --target-processes all --clock-control none --set full --import-source no \
    -k regex:product_wgmma --launch-skip 2 -c 1 -f -o "/tmp/$tag" \
    bin/vkern bench --suite ops --backend cuda --op linear --shape "$shape" --runs 3 > "$out/ncu-$tag-run.txt" 2>&1
  echo "rc=$?"
  [ -f "/tmp/$tag.ncu-rep" ] || { tail -5 "$out/ncu-$tag-run.txt"; return; }
  ncu --import "/tmp/$tag.ncu-rep" --page details > "$out/ncu-$tag-details.txt" 2>&1
  ncu -i "/tmp/$tag.ncu-rep" --page source --print-source sass --csv > "/tmp/$tag-sass.csv" 2>&1
  python3 bench/ncu_sass_summary.py "/tmp/$tag-sass.csv" > "$out/ncu-$tag-sass-summary.txt" 2>&1
  grep -E '^    (Duration|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|DRAM Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Registers Per Thread|Shared Memory Configuration Size)' "$out/ncu-$tag-details.txt" | head -14
  tail -12 "$out/ncu-$tag-sass-summary.txt"
}
ncu_op wides3-dx-50257 1 16384x768x50257:bias=0
ncu_op wides-dx-50304 0 16384x768x50304:bias=0
