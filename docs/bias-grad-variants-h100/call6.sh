#!/usr/bin/env bash
# rows.cuh's last_to_arrive, which bias_grad's tiles use to pick the block
# that finishes a tile: thread 0's atomic increment with acquire-release
# semantics after the barrier (branch bias-grad-release), where each thread
# fenced before it and the last block after it. Call 2 put the finish at
# about 2.2 µs of the kernel's 16.2 at 16384x768. This call:
#   - times bench/bias_grad_lab.cu built both ways (the fences with
#     -DVKERN_LAST_TO_ARRIVE_FENCES) at GPT-2's three shapes, alternating;
#   - verifies bias_grad (its default shapes, 16384x768, 4100x40, 13000x40,
#     7x4099) and linear_grad_w (its default shapes, db with bias=1), every
#     distribution, and runs bias_grad's planted CUDA defects;
#   - times bias_grad in the server with the copy bandwidth and
#     `db.add_(dy.sum(0))` in the same call.
# Run from the repository root with bin/ from `bash bench/prep-call.sh` and
# ../shared/bench/anchors.py copied to .anchors/anchors.py.
set -uo pipefail
NAME=call6
LIMIT=275
source bench/call-lib.sh
shapes=(16384x768 16384x2304 16384x3072)
d=(--dist integer --dist normal --dist uniform --dist wide --dist special)
step "build the server and the lab both ways"
lab() {
  local name=$1
  shift
  timeout 150 nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Ibin/labsrc -Ibench "$@" \
    -o "/tmp/lab_$name" bench/bias_grad_lab.cu > "$out/lab-build-$name.txt" 2>&1
}
lab fences -DVKERN_LAST_TO_ARRIVE_FENCES & fences=$!
lab release & release=$!
build_server bin/vkern || exit 1
wait $fences && wait $release || { tail -20 "$out"/lab-build-*.txt; exit 1; }
step "the lab, fences and release, alternating"
for n in 768 2304 3072; do
  for b in fences release fences release; do
    timeout 30 /tmp/lab_$b 16384 $n > "$out/lab-$b-$n.txt" 2>&1
    printf '%-8s %5s  %s\n' "$b" "$n" "$(grep -E '^bias_grad ' "$out/lab-$b-$n.txt")"
  done
done | tee "$out/lab-table.txt"
step "verify"
export VERIFY_TIMEOUT=90
verify verify-bias-grad --op bias_grad --shape 1x1 --shape 7x4099 --shape 1000x64 --shape 4100x40 --shape 64x100000 \
  --shape 16384x768 --shape 13000x40 "${d[@]}"
verify verify-linear-grad-w --op linear_grad_w "${d[@]}"
step "planted defects of bias_grad"
run defects timeout 120 ./bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^bias_grad' -test.v
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt" | tail -6
step "anchors and bench"
[ "$(left)" -gt 35 ] || exit 0
{ python3 .anchors/anchors.py && python3 bench/op_anchors.py "${shapes[@]/#/bias_grad=}"; } > "$out/anchors.jsonl" 2> "$out/anchors.stderr" ||
  echo "anchors: FAILED"
bench_ops release bin/vkern "$out/anchors.jsonl" bias_grad "${shapes[@]}"
tables
