#!/usr/bin/env bash
# One H100 call for the changes written since the last GPU run, most
# important first, each part skipped when too little of the call's time is
# left for it ($BUDGET seconds, default 560), so that a call cut short still
# returns what ran:
#   lab       bench/attention_lab.cu built from bin/labsrc (here: go run
#             ./bench/labsrc bin/labsrc) with ptxas's register report of
#             the attention kernels, run at gpt2's shape and two small ones
#   labab     the attention lab built from bin/labsrc-base (the sources of
#             a base commit: git worktree add /tmp/base BASE, then there go
#             run ./bench/labsrc <this tree>/bin/labsrc-base) and from
#             bin/labsrc, both with ptxas's report of the Hopper kernels,
#             run in turn twice at 16x1024x768x12 and at 32x1024x768x12:
#             the Hopper kernels' times, base against new, in one call
#   verify-attn  vkern verify --backend cuda --op attention,attention_grad at the
#             default shapes, the Hopper kernels (variants 6, 7) and the
#             mma.sync ones ($VKERN_ATTENTION=mma)
#   verify-attn-gpt2  the same at gpt2's shape, the Hopper kernels
#   verify    vkern verify --backend cuda of the changed ops at their default
#             shapes (layernorm_grad with its residual, linear_grad_w with
#             accumulate 0, attention_grad both ways)
#   verify-gpt2  layernorm_grad at the gpt2 shape the step runs
#   verify-head  linear_grad_w at the lm_head's shape (about 190 s)
#   exp2      bench/exp2_check.cu: every float through exp2f and
#             ex2.approx.ftz (attention.cu's exp2_tile): how many at and
#             above −126 differ, their largest errors in ulps and relative
#             over [−126, 128) (the oracle's u = 2⁻²³), and below −126
#             where the instruction is not 0 or exp2f not under 2⁻¹²⁶
#             (exit 1 where any differ or flush otherwise)
#   verify-every  vkern train --verify-every on real runs: char, 20 steps,
#             steps 0, 5, 10 and 15 checked against the float64 oracles;
#             gpt2, 10 steps, step 0 checked (sampled where large; about
#             280 s at that size)
#   step      the whole-step check on cuda (gpt's TestAStepOnCUDA…): the
#             in-place layernorm_grad, the overwriting linear_grad_w and
#             the two fills against the float64 model
#   bench     bench/cuda-train-bench.sh for gpt2 (PyTorch eager and
#             torch.compile, then vkern bench --suite train against them)
#   gpt2      vkern train --model gpt2 --batch 16, 30 steps each on
#             bin/corpus.txt (any text; made from the Go sources here): as built,
#             and with $VKERN_ATTENTION=mma (attention and attention_grad
#             on mma.sync, variant 3); the median step and its phases, as
#             ratios to the first run
#   lngrad    layernorm_grad's variants 1 and 3 ($VKERN_LAYERNORM_GRAD_RPB
#             8, 4, 2): the rows kernels' registers and spills (cuobjdump),
#             vkern verify at the default and gpt2 shapes and vkern bench
#             --suite ops against the copy floor (a copy of
#             ../shared/bench/anchors.py at .anchors/anchors.py, carried)
#             for each, then gpt2 steps at 8 and 4
#   groups    attention's variant 8, the Hopper kernels' items in groups of
#             heads (16 by default since the H100 call of 67632c4): vkern
#             verify of attention and attention_grad at the default shapes
#             (3x130x384x6: 18 heads, a ragged last group) and at gpt2's,
#             then gpt2 steps at B 16 and 32 with groups of 16 (the default)
#             and of all heads ($VKERN_ATTENTION_HEAD_GROUP=0)
#   spin      gpt2 steps with $VKERN_SPIN_US 50 (the default), 1000 and
#             5000: whether the host's phases around the device work
#             (write, read, update) shrink when neither side of the kernel
#             server's link sleeps through a step's batch (in the H100
#             call of 67632c4 they did not: 37.46, 37.15 and 37.46 ms,
#             write 0.165–0.199 and read 0.153–0.175 ms at every spin)
#   ncu       the attention lab built twice (the default register budget
#             of the Hopper backward, three blocks an SM, and two:
#             -DVKERN_ATTENTION_HOPPER_MIN_BLOCKS=2), both run at gpt2's
#             shape, then Nsight Compute (--set full, the clocks left
#             alone) on one launch each of forward_hopper,
#             backward_dkdv_hopper and backward_dq_hopper there: each
#             kernel's details page and its SASS with the sampled stall
#             reasons (CSV), to place the backward's time
#   profile   every call of a step timed by the kernel server (gpt's
#             TestProfileStep): char at B 64 and 32, gpt2 at 16; the
#             kernels' sum beside the batch's wall time, op by op
#   transfers the host's part of a step outside its batches (gpt's
#             BenchmarkStepTransfers: the tokens encoded and written, the
#             losses and norm read back and reduced) on cuda, char at B 64
#             and gpt2 at 16, 2000 steps each; with bin/gpt-base.test (a
#             base commit's gpt tests with this benchmark: git worktree add
#             /tmp/base BASE, copy gpt/profile_test.go and gpt/gpt_test.go
#             into it, go test -c -o <this tree>/bin/gpt-base.test ./gpt
#             there) base and new in turn, three times
#   gelu      the MLP's GELU products in bench/gemm_lab.cu (c_fc's forward
#             and c_proj's dx, each with and without the GELU, against
#             cuBLAS's product, and the head's forward at V 50257, whose
#             rows of output are not 16-byte aligned) for the dispatcher
#             and variants 6 and 9,
#             then Nsight Compute (--set full, the clocks left alone) on one
#             launch of the dispatcher's kernel in each: the details page
#             and the SASS's stall reasons (bench/ncu_sass_summary.py), to
#             place the GELU epilogue's cost and the unaligned store's
#             (about 6 minutes)
#   unaligned the Hopper GEMM's store of f16 rows that do not start 16-byte
#             aligned (staged_store.cuh) and the padded copies' rows of 64
#             halves: vkern verify of linear and linear_grad_x at odd widths
#             past the padding threshold (every epilogue) and at the
#             lm_head's 16384x768x50257; vkern bench --suite ops of linear,
#             linear_nt and linear_grad_w at V 50257 and 50304 against
#             PyTorch at both (bench/op_anchors.py), with bin/vkern-base
#             (prep-call.sh BASE) and bin/vkern in turn, twice; then the
#             store's two planted defects (about 8 minutes: BUDGET=560)
#   unaligned-lab  bench/gemm_lab.cu's V cases (V 50257: the head, linear's
#             layout, dx and dW) built from bin/labsrc-base and bin/labsrc,
#             against cuBLAS at the same shapes, and Nsight Compute's speed
#             of light on V linear's kernels, with no kernel server (about
#             4 minutes)
#   defects   the planted CUDA defects of layernorm and attention and the
#             stored-dS attention test (or the defects whose names match
#             $DEFECTS alone)
# Here, first: bash bench/prep-call.sh [BASE] (the CLI, bin/vkern.test,
# bin/gpt.test, bin/labsrc; with BASE, bin/labsrc-base for labab and
# bin/gpt-base.test for transfers; then the checks a call would otherwise
# fail first), and bin/corpus.txt: any text of a few MB (the train parts
# read it).
# then, with bin/ carried: bash bench/cuda-pending.sh [parts]. The default
# parts (exp2 verify-attn verify-attn-gpt2 defects) are what a new attention
# variant owes; verify-every, the rest of it, needs a call of its own. Logs under $OUT; the table last.
set -uo pipefail
out=${OUT:-/tmp/vkern-out}
mkdir -p "$out"
export VKERN_CACHE=${VKERN_CACHE:-$PWD/.vkcache}
vk=$PWD/bin/vkern
parts=${*:-exp2 verify-attn verify-attn-gpt2 defects}
budget=${BUDGET:-560}
start=$(date +%s)
status=0
table=()
elapsed() { echo $(( $(date +%s) - start )); }
# left: the call's seconds left, at least 1 (timeout 0 would mean none).
left() { local n=$(( budget - $(elapsed) )); echo $(( n > 0 ? n : 1 )); }
step() { printf '\n=== %s (at %d s)\n' "$*" "$(elapsed)"; }
# room N: whether N more seconds fit in the budget; says so when not.
room() {
  if (( $(elapsed) + $1 > budget )); then
    echo "skipped: needs about $1 s, $(( budget - $(elapsed) )) s left"
    table+=("$2: skipped (time)")
    return 1
  fi
}
# run NAME CMD...: CMD's output to $out/NAME.txt, its tail shown, its
# verdict in the table.
run() {
  local name=$1
  shift
  if timeout $(left) "$@" > "$out/$name.txt" 2>&1; then
    table+=("$name: ok")
  else
    status=1
    table+=("$name: FAILED (rc $?)")
  fi
  tail -15 "$out/$name.txt"
}
wants() { [[ " $parts " == *" $1 "* ]]; }
# lab_build SRC OUT [FLAG…]: the attention lab from the kernel sources in
# SRC (bench/labsrc's output) to OUT, ptxas's report in
# $out/<OUT's base name>-build.txt; a stale OUT (a warm machine keeps
# /tmp) is removed first.
lab_build() {
  local src=$1 bin=$2
  shift 2
  rm -f "$bin"
  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -I"$src" "$@" -o "$bin" \
    bench/attention_lab.cu > "$out/$(basename "$bin")-build.txt" 2>&1
}
# gemm_lab_build SRC OUT LOG: bench/gemm_lab.cu from the kernel sources in
# SRC to OUT (a stale one removed first), nvcc's output in LOG, within the
# call's time.
gemm_lab_build() {
  rm -f "$2"
  timeout $(left) nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I"$1" -o "$2" bench/gemm_lab.cu -lcublas \
    > "$3" 2>&1
}
# lab_registers OUT PATTERN PREFIX: ptxas's registers and spills of OUT's
# kernels whose names match PATTERN, each line after PREFIX.
lab_registers() {
  grep -A3 -E "Compiling entry function.*($2)" "$out/$(basename "$1")-build.txt" | grep -E "entry|registers|spill" |
    sed -E "s/^/$3: /; s/Compiling entry function '_ZN[^']*($2)[^']*'/\1/"
}

