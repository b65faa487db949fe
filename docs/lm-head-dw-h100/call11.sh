#!/usr/bin/env bash
# 2026-11-28, call 11 (the session's fourth, in its last ~225 s of device
# time), branch dw-depth-classes: kDepthClassL in the depth's order
# (eight class boxes a stage), opt-in with VKERN_GEMM_DEPTH_CLASSES=1.
#   - verify it at odd depth, with accumulation and another shift pattern,
#     all three distributions (call 10's class-major order failed special);
#   - the head's dW with it, with the padded copy, and at 50304, once,
#     with cuBLAS before;
#   - if time is left, verify it at the head.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call11
LIMIT=150
source bench/call-lib.sh
step "build"
build_server bin/vkern || exit 1
step "verify"
VKERN_GEMM_DEPTH_CLASSES=1 verify verify-depth-classes --op linear_grad_w --shape 2051x768x4097 \
  --shape 1025x520x4097:accumulate=1 --shape 1024x520x4099 --dist integer --dist normal --dist special
step "anchors and bench"
python3 bench/op_anchors.py linear_grad_w=16384x768x50304 > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
VKERN_GEMM_DEPTH_CLASSES=1 bench_ops "classes" bin/vkern "$out/anchors.jsonl" linear_grad_w 16384x768x50257
bench_ops "padded" bin/vkern "$out/anchors.jsonl" linear_grad_w 16384x768x50257 16384x768x50304
tables
if [ "$(left)" -gt 45 ]; then
  step "verify at the head"
  VERIFY_TIMEOUT=$(( $(left) - 5 )) VKERN_GEMM_DEPTH_CLASSES=1 verify verify-head-dw --op linear_grad_w \
    --shape 16384x768x50257 --dist normal
fi
