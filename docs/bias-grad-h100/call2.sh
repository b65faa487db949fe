#!/usr/bin/env bash
# Branch bias-grad-tiles, not yet run: bias_grad's launch for 16-byte
# aligned dy, after call 1 put 8 warps a block of lanes of 8 columns on
# main (f0eb06d, 0.48 of the floor at 16384x768; that file not yet built by
# nvcc). The server's VKERN_BIAS_GRAD_LAUNCH: 0 (8 warps, 8 columns a
# lane: main's), 1 (8, 4: 8-byte loads, tiles of 128 columns, twice the
# tiles), 2 (16, 8), 3 (16, 4), 4 (4, 4).
#   - verify each at bias_grad's default shapes and at 16384x768, 4100x40
#     and 7x4099;
#   - time each at GPT-2's three shapes, two rounds in opposite orders, with
#     the copy bandwidth (anchors.py) and `db.add_(dy.sum(0))` measured in
#     the same call;
#   - the planted defects of bias_grad and of the padded copy (pad_rows,
#     new on main, not yet run) on the default launch, before the bench.
# Run from the repository root with bin/ from `bash bench/prep-call.sh` and
# ../shared/bench/anchors.py copied to .anchors/anchors.py.
set -uo pipefail
NAME=call2
LIMIT=420
source bench/call-lib.sh
shapes=(16384x768 16384x2304 16384x3072)
step "build"
build_server bin/vkern || exit 1
step "anchors"
{ python3 .anchors/anchors.py && python3 bench/op_anchors.py "${shapes[@]/#/bias_grad=}"; } > "$out/anchors.jsonl" 2> "$out/anchors.stderr" ||
  echo "anchors: FAILED"
step "verify"
for v in 0 1 2 3 4; do
  VKERN_BIAS_GRAD_LAUNCH=$v verify "verify-$v" --op bias_grad
  VKERN_BIAS_GRAD_LAUNCH=$v verify "verify-$v-more" --op bias_grad --shape 16384x768 --shape 4100x40 --shape 13000x40 --shape 7x4099
done
step "planted defects of bias_grad and the padded copy"
run defects timeout 200 ./bin/vkern.test \
  -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^(bias_grad|pad_rows)' -test.v
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt" | tail -9
step "bench"
for v in 0 1 2 3 4 4 3 2 1 0; do
  [ "$(left)" -gt 30 ] || break
  r=1; [ -f "$out/bench-v$v-1-bias_grad.txt" ] && r=2
  VKERN_BIAS_GRAD_LAUNCH=$v bench_ops "v$v-$r" bin/vkern "$out/anchors.jsonl" bias_grad "${shapes[@]}"
done
tables
