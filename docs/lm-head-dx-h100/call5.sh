#!/usr/bin/env bash
# 2026-11-27, sixth session, call 5: L in row classes in clusters of 2
# sharing R (W) by multicast (WideSRC2; VKERN_GEMM_CLASS_L_C2=1), against
# WideSR (call 4's build: raw boxes without L2 promotion). W's slices are
# most of the L2 reads of the head's dx. Verifies WideSRC2 at odd K, then
# times the head's dx, the two in turn, three times, with cuBLAS before
# and after.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call5
LIMIT=400
source bench/call-lib.sh
step "build"
build_server bin/vkern || exit 1
VERIFY_TIMEOUT=120
step "verify: WideSRC2"
VKERN_GEMM_CLASS_L_C2=1 verify verify-c2-linear --op linear --shape 16390x520x1001 --shape 4100x1000x1003:bias=0 --shape 4103x1024x4097 \
  --dist integer --dist normal --dist special
VKERN_GEMM_CLASS_L_C2=1 verify verify-c2-gemm --op gemm --shape 4096x512x4099 --shape 4101x768x2053 --dist integer --dist normal --dist special
step "anchors and bench"
python3 bench/op_anchors.py linear=16384x768x50304:bias=0 > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
for round in 1 2 3; do
  [ "$(left)" -gt 60 ] || break
  bench_ops "widesr-$round" bin/vkern "$out/anchors.jsonl" linear 16384x768x50257:bias=0 16384x768x50304:bias=0
  VKERN_GEMM_CLASS_L_C2=1 bench_ops "widesrc2-$round" bin/vkern "$out/anchors.jsonl" linear 16384x768x50257:bias=0
done
python3 bench/op_anchors.py linear=16384x768x50304:bias=0 > "$out/anchors-after.jsonl" 2> "$out/anchors-after.stderr" || echo "anchors: FAILED"
tables
