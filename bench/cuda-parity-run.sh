#!/usr/bin/env bash
# One GPU call for TRAINING.md's level 4: vkern trains char (200 steps) and
# gpt2 (50 steps, B=16, T=1024) on the cuda backend from a seed, writing its
# initial checkpoint and every batch; bench/parity.py replays the batches in
# PyTorch (fp16 autocast + GradScaler, and fp32) from that checkpoint and
# prints the three loss curves; vkern eval and transformers evaluate the
# trained char checkpoint on the same windows. Expects bin/vkern and the
# corpus bin/corpus.txt (one text file: its last 5% is the validation part).
set -uo pipefail
out=${OUT:-/tmp/vkern-out}
mkdir -p "$out"
export VKERN_CACHE=${VKERN_CACHE:-/tmp/vkern-cache}
vk=bin/vkern
data=bin/corpus.txt
work=/tmp/parity
rm -rf "$work"; mkdir -p "$work"
run() { # model steps batch
  local m=$1 steps=$2 b=$3
  $vk train --backend cuda --model "$m" --batch "$b" --steps 0 --data $data --seed 1 --out "$work/$m-init" --sample 0 >/dev/null 2>&1 || echo "init $m failed"
  $vk train --backend cuda --model "$m" --batch "$b" --steps "$steps" --data $data --seed 1 --out "$work/$m-run" \
    --json "$out/$m-train.json" --batches "$work/$m.bin" --eval-every "$steps" --sample 300 2>&1 | grep -v "^step " | tail -12
  python3 bench/parity.py --init "$work/$m-init" --batches "$work/$m.bin" --vkern-json "$out/$m-train.json" \
    --json "$out/$m-parity.json" 2>&1 | grep -v Warning | tail -32
}
start=$(date +%s)
run char 200 32
echo "char: $(( $(date +%s) - start )) s"
$vk eval --backend cuda --resume "$work/char-run" --data $data --windows 64 --json "$out/char-eval.json" 2>&1 | tail -2
python3 bench/parity.py --eval "$work/char-run" --data $data --windows 64 2>&1 | tail -1 | tee "$out/char-eval-transformers.txt"
run gpt2 50 16
echo "gpt2: $(( $(date +%s) - start )) s"
