#!/usr/bin/env bash
# bias_grad's spans (variant 5, kernels/cuda/bias_grad.cu): blocks of two
# row blocks over three adjacent 256-column tiles, in clusters of 8 that add
# their group sums through distributed shared memory. First nvcc build of
# the spans. This call:
#   - verifies bias_grad with spans (the default) at its default shapes
#     (2100x1000 takes the spans) and at GPT-2's three, 4100x1000 (a narrow
#     last span), 1100x768 (a last cluster of two row blocks), 3000x1536,
#     and the one-tile paths' 13000x40, 4100x40 and 7x4099, every
#     distribution; again with VKERN_BIAS_GRAD_SPANS=0; and linear_grad_w at
#     its default shapes (2100x1000x40:bias=1 takes the spans for its db);
#   - runs bias_grad's planted CUDA defects (two of them the spans');
#   - times bias_grad with and without spans at GPT-2's three shapes, two
#     rounds alternating, with the copy bandwidth and `db.add_(dy.sum(0))`
#     in the same call;
#   - times a gpt2 step with spans against its train anchors, then without.
# Run from the repository root with bin/ from `bash bench/prep-call.sh` and
# ../shared/bench/anchors.py copied to .anchors/anchors.py.
set -uo pipefail
NAME=call4
LIMIT=570
source bench/call-lib.sh
shapes=(16384x768 16384x2304 16384x3072)
d=(--dist integer --dist normal --dist uniform --dist wide --dist special)
step "build"
build_server bin/vkern || exit 1
step "verify"
export VERIFY_TIMEOUT=120
more=(--shape 16384x768 --shape 16384x2304 --shape 16384x3072 --shape 4100x1000 --shape 1100x768 --shape 3000x1536
  --shape 13000x40 --shape 4100x40 --shape 7x4099)
verify verify-spans --op bias_grad "${d[@]}"
verify verify-spans-more --op bias_grad "${more[@]}" "${d[@]}"
VKERN_BIAS_GRAD_SPANS=0 verify verify-tiles-more --op bias_grad "${more[@]}" "${d[@]}"
verify verify-linear-grad-w --op linear_grad_w "${d[@]}"
step "planted defects of bias_grad"
run defects timeout 200 ./bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^bias_grad' -test.v
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt" | tail -9
step "anchors and bench"
{ python3 .anchors/anchors.py && python3 bench/op_anchors.py "${shapes[@]/#/bias_grad=}"; } > "$out/anchors.jsonl" 2> "$out/anchors.stderr" ||
  echo "anchors: FAILED"
for v in 1 0 1 0; do
  r=1; [ -f "$out/bench-spans$v-1-bias_grad.json" ] && r=2
  VKERN_BIAS_GRAD_SPANS=$v bench_ops "spans$v-$r" bin/vkern "$out/anchors.jsonl" bias_grad "${shapes[@]}"
done
tables
python3 - "$out" <<'PY' | tee "$out/shares.txt"
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench-spans*-bias_grad.json")), key=os.path.getmtime):
    tag = os.path.basename(f)[len("bench-"):-len("-bias_grad.json")]
    print(tag, "  ".join(f"{r['name'].split('_')[-1]} {r['median_ns'] / 1e3:.1f} us {r.get('floor_share', 0):.3f}"
                         for r in json.load(open(f))["results"]))
PY
step "training step, gpt2"
[ "$(left)" -gt 150 ] || exit 0
train=(--batch 16 --steps 30 --warmup 10)
OUT=$out/train MODELS=gpt2 bash bench/cuda-train-bench.sh "${train[@]}" > "$out/train.txt" 2>&1
tail -4 "$out/train.txt"
[ "$(left)" -gt 40 ] && VKERN_BIAS_GRAD_SPANS=0 bin/vkern bench --suite train --backend cuda --model gpt2 "${train[@]}" \
  --anchors "$out/train/train-anchors.jsonl" --json "$out/train-tiles.json" > "$out/train-tiles.txt" 2>&1 &&
  grep -E 'gpt2' "$out/train-tiles.txt" | head -3
