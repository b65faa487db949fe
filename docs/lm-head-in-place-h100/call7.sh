#!/usr/bin/env bash
# 2026-11-27, third session, call 7: WideSL's copies as one bulk copy a
# row (cp.async.bulk into the raw slots, an mbarrier a slot), after call 6
# found the 16-byte cp.async requests, not their latency, setting the pace.
# WideSL (4 stages, copies a step ahead) and WideSLDeep
# ($VKERN_GEMM_L_DEEP=1: 3 stages, three steps ahead). Verify at odd K for
# both, bench linear and linear_grad_w at 50257 for each, base (main
# 06f5a4e: the padded copy) and cuBLAS at 50304, twice; then the head's dx
# verified and the planted defects. Outputs tarred into $OUT/call7.tar.gz.
set -uo pipefail
out=/tmp/call7
mkdir -p "$out"
export VKERN_CACHE=$PWD/.vkcache
start=$(date +%s)
left() { echo $(( 570 - ($(date +%s) - start) )); }
step() { printf '\n=== %s (at %d s)\n' "$*" $(( $(date +%s) - start )); }
run() { local n=$1; shift; if "$@" > "$out/$n.txt" 2>&1; then echo "$n: ok"; else echo "$n: FAILED"; tail -25 "$out/$n.txt"; fi; }
finish() { tar -czf "${OUT:-/tmp}/call7.tar.gz" -C /tmp call7; step done; }
trap finish EXIT
step "builds: new and base servers"
VKERN_CACHE=$PWD/.vkcache-base bin/vkern-base build --backend cuda > "$out/build-base.txt" 2>&1 &
if ! bin/vkern build --backend cuda > "$out/build.txt" 2>&1; then
  echo "build: FAILED"; grep -E 'error' "$out/build.txt" | head -30; tail -20 "$out/build.txt"; exit 1
fi
wait
step "verify: in-place L (odd K), both variants"
for deep in 0 1; do
  VKERN_GEMM_L_DEEP=$deep run verify-linear-deep$deep timeout 100 bin/vkern verify --backend cuda --op linear --shape 4096x264x1001 \
    --shape 4100x264x1003 --shape 4096x264x1002:bias=1 --shape 130x260x4100 --shape 300x520x77:bias=1
  grep -E 'PASSED|FAILED|INCORRECT' "$out/verify-linear-deep$deep.txt" | tail -1
  VKERN_GEMM_L_DEEP=$deep run verify-grad-w-deep$deep timeout 100 bin/vkern verify --backend cuda --op linear_grad_w \
    --shape 4096x264x1001:accumulate=0 --shape 4100x264x1005:accumulate=1 --shape 77x300x130:accumulate=1
  grep -E 'PASSED|FAILED|INCORRECT' "$out/verify-grad-w-deep$deep.txt" | tail -1
done
step "anchors and bench"
cases=(linear=16384x768x50257:bias=0 linear=16384x768x50304:bias=0 linear_grad_w=16384x768x50257 linear_grad_w=16384x768x50304)
python3 bench/op_anchors.py "${cases[@]}" > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
grep -E '"op": "linear(_grad_w)?"' "$out/anchors.jsonl"
bench() { # tag binary cache shape-filter
  local tag=$1 bin=$2 cache=$3 filter=$4
  for op in linear linear_grad_w; do
    shapes=()
    for c in "${cases[@]}"; do [ "${c%%=*}" = "$op" ] && [[ "$c" == *$filter* ]] && shapes+=(--shape "${c#*=}"); done
    [ "$(left)" -gt 130 ] || return
    VKERN_CACHE=$cache run "bench-$tag-$op" "$bin" bench --suite ops --backend cuda --op "$op" --runs 20 "${shapes[@]}" \
      --anchors "$out/anchors.jsonl" --json "$out/bench-$tag-$op.json"
  done
}
bench base bin/vkern-base $PWD/.vkcache-base 50
for round in 1 2; do
  [ $round = 2 ] && bench base-2 bin/vkern-base $PWD/.vkcache-base 50
  for deep in 0 1; do VKERN_GEMM_L_DEEP=$deep bench "deep$deep-$round" bin/vkern $PWD/.vkcache 50; done
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
[ "$(left)" -gt 150 ] && run verify-head-dx timeout 50 bin/vkern verify --backend cuda --op linear --shape 16384x768x50257 --dist normal
grep -E 'PASSED|FAILED|INCORRECT' "$out/verify-head-dx.txt" | tail -2
step "planted defects of the in-place loader"
[ "$(left)" -gt 100 ] && run defects timeout $(( $(left) - 10 )) ./bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/Hopper_in-place' -test.v
grep -E '^(    --- |--- |ok|FAIL)|caught' "$out/defects.txt" | tail -12
