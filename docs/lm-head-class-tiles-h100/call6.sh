#!/usr/bin/env bash
# 2026-11-27, fifth session, call 6: L in row classes with one 4-byte load
# a fragment register where the warp's class starts at an even shift (call
# 5's loaded two words and permuted for every class). Verifies the path at
# odd K and times the head's dx at 50257 and 50304 with cuBLAS in the same
# call (no base build: the device time left did not allow it).
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call6
LIMIT=200
source bench/call-lib.sh
step "build"
build_server bin/vkern || exit 1
step "verify: L in row classes"
run verify-class-l timeout 60 bin/vkern verify --backend cuda --op linear --shape 16390x520x1001 --shape 4100x1000x1003:bias=0 \
  --shape 4103x1024x4097 --dist integer --dist normal --dist special
grep -E 'PASSED|FAILED|INCORRECT' "$out/verify-class-l.txt" | tail -1
step "anchors and bench"
python3 bench/op_anchors.py linear=16384x768x50257:bias=0 linear=16384x768x50304:bias=0 > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
for round in 1 2; do
  [ "$(left)" -gt 25 ] || break
  bench_ops "vkern-$round" bin/vkern "$out/anchors.jsonl" linear 16384x768x50257:bias=0 16384x768x50304:bias=0
done
bench_table > "$out/table.txt"
anchor_table "$out/anchors.jsonl" >> "$out/table.txt"
cat "$out/table.txt"
