#!/usr/bin/env bash
# bias_grad's spans finished by slices (variant 6, kernels/cuda/bias_grad.cu,
# branch bias-grad-slices): blocks of two row blocks over three adjacent
# 256-column tiles, no clusters; a span's partial rows finished by slices of
# 96 columns, each by the last block of the span at that slice's counter.
# First nvcc build. As call 4 (the same steps, shapes and rounds), with the
# registers of span_sums and column_sums after the build. Spans now apply
# for N >= 768 at any M, so bias_grad's default 64x100000 takes them too.
# Run from the repository root with bin/ from `bash bench/prep-call.sh` and
# ../shared/bench/anchors.py copied to .anchors/anchors.py.
set -uo pipefail
NAME=call5
LIMIT=570
source bench/call-lib.sh
shapes=(16384x768 16384x2304 16384x3072)
d=(--dist integer --dist normal --dist uniform --dist wide --dist special)
step "build"
build_server bin/vkern || exit 1
kernel_resources span_sums && cat "$out/resources-span_sums.txt"
kernel_resources column_sums && cat "$out/resources-column_sums.txt"
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
