#!/usr/bin/env bash
# 2026-11-27, fourth session, call 2: the shifting producer (L's row
# classes copied by TMA at aligned columns, each row shifted into place in
# shared memory). Builds this tree's server and main 10f2399's (the padded
# copy); verifies the products that now take it (linear and gemm with an
# odd K; linear_grad_w and gemm_grad_b with an odd K, which makes their L's
# rows, the depth, unaligned) and the gemm family at its default shapes;
# times the head's dx (linear) and dW (linear_grad_w) at 50257 and 50304 in
# both builds with cuBLAS in the same call; verifies the head's dx and dW
# at 50257; then the two planted defects of the shifting producer.
# Run from the repository root with bin/ from `bash bench/prep-call.sh 10f2399`.
set -uo pipefail
NAME=call2
source bench/call-lib.sh
step "builds: new and base servers"
VKERN_CACHE=$PWD/.vkcache-base bin/vkern-base build --backend cuda > "$out/build-base.txt" 2>&1 &
if ! bin/vkern build --backend cuda > "$out/build.txt" 2>&1; then
  echo "build: FAILED"; grep -E 'error' "$out/build.txt" | head -30; tail -20 "$out/build.txt"; exit 1
fi
wait
step "verify: the shifting producer"
v() { local n=$1; shift; run "$n" timeout 150 bin/vkern verify --backend cuda "$@"; grep -E 'PASSED|FAILED|INCORRECT' "$out/$n.txt" | tail -1; }
v verify-linear --op linear,gemm --shape 16390x520x1001 --shape 16390x512x1001:bias=0 --shape 16384x768x1003:bias=0
v verify-grad --op linear_grad_w,gemm_grad_b --shape 4096x512x16385:accumulate=0 --shape 4100x520x16387
step "verify: the gemm family's default shapes"
v verify-default --op linear,linear_grad_w,linear_nt,linear_grad_x,gemm,gemm_grad_a,gemm_grad_b
step "anchors and bench"
cases=(linear=16384x768x50257:bias=0 linear=16384x768x50304:bias=0 linear_grad_w=16384x768x50257 linear_grad_w=16384x768x50304)
python3 bench/op_anchors.py "${cases[@]}" > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
grep -E '"op": "linear(_grad_w)?"' "$out/anchors.jsonl"
bench() { # tag binary cache
  local tag=$1 bin=$2 cache=$3
  for op in linear linear_grad_w; do
    shapes=()
    for c in "${cases[@]}"; do [ "${c%%=*}" = "$op" ] && shapes+=(--shape "${c#*=}"); done
    [ "$(left)" -gt 100 ] || return
    VKERN_CACHE=$cache run "bench-$tag-$op" "$bin" bench --suite ops --backend cuda --op "$op" --runs 20 "${shapes[@]}" \
      --anchors "$out/anchors.jsonl" --json "$out/bench-$tag-$op.json"
  done
}
bench base bin/vkern-base "$PWD/.vkcache-base"
bench new bin/vkern "$PWD/.vkcache"
python3 - "$out" > "$out/table.txt" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench-*.json")), key=os.path.getmtime):
    tag = os.path.basename(f)[len("bench-"):-5]
    for r in json.load(open(f))["results"]:
        print(f"{tag:<20} {r['name']:<34} {r['median_ns'] / 1e6:9.4f} ms  ratio to {r.get('anchor', '-')[:14]}: {r.get('ratio', 0):.3f}")
PY
step "verify the head's dx and dW at 50257"
[ "$(left)" -gt 200 ] && v verify-head --op linear,linear_grad_w --shape 16384x768x50257:bias=0 --shape 16384x768x50257:accumulate=1 --dist normal
step "planted defects of the shifting producer"
[ "$(left)" -gt 110 ] && run defects timeout $(( $(left) - 10 )) ./bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/Hopper_shifting' -test.v
grep -E '^(    --- |--- |ok|FAIL$)|caught|want incorrect' "$out/defects.txt" | tail -8
step table
cat "$out/table.txt"
