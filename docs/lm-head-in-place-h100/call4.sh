#!/usr/bin/env bash
# 2026-11-27, third session, call 4: WideSL with L2 prefetches of L's rows
# $VKERN_GEMM_L_PREFETCH depth steps ahead (0: none, as in call 3; 4 the
# default; 8; 16). Verify at odd K (the in-place path), then linear and
# linear_grad_w at 50257 and 50304 for each distance against cuBLAS, base
# (main 06f5a4e, the padded copy) once; then the head's dx verified at
# 50257. Outputs tarred into $OUT/call4.tar.gz.
set -uo pipefail
out=/tmp/call4
mkdir -p "$out"
export VKERN_CACHE=$PWD/.vkcache
start=$(date +%s)
left() { echo $(( 560 - ($(date +%s) - start) )); }
step() { printf '\n=== %s (at %d s)\n' "$*" $(( $(date +%s) - start )); }
run() { local n=$1; shift; if "$@" > "$out/$n.txt" 2>&1; then echo "$n: ok"; else echo "$n: FAILED"; tail -25 "$out/$n.txt"; fi; }
finish() { tar -czf "${OUT:-/tmp}/call4.tar.gz" -C /tmp call4; step done; }
trap finish EXIT
step "builds: new and base servers"
VKERN_CACHE=$PWD/.vkcache-base bin/vkern-base build --backend cuda > "$out/build-base.txt" 2>&1 &
if ! bin/vkern build --backend cuda > "$out/build.txt" 2>&1; then
  echo "build: FAILED"; grep -E 'error' "$out/build.txt" | head -30; tail -20 "$out/build.txt"; exit 1
fi
wait
step "verify: in-place L (odd K)"
run verify-linear timeout 150 bin/vkern verify --backend cuda --op linear --shape 4096x264x1001 --shape 4096x264x1001:bias=1 \
  --shape 4100x264x1003 --shape 4096x264x1002:bias=1 --shape 130x260x4100 --shape 40x40x4100
grep -E 'PASSED|FAILED|INCORRECT' "$out/verify-linear.txt" | tail -2
run verify-grad-w timeout 150 bin/vkern verify --backend cuda --op linear_grad_w --shape 4096x264x1001:accumulate=0 \
  --shape 4096x264x1001:accumulate=1 --shape 4100x264x1005:accumulate=1 --shape 300x130x77:accumulate=0
grep -E 'PASSED|FAILED|INCORRECT' "$out/verify-grad-w.txt" | tail -2
step "anchors and bench"
cases=(linear=16384x768x50257:bias=0 linear=16384x768x50304:bias=0 linear_grad_w=16384x768x50257 linear_grad_w=16384x768x50304)
python3 bench/op_anchors.py "${cases[@]}" > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
grep -E '"op": "linear(_grad_w)?"' "$out/anchors.jsonl"
bench() { # tag binary cache shapes-op
  local tag=$1 bin=$2 cache=$3
  for op in linear linear_grad_w; do
    shapes=()
    for c in "${cases[@]}"; do [ "${c%%=*}" = "$op" ] && shapes+=(--shape "${c#*=}"); done
    [ "$(left)" -gt 50 ] || return
    VKERN_CACHE=$cache run "bench-$tag-$op" "$bin" bench --suite ops --backend cuda --op "$op" --runs 30 "${shapes[@]}" \
      --anchors "$out/anchors.jsonl" --json "$out/bench-$tag-$op.json"
  done
}
bench base bin/vkern-base $PWD/.vkcache-base
for d in 4 0 8 16 2; do VKERN_GEMM_L_PREFETCH=$d bench "new-d$d" bin/vkern $PWD/.vkcache; done
VKERN_GEMM_L_PREFETCH=4 bench "new-d4-again" bin/vkern $PWD/.vkcache
python3 - "$out" > "$out/table.txt" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench-*.json")), key=os.path.getmtime):
    tag = os.path.basename(f)[len("bench-"):-5]
    for r in json.load(open(f))["results"]:
        print(f"{tag:<28} {r['name']:<36} {r['median_ns'] / 1e6:9.4f} ms  ratio to {r.get('anchor', '-')[:14]}: {r.get('ratio', 0):.3f}")
PY
cat "$out/table.txt"
step "verify the head's dx at 50257 (in place)"
if [ "$(left)" -gt 60 ]; then
  run verify-head-dx timeout $(( $(left) - 10 )) bin/vkern verify --backend cuda --op linear --shape 16384x768x50257 --dist normal
  grep -E 'PASSED|FAILED|INCORRECT' "$out/verify-head-dx.txt" | tail -2
fi
