#!/usr/bin/env bash
set -uo pipefail
export VKERN_CACHE=$PWD/.vkcache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export VKERN_NCCL=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))')
t0=$(date +%s)
mkdir -p $OUT/l
timeout 120 python3 ar_bench.py 2>&1 | grep -v Warning | tail -5
common=(--backend cuda --model gpt2 --data bin/corpus.txt --batch 16 --sample 0 --eval-every 100000 --eval-windows 4 --seed 1 --steps 20)
summ() { grep "DIAG rank 0" $1 | tail -12 | python3 -c "
import sys, statistics
rows = [list(map(float, l.split(':')[-1].split())) for l in sys.stdin]
print(' '.join(f'{statistics.median(c):.2f}' for c in zip(*rows)))"; }
run() {
  local name=$1; shift
  env VKERN_DIAG=1 "$@" > $OUT/l/$name.log 2>&1 || { echo "$name FAILED"; tail -3 $OUT/l/$name.log; }
  echo "$name: write backward+ar loss norm finish = $(summ $OUT/l/$name.log)"
}
vk=bin/vkern-diag
run g1 $vk train "${common[@]}" --gpus 1 --out /tmp/v/g1
run g2 $vk train "${common[@]}" --gpus 2 --out /tmp/v/g2
run g2-one $vk train "${common[@]}" --gpus 2 --bucket-mb 4096 --out /tmp/v/g2o
run g2-info NCCL_DEBUG=INFO $vk train "${common[@]}" --gpus 2 --out /tmp/v/g2i
grep -E "NCCL INFO (Channel|.*nChannels|.*Using|.*comm .* rank|.*P2P|.*proto)" $OUT/l/g2-info.log | head -20
run g2-cta16-sms32 NCCL_MAX_CTAS=16 VKERN_COMM_SMS=32 $vk train "${common[@]}" --gpus 2 --out /tmp/v/g2c
run g2-one-cta32 NCCL_MIN_CTAS=32 NCCL_MAX_CTAS=32 $vk train "${common[@]}" --gpus 2 --bucket-mb 4096 --out /tmp/v/g2o32
echo "done at $(( $(date +%s) - t0 )) s"