step device
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
step "vkern build --backend cuda"
run build "$vk" build --backend cuda || true

if wants lab && room 150 lab; then
  step "attention lab"
  if lab_build bin/labsrc /tmp/attention_lab; then
    lab_registers /tmp/attention_lab "hopper|dkdv_mma|dq_mma|forward_mma" lab
    run lab-gpt2 /tmp/attention_lab
    run lab-d48 /tmp/attention_lab 2 129 96 2
    run lab-t300 /tmp/attention_lab 1 300 128 2
  else
    status=1
    table+=("lab build: FAILED")
    tail -30 "$out/attention_lab-build.txt"
  fi
fi
if wants labab && room 200 labab; then
  step "attention lab: base against new"
  lab_build bin/labsrc-base /tmp/lab-base &
  base_pid=$!
  lab_build bin/labsrc /tmp/lab-new &
  new_pid=$!
  built=1
  wait $base_pid || built=0
  wait $new_pid || built=0
  if (( built )); then
    labab_ok=1
    for v in base new; do lab_registers /tmp/lab-$v "forward_hopper|backward_dkdv_hopper|backward_dq_hopper" $v; done
    # Each Hopper kernel's loads in its SASS: generic (LD), shared (LDS),
    # local (LDL), and its MUFU.EX2 and FMUL instructions.
    for v in base new; do
      cuobjdump -sass /tmp/lab-$v | awk -v v=$v '
        /Function :/ { name = ""; if (match($0, /(forward|backward_dkdv|backward_dq)_hopper/)) name = substr($0, RSTART, RLENGTH) }
        name != "" && /[^A-Z_]LD\.E/ { ld[name]++ } name != "" && /LDS/ { lds[name]++ } name != "" && /LDL/ { ldl[name]++ }
        name != "" && /MUFU\.EX2/ { ex2[name]++ } name != "" && /FMUL/ { fmul[name]++ }
        END { for (k in ex2) printf "%s sass %s: LD %d, LDS %d, LDL %d, MUFU.EX2 %d, FMUL %d\n", v, k, ld[k], lds[k], ldl[k], ex2[k], fmul[k] }'
    done
    : > "$out/labab-table.txt"
    for round in 1 2; do
      for v in base new; do
        for b in 16 32; do
          timeout $(left) /tmp/lab-$v $b 1024 768 12 > "$out/labab-$v-$b-$round.txt" 2>&1 ||
            { status=1; labab_ok=0; table+=("labab $v $b round $round: FAILED"); }
          printf '%-5s B=%-3s round %s: %s\n' $v $b $round \
            "$(grep -E '^(forward|backward), wgmma|^backward, mma.sync|differen|^bits' "$out/labab-$v-$b-$round.txt" | tr -s ' ' | paste -sd ';')" \
            >> "$out/labab-table.txt"
        done
      done
    done
    cat "$out/labab-table.txt"
    (( labab_ok )) && table+=("labab: ok")
  else
    status=1
    table+=("labab build: FAILED")
    tail -20 "$out/lab-base-build.txt" "$out/lab-new-build.txt"
  fi
