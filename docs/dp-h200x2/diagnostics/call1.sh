#!/usr/bin/env bash
# Session call 1 on nvidia-h200-x2: the bars at global batch 32 (16 per GPU),
# the faults, then diagnostics of the data-parallel step's exposed time.
set -uo pipefail
export VKERN_CACHE=$PWD/.vkcache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export VKERN_NCCL=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))')
t0=$(date +%s)
mkdir -p $OUT/l
nvidia-smi topo -m > $OUT/l/topo.txt 2>&1
OUT=$OUT/l/two STEPS=50 BATCH=16 bash bench/cuda-dp-run.sh two > $OUT/l/two.out 2>&1
echo "two done at $(( $(date +%s) - t0 )) s"
OUT=$OUT/l/faults REPEAT=5 bash bench/cuda-dp-run.sh faults > $OUT/l/faults.out 2>&1
echo "faults done at $(( $(date +%s) - t0 )) s"
# Diagnostics: 2 GPUs at --batch 16, 30 steps, one setting changed each.
mkdir -p $OUT/l/var
common=(--backend cuda --model gpt2 --data bin/corpus.txt --batch 16 --sample 0 --eval-every 100000 --eval-windows 4 --seed 1 --steps 30)
rate() { python3 -c "
import json, statistics, sys
r = json.load(open('$1'))
ms = statistics.median(s['ms'] for s in r['steps'][5:])
print(f\"{ms:.2f} ms {r['batch'] * r['accum'] * r['config']['context'] / (ms / 1000):.0f} tok/s\")"; }
var() {
  local name=$1; shift
  [ $(( $(date +%s) - t0 )) -gt 540 ] && { echo "$name: skipped (time)"; return; }
  env "$@" > $OUT/l/var/$name.log 2>&1 && echo "$name: $(rate $OUT/l/var/$name.json)" || { echo "$name: FAILED"; tail -3 $OUT/l/var/$name.log; }
}
vk=bin/vkern
var p16 $vk train "${common[@]}" --out /tmp/v/p16 --json $OUT/l/var/p16.json
var dp $vk train "${common[@]}" --gpus 2 --out /tmp/v/dp --json $OUT/l/var/dp.json
var dp-onebucket $vk train "${common[@]}" --gpus 2 --bucket-mb 4096 --out /tmp/v/b1 --json $OUT/l/var/dp-onebucket.json
var dp-b100 $vk train "${common[@]}" --gpus 2 --bucket-mb 100 --out /tmp/v/b100 --json $OUT/l/var/dp-b100.json
var dp-b8 $vk train "${common[@]}" --gpus 2 --bucket-mb 8 --out /tmp/v/b8 --json $OUT/l/var/dp-b8.json
var dp-cta4 NCCL_MAX_CTAS=4 $vk train "${common[@]}" --gpus 2 --out /tmp/v/c4 --json $OUT/l/var/dp-cta4.json
var dp-cta8 NCCL_MAX_CTAS=8 $vk train "${common[@]}" --gpus 2 --out /tmp/v/c8 --json $OUT/l/var/dp-cta8.json
var dp-cta8-sms8 NCCL_MAX_CTAS=8 VKERN_COMM_SMS=8 $vk train "${common[@]}" --gpus 2 --out /tmp/v/c8s8 --json $OUT/l/var/dp-cta8-sms8.json
var dp-cta16-sms16 NCCL_MAX_CTAS=16 VKERN_COMM_SMS=16 $vk train "${common[@]}" --gpus 2 --out /tmp/v/c16s16 --json $OUT/l/var/dp-cta16-sms16.json
echo "all done at $(( $(date +%s) - t0 )) s"
cd $OUT && tar czf logs.tar.gz l
echo "=== two"; cat l/two/summary.txt
echo "=== faults"; cat l/faults/summary.txt
