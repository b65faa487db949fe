#!/usr/bin/env bash
set -uo pipefail
export VKERN_CACHE=$PWD/.vkcache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export VKERN_NCCL=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))')
t0=$(date +%s)
mkdir -p $OUT/l
common=(--backend cuda --model gpt2 --data bin/corpus.txt --batch 16 --sample 0 --eval-every 100000 --eval-windows 4 --seed 1 --steps 20)
summ() { grep "DIAG rank 0" $1 | tail -12 | python3 -c "
import sys, statistics
rows = [list(map(float, l.split(':')[-1].split())) for l in sys.stdin]
print(' '.join(f'{statistics.median(c):.2f}' for c in zip(*rows)), ' total', f'{sum(statistics.median(c) for c in zip(*rows)):.2f}')"; }
run() {
  local name=$1; shift
  [ $(( $(date +%s) - t0 )) -gt 300 ] && { echo "$name: skipped (time)"; return; }
  env VKERN_DIAG=1 "$@" > $OUT/l/$name.log 2>&1 || { echo "$name FAILED"; tail -3 $OUT/l/$name.log; }
  echo "$name: write backward+ar loss norm finish = $(summ $OUT/l/$name.log)"
}
vk=bin/vkern-diag
run g1 $vk train "${common[@]}" --gpus 1 --out /tmp/v/a
run g2-normal VKERN_COMM_PRIORITY=normal $vk train "${common[@]}" --gpus 2 --out /tmp/v/b
run g2-high $vk train "${common[@]}" --gpus 2 --out /tmp/v/c
run g2-high-u1 VKERN_COMM_GEMM_UNITS=1 $vk train "${common[@]}" --gpus 2 --out /tmp/v/d
run g2-high-u1-b50 VKERN_COMM_GEMM_UNITS=1 $vk train "${common[@]}" --gpus 2 --bucket-mb 50 --out /tmp/v/e
run g2-high-u2 VKERN_COMM_GEMM_UNITS=2 $vk train "${common[@]}" --gpus 2 --out /tmp/v/f
# Two independent one-GPU runs at once (no communication): what sharing the host costs.
CUDA_VISIBLE_DEVICES=1 VKERN_DIAG=1 $vk train "${common[@]}" --gpus 1 --out /tmp/v/g > $OUT/l/solo1.log 2>&1 &
run solo0 CUDA_VISIBLE_DEVICES=0 $vk train "${common[@]}" --gpus 1 --out /tmp/v/h
wait; echo "solo1: $(summ $OUT/l/solo1.log)"
run g2-high-u1-again VKERN_COMM_GEMM_UNITS=1 $vk train "${common[@]}" --gpus 2 --out /tmp/v/i
run g2-high-again $vk train "${common[@]}" --gpus 2 --out /tmp/v/j
echo "done at $(( $(date +%s) - t0 )) s"