fi
if wants verify-attn && room 60 verify-attn; then
  step "verify attention and attention_grad"
  run verify-attn "$vk" verify --backend cuda --op attention,attention_grad
  run verify-attn-mma env VKERN_ATTENTION=mma "$vk" verify --backend cuda --op attention,attention_grad
fi
if wants verify-attn-gpt2 && room 120 verify-attn-gpt2; then
  step "verify attention and attention_grad at gpt2's shape (about 105 s)"
  run verify-attn-gpt2 "$vk" verify --backend cuda --op attention,attention_grad --shape 16x1024x768x12
fi
if wants verify && room 120 verify; then
  step verify
  run verify-default "$vk" verify --backend cuda --op layernorm_grad,linear_grad_w,attention_grad
  run verify-dq-stored env VKERN_ATTENTION_DQ=stored "$vk" verify --backend cuda --op attention,attention_grad
fi
if wants verify-gpt2 && room 60 verify-gpt2; then
  step "verify at the gpt2 shapes"
  run verify-gpt2 "$vk" verify --backend cuda --op layernorm_grad --shape 16384x768:residual=1,dx_sum=1
fi
if wants verify-head && room 200 verify-head; then
  step "verify the lm_head's weight gradient (about 190 s)"
  run verify-gpt2-head "$vk" verify --backend cuda --op linear_grad_w --shape 16384x768x50304:accumulate=0
