#!/usr/bin/env bash
# 2026-11-27, third session, call 1: main's HEAD 06f5a4e (cd0d16d's
# prefetch_pre first built by nvcc): verify of linear_grad_x (the GELU
# backward's product), TRAINING.md's level-4 parity under the logistic GELU
# (bench/cuda-parity-run.sh), the char bars (bench/cuda-train-bench.sh at
# B 64) and, time allowing, the gpt2 step twice against PyTorch's. Every
# output is tarred into $OUT/call1.tar.gz.
set -uo pipefail
out=/tmp/call1
mkdir -p "$out"
export VKERN_CACHE=$PWD/.vkcache
start=$(date +%s)
left() { echo $(( 560 - ($(date +%s) - start) )); }
step() { printf '\n=== %s (at %d s)\n' "$*" $(( $(date +%s) - start )); }
run() { local n=$1; shift; if "$@" > "$out/$n.txt" 2>&1; then echo "$n: ok"; else echo "$n: FAILED"; tail -15 "$out/$n.txt"; fi; }
finish() { tar -czf "${OUT:-/tmp}/call1.tar.gz" -C /tmp call1; step done; }
trap finish EXIT
step build
run build bin/vkern build --backend cuda
step "verify linear_grad_x (gelu=1 and plain) at its default shapes"
run verify timeout 120 bin/vkern verify --backend cuda --op linear_grad_x
grep -E 'PASSED|FAILED|INCORRECT|passed|failed' "$out/verify.txt" | tail -4
step "parity: char 200 steps, gpt2 50 steps"
OUT=$out/parity timeout 330 bash bench/cuda-parity-run.sh > "$out/parity.txt" 2>&1; echo "parity rc=$?"
grep -iE 'max|worst|bar|pass|fail|char:|gpt2:|loss' "$out/parity.txt" | tail -30
step "char bars"
if [ "$(left)" -gt 120 ]; then
  OUT=$out/char MODELS=char timeout $(( $(left) - 20 )) bash bench/cuda-train-bench.sh --batch 64 --steps 30 --warmup 10 > "$out/char.txt" 2>&1
  echo "char rc=$?"; tail -12 "$out/char.txt"
fi
step "gpt2 step"
if [ "$(left)" -gt 150 ]; then
  OUT=$out/gpt2 MODELS=gpt2 timeout $(( $(left) - 15 )) bash bench/cuda-train-bench.sh --batch 16 --steps 30 --warmup 10 > "$out/gpt2.txt" 2>&1
  echo "gpt2 rc=$?"; tail -12 "$out/gpt2.txt"
fi
