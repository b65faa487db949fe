#!/usr/bin/env bash
# 2026-11-27, third session, call 5: WideSL's producer with two lanes a
# row, each keeping its rows' walks for a tile (call 4's L2 prefetches
# gone). ptxas's report of WideSL's kernels (spills); verify at odd K (the
# in-place path) and at the default shapes; linear and linear_grad_w at
# 50257 and 50304 against cuBLAS, base (main 06f5a4e: the padded copy) and
# new in turn, twice; the head's dx verified at 50257; then the three
# planted defects of the in-place loader. Outputs tarred into
# $OUT/call5.tar.gz.
set -uo pipefail
out=/tmp/call5
mkdir -p "$out"
export VKERN_CACHE=$PWD/.vkcache
start=$(date +%s)
left() { echo $(( 570 - ($(date +%s) - start) )); }
step() { printf '\n=== %s (at %d s)\n' "$*" $(( $(date +%s) - start )); }
run() { local n=$1; shift; if "$@" > "$out/$n.txt" 2>&1; then echo "$n: ok"; else echo "$n: FAILED"; tail -25 "$out/$n.txt"; fi; }
finish() { tar -czf "${OUT:-/tmp}/call5.tar.gz" -C /tmp call5; step done; }
trap finish EXIT
step "builds: new and base servers, ptxas report of linear.cu and linear_grad.cu"
( for f in linear linear_grad; do nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Ibin/labsrc -DVKERN_GEMM_LAB \
    -Xptxas -v -c bin/labsrc/cuda/$f.cu -o /tmp/$f.o; done > "$out/ptxas.txt" 2>&1; echo "ptxas probe rc=$?" ) &
VKERN_CACHE=$PWD/.vkcache-base bin/vkern-base build --backend cuda > "$out/build-base.txt" 2>&1 &
if ! bin/vkern build --backend cuda > "$out/build.txt" 2>&1; then
  echo "build: FAILED"; grep -E 'error' "$out/build.txt" | head -30; tail -20 "$out/build.txt"; exit 1
fi
wait
grep -A3 'Compiling entry.*Config.*Lb0ELb1EEE' "$out/ptxas.txt" | grep -E 'spill' | sort | uniq -c
step "verify: in-place L (odd K), default shapes"
run verify-linear timeout 150 bin/vkern verify --backend cuda --op linear --shape 4096x264x1001 --shape 4096x264x1001:bias=1 \
  --shape 4100x264x1003 --shape 4096x264x1002:bias=1 --shape 130x260x4100 --shape 40x40x4100 --shape 300x520x77:bias=1
grep -E 'PASSED|FAILED|INCORRECT' "$out/verify-linear.txt" | tail -2
run verify-grad-w timeout 150 bin/vkern verify --backend cuda --op linear_grad_w --shape 4096x264x1001:accumulate=0 \
  --shape 4096x264x1001:accumulate=1 --shape 4100x264x1005:accumulate=1 --shape 300x130x77:accumulate=0 --shape 77x300x130:accumulate=1
grep -E 'PASSED|FAILED|INCORRECT' "$out/verify-grad-w.txt" | tail -2
run verify-default timeout 100 bin/vkern verify --backend cuda --op linear,linear_grad_w,linear_nt,gemm,gemm_grad_a,gemm_grad_b
grep -E 'PASSED|FAILED|INCORRECT' "$out/verify-default.txt" | tail -2
step "anchors and bench"
cases=(linear=16384x768x50257:bias=0 linear=16384x768x50304:bias=0 linear_grad_w=16384x768x50257 linear_grad_w=16384x768x50304)
python3 bench/op_anchors.py "${cases[@]}" > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
grep -E '"op": "linear(_grad_w)?"' "$out/anchors.jsonl"
bench() { # tag binary cache
  local tag=$1 bin=$2 cache=$3
  for op in linear linear_grad_w; do
    shapes=()
    for c in "${cases[@]}"; do [ "${c%%=*}" = "$op" ] && shapes+=(--shape "${c#*=}"); done
    [ "$(left)" -gt 50 ] || return
    VKERN_CACHE=$cache run "bench-$tag-$op" "$bin" bench --suite ops --backend cuda --op "$op" --runs 30 "${shapes[@]}" \
      --anchors "$out/anchors.jsonl" --json "$out/bench-$tag-$op.json"
  done
}
for round in 1 2; do
  bench "base-$round" bin/vkern-base $PWD/.vkcache-base
  bench "new-$round" bin/vkern $PWD/.vkcache
done
python3 - "$out" > "$out/table.txt" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench-*.json")), key=os.path.getmtime):
    tag = os.path.basename(f)[len("bench-"):-5]
    for r in json.load(open(f))["results"]:
        print(f"{tag:<26} {r['name']:<34} {r['median_ns'] / 1e6:9.4f} ms  ratio to {r.get('anchor', '-')[:14]}: {r.get('ratio', 0):.3f}")
PY
cat "$out/table.txt"
step "verify the head's dx at 50257 (in place)"
[ "$(left)" -gt 60 ] && run verify-head-dx timeout 50 bin/vkern verify --backend cuda --op linear --shape 16384x768x50257 --dist normal
grep -E 'PASSED|FAILED|INCORRECT' "$out/verify-head-dx.txt" | tail -2
step "planted defects of the in-place loader"
[ "$(left)" -gt 120 ] && run defects timeout $(( $(left) - 10 )) ./bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/Hopper_in-place' -test.v
grep -E '^(=== RUN|--- |PASS|FAIL|ok)' "$out/defects.txt" | tail -12
