#!/usr/bin/env bash
# One GPU call for data-parallel training (issue 14), on as many GPUs as the
# machine has (one, or two for the bars). Expects, built on the host:
#   CGO_ENABLED=0 go build -o bin/vkern ./cmd/vkern
#   CGO_ENABLED=0 go test -c -o bin/vkern.test .
# and a text corpus at bin/corpus.txt (as cuda-parity-run.sh). Parts, in
# order; name some to run only those:
#   nccl    where NCCL is, vkern doctor's line, and the one-rank communicator
#           test through NCCL (TestCUDACommunicatorsOfOneRankThroughNCCL)
#   one     gpt2 on one GPU without --gpus and with --gpus 1 (the single-rank
#           NCCL path, in-batch all-reduces that move nothing): the same
#           losses bit for bit, and the cost of the path
#   two     (2 GPUs) the bars, at the global batch of 2 x BATCH: tokens/s of
#           2 GPUs over the faster of the 1-GPU runs (--batch 2xBATCH, and
#           --batch BATCH --accum 2; want >= 1.85); the losses of each step
#           against both; NCCL's all-reduce through PyTorch at the
#           gradients' sizes (bench/nccl_allreduce.py); two processes
#           (torchrun's variables) against --gpus 2, which must be the
#           same bits
#   accum   (2 GPUs) the same at the global batch of 4 x BATCH, where each
#           GPU accumulates over its share as a longer run's step does: one
#           GPU at --batch 2xBATCH --accum 2, --batch BATCH --accum 4 and
#           --batch 4xBATCH; two at --batch 2xBATCH (one micro-batch a GPU)
#           and --batch BATCH --accum 2 (two a GPU; with --gpus, --batch and
#           --accum are per GPU); tokens/s
#           of each two-GPU run over the fastest one-GPU run, and the
#           losses of each against the one-GPU run of its micro-batches
#   faults  (2 GPUs) kill -9 and SIGSTOP of rank 1's process mid-run, REPEAT
#           (5) times each, of rank 0's once each, and kill -9 of a rank's
#           kernel server: the other rank must stop with an error naming the
#           rank within the deadline, and no process may be left
#   overlap (2 GPUs) whether the all-reduces run beside the backward: gpt2
#           at --batch BATCH on one GPU and on two (30 steps each), the
#           two-GPU run again with NCCL's clusters of 4 blocks
#           (NCCL_CGA_CLUSTER_SIZE=4, NCCL's default before 417fb46) and
#           with $VKERN_COMM_GEMM_UNITS=1, then TestProfileDataParallel
#           (bin/gpt.test: CGO_ENABLED=0 go test -c -o bin/gpt.test ./gpt)
#           on one rank and on two: the compute stream's time between
#           all-reduces, rank by rank
#   anchors (2 GPUs) PyTorch's own scaling on the same machine, for
#           context: bench/train_anchors.py's gpt2 step (eager and
#           torch.compile) on one GPU at --batch 2xBATCH and under DDP on
#           two at BATCH each
# Logs and JSON go under $OUT; the summary is $OUT/summary.txt.
#   bash bench/cuda-dp-run.sh               # every part the GPUs allow
#   STEPS=20 bash bench/cuda-dp-run.sh two
set -uo pipefail
out=${OUT:-/tmp/vkern-out}
mkdir -p "$out"
export VKERN_CACHE=${VKERN_CACHE:-/tmp/vkern-cache}
# NVLink multicast stays off on these machines (KINDS.md): a program that
# uses it can take the host's GPUs out of service.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
vk=bin/vkern
data=${DATA:-bin/corpus.txt}
steps=${STEPS:-50}
batch=${BATCH:-8}
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
parts=${*:-nccl one two accum faults overlap anchors}
work=/tmp/dp
rm -rf "$work"; mkdir -p "$work"
start=$(date +%s)
status=0
step() { printf '\n=== %s (at %d s)\n' "$*" $(( $(date +%s) - start )) | tee -a "$out/summary.txt"; }
note() { echo "$*" | tee -a "$out/summary.txt"; }
fail() { status=1; note "FAILED: $*"; }
common=(--backend cuda --model gpt2 --data "$data" --batch "$batch" --sample 0 --eval-every 100000 --eval-windows 4 --seed 1)

nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee -a "$out/summary.txt"

# NCCL: the server's search finds the Python package's copy under
# site-packages; VKERN_NCCL pins what PyTorch itself loads, when python can
# say where that is.
if [ -z "${VKERN_NCCL:-}" ]; then
  lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
  [ -f "$lib" ] && export VKERN_NCCL=$lib
fi