fi

if wants bench && room 200 bench; then
  step "gpt2 against PyTorch"
  OUT=$out/bench timeout $(left) env MODELS=gpt2 bash bench/cuda-train-bench.sh --steps 30 --warmup 10 \
    > "$out/bench.txt" 2>&1 && table+=("bench: ok") || { status=1; table+=("bench: FAILED"); }
  tail -4 "$out/bench.txt"
fi

if wants exp2 && room 30 exp2; then
  step "exp2f against ex2.approx.ftz, every float"
  if nvcc -std=c++17 -O3 -arch=sm_90 -Ibench -o /tmp/exp2_check bench/exp2_check.cu > "$out/exp2-build.txt" 2>&1; then
    run exp2 /tmp/exp2_check
  else
    status=1
    table+=("exp2 build: FAILED")
    tail -20 "$out/exp2-build.txt"
  fi
fi

if wants verify-every && room 420 verify-every; then
  step "vkern train --verify-every: char, then gpt2"
  run verify-every-char "$vk" train --backend cuda --model char --data bin/corpus.txt --steps 20 --verify-every 5 \
    --eval-every 1000 --sample 0 --out "$out/run-verify-char"
  run verify-every-gpt2 "$vk" train --backend cuda --model gpt2 --data bin/corpus.txt --steps 10 --verify-every 10 \
    --eval-every 1000 --sample 0 --out "$out/run-verify-gpt2"
  rm -rf "$out/run-verify-char" "$out/run-verify-gpt2"
