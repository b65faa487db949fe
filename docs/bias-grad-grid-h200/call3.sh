#!/usr/bin/env bash
# bias_grad's spans (variant 8) beside NCCL: gpt2 data-parallel on the two
# H200s of nvidia-h200-x2 (--gpus 2 --batch 16, 30 steps), with the spans'
# cooperative launch (VKERN_BIAS_GRAD_SPANS=1, the branch's default) and
# with variant 7's tiles (=0), two rounds alternating, one binary: whether
# a launch that waits for every block to be resident slows the step while
# NCCL's kernels hold SMs. Call 2 of 2026-11-28 ran `STEPS=20 BATCH=8 bash
# bench/cuda-dp-run.sh nccl two` with the branch's binaries first (no
# hang, losses within the parity bar, two processes the same bits as
# --gpus 2). Run from the repository root with bin/vkern built from branch
# bias-grad-grid and bin/corpus.txt (the first 20 MB of the Go
# distribution's sources).
set -uo pipefail
NAME=call3
LIMIT=400
source bench/call-lib.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
[ -f "$lib" ] && export VKERN_NCCL=$lib
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
step "build"
build_server bin/vkern || exit 1
rate() {
  python3 - "$out/$1.json" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1]))
steps = r["steps"][5:]
ms = statistics.median(s["ms"] for s in steps)
g = statistics.median(s.get("gradients_ms", 0) for s in steps)
print(f"{r['batch'] * r['accum'] * r['config']['context'] / (ms / 1000):.0f} tokens/s, step {ms:.2f} ms, gradients {g:.2f} ms, final loss {r['steps'][-1]['loss']:.4f}")
PY
}
step "gpt2 --gpus 2 --batch 16, spans on and off"
for round in 1 2; do
  for v in 1 0; do
    [ "$(left)" -gt 60 ] || continue
    n=spans$v-$round
    VKERN_BIAS_GRAD_SPANS=$v timeout 120 bin/vkern train --backend cuda --model gpt2 --data bin/corpus.txt --batch 16 \
      --gpus 2 --steps 30 --sample 0 --eval-every 100000 --eval-windows 4 --seed 1 --out /tmp/dp-$n --json "$out/$n.json" \
      > "$out/$n.log" 2>&1 || { echo "$n: FAILED"; tail -5 "$out/$n.log"; continue; }
    echo "$n: $(rate $n)" | tee -a "$out/table.txt"
  done
done
