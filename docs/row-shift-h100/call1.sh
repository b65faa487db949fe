#!/usr/bin/env bash
# 2026-11-27, fourth session, call 1: L read in row classes (007231a and
# after). Builds the server of this tree and of main 10f2399 (the padded
# copy); verifies the products that now take the row classes (linear and
# gemm with an odd K, every epilogue, edge tiles in rows and columns; the
# head's dx at 50257) and the gemm family at its default shapes; times
# linear at 16384x768x50257 and x50304 in both builds, twice, with cuBLAS
# in the same call; then the two planted defects of the row classes.
# Run from the repository root with bin/ from `bash bench/prep-call.sh 10f2399`.
set -uo pipefail
NAME=call1
source bench/call-lib.sh
step "builds: new and base servers"
VKERN_CACHE=$PWD/.vkcache-base bin/vkern-base build --backend cuda > "$out/build-base.txt" 2>&1 &
if ! bin/vkern build --backend cuda > "$out/build.txt" 2>&1; then
  echo "build: FAILED"; grep -E 'error' "$out/build.txt" | head -30; tail -20 "$out/build.txt"; exit 1
fi
wait
step "verify: row classes"
v() { local n=$1; shift; run "$n" timeout 200 bin/vkern verify --backend cuda "$@"; grep -E 'PASSED|FAILED|INCORRECT' "$out/$n.txt" | tail -2; }
v verify-linear --op linear --shape 16390x520x1001 --shape 16390x520x1001:gelu=1 --shape 16390x520x1001:residual=1 \
  --shape 16390x512x1001:bias=0 --shape 16384x768x1003:bias=0
v verify-gemm --op gemm --shape 16390x520x1001 --shape 16384x512x1005
step "verify: the gemm family's default shapes"
v verify-default --op linear,linear_grad_w,linear_nt,linear_grad_x,gemm,gemm_grad_a,gemm_grad_b
step "anchors and bench"
cases=(linear=16384x768x50257:bias=0 linear=16384x768x50304:bias=0)
python3 bench/op_anchors.py "${cases[@]}" > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
grep -E '"op": "linear"' "$out/anchors.jsonl"
bench() { # tag binary cache
  [ "$(left)" -gt 60 ] || return
  VKERN_CACHE=$3 run "bench-$1" "$2" bench --suite ops --backend cuda --op linear --runs 30 \
    --shape 16384x768x50257:bias=0 --shape 16384x768x50304:bias=0 --anchors "$out/anchors.jsonl" --json "$out/bench-$1.json"
}
for round in 1 2; do
  bench "base-$round" bin/vkern-base "$PWD/.vkcache-base"
  bench "new-$round" bin/vkern "$PWD/.vkcache"
done
python3 - "$out" > "$out/table.txt" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench-*.json")), key=os.path.getmtime):
    tag = os.path.basename(f)[len("bench-"):-5]
    for r in json.load(open(f))["results"]:
        print(f"{tag:<10} {r['name']:<34} {r['median_ns'] / 1e6:9.4f} ms  ratio to {r.get('anchor', '-')[:14]}: {r.get('ratio', 0):.3f}")
PY
step "verify the head's dx at 50257"
[ "$(left)" -gt 90 ] && v verify-head-dx --op linear --shape 16384x768x50257:bias=0 --dist normal --dist wide
step "planted defects of the row classes"
[ "$(left)" -gt 150 ] && run defects timeout $(( $(left) - 15 )) ./bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/Hopper_row' -test.v
grep -E '^(=== RUN|--- |PASS|FAIL|ok)' "$out/defects.txt" | tail -8
step table
cat "$out/table.txt"
