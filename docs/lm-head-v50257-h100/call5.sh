#!/usr/bin/env bash
# 2026-11-27, second session, call 5: store_chunk_any's shifted units
# (store-shift) against main (bin/vkern-base): verify of the unaligned
# outputs, the store's planted defects, and linear_nt at V 50257 and 50304,
# base and new in turn, twice, against PyTorch in the same call.
set -uo pipefail
out=${OUT:-/tmp/vkern-out}
mkdir -p "$out"
export VKERN_CACHE=$PWD/.vkcache
start=$(date +%s)
step() { printf '\n=== %s (at %d s)\n' "$*" $(( $(date +%s) - start )); }
run() { local n=$1; shift; if "$@" > "$out/$n.txt" 2>&1; then echo "$n: ok"; else echo "$n: FAILED"; tail -15 "$out/$n.txt"; fi; }
step "builds: both servers, in parallel"
run build bin/vkern build --backend cuda &
run build-base bin/vkern-base build --backend cuda &
wait
step "PyTorch's anchors"
cases=(linear_nt=16384x50257x768 linear_nt=16384x50304x768)
python3 bench/op_anchors.py "${cases[@]}" > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
cat "$out/anchors.jsonl"
step "verify: outputs whose rows are not 16-byte aligned"
run verify-nt bin/vkern verify --backend cuda --op linear_nt --shape 4096x1001x264 --shape 4100x1003x264:bias=0 \
  --shape 4096x1002x264 --shape 4096x1005x264:bias=0 --shape 16384x50257x768:bias=0
run verify-linear bin/vkern verify --backend cuda --op linear --shape 4096x1001x264 --shape 4096x1001x264:gelu=1 \
  --shape 4100x1003x264:residual=1 --shape 4096x1002x264:bias=1
run verify-grad-x bin/vkern verify --backend cuda --op linear_grad_x --shape 4096x264x1001 --shape 4100x264x1005:gelu=1
for f in verify-nt verify-linear verify-grad-x; do grep -E '^(linear|op)|PASSED|FAILED|INCORRECT' "$out/$f.txt" | tail -2; done
step "linear_nt at V 50257 and 50304, base and new in turn, twice"
for r in 1 2; do for v in base new; do
  bin=bin/vkern; [ $v = base ] && bin=bin/vkern-base
  $bin bench --suite ops --backend cuda --op linear_nt --runs 30 --shape 16384x50257x768 --shape 16384x50304x768 \
    --anchors "$out/anchors.jsonl" --json "$out/bench-$v-$r.json" > "$out/bench-$v-$r.txt" 2>&1 || echo "bench $v $r: FAILED"
done; done
step "the store's planted defects"
run defects bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/Hopper:_unaligned' -test.v
grep -E 'cases caught|--- (PASS|FAIL)' "$out/defects.txt"
step table
python3 - "$out" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench-*-*.json"))):
    for r in json.load(open(f))["results"]:
        print(f"{os.path.basename(f)[6:-5]:<8} {r['name']:<28} {r['median_ns'] / 1e6:8.4f} ms  ratio to {r.get('anchor', '-')}: {r.get('ratio', 0):.3f}")
PY
step done
