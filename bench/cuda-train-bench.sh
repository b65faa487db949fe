#!/usr/bin/env bash
# One GPU call for `vkern bench --suite train`: PyTorch's training steps of
# char and gpt2 (bench/train_anchors.py: eager and torch.compile, fp16
# autocast + GradScaler, fused AdamW, clipping), then vkern's on the cuda
# backend at the same models, batches and contexts against those anchors,
# and a table last. The server is built first, so that nvcc does not share
# the CPU with a timed step. Expects bin/vkern built on the host from this
# tree; arguments go to both timers (--batch, --context, --steps, --warmup),
# $MODELS chooses the models (default char,gpt2). Everything goes under $OUT.
#   bash bench/cuda-train-bench.sh
#   MODELS=gpt2 bash bench/cuda-train-bench.sh --batch 8 --steps 50
set -uo pipefail
out=${OUT:-/tmp/vkern-out}
mkdir -p "$out"
# In the repository's ignored .vkcache/ a warm machine keeps the server
# between calls.
export VKERN_CACHE=${VKERN_CACHE:-$PWD/.vkcache}
vk=bin/vkern
models=${MODELS:-char,gpt2}
start=$(date +%s)
status=0
step() { printf '\n=== %s (at %d s)\n' "$*" $(( $(date +%s) - start )); }
fail() { status=1; echo "FAILED: $1 (stderr tail below; whole in $out/$1.stderr)"; tail -5 "$out/$1.stderr"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)'

step "vkern build --backend cuda"
$vk build --backend cuda > "$out/build.txt" 2> "$out/build.stderr" || { fail build; exit 1; }

step "PyTorch anchors: bench/train_anchors.py --models $models $*"
python3 bench/train_anchors.py --models "$models" "$@" > "$out/train-anchors.jsonl" 2> "$out/train-anchors.stderr" ||
  fail train-anchors
cat "$out/train-anchors.jsonl"

step "vkern bench --suite train --backend cuda --model $models $*"
$vk bench --suite train --backend cuda --model "$models" "$@" --anchors "$out/train-anchors.jsonl" \
  --json "$out/bench-train.json" --svg "$out/bench-train.svg" > "$out/bench-train.txt" 2> "$out/bench-train.stderr" ||
  fail bench-train
cat "$out/bench-train.txt"

# The table: per model, vkern's ms/step and tokens/s, each anchor's tokens/s
# and vkern's ratio to it (above 1: vkern faster), and the share of the
# 990 TFLOP/s peak the model flops (6·N + 12·L·C·T per token) take at each.
if [ -s "$out/bench-train.json" ]; then
  step "training steps: vkern against PyTorch (ratio: anchor time / vkern's; MFU: model flops at 990 TFLOP/s over the step)"
  python3 - "$out/bench-train.json" <<'EOF' | tee "$out/table.txt"
import json, sys
results = json.load(open(sys.argv[1]))["results"]
print(f"{'case':<22} {'vkern ms':>9} {'vkern tok/s':>12} {'MFU':>5}  {'anchor':<14} {'tok/s':>10} {'MFU':>5} {'ratio':>6}")
for r in results:
    ms, share = r["median_ns"] / 1e6, r.get("floor_share", 0)
    rels = r.get("relations") or [{"anchor": "none", "ratio": 0}]
    for i, rel in enumerate(rels):
        head = f"{r['name']:<22} {ms:9.2f} {r['tokens_per_second']:12.0f} {share:5.3f}" if i == 0 else " " * 51
        tps = f"{rel.get('tokens_per_second', 0):10.0f}" if rel["ratio"] else f"{'-':>10}"
        mfu = f"{share / rel['ratio']:5.3f}" if rel["ratio"] else f"{'-':>5}"
        print(f"{head}  {rel['anchor']:<14} {tps} {mfu} {rel['ratio']:6.3f}")
    if r.get("phases_ms"):
        p = r["phases_ms"]
        print(f"{'':<22} host phases (medians, ms): write {p['write']:.3f}, gradients {p['gradients']:.3f}, "
              f"read {p['read']:.3f}, update {p['update']:.3f}")
EOF
fi
exit $status
