#!/usr/bin/env bash
# 2026-11-28, call 8, on branch dx-share-l (main b81d0f5 plus WideSRL3):
# main's unrun commits and the branch's new kernel in one call.
#   - main's part: the gemm family at its default shapes (542b7be's
#     rows_aligned16 decides every product's dispatch), L in row classes
#     and the forward's class tiles at odd shapes, and every Hopper planted
#     defect (d0ab120's cluster defect among them), the defects in the
#     background while the verifies run, finished before any timing;
#   - WideSRL3 (L's row classes in clusters of 3 along the tile columns,
#     sharing L's eight class boxes by multicast; VKERN_GEMM_SHARE_L=1):
#     verify at odd K and at the head's dx, with 2, 3 and 4 tile columns
#     of 256 (4100x1000x1003 and 4103x1024x4097 leave a cluster's last two
#     tiles past the last column, 16390x512x1001 its last one);
#   - the head's dx, WideSR and WideSRL3 in turn, three times, with cuBLAS
#     before and after; and at 16128 rows (126 tile rows), where both take
#     three rounds of tiles if about 42 clusters of 3 fit (the head's 128
#     tile rows would leave clusters of 3 a fourth round for two clusters).
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call8
LIMIT=585
source bench/call-lib.sh
step "build"
build_server bin/vkern || exit 1
step "planted defects (background) and verify"
timeout 330 ./bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/Hopper' -test.v > "$out/defects.txt" 2>&1 &
defects=$!
verify verify-gemm-family --op linear,linear_grad_w,linear_nt,linear_grad_x,gemm,gemm_grad_a,gemm_grad_b
verify verify-class-l-linear --op linear --shape 16390x520x1001 --shape 4100x1000x1003:bias=0 --shape 4103x1024x4097 \
  --shape 16384x768x50257:bias=0 --dist integer --dist normal --dist special
verify verify-class-nt --op linear_nt --shape 4096x1001x512 --shape 1024x50257x768:bias=0 --dist integer --dist normal --dist special
VKERN_GEMM_SHARE_L=1 verify verify-share-l-linear --op linear --shape 16390x520x1001 --shape 4100x1000x1003:bias=0 --shape 4103x1024x4097 \
  --shape 16384x768x50257:bias=0 --dist integer --dist normal --dist special
VKERN_GEMM_SHARE_L=1 verify verify-share-l-gemm --op gemm --shape 4096x1024x4099 --shape 4101x768x2053 --shape 16390x512x1001 \
  --dist integer --dist normal --dist special
wait $defects
echo "defects rc=$?"
grep -E '^(    --- FAIL|--- |ok|FAIL$|PASS$)' "$out/defects.txt" | tail -6
grep -c '^    --- PASS' "$out/defects.txt"
step "anchors and bench"
python3 bench/op_anchors.py linear=16384x768x50304:bias=0 > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
for round in 1 2 3; do
  [ "$(left)" -gt 60 ] || break
  bench_ops "widesr-$round" bin/vkern "$out/anchors.jsonl" linear 16384x768x50257:bias=0 16384x768x50304:bias=0 \
    16128x768x50257:bias=0
  VKERN_GEMM_SHARE_L=1 bench_ops "sharel-$round" bin/vkern "$out/anchors.jsonl" linear 16384x768x50257:bias=0 16128x768x50257:bias=0
done
python3 bench/op_anchors.py linear=16384x768x50304:bias=0 > "$out/anchors-after.jsonl" 2> "$out/anchors-after.stderr" || echo "anchors: FAILED"
tables
