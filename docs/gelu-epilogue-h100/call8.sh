#!/usr/bin/env bash
# 2026-11-27, second session, call 8: main's HEAD as it stops (a151f57):
# verify of the GELU ops and products, a char run with --verify-every, and
# the gpt2 step twice against PyTorch's in the same call. Every output is
# tarred into $OUT/call8.tar.gz.
set -uo pipefail
out=/tmp/call8
mkdir -p "$out"
export VKERN_CACHE=$PWD/.vkcache
start=$(date +%s)
step() { printf '\n=== %s (at %d s)\n' "$*" $(( $(date +%s) - start )); }
run() { local n=$1; shift; if "$@" > "$out/$n.txt" 2>&1; then echo "$n: ok"; else echo "$n: FAILED"; tail -15 "$out/$n.txt"; fi; }
step build
run build bin/vkern build --backend cuda
step "verify: gelu, gelu_grad, linear, linear_grad_x at their default shapes"
run verify bin/vkern verify --backend cuda --op gelu,gelu_grad,linear,linear_grad_x
grep -E '^(op|gelu|linear)|PASSED|FAILED|INCORRECT' "$out/verify.txt" | tail -6
step "char --verify-every 5, 10 steps"
run verify-every-char timeout 200 bin/vkern train --backend cuda --model char --data bin/corpus.txt --steps 10 --verify-every 5 \
  --eval-every 1000 --sample 0 --out /tmp/run-verify-char
grep -oE 'step [0-9]+ verified: [0-9]+ calls' "$out/verify-every-char.txt"
step "PyTorch's gpt2 step, then vkern's twice"
python3 bench/train_anchors.py --models gpt2 --batch 16 --steps 30 --warmup 10 > "$out/train-anchors.jsonl" 2> "$out/train-anchors.stderr"
cat "$out/train-anchors.jsonl"
for r in 1 2; do
  bin/vkern bench --suite train --backend cuda --model gpt2 --batch 16 --steps 30 --warmup 10 --anchors "$out/train-anchors.jsonl" \
    --json "$out/train-$r.json" > "$out/train-$r.txt" 2>&1 || echo "train $r: FAILED"
  grep -A2 '^CASE' "$out/train-$r.txt"
done
tar -czf "${OUT:-/tmp}/call8.tar.gz" -C /tmp call8
step done
