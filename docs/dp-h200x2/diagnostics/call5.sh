#!/usr/bin/env bash
set -uo pipefail
export VKERN_CACHE=$PWD/.vkcache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export VKERN_NCCL=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))')
mkdir -p $OUT/l
VKERN_DIAG_JOIN=$OUT/l/join.txt bin/vkern-join train --backend cuda --model gpt2 --data bin/corpus.txt --batch 16 --sample 0 --eval-every 100000 --eval-windows 4 --seed 1 --steps 3 --gpus 2 --out /tmp/v/j > $OUT/l/join-run.log 2>&1; echo "join run rc=$?"
echo "joins: $(wc -l < $OUT/l/join.txt 2>/dev/null)"; head -8 $OUT/l/join.txt 2>/dev/null; cut -d' ' -f3 $OUT/l/join.txt 2>/dev/null | sort | uniq -c
OUT=$OUT/l/two STEPS=50 BATCH=16 VKERN_COMM_GEMM_UNITS=1 bash bench/cuda-dp-run.sh two > $OUT/l/two.out 2>&1
cat $OUT/l/two/summary.txt