fi

if wants step && room 90 step; then
  step "whole step on cuda"
  pushd gpt > /dev/null
  run wholestep ../bin/gpt.test -test.run 'TestAStepOnCUDAMatchesTheFloat64Model' -test.v
  popd > /dev/null
fi

# train NAME [ENV=…]: 30 gpt2 steps, the median step and phases after the first.
train() {
  local name=$1
  shift
  room 60 "gpt2-$name" || return 0
  timeout 120 env "$@" "$vk" train --backend cuda --model gpt2 --data bin/corpus.txt --batch "${gpt2_batch:-16}" --steps 30 --eval-every 1000 --sample 0 \
    --out "$out/run-$name" --json "$out/gpt2-$name.json" > "$out/gpt2-$name.txt" 2>&1 ||
    { status=1; table+=("gpt2-$name: FAILED"); tail -5 "$out/gpt2-$name.txt"; return 0; }
  rm -rf "$out/run-$name"
  table+=("gpt2-$name: ok")
  python3 - "$out/gpt2-$name.json" "$name" >> "$out/gpt2-table.txt" <<'EOF'
import json, statistics, sys
d = json.load(open(sys.argv[1]))
steps = next(v for v in d.values() if isinstance(v, list) and v and isinstance(v[0], dict) and "write_ms" in v[0])[5:]
med = {k: statistics.median(s[k] for s in steps) for k in ("write_ms", "gradients_ms", "read_ms", "update_ms")}
total = sum(med.values())
print(f"{sys.argv[2]:10s} {total:8.2f} ms  " + "  ".join(f"{k[:-3]} {v:.3f}" for k, v in med.items()))
EOF
  tail -1 "$out/gpt2-table.txt"
}
if wants gpt2; then
  step "gpt2 steps"
  : > "$out/gpt2-table.txt"
  train base
  train mma VKERN_ATTENTION=mma
fi

if wants groups && room 200 groups; then
  step "attention's head groups (variant 8)"
  run verify-groups "$vk" verify --backend cuda --op attention,attention_grad
  run verify-groups-gpt2 "$vk" verify --backend cuda --op attention,attention_grad --shape 16x1024x768x12
  : > "$out/gpt2-table.txt"
  for gpt2_batch in 16 32; do
    train "b$gpt2_batch-g16"
    train "b$gpt2_batch-all" VKERN_ATTENTION_HEAD_GROUP=0
  done
  gpt2_batch=16
fi

if wants spin && room 120 spin; then
  step "the link's spin and the host's phases"
  for us in 50 1000 5000; do train "spin$us" VKERN_SPIN_US=$us; done
fi

if wants lngrad && room 150 lngrad; then
  step "layernorm_grad: blocks of 8, 4 and 2 rows"
  server=$(find "$VKERN_CACHE" -name server -type f | head -1)
  cuobjdump --dump-resource-usage "$server" > "$out/resources.txt" 2>&1
  # One line per layernorm_grad rows kernel: its template arguments
  # (T, RPB, E, VW, kSum) and its registers, stack and local memory.
  python3 - "$out/resources.txt" > "$out/lngrad-resources.txt" <<'EOF2'
import re, sys
name = None
for line in open(sys.argv[1]):
    m = re.search(r"Function (\S*layernorm_grad_rows\S*):", line)
    if m:
        name = m.group(1)
        continue
    if name and "REG:" in line:
        args = re.findall(r"Li(\d+)E|Lb(\d)E", name)
        print("T,RPB,E,VW,kSum =", ",".join(a or b for a, b in args),
              " ".join(f for f in line.split() if f.split(":")[0] in ("REG", "STACK", "LOCAL", "SHARED")))
        name = None