nccl_part() {
  step "NCCL: where it is and what vkern doctor says"
  note "VKERN_NCCL=${VKERN_NCCL:-unset}; PyTorch's NCCL: $(python3 -c 'import torch; print(torch.cuda.nccl.version())' 2>/dev/null)"
  $vk doctor 2>&1 | grep -E "NCCL|CUDA|GPU" | tee -a "$out/summary.txt"
  bin/vkern.test -test.run 'TestCUDACommunicatorsOfOneRankThroughNCCL' -test.v > "$out/comm-test.txt" 2>&1 || fail "the one-rank NCCL test (see comm-test.txt)"
  grep -E "^(--- |ok|FAIL|PASS)|comm_test" "$out/comm-test.txt" | tee -a "$out/summary.txt"
}

# train NAME ARGS...: one run, its JSON at $out/NAME.json, its log there too.
train() {
  local name=$1; shift
  $vk train "${common[@]}" --steps "$steps" --out "$work/$name" --json "$out/$name.json" "$@" > "$out/$name.log" 2>&1 ||
    { fail "train $name (tail of $out/$name.log below)"; tail -5 "$out/$name.log"; }
}

# rate NAME: tokens/s from the median step time of steps 5 on (the first
# steps build and warm up).
rate() {
  python3 - "$out/$1.json" <<'EOF'
import json, statistics, sys
r = json.load(open(sys.argv[1]))
ms = statistics.median(s["ms"] for s in r["steps"][5:])
print(f"{r['batch'] * r['accum'] * r['config']['context'] / (ms / 1000):.0f}")
EOF
}

# phases NAME: where the median step of steps 5 on went, as the host saw
# it (vkern train --json's write_ms, gradients_ms, read_ms, update_ms).
phases() {
  python3 - "$out/$1.json" <<'EOF'
import json, statistics, sys
steps = json.load(open(sys.argv[1]))["steps"][5:]
med = lambda k: statistics.median(s.get(k, 0) for s in steps)
print(f"write {med('write_ms'):.2f}, gradients {med('gradients_ms'):.2f}, read {med('read_ms'):.2f}, update {med('update_ms'):.2f} ms")
EOF
}

# compare A B [bits]: the largest relative difference of the two runs'
# losses, or whether they are the same bits.
compare() {
  python3 - "$out/$1.json" "$out/$2.json" "${3:-}" <<'EOF'
import json, struct, sys
a = [s["loss"] for s in json.load(open(sys.argv[1]))["steps"]]
b = [s["loss"] for s in json.load(open(sys.argv[2]))["steps"]]
n = min(len(a), len(b))
if sys.argv[3] == "bits":
    same = all(struct.pack("d", x) == struct.pack("d", y) for x, y in zip(a[:n], b[:n]))
    print(f"{n} steps: {'the same bits' if same and len(a) == len(b) else 'DIFFERENT'}")
else:
    worst = max(abs(x - y) / abs(y) for x, y in zip(a[:n], b[:n]))
    print(f"{n} steps: largest relative loss difference {worst:.2e}; final {a[n-1]:.4f} vs {b[n-1]:.4f}")
EOF
}

one_part() {
  step "one GPU: gpt2 without --gpus, and with --gpus 1 (NCCL, one rank)"
  train plain
  train rank1 --gpus 1
  note "plain: $(rate plain) tokens/s; --gpus 1: $(rate rank1) tokens/s"
  note "--gpus 1 against plain: $(compare rank1 plain bits)"
}

two_part() {
  if [ "$gpus" -lt 2 ]; then note "two: skipped, $gpus GPU(s) here"; return; fi
  step "two GPUs at the global batch of 2 x BATCH: throughput, loss parity, multi-process"
  # The 1-GPU runs at the same global batch, both ways one GPU can take it:
  # one micro-batch of 2 x BATCH, and two of BATCH (the split the 2 GPUs
  # use, so the losses differ from it only by the order of a sum).
  train one2b --batch $((2 * batch))
  train acc2 --accum 2
  train g2 --gpus 2
  local r1 r1a r2
  r1=$(rate one2b); r1a=$(rate acc2); r2=$(rate g2)
  note "tokens/s: 1 GPU --batch $((2 * batch)) $r1, 1 GPU --batch $batch --accum 2 $r1a, 2 GPUs --batch $batch $r2"
  note "2 GPUs over the faster 1-GPU run: $(python3 -c "print(f'{$r2/max($r1,$r1a):.3f}')") (bar: >= 1.85)"
  local r
  for r in one2b acc2 g2; do note "phases of $r: $(phases $r)"; done
  note "losses, 2 GPUs against 1 GPU --accum 2: $(compare g2 acc2)"
  note "losses, 2 GPUs against 1 GPU --batch $((2 * batch)): $(compare g2 one2b)"
  note "the anchor, NCCL's all-reduce through PyTorch at the gradients' sizes:"
  python3 bench/nccl_allreduce.py --port $(( 31500 + RANDOM % 1000 )) 2>&1 | grep "^all_reduce" | tee -a "$out/summary.txt"
  local port=$(( 29500 + RANDOM % 1000 ))
  for r in 0 1; do
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=$r LOCAL_RANK=$r \
      $vk train "${common[@]}" --steps "$steps" --out "$work/mp" --json "$out/mp$r.json" > "$out/mp$r.log" 2>&1 &
  done
  wait
  [ -s "$out/mp0.json" ] || { fail "the two-process run (see mp0.log, mp1.log)"; tail -3 "$out/mp0.log" "$out/mp1.log"; return; }
  note "two processes: $(rate mp0) tokens/s; against --gpus 2: $(compare mp0 g2 bits)"
}

