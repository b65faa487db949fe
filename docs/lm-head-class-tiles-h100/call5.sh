#!/usr/bin/env bash
# 2026-11-27, fifth session, call 5: L in row classes (Tiles::kClassL,
# WideSR), first built by nvcc here. Each consumer warp builds its wgmma A
# fragments from one row class's raw box, and the head's dx reads the
# logits gradient at V = 50257 in place, with the depth in order.
# Steps:
#   - verify the new path (linear and gemm at odd K), the head's dx at
#     50257, and the gemm family at its default shapes;
#   - time the head's dx at 50257 and 50304, base (main before it, which
#     pads the operand into scratch) and new in turn, with cuBLAS in the
#     same call;
#   - the new path's two planted defects.
# Run from the repository root with bin/ from `bash bench/prep-call.sh BASE`.
set -uo pipefail
NAME=call5
LIMIT=500
source bench/call-lib.sh
step "build"
build_server bin/vkern || exit 1
step "verify: L in row classes"
v() { local n=$1; shift; run "$n" timeout 150 bin/vkern verify --backend cuda "$@"; grep -E 'PASSED|FAILED|INCORRECT' "$out/$n.txt" | tail -1; }
v verify-class-l-linear --op linear --shape 16390x520x1001 --shape 4100x1000x1003:bias=0 --shape 4103x1024x4097 \
  --shape 16384x768x50257:bias=0 --dist integer --dist normal --dist special
v verify-class-l-gemm --op gemm --shape 4096x512x4099 --shape 4101x768x2053 --dist integer --dist normal --dist special
grep -E 'FAIL|incorrect|first' "$out/verify-class-l-linear.txt" | head -5
step "verify: the gemm family at its default shapes"
v verify-gemm-family --op linear,linear_grad_w,linear_nt,linear_grad_x,gemm,gemm_grad_a,gemm_grad_b
step "anchors and bench"
python3 bench/op_anchors.py linear=16384x768x50257:bias=0 linear=16384x768x50304:bias=0 > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
build_server bin/vkern-base
for round in 1 2; do
  for b in vkern vkern-base; do
    [ "$(left)" -gt 150 ] || break
    bench_ops "$b-$round" "bin/$b" "$out/anchors.jsonl" linear 16384x768x50257:bias=0 16384x768x50304:bias=0
  done
done
bench_table > "$out/table.txt"
anchor_table "$out/anchors.jsonl" >> "$out/table.txt"
cat "$out/table.txt"
step "planted defects of L in row classes"
[ "$(left)" -gt 70 ] && run defects timeout $(( $(left) - 10 )) ./bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/Hopper_row_classes' -test.v
grep -E '^(    --- |--- |ok|FAIL$)|caught|want incorrect' "$out/defects.txt" | tail -8
