#!/usr/bin/env bash
# 2026-11-27, sixth session, call 2: why the head's dx from L's row classes
# (kClassL) reads twice the DRAM bytes of the aligned product (call 1), and
# whether class tiles of L (kClassLTiles: a tile's 128 rows one row class,
# one TMA box a stage instead of eight; VKERN_GEMM_L_TILES=1) or another L2
# promotion (VKERN_GEMM_PROMOTION) or L2 group (GEMM_LAB_GROUP) change it.
#   - verify kClassLTiles at odd K (linear, gemm);
#   - bench/gemm_lab.cu at the head's dx, 50257 and 50304, per setting;
#   - Nsight Compute's DRAM and L2 counts per setting;
#   - vkern bench of the head's dx, kClassL and kClassLTiles in turn, with
#     cuBLAS in the same call.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call2
LIMIT=560
source bench/call-lib.sh
step "build (the lab in the background)"
build_lab -Xptxas -v &
lab=$!
build_server bin/vkern || exit 1
step "verify: class tiles of L"
VKERN_GEMM_L_TILES=1 verify verify-l-tiles-linear --op linear --shape 16390x520x1001 --shape 4100x1000x1003:bias=0 --shape 4103x1024x4097 \
  --dist integer --dist normal --dist special
VKERN_GEMM_L_TILES=1 verify verify-l-tiles-gemm --op gemm --shape 4096x512x4099 --shape 4101x768x2053 --dist integer --dist normal --dist special
step "anchors and bench"
python3 bench/op_anchors.py linear=16384x768x50304:bias=0 > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
for round in 1 2; do
  bench_ops "classl-$round" bin/vkern "$out/anchors.jsonl" linear 16384x768x50257:bias=0 16384x768x50304:bias=0
  VKERN_GEMM_L_TILES=1 bench_ops "ltiles-$round" bin/vkern "$out/anchors.jsonl" linear 16384x768x50257:bias=0
done
tables
step "the lab"
wait $lab
tail -1 "$out/lab-build.txt"
grep -A2 "TilesE4" "$out/lab-build.txt" | grep -E 'spill|registers' | head -4
[ -x /tmp/gemm_lab ] || exit 1
cases="V dx head,dx head"
lab_times classl "$cases"
lab_times ltiles "$cases" VKERN_GEMM_L_TILES=1
lab_times classl-promo-none "$cases" VKERN_GEMM_PROMOTION=none
lab_times ltiles-promo-none "$cases" VKERN_GEMM_L_TILES=1 VKERN_GEMM_PROMOTION=none
lab_times ltiles-promo-128 "$cases" VKERN_GEMM_L_TILES=1 VKERN_GEMM_PROMOTION=128
lab_times classl-group-16 "$cases" GEMM_LAB_GROUP=16
lab_times ltiles-group-16 "$cases" VKERN_GEMM_L_TILES=1 GEMM_LAB_GROUP=16
lab_times ltiles-group-4 "$cases" VKERN_GEMM_L_TILES=1 GEMM_LAB_GROUP=4
step "Nsight Compute: DRAM and L2 counts"
metrics=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
ncu_run() {  # TAG CASE ENV...
  local tag=$1 case=$2; shift 2
  [ "$(left)" -gt 30 ] || return
  env "$@" GEMM_LAB_ONLY="$case" timeout 40 ncu --clock-control none --metrics $metrics -k regex:product_wgmma --launch-skip 2 -c 1 \
    /tmp/gemm_lab 6 > "$out/ncu-$tag.txt" 2>&1
  echo "== $tag"; grep -E '^\s+(gpu__time|dram__|lts__|sm__pipe)' "$out/ncu-$tag.txt"
}
ncu_run aligned "dx head" X=1
ncu_run classl "V dx head" X=1
ncu_run ltiles "V dx head" VKERN_GEMM_L_TILES=1
ncu_run ltiles-promo-none "V dx head" VKERN_GEMM_L_TILES=1 VKERN_GEMM_PROMOTION=none
ncu_run classl-group-16 "V dx head" GEMM_LAB_GROUP=16
