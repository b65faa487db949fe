#!/usr/bin/env bash
# 2026-11-27, second session, call 6: the epilogue's side operand (pre in
# the GELU's backward, the residual) prefetched into L2 as a tile's product
# starts (side-prefetch) against main (bin/vkern-base): verify, the ops
# that read a side operand at gpt2's shapes against PyTorch, and the gpt2
# step, base and new in turn, twice, against PyTorch's in the same call.
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
step "verify: linear and linear_grad_x at their default shapes, and the side-reading products at gpt2's"
run verify-default bin/vkern verify --backend cuda --op linear,linear_grad_x
run verify-gpt2 bin/vkern verify --backend cuda --op linear --shape 16384x768x3072:residual=1 --shape 16384x768x768:residual=1 --dist normal
run verify-gpt2-dx bin/vkern verify --backend cuda --op linear_grad_x --shape 16384x768x3072:gelu=1 --dist normal
for f in verify-default verify-gpt2 verify-gpt2-dx; do grep -E '^(linear|op)|PASSED|FAILED|INCORRECT' "$out/$f.txt" | tail -3; done
step "PyTorch's anchors: ops, then the gpt2 step"
cases=(linear_grad_x=16384x768x3072:gelu=1 linear=16384x768x3072:residual=1 linear=16384x768x768:residual=1)
python3 bench/op_anchors.py "${cases[@]}" > "$out/op-anchors.jsonl" 2> "$out/op-anchors.stderr" || echo "op anchors: FAILED"
python3 bench/train_anchors.py --models gpt2 --batch 16 --steps 30 --warmup 10 > "$out/train-anchors.jsonl" 2> "$out/train-anchors.stderr" || echo "train anchors: FAILED"
cat "$out/op-anchors.jsonl" "$out/train-anchors.jsonl"
for r in 1 2; do for v in base new; do
  bin=bin/vkern; [ $v = base ] && bin=bin/vkern-base
  step "$v, round $r: ops, then the gpt2 step"
  $bin bench --suite ops --backend cuda --op linear_grad_x --runs 30 --shape 16384x768x3072:gelu=1 \
    --anchors "$out/op-anchors.jsonl" --json "$out/ops-dx-$v-$r.json" > "$out/ops-dx-$v-$r.txt" 2>&1 || echo "ops $v $r: FAILED"
  $bin bench --suite ops --backend cuda --op linear --runs 30 --shape 16384x768x3072:residual=1 --shape 16384x768x768:residual=1 \
    --anchors "$out/op-anchors.jsonl" --json "$out/ops-res-$v-$r.json" > "$out/ops-res-$v-$r.txt" 2>&1 || echo "ops $v $r: FAILED"
  $bin bench --suite train --backend cuda --model gpt2 --batch 16 --steps 30 --warmup 10 --anchors "$out/train-anchors.jsonl" \
    --json "$out/train-$v-$r.json" > "$out/train-$v-$r.txt" 2>&1 || echo "train $v $r: FAILED"
done; done
step table
python3 - "$out" <<'PY'
import glob, json, os, sys
for kind in ("ops-dx", "ops-res", "train"):
    for f in sorted(glob.glob(os.path.join(sys.argv[1], kind + "-*-*.json"))):
        for r in json.load(open(f))["results"]:
            rel = r.get("relations") or ([{"anchor": r["anchor"], "ratio": r["ratio"]}] if r.get("anchor") else [])
            rel = "  ".join(f"{x['anchor']}: {x['ratio']:.3f}" for x in rel)
            print(f"{os.path.basename(f)[:-5]:<16} {r['name']:<36} {r['median_ns'] / 1e6:8.4f} ms  {rel}")
PY
step done
