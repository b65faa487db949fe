#!/usr/bin/env bash
# 2026-11-27, fifth session, call 1: the class tiles (gemm_sm90.cu,
# kOutClass), which write linear_nt's f16 logits at V = 50257 as whole
# 16-byte units. Builds this tree's server and the base's (1684aca, whose
# refactor of the aligned producer's R copies this call builds first);
# verifies the gemm family at its default shapes (that refactor) and the
# class tiles at unaligned output widths; times linear_nt at 50257 and
# 50304, base and new in turn, with cuBLAS in the same call; then the class
# tiles' two planted defects.
# Run from the repository root with bin/ from `bash bench/prep-call.sh 1684aca`.
set -uo pipefail
NAME=call1
LIMIT=540
source bench/call-lib.sh
step "build"
build_server bin/vkern || exit 1
step "verify: the gemm family at its default shapes"
v() { local n=$1; shift; run "$n" timeout 200 bin/vkern verify --backend cuda "$@"; grep -E 'PASSED|FAILED|INCORRECT' "$out/$n.txt" | tail -1; }
v verify-gemm-family --op linear,linear_grad_w,linear_nt,linear_grad_x,gemm,gemm_grad_a,gemm_grad_b
step "verify: the class tiles"
v verify-class-nt --op linear_nt --shape 4096x1001x512 --shape 4099x1001x520 --shape 4100x1003x512:bias=0 \
  --shape 16384x50257x768 --dist integer --dist normal --dist special
v verify-class-grad-a --op gemm_grad_a --shape 4096x512x1001 --shape 4103x520x1005 --dist integer --dist normal --dist special
step "anchors and bench"
python3 bench/op_anchors.py linear_nt=16384x50257x768 linear_nt=16384x50304x768 > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
build_server bin/vkern-base
for round in 1 2; do
  for b in vkern vkern-base; do
    [ "$(left)" -gt 120 ] || break
    bench_ops "$b-$round" "bin/$b" "$out/anchors.jsonl" linear_nt 16384x50257x768 16384x50304x768
  done
done
bench_table > "$out/table.txt"
anchor_table "$out/anchors.jsonl" >> "$out/table.txt"
cat "$out/table.txt"
step "planted defects of the class tiles"
[ "$(left)" -gt 60 ] && run defects timeout $(( $(left) - 10 )) ./bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/Hopper_class' -test.v
grep -E '^(    --- |--- |ok|FAIL$)|caught|want incorrect' "$out/defects.txt" | tail -8
