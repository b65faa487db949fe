#!/usr/bin/env bash
# 2026-11-27, fourth session, call 3: the shifting producer with three raw
# slots (copies two depth steps ahead of the shifts, where call 2's had
# one), on only where VKERN_GEMM_SHIFT=1. Builds this tree's server;
# verifies the shifting path (linear at an odd K, linear_grad_w with its
# x's rows unaligned); times the head's dx and dW at 50257 (and 50304)
# with the path on and off (off: the padded copy) and cuBLAS in the same
# call; then the two planted defects of the shifting producer.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call3
LIMIT=420
source bench/call-lib.sh
step "build"
if ! bin/vkern build --backend cuda > "$out/build.txt" 2>&1; then
  echo "build: FAILED"; grep -E 'error' "$out/build.txt" | head -30; tail -20 "$out/build.txt"; exit 1
fi
step "verify: the shifting producer"
v() { local n=$1; shift; run "$n" timeout 120 env VKERN_GEMM_SHIFT=1 bin/vkern verify --backend cuda "$@"; grep -E 'PASSED|FAILED|INCORRECT' "$out/$n.txt" | tail -1; }
v verify-shift --op linear,linear_grad_w --shape 16390x520x1001 --shape 4096x512x16385:accumulate=0 --dist integer --dist normal --dist special
step "anchors and bench"
cases=(linear=16384x768x50257:bias=0 linear=16384x768x50304:bias=0 linear_grad_w=16384x768x50257 linear_grad_w=16384x768x50304)
python3 bench/op_anchors.py "${cases[@]}" > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
bench() { # tag shift
  local tag=$1 shift=$2
  for op in linear linear_grad_w; do
    shapes=()
    for c in "${cases[@]}"; do [ "${c%%=*}" = "$op" ] && shapes+=(--shape "${c#*=}"); done
    [ "$(left)" -gt 100 ] || return
    run "bench-$tag-$op" env VKERN_GEMM_SHIFT=$shift bin/vkern bench --suite ops --backend cuda --op "$op" --runs 20 \
      "${shapes[@]}" --anchors "$out/anchors.jsonl" --json "$out/bench-$tag-$op.json"
  done
}
bench padded 0
bench shifted 1
python3 - "$out" > "$out/table.txt" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench-*.json")), key=os.path.getmtime):
    tag = os.path.basename(f)[len("bench-"):-5]
    for r in json.load(open(f))["results"]:
        print(f"{tag:<22} {r['name']:<34} {r['median_ns'] / 1e6:9.4f} ms  ratio to {r.get('anchor', '-')[:14]}: {r.get('ratio', 0):.3f}")
PY
cat "$out/table.txt"
step "planted defects of the shifting producer"
[ "$(left)" -gt 100 ] && run defects timeout $(( $(left) - 10 )) ./bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/Hopper_shifting' -test.v
grep -E '^(    --- |--- |ok|FAIL$)|caught|want incorrect' "$out/defects.txt" | tail -8
