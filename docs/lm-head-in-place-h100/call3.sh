#!/usr/bin/env bash
# 2026-11-27, third session, call 3: WideSL (four stages, a ring of three half-step raw slots a warp), the Hopper GEMM variant whose
# producer warpgroup reads L in place (rows that do not start 16-byte
# aligned: the logits gradient at V = 50257, L of the head's dx and dW),
# first built by nvcc. ptxas's report of WideSL's kernels (registers,
# spills) from linear_grad.cu alone; verify of linear and linear_grad_w at
# their default shapes and at odd K (the in-place path); then base
# (bin/vkern-base, main at 06f5a4e: the padded copy) and new against cuBLAS
# at 50257 and 50304, twice; then verify of the head's dx at 50257.
# Outputs tarred into $OUT/call3.tar.gz.
set -uo pipefail
out=/tmp/call3
mkdir -p "$out"
export VKERN_CACHE=$PWD/.vkcache
start=$(date +%s)
left() { echo $(( 560 - ($(date +%s) - start) )); }
step() { printf '\n=== %s (at %d s)\n' "$*" $(( $(date +%s) - start )); }
run() { local n=$1; shift; if "$@" > "$out/$n.txt" 2>&1; then echo "$n: ok"; else echo "$n: FAILED"; tail -25 "$out/$n.txt"; fi; }
finish() { tar -czf "${OUT:-/tmp}/call3.tar.gz" -C /tmp call3; step done; }
trap finish EXIT
step "builds: new and base servers, ptxas report of linear_grad.cu"
( nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Ibin/labsrc -DVKERN_GEMM_LAB -Xptxas -v \
    -c bin/labsrc/cuda/linear_grad.cu -o /tmp/lg.o > "$out/ptxas.txt" 2>&1; nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Ibin/labsrc -DVKERN_GEMM_LAB -Xptxas -v -c bin/labsrc/cuda/linear.cu -o /tmp/l.o >> "$out/ptxas.txt" 2>&1; echo "ptxas probe rc=$?" ) &
VKERN_CACHE=$PWD/.vkcache-base bin/vkern-base build --backend cuda > "$out/build-base.txt" 2>&1 &
if ! bin/vkern build --backend cuda > "$out/build.txt" 2>&1; then
  echo "build: FAILED"; grep -E 'error|warning' "$out/build.txt" | head -30; tail -20 "$out/build.txt"; exit 1
fi
wait
echo "builds done"
grep -A3 'Compiling entry.*Config.*Lb0ELb1EEE' "$out/ptxas.txt" | grep -E 'Compiling|spill|Used' | sed 's/_ZN47_GLOBAL[^ ]*product_wgmma/product_wgmma/' | cut -c1-150
grep -ci 'warning' "$out/ptxas.txt"
step "verify: in-place L (odd K) and default shapes"
run verify-linear timeout 150 bin/vkern verify --backend cuda --op linear --shape 4096x264x1001 --shape 4096x264x1001:bias=1 \
  --shape 4100x264x1003 --shape 4096x264x1002:bias=1 --shape 130x260x4100 --shape 1x1x1 --shape 17x31x129 --shape 40x40x4100
grep -E 'PASSED|FAILED|INCORRECT|passed|failed|incorrect' "$out/verify-linear.txt" | tail -3
run verify-grad-w timeout 150 bin/vkern verify --backend cuda --op linear_grad_w --shape 4096x264x1001:accumulate=0 \
  --shape 4096x264x1001:accumulate=1 --shape 4100x264x1005:accumulate=1 --shape 300x130x77:accumulate=0
grep -E 'PASSED|FAILED|INCORRECT|passed|failed|incorrect' "$out/verify-grad-w.txt" | tail -3
run verify-default timeout 150 bin/vkern verify --backend cuda --op linear,linear_grad_w,linear_nt,gemm
grep -E 'PASSED|FAILED|INCORRECT|passed|failed|incorrect' "$out/verify-default.txt" | tail -3
step "anchors and bench: base and new, twice"
cases=(linear=16384x768x50257:bias=0 linear=16384x768x50304:bias=0 linear_grad_w=16384x768x50257 linear_grad_w=16384x768x50304)
python3 bench/op_anchors.py "${cases[@]}" > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
cat "$out/anchors.jsonl"
for round in 1 2; do
  for v in base new; do
    bin=bin/vkern; cache=$PWD/.vkcache
    [ "$v" = base ] && { bin=bin/vkern-base; cache=$PWD/.vkcache-base; }
    for op in linear linear_grad_w; do
      shapes=()
      for c in "${cases[@]}"; do [ "${c%%=*}" = "$op" ] && shapes+=(--shape "${c#*=}"); done
      [ "$(left)" -gt 60 ] || break
      VKERN_CACHE=$cache run "bench-$v-$op-$round" "$bin" bench --suite ops --backend cuda --op "$op" --runs 30 "${shapes[@]}" \
        --anchors "$out/anchors.jsonl" --json "$out/bench-$v-$op-$round.json"
    done
  done
done
python3 - "$out" > "$out/table.txt" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench-*.json"))):
    tag = os.path.basename(f)[len("bench-"):-5]
    for r in json.load(open(f))["results"]:
        print(f"{tag:<24} {r['name']:<36} {r['median_ns'] / 1e6:9.4f} ms  ratio to {r.get('anchor', '-')}: {r.get('ratio', 0):.3f}")
PY
cat "$out/table.txt"
step "verify the head's dx at 50257 (in place)"
if [ "$(left)" -gt 90 ]; then
  run verify-head-dx timeout $(( $(left) - 15 )) bin/vkern verify --backend cuda --op linear --shape 16384x768x50257 --dist normal
  grep -E 'PASSED|FAILED|INCORRECT|passed|failed|incorrect' "$out/verify-head-dx.txt" | tail -3
fi