EOF2
  cat "$out/lngrad-resources.txt"
  python3 .anchors/anchors.py > "$out/lngrad-anchors.jsonl" 2> "$out/lngrad-anchors.stderr" || echo "anchors.py failed"
  for rpb in 8 4 2; do
    run lngrad-verify-$rpb env VKERN_LAYERNORM_GRAD_RPB=$rpb "$vk" verify --backend cuda --op layernorm_grad
    run lngrad-verify-gpt2-$rpb env VKERN_LAYERNORM_GRAD_RPB=$rpb "$vk" verify --backend cuda --op layernorm_grad \
      --shape 16384x768:residual=1,dx_sum=1
    VKERN_LAYERNORM_GRAD_RPB=$rpb timeout 120 "$vk" bench --suite ops --backend cuda --op layernorm_grad \
      --anchors "$out/lngrad-anchors.jsonl" --json "$out/lngrad-bench-$rpb.json" > "$out/lngrad-bench-$rpb.txt" 2>&1 ||
      { status=1; table+=("lngrad-bench-$rpb: FAILED"); }
    sed "s/^/rpb $rpb: /" "$out/lngrad-bench-$rpb.txt" | grep -E "layernorm_grad" | tee -a "$out/lngrad-table.txt"
  done
  : > "$out/gpt2-table.txt"
  train lngrad8 VKERN_LAYERNORM_GRAD_RPB=8
  train lngrad4 VKERN_LAYERNORM_GRAD_RPB=4
fi

if wants ncu && room 240 ncu; then
  step "attention under Nsight Compute"
  lab_build bin/labsrc /tmp/lab3 &
  pid3=$!
  lab_build bin/labsrc /tmp/lab2 -DVKERN_ATTENTION_HOPPER_MIN_BLOCKS=2 &
  pid2=$!
  built=1
  wait $pid3 || built=0
  wait $pid2 || built=0
  if (( built )); then
    for f in 3 2; do lab_registers /tmp/lab$f "forward_hopper|backward_dkdv_hopper|backward_dq_hopper" "min-blocks $f"; done
    run lab-min3 /tmp/lab3
    run lab-min2 /tmp/lab2
    for k in forward_hopper backward_dkdv_hopper backward_dq_hopper; do
      timeout $(left) ncu --clock-control none --set full --import-source no -k "regex:$k" --launch-skip 1 -c 1 \
        -f -o "$out/ncu-$k" /tmp/lab3 > "$out/ncu-$k-run.txt" 2>&1 || { status=1; table+=("ncu $k: FAILED"); }
      if [ -f "$out/ncu-$k.ncu-rep" ]; then
        ncu -i "$out/ncu-$k.ncu-rep" --page details > "$out/ncu-$k-details.txt" 2>&1
        ncu -i "$out/ncu-$k.ncu-rep" --page source --print-source sass --csv > "$out/ncu-$k-sass.csv" 2>&1
        table+=("ncu $k: ok")
        grep -E "^    (Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per Thread|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued)" \
          "$out/ncu-$k-details.txt" | sed "s/^/$k: /"
      fi
    done
  else
    status=1
    table+=("ncu lab build: FAILED")
    tail -20 "$out/lab3-build.txt" "$out/lab2-build.txt"
  fi
fi

if wants profile && room 120 profile; then
  step "steps profiled call by call: char at B 64 and 32, gpt2 at 16"
  for cfg in "char 64" "char 32" "gpt2 16"; do
    set -- $cfg
    run "profile-$1-b$2" env VKERN_PROFILE=cuda VKERN_PROFILE_MODEL="$1" VKERN_PROFILE_B="$2" \
      ./bin/gpt.test -test.run 'TestProfileStep$' -test.v
  done
fi

if wants transfers && room 90 transfers; then
  step "the host's transfers of a step: char at B 64, gpt2 at 16"
  for round in 1 2 3; do
    for v in base new; do
      bin=./bin/gpt.test
      [ "$v" = base ] && bin=./bin/gpt-base.test
      [ -x "$bin" ] || continue
      for cfg in "char 64" "gpt2 16"; do
        set -- $cfg
        run "transfers-$v-$1-$round" env VKERN_PROFILE=cuda VKERN_PROFILE_MODEL="$1" VKERN_PROFILE_B="$2" \
          "$bin" -test.run '^$' -test.bench 'StepTransfers$' -test.benchtime 2000x
      done
    done
  done
  grep -H 'ns/op' "$out"/transfers-*.txt | sed 's|.*/transfers-||' > "$out/transfers-table.txt"