accum_part() {
  if [ "$gpus" -lt 2 ]; then note "accum: skipped, $gpus GPU(s) here"; return; fi
  step "two GPUs at the global batch of 4 x BATCH, accumulating: throughput and loss parity"
  train a-one2b2 --batch $((2 * batch)) --accum 2
  train a-one1b4 --accum 4
  train a-one4b --batch $((4 * batch))
  train a-two2b2 --gpus 2 --batch $((2 * batch))
  train a-two1b4 --gpus 2 --accum 2
  local r best=0 name
  for r in a-one2b2 a-one1b4 a-one4b; do
    [ -s "$out/$r.json" ] || continue
    local x; x=$(rate "$r"); note "1 GPU $r: $x tokens/s; $(phases "$r")"
    [ "$x" -gt "$best" ] && { best=$x; name=$r; }
  done
  for r in a-two2b2 a-two1b4; do
    [ -s "$out/$r.json" ] || continue
    local x; x=$(rate "$r")
    note "2 GPUs $r: $x tokens/s, $(python3 -c "print(f'{$x/$best:.3f}')")x the fastest 1-GPU run ($name; bar: >= 1.85); $(phases "$r")"
  done
  note "losses, a-two2b2 against a-one2b2: $(compare a-two2b2 a-one2b2)"
  note "losses, a-two1b4 against a-one1b4: $(compare a-two1b4 a-one1b4)"
}

# leftovers: the vkern processes and kernel servers still alive.
leftovers() { pgrep -f "vkern train|$VKERN_CACHE/.*/server" | tr '\n' ' '; }

# fault NAME SIGNAL WHO: two rank processes of char; once rank 0 has saved
# (step 2), WHO (rank0 or rank1, or server1: rank 1's kernel server) gets
# SIGNAL; the other rank must exit 1 naming the target's rank within the
# deadlines (5 s of silence, 60 s a step). Then the stopped or killed
# rank's process is killed (as an operator would), and no vkern process
# or kernel server may be left after 10 s.
fault() {
  local name=$1 sig=$2 who=$3 port=$(( 30500 + RANDOM % 1000 ))
  local pids=() dir="$work/fault-$name"
  for r in 0 1; do
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 RANK=$r LOCAL_RANK=$r \
      $vk train --backend cuda --model char --data "$data" --batch 8 --sample 0 --eval-every 100000 --eval-windows 4 \
      --steps 100000 --save-every 2 --out "$dir" --rank-timeout 5s --step-timeout 60s \
      > "$out/fault-$name-$r.log" 2>&1 &
    pids+=($!)
  done
  local t=0
  until [ -f "$dir/train_state.json" ] || [ $t -gt 600 ]; do sleep 0.5; t=$((t + 1)); done
  sleep 0.$((RANDOM % 10))  # land somewhere in a step, not always at its start
  local hit=1 survivor=0
  [ "$who" = rank0 ] && { hit=0; survivor=1; }
  local target=${pids[$hit]}
  if [ "$who" = server1 ]; then target=$(pgrep -P "${pids[1]}" | head -1); fi
  local t0=$(date +%s.%N)
  kill -"$sig" "$target"
  local waited=0
  while kill -0 "${pids[$survivor]}" 2>/dev/null && [ $waited -lt 900 ]; do sleep 0.1; waited=$((waited + 1)); done  # 90 s
  local took
  took=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
  wait "${pids[$survivor]}"; local code=$?
  kill -9 "${pids[$hit]}" 2>/dev/null; kill -CONT "${pids[$hit]}" 2>/dev/null; wait "${pids[$hit]}" 2>/dev/null
  local left tries=0
  while left=$(leftovers); [ -n "$left" ] && [ $tries -lt 100 ]; do sleep 0.1; tries=$((tries + 1)); done  # 10 s
  local msg
  msg=$(grep "vkern train:" "$out/fault-$name-$survivor.log" | tail -1)
  note "$name: rank $survivor exit $code after ${took}s; left: ${left:-none}; $msg"
  case "$msg" in *"rank $hit of 2"*) ;; *) fail "$name: rank $survivor's error does not name rank $hit";; esac
  [ "$code" = 1 ] || fail "$name: rank $survivor exit $code, want 1"
  [ -z "$left" ] || { fail "$name: processes left: $left"; pkill -9 -f "vkern train|$VKERN_CACHE/.*/server"; }
}

