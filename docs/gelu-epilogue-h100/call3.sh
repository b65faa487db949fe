#!/usr/bin/env bash
# 2026-11-27, second session: the GELU epilogues' logistic form
# (gelu-logistic, 70c82f0) against main (f76b72f, bin/*-base), in two calls
# on one warm machine:
#   bash bin/call3.sh check   # builds both servers and labs, verify, defects, exp2, the lab
#   bash bin/call3.sh train   # gpt2 steps base and new in turn, PyTorch's anchors, a char --verify-every run
set -uo pipefail
part=$1
out=${OUT:-/tmp/vkern-out}
mkdir -p "$out"
export VKERN_CACHE=$PWD/.vkcache
start=$(date +%s)
step() { printf '\n=== %s (at %d s)\n' "$*" $(( $(date +%s) - start )); }
run() { local n=$1; shift; if "$@" > "$out/$n.txt" 2>&1; then echo "$n: ok"; else echo "$n: FAILED"; tail -15 "$out/$n.txt"; fi; }
cases="fwd fc,fwd fc gelu,dx fc.proj,dx fc.proj gelu"
if [ "$part" = check ]; then
  step "builds: both servers, both labs, in parallel"
  run build bin/vkern build --backend cuda &
  run build-base bin/vkern-base build --backend cuda &
  for v in base new; do
    src=bin/labsrc; [ $v = base ] && src=bin/labsrc-base
    run lab-build-$v nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I$src -o /tmp/lab-$v bench/gemm_lab.cu -lcublas &
  done
  wait
  step "verify: gelu, gelu_grad, linear, linear_grad_x (default shapes), and at gpt2's MLP"
  run verify-default bin/vkern verify --backend cuda --op gelu,gelu_grad,linear,linear_grad_x
  grep -E '^(op|gelu|linear)|PASSED|FAILED|INCORRECT' "$out/verify-default.txt" | tail -8
  run verify-gelu-gpt2 bin/vkern verify --backend cuda --op gelu --shape 50331648
  run verify-gelu-grad-gpt2 bin/vkern verify --backend cuda --op gelu_grad --shape 50331648
  run verify-fc-gpt2 bin/vkern verify --backend cuda --op linear --shape 16384x3072x768:gelu=1 --dist normal
  run verify-proj-dx-gpt2 bin/vkern verify --backend cuda --op linear_grad_x --shape 16384x768x3072:gelu=1 --dist normal
  for f in verify-gelu-gpt2 verify-gelu-grad-gpt2 verify-fc-gpt2 verify-proj-dx-gpt2; do grep -E '^(gelu|linear)' "$out/$f.txt" | tail -1; done
  step "planted defects: every one with gelu in its name"
  run defects bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/(.*gelu|.*GELU)' -test.v
  grep -E '^    --- |cases caught' "$out/defects.txt" | tail -30
  step "exp2f's errors"
  if nvcc -std=c++17 -O3 -arch=sm_90 -Ibench -o /tmp/exp2_check bench/exp2_check.cu > "$out/exp2-build.txt" 2>&1; then
    run exp2 /tmp/exp2_check; tail -6 "$out/exp2.txt"
  fi
  step "the lab: the MLP's products with and without the GELU, base and new in turn, twice"
  for r in 1 2; do for v in base new; do
    echo "--- $v, round $r"; GEMM_LAB_ONLY="$cases" /tmp/lab-$v -1 2>&1 | grep -v '^sm90 variant'
  done; done
fi
if [ "$part" = train ]; then
  step "builds: both servers, in parallel"
  run build bin/vkern build --backend cuda &
  run build-base bin/vkern-base build --backend cuda &
  wait
  step "PyTorch anchors, gpt2 B 16"
  python3 bench/train_anchors.py --models gpt2 --batch 16 --steps 30 --warmup 10 > "$out/train-anchors.jsonl" 2> "$out/train-anchors.stderr"
  cat "$out/train-anchors.jsonl"
  for r in 1 2; do for v in base new; do
    bin=bin/vkern; [ $v = base ] && bin=bin/vkern-base
    step "vkern bench --suite train gpt2, $v, round $r"
    $bin bench --suite train --backend cuda --model gpt2 --batch 16 --steps 30 --warmup 10 --anchors "$out/train-anchors.jsonl" \
      --json "$out/train-$v-$r.json" > "$out/train-$v-$r.txt" 2>&1 || echo "train $v $r: FAILED"
    grep -E 'gpt2' "$out/train-$v-$r.txt" | head -4
  done; done
  step "char --verify-every 5, 10 steps, new"
  run verify-every-char timeout 200 bin/vkern train --backend cuda --model char --data bin/corpus.txt --steps 10 --verify-every 5 \
    --eval-every 1000 --sample 0 --out /tmp/run-verify-char
  grep -iE 'verif' "$out/verify-every-char.txt" | tail -4
  step table
  python3 - "$out" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "train-*-*.json"))):
    for r in json.load(open(f))["results"]:
        rel = " ".join(f"{x['anchor']} {x['ratio']:.3f}" for x in (r.get("relations") or []))
        print(f"{os.path.basename(f)[6:-5]:<8} {r['name']:<20} {r['median_ns'] / 1e6:8.2f} ms  {rel}")
PY
fi
step done
