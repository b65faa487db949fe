#!/usr/bin/env bash
# H100: where a gpt2 step's fixed cost goes (B scan, per-op profiles at B 16
# and 32), the SDPA flash anchors beside vkern's attention, a quick verify of
# HEAD's server, and planted Hopper defects (object reuse on a GPU).
set -uo pipefail
export VKERN_CACHE=/tmp/vkcache
t0=$(date +%s)
mkdir -p $OUT/l
at() { echo "== $* at $(( $(date +%s) - t0 )) s"; }
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
at verify
bin/vkern verify --backend cuda --op attention,attention_grad,linear,linear_grad_w,gemm --quick > $OUT/l/verify.log 2>&1; echo "verify rc=$?"
grep -E "passed|failed|incorrect" $OUT/l/verify.log | tail -3
common=(--backend cuda --model gpt2 --data bin/corpus.txt --sample 0 --eval-every 100000 --eval-windows 4 --seed 1 --steps 30)
summ() { python3 - "$1" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1])); st = r["steps"][5:]
med = lambda k: statistics.median(s.get(k, 0) for s in st)
ms = med("ms"); tok = r['batch'] * r['accum'] * r['config']['context']
print(f"{ms:7.2f} ms  {tok/(ms/1000):9.0f} tok/s  write {med('write_ms'):.2f} grad {med('gradients_ms'):.2f} read {med('read_ms'):.2f} update {med('update_ms'):.2f}")
PY
}
run() {
  local name=$1; shift
  env "$@" --out /tmp/v/$name --json $OUT/l/$name.json > $OUT/l/$name.log 2>&1 || { echo "$name FAILED"; tail -3 $OUT/l/$name.log; return; }
  echo "$name: $(summ $OUT/l/$name.json)"
}
at "B scan"
for b in 8 16 32 16; do run b$b-$RANDOM bin/vkern train "${common[@]}" --batch $b; done
at profiles
for b in 16 32; do
  (cd gpt && VKERN_PROFILE=cuda VKERN_PROFILE_B=$b ../bin/gpt.test -test.run 'TestProfileStep$' -test.v > $OUT/l/profile-b$b.txt 2>&1) || echo "profile b$b FAILED"
  grep -E "^kernels" $OUT/l/profile-b$b.txt
done
at "attention bench with SDPA anchors"
OUT=$OUT/ops OPS=attention,attention_grad bash bench/cuda-train-ops-run.sh bench > $OUT/l/ops-bench.log 2>&1; echo "ops bench rc=$?"
tail -12 $OUT/l/ops-bench.log
at defects
touch /tmp/marker
./bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/(Hopper:_R.s_transpose|attention_grad.s_dv_overwritten)' -test.v > $OUT/l/defects.log 2>&1; echo "defects rc=$?"
grep -E "^\s*--- (PASS|FAIL)" $OUT/l/defects.log | head
for f in $(find / -xdev -name manifest.json -newer /tmp/marker 2>/dev/null | head -20); do
  python3 -c "import json,sys; m=json.load(open('$f')); print(m['backend'], len(m['units']), 'units,', len(m.get('reused_units') or []), 'reused')"
done
at done
cd $OUT && cp -r ops l/ 2>/dev/null; tar czf l.tgz l && rm -rf l ops