fi

if wants gelu && room 300 gelu; then
  step "the GELU products: the lab, then Nsight Compute"
  if gemm_lab_build bin/labsrc /tmp/gemm_lab "$out/gelu-lab-build.txt"; then
    fc_cases=("fwd fc" "fwd fc gelu" "dx fc.proj" "dx fc.proj gelu" "V fwd head")
    run gelu-lab env GEMM_LAB_ONLY="$(IFS=,; echo "${fc_cases[*]}")" /tmp/gemm_lab 6 9
    # The reports and SASS tables stay outside $out (a call brings back at
    # most eight files, none over its size limit); the pages read from
    # them go into one tarball.
    ncu_dir=/tmp/gelu-ncu
    rm -rf "$ncu_dir"
    mkdir -p "$ncu_dir/pages"
    for c in "${fc_cases[@]}"; do
      n=${c// /-}
      rep=$ncu_dir/$n
      if timeout $(left) env GEMM_LAB_ONLY="$c" ncu --clock-control none --set full --import-source no \
        -k regex:product_wgmma --launch-skip 2 -c 1 -f -o "$rep" /tmp/gemm_lab -1 > "$ncu_dir/pages/$n-run.txt" 2>&1 &&
        [ -f "$rep.ncu-rep" ]; then
        ncu -i "$rep.ncu-rep" --page details > "$ncu_dir/pages/$n-details.txt" 2>&1
        ncu -i "$rep.ncu-rep" --page source --print-source sass --csv > "$rep-sass.csv" 2>&1
        python3 bench/ncu_sass_summary.py "$rep-sass.csv" > "$ncu_dir/pages/$n-sass-summary.txt" 2>&1
        table+=("ncu $c: ok")
        grep -E "^    (Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Registers Per Thread|Issue Slots Busy|No Eligible|Warp Cycles Per Issued)" \
          "$ncu_dir/pages/$n-details.txt" | sed "s/^/$n: /"
      else
        status=1
        table+=("ncu $c: FAILED (no report; $ncu_dir/pages/$n-run.txt)")
        tail -5 "$ncu_dir/pages/$n-run.txt"
      fi
    done
    tar -czf "$out/gelu-ncu.tar.gz" -C "$ncu_dir" pages
  else
    status=1
    table+=("gelu lab build: FAILED")
    tail -30 "$out/gelu-lab-build.txt"
  fi
fi

if wants unaligned && room 200 unaligned; then
  step "f16 rows that do not start 16-byte aligned: verify, bench, defects"
  run unaligned-build "$vk" build --backend cuda
  run verify-unaligned-linear "$vk" verify --backend cuda --op linear --shape 4096x1001x264 --shape 4096x1001x264:bias=1 \
    --shape 4096x1001x264:gelu=1 --shape 4100x1003x264:residual=1 --shape 4096x1002x264:bias=1 --shape 4096x1004x264
  run verify-unaligned-grad-x "$vk" verify --backend cuda --op linear_grad_x --shape 4096x264x1001 \
    --shape 4096x264x1001:gelu=1 --shape 4100x264x1005:gelu=1
  cases=(linear=16384x768x50257:bias=0 linear=16384x768x50304:bias=0 linear_nt=16384x50257x768
    linear_nt=16384x50304x768 linear_grad_w=16384x768x50257 linear_grad_w=16384x768x50304)
  python3 bench/op_anchors.py "${cases[@]}" > "$out/unaligned-anchors.jsonl" 2> "$out/unaligned-anchors.stderr" ||
    table+=("unaligned anchors: FAILED")
  cat "$out/unaligned-anchors.jsonl"
  [ -x bin/vkern-base ] && run unaligned-build-base bin/vkern-base build --backend cuda
  for round in 1 2; do
    for v in base new; do
      bin=$vk
      [ "$v" = base ] && bin=$PWD/bin/vkern-base
      [ -x "$bin" ] || continue
      for op in linear linear_nt linear_grad_w; do
        shapes=()
        for c in "${cases[@]}"; do [ "${c%%=*}" = "$op" ] && shapes+=(--shape "${c#*=}"); done
        run "unaligned-bench-$v-$op-$round" "$bin" bench --suite ops --backend cuda --op "$op" --runs 30 "${shapes[@]}" \
          --anchors "$out/unaligned-anchors.jsonl" --json "$out/unaligned-bench-$v-$op-$round.json"
      done
    done
  done
  python3 - "$out" > "$out/unaligned-table.txt" <<'EOF'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "unaligned-bench-*.json"))):
    tag = os.path.basename(f)[len("unaligned-bench-"):-5]
    for r in json.load(open(f))["results"]:
        print(f"{tag:<28} {r['name']:<36} {r['median_ns'] / 1e6:9.4f} ms  ratio to {r.get('anchor', '-')}: {r.get('ratio', 0):.3f}")
