#!/usr/bin/env bash
# ZeRO-1 timing simulation on two GPUs (temporary diag binary bin/vkern-diag).
set -uo pipefail
export VKERN_CACHE=/tmp/vkcache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export VKERN_NCCL=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))')
t0=$(date +%s)
mkdir -p $OUT/l
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
echo "== verify (first nvcc build of HEAD's server) at $(( $(date +%s) - t0 )) s"
bin/vkern verify --backend cuda --op attention,attention_grad,linear,matmul --quick > $OUT/l/verify.log 2>&1; echo "verify rc=$?"
tail -4 $OUT/l/verify.log
echo "== runs at $(( $(date +%s) - t0 )) s"
common=(--backend cuda --model gpt2 --data bin/corpus.txt --sample 0 --eval-every 100000 --eval-windows 4 --seed 1 --steps 30)
summ() { python3 - "$1" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1])); st = r["steps"][5:]
med = lambda k: statistics.median(s.get(k, 0) for s in st)
ms = med("ms"); tok = r['batch'] * r['accum'] * r['config']['context']
sk = sum(1 for s in r["steps"] if s.get("skipped"))
print(f"{ms:7.2f} ms  {tok/(ms/1000):9.0f} tok/s  write {med('write_ms'):.2f} grad {med('gradients_ms'):.2f} read {med('read_ms'):.2f} update {med('update_ms'):.2f}  skipped {sk}")
PY
}
run() {
  local name=$1; shift
  [ $(( $(date +%s) - t0 )) -gt 420 ] && { echo "$name: skipped (time)"; return; }
  env "$@" --out /tmp/v/$name --json $OUT/l/$name.json > $OUT/l/$name.log 2>&1 || { echo "$name FAILED"; tail -3 $OUT/l/$name.log; return; }
  echo "$name: $(summ $OUT/l/$name.json)"
}
vk=bin/vkern-diag
run one32 $vk train "${common[@]}" --batch 32
run g2 $vk train "${common[@]}" --batch 16 --gpus 2
run none VKERN_DIAG_ZERO=none $vk train "${common[@]}" --batch 16 --gpus 2
run rs VKERN_DIAG_ZERO=rs $vk train "${common[@]}" --batch 16 --gpus 2
run rs-half VKERN_DIAG_ZERO=rs-half $vk train "${common[@]}" --batch 16 --gpus 2
run rs-half-ag VKERN_DIAG_ZERO=rs-half-ag $vk train "${common[@]}" --batch 16 --gpus 2
run g2-again $vk train "${common[@]}" --batch 16 --gpus 2
run rs-half-ag-b100 VKERN_DIAG_ZERO=rs-half-ag $vk train "${common[@]}" --batch 16 --gpus 2 --bucket-mb 100
run one32-again $vk train "${common[@]}" --batch 32
echo "done at $(( $(date +%s) - t0 )) s"
cd $OUT && tar czf l.tgz l && rm -rf l
