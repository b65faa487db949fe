#!/usr/bin/env bash
# Branch dx-share-l (not yet run): L's row classes in clusters of 3 along
# the tile columns, sharing L's eight class boxes by multicast (WideSRL3;
# VKERN_GEMM_SHARE_L=1), against main's WideSR (clusters of 2 sharing R).
#   - verify WideSRL3 at odd K and at the head's dx: 2, 3 and 4 tile
#     columns of 256 (4100x1000x1003 and 4103x1024x4097 leave a cluster's
#     last two tiles past the last column, 16390x512x1001 its last one);
#   - the head's dx, the two in turn, three times, with cuBLAS before and
#     after; and at 16128 rows (126 tile rows), where both take three rounds
#     of tiles if about 42 clusters of 3 fit (the head's 128 tile rows would
#     leave clusters of 3 a fourth round for two clusters);
#   - the new planted defect (every block of a cluster of 3 on its first
#     tile column).
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call8
LIMIT=450
source bench/call-lib.sh
step "build"
build_server bin/vkern || exit 1
step "verify: WideSRL3"
VKERN_GEMM_SHARE_L=1 verify verify-share-l-linear --op linear --shape 16390x520x1001 --shape 4100x1000x1003:bias=0 --shape 4103x1024x4097 \
  --shape 16384x768x50257:bias=0 --dist integer --dist normal --dist special
VKERN_GEMM_SHARE_L=1 verify verify-share-l-gemm --op gemm --shape 4096x1024x4099 --shape 4101x768x2053 --shape 16390x512x1001 \
  --dist integer --dist normal --dist special
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
step "planted defect of WideSRL3"
[ "$(left)" -gt 90 ] && run defects timeout $(( $(left) - 10 )) ./bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/Hopper_row_classes_of_L_shared' -test.v
grep -E '^(    --- |--- |ok|FAIL$)' "$out/defects.txt" | tail -3