EOF
  run verify-unaligned-head "$vk" verify --backend cuda --op linear --shape 16384x768x50257:bias=0 --dist normal
  # The head's dx at V 50257: its 1.65 GB operand padded (2 GiB cap).
  run verify-unaligned-head-dx "$vk" verify --backend cuda --op linear --shape 16384x768x50257 --dist normal
  run verify-unaligned-grad-w "$vk" verify --backend cuda --op linear_grad_w --shape 4096x264x1001:accumulate=0 \
    --shape 4096x264x1001:accumulate=1
  run unaligned-defects ./bin/vkern.test -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/Hopper:_unaligned' -test.v
fi

if wants unaligned-lab && room 300 unaligned-lab; then
  step "the vocabulary as it is, kernel by kernel: the lab from the base's sources and these, then Nsight Compute"
  # Kernel by kernel, no server: bench/gemm_lab.cu's V cases (the
  # vocabulary as it is) built from the base's sources and from these,
  # against cuBLAS at the same shapes, then Nsight Compute on the slowest.
  for v in base new; do
    src=bin/labsrc
    [ "$v" = base ] && src=bin/labsrc-base
    [ -d "$src" ] || continue
    if gemm_lab_build "$src" "/tmp/gemm_lab-$v" "$out/unaligned-lab-$v-build.txt"; then
      run "unaligned-lab-$v" env GEMM_LAB_ONLY="V fwd head,V linear,V dx head,V dW head" "/tmp/gemm_lab-$v" 6
    else
      table+=("unaligned-lab-$v build: FAILED")
    fi
  done
  [ -x /tmp/gemm_lab-new ] && run unaligned-ncu env GEMM_LAB_ONLY="V linear" ncu -k 'regex:product|pad_rows' \
    --section SpeedOfLight --launch-count 4 /tmp/gemm_lab-new 6
fi

if wants defects && room 200 defects; then
  step "planted CUDA defects: layernorm, attention"
  tests="TestPlantedDefectsInTheCUDAKernelsAreIncorrect/(${DEFECTS:-layernorm|attention})"
  [ -z "${DEFECTS:-}" ] && tests+="|TestCUDAAttentionGradFromStoredDS"
  run defects ./bin/vkern.test -test.run "$tests" -test.v
fi

step table
printf '%s\n' "${table[@]}"
if [ -s "$out/transfers-table.txt" ]; then
  echo "the host's transfers (version-model-round: ns a step, read, write):"
  cat "$out/transfers-table.txt"
fi
if [ -s "$out/unaligned-table.txt" ]; then
  echo "V 50257 and 50304, base and new (median ms, ratio to the PyTorch anchor):"
  cat "$out/unaligned-table.txt"
fi
if [ -s "$out/gpt2-table.txt" ]; then
  echo "gpt2, median of steps 5-29 (sum of the phases), ratio to base:"
  awk 'NR == 1 { b = $2 } { printf "  %s  %.4f\n", $0, $2 / b }' "$out/gpt2-table.txt"
fi
exit $status