faults_part() {
  if [ "$gpus" -lt 2 ]; then note "faults: skipped, $gpus GPU(s) here"; return; fi
  step "faults: a rank killed or stopped mid-run (${REPEAT:-5} times each), rank 0 the same once, a kernel server killed"
  local i
  for i in $(seq "${REPEAT:-5}"); do
    fault "kill$i" KILL rank1
    fault "stop$i" STOP rank1
  done
  fault kill-rank0 KILL rank0
  fault stop-rank0 STOP rank0
  fault server KILL server1
}

overlap_part() {
  if [ "$gpus" -lt 2 ]; then note "overlap: skipped, $gpus GPU(s) here"; return; fi
  step "overlap: gpt2 at --batch $batch, 30 steps, one GPU and two, NCCL's clusters and tiles per cluster"
  local keep=$steps
  steps=30
  train ov-one
  train ov-two --gpus 2
  NCCL_CGA_CLUSTER_SIZE=4 train ov-two-cga4 --gpus 2
  VKERN_COMM_GEMM_UNITS=1 train ov-two-units1 --gpus 2
  steps=$keep
  local r
  for r in ov-one ov-two ov-two-cga4 ov-two-units1; do
    [ -s "$out/$r.json" ] && note "$r: $(rate "$r") tokens/s; $(phases "$r")"
  done
  if [ -x bin/gpt.test ]; then
    local n
    for n in 1 2; do
      VKERN_PROFILE_DP=cuda VKERN_PROFILE_GPUS=$n VKERN_PROFILE_B=$batch \
        bin/gpt.test -test.run TestProfileDataParallel -test.v > "$out/profile-dp$n.txt" 2>&1 ||
        fail "TestProfileDataParallel on $n rank(s) (see profile-dp$n.txt)"
      grep -E "kernels .* wall" "$out/profile-dp$n.txt" | sed "s/^/profile, $n rank(s): /" | tee -a "$out/summary.txt"
    done
  else
    note "overlap: no bin/gpt.test, so no profile"
  fi
}

anchors_part() {
  if [ "$gpus" -lt 2 ]; then note "anchors: skipped, $gpus GPU(s) here"; return; fi
  # ANCHOR_BATCH: the sequences a GPU takes under DDP (BATCH); one GPU
  # takes twice as many.
  local b=${ANCHOR_BATCH:-$batch}
  step "PyTorch's gpt2 step on one GPU at --batch $((2 * b)) and under DDP on two at $b each"
  python3 bench/train_anchors.py --models gpt2 --batch $((2 * b)) > "$out/anchors-1gpu.jsonl" 2> "$out/anchors-1gpu.log" ||
    fail "train_anchors.py on one GPU (see anchors-1gpu.log)"
  python3 bench/train_anchors.py --models gpt2 --batch "$b" --gpus 2 --port $(( 32500 + RANDOM % 1000 )) \
    > "$out/anchors-ddp.jsonl" 2> "$out/anchors-ddp.log" || fail "train_anchors.py --gpus 2 (see anchors-ddp.log)"
  python3 - "$out/anchors-1gpu.jsonl" "$out/anchors-ddp.jsonl" <<'EOF2' | tee -a "$out/summary.txt"
import json, sys
one = {r["mode"]: r for r in map(json.loads, open(sys.argv[1]))}
for r in map(json.loads, open(sys.argv[2])):
    o = one.get(r["mode"])
    ratio = f"{r['tokens_per_second'] / o['tokens_per_second']:.3f}x one GPU's {o['tokens_per_second']:.0f}" if o else "no one-GPU line"
    print(f"PyTorch {r['mode']}: DDP on {r['gpus']} GPUs {r['tokens_per_second']:.0f} tokens/s, {ratio}")
EOF2
}

for p in $parts; do "${p}_part"; done
note "done in $(( $(date +%s) - start )) s; status $status"
exit $status
