# Sourced by a GPU call's script (bench/ or docs/*/callN.sh): the helpers
# every call uses. Set NAME (the call's name) and, optionally, LIMIT (the
# seconds the call may take, default 570) before sourcing. Outputs go under
# /tmp/$NAME; on exit they are tarred into $OUT/$NAME.tar.gz, which the
# device tool brings back.
#   left        seconds left before LIMIT
#   step WORDS  prints a heading with the time so far
#   run N CMD   runs CMD with its output in /tmp/$NAME/N.txt; prints "N: ok",
#               or "N: FAILED" and the output's last 25 lines
out=/tmp/$NAME
mkdir -p "$out"
export VKERN_CACHE=$PWD/.vkcache
start=$(date +%s)
left() { echo $(( ${LIMIT:-570} - ($(date +%s) - start) )); }
step() { printf '\n=== %s (at %d s)\n' "$*" $(( $(date +%s) - start )); }
run() { local n=$1; shift; if "$@" > "$out/$n.txt" 2>&1; then echo "$n: ok"; else echo "$n: FAILED"; tail -25 "$out/$n.txt"; fi; }
finish() { tar -czf "${OUT:-/tmp}/$NAME.tar.gz" -C /tmp "$NAME"; step done; }
trap finish EXIT
#   build_server BIN    builds BIN's cuda kernel server ("build-BIN.txt");
#               on failure prints the errors and returns 1
#   bench_ops TAG BIN ANCHORS OP SHAPE...
#               BIN's `vkern bench --suite ops` of OP at the shapes, with the
#               anchors of ANCHORS (bench/op_anchors.py's JSON lines), into
#               bench-TAG-OP.json
#   bench_table prints a line per result of every bench-*.json, oldest first
#   anchor_table FILE
#               prints a line per anchor of FILE (bench/op_anchors.py's JSON lines)
#   ncu_bench TAG SHIFT OP SHAPE
#               Nsight Compute (--set full) of the third product_wgmma launch
#               of `vkern bench` of OP at SHAPE, VKERN_GEMM_SHIFT=SHIFT, into
#               /tmp/TAG.ncu-rep, then ncu_report. (In calls 2-4 of
#               docs/lm-head-class-tiles-h100 the kernel server did not start
#               under ncu; bench/gemm_lab.cu is the way that has worked.)
#   ncu_server TAG KERNELS COUNT CMD...
#               runs CMD (a bin/vkern command) with its kernel server started
#               under Nsight Compute as its parent ($VKERN_SERVER_WRAPPER;
#               $VKERN_START_TIMEOUT 3m unless set), profiling COUNT launches
#               of the kernels whose names match the regex KERNELS (--set
#               full), after the first $NCU_SKIP (2) of them, into
#               /tmp/TAG.ncu-rep; ncu's own output in ncu-TAG-log.txt, the
#               processes 20 s in in ncu-TAG-ps.txt; within what is left
#               but 40 s (then SIGTERM, and SIGKILL 20 s on: vkern's Close
#               may wait minutes for ncu); then ncu_report. The way to
#               profile the server (under `ncu --target-processes all
#               bin/vkern …` it never started: docs/rows-ncu-h200); not yet
#               tried with ncu itself
#   tables      writes table.txt: bench_table, then anchor_table of
#               anchors.jsonl and of anchors-after.jsonl (its lines marked
#               "after", anchors measured after the rounds), and prints it
#   verify N ARGS...
#               `bin/vkern verify --backend cuda ARGS` into N.txt, within
#               VERIFY_TIMEOUT seconds (default 150); prints its verdict
#   build_lab [FLAGS...]
#               bench/gemm_lab.cu with the dispatcher's variants alone
#               (-DVKERN_GEMM_LAB_FEW) from bin/labsrc into /tmp/gemm_lab,
#               within 300 s, its log in lab-build.txt ending "lab build
#               rc=N"; in the background (build_lab & lab=$!; … wait $lab)
#               it overlaps the server's build
#   lab_times TAG CASES [ENV...]
#               the lab's cases (a comma-separated $GEMM_LAB_ONLY) at
#               variant 6 with the environment ENV into lab-TAG.txt;
#               prints a line of vkern's µs a case and cuBLAS's
#   ncu_lab TAG CASE
#               Nsight Compute (--set full) of the lab's third
#               product_wgmma launch at CASE (variant 6) into
#               /tmp/TAG.ncu-rep, then ncu_report
#   ncu_report TAG
#               the details page and SASS summary of /tmp/TAG.ncu-rep into
#               ncu-TAG-details.txt and ncu-TAG-sass-summary.txt; prints the
#               headline metrics, the stall reasons and the top opcodes
#               (ncu_bench and ncu_lab end with it)
#   ncu_counts TAG
#               DRAM and L2 counts of /tmp/TAG.ncu-rep into
#               ncu-TAG-counts.txt, printed
#   floor_shares
#               a line per bench-*.json, oldest first, into shares.txt and
#               printed: its tag, then each shape's µs and share of the
#               floor (vkern bench's floor_share, from anchors.py's copy or
#               matmul rate in the --anchors file)
#   train_steps [BIN [VAR=VALUE...]]
#               a gpt2 step (B 16, T 1024, 30 steps after 10) by
#               bench/cuda-train-bench.sh into train/ and train.txt, with
#               its PyTorch anchors; then, given BIN (default bin/vkern),
#               BIN's step with the variables set against the same anchors
#               into train-again.txt and .json; prints both medians
#   attention_labs NAME=SRC [NAME=SRC...]
#               bench/attention_lab.cu built from each SRC (bench/labsrc's
#               output, e.g. bin/labsrc-base from `bash bench/prep-call.sh
#               BASE`) to /tmp/lab-NAME, in parallel, nvcc's output in
#               lab-NAME-build.txt, with $ATTENTION_LAB_FLAGS_NAME's
#               nvcc flags where set; the Hopper kernels' registers,
#               spilled bytes and stack into ptxas.txt, a line per lab
#               printed
#   attention_rounds ROUNDS NAME...
#               each /tmp/lab-NAME at 16x1024x768x12 and 32x1024x768x12 in
#               turn, ROUNDS times, into lab-NAME-B-ROUND.txt; a line each
#               (the wgmma and mma.sync times in ms and the outputs' hashes)
#               into lab-table.txt, printed
#   kernel_resources KERNEL
#               cuobjdump's resource usage of the built server (in
#               $VKERN_CACHE) into resources.txt, then a line per instance
#               of the kernel KERNEL (a name, e.g. product_wgmma or
#               layernorm_grad_rows) into resources-KERNEL.txt: its integer
#               and bool template arguments in order, then its registers,
#               stack, local and shared memory
#   gpt2_parity A "VAR=VALUE ..." B "VAR=VALUE ..."
#               6 gpt2 steps (B 16, the kernels' text as data) with A's
#               variables, then with B's (either list may be empty), each
#               saved to /tmp/gpt2-A and /tmp/gpt2-B; into parity.txt and
#               printed: whether the steps' losses, norms and validation
#               losses are the same bits, and whether the checkpoints are
#               the same bytes
#   gpt2_step TAG [VAR=VALUE...]
#               a gpt2 `vkern bench --suite train` (B 16, 30 steps after
#               10) with the variables set, into step-TAG.json and .txt,
#               its line printed; skipped with a message when under 15 s
#               are left. Alternate the settings' calls to time them.
#   defects_start REGEX [VAR=VALUE...]
#               the planted CUDA defects whose subtest names match REGEX
#               (spaces as _), in the background (bin/vkern.test, 300 s at
#               most) with the variables set, into defects.txt
#   defects_wait
#               waits for defects_start's run, then prints each subtest's
#               line and the counts caught and missed
defects_start() {
  local regex=$1; shift
  env "$@" timeout 300 ./bin/vkern.test -test.run "TestPlantedDefectsInTheCUDAKernelsAreIncorrect/($regex)" \
    -test.v > "$out/defects.txt" 2>&1 &
  defects_pid=$!
}
defects_wait() {
  [ -n "${defects_pid:-}" ] || { echo "defects_wait: no defects_start"; return 1; }
  wait "$defects_pid"
  grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt"
  echo "defects caught: $(grep -cE '^    --- PASS' "$out/defects.txt"), missed: $(grep -cE '^    --- FAIL' "$out/defects.txt")"
}
gpt2_parity() {
  local a=$1 a_env=$2 b=$3 b_env=$4 tag env_words
  local args=(train --backend cuda --model gpt2 --batch 16 --steps 6 --warmup 2 --data kernels --eval-every 1000 --sample 0)
  for tag in "$a" "$b"; do
    [ "$tag" = "$a" ] && env_words=$a_env || env_words=$b_env
    # shellcheck disable=SC2086 # the variables are words
    run "train-$tag" env $env_words ./bin/vkern "${args[@]}" --out "/tmp/gpt2-$tag" --json "$out/train-$tag.json"
  done
  python3 - "$out/train-$a.json" "$out/train-$b.json" <<'PY' | tee "$out/parity.txt"
import json, sys
def steps(p):
    return [(s["step"], s["loss"], s.get("grad_norm"), s.get("val_loss")) for s in json.load(open(p))["steps"]]
x, y = steps(sys.argv[1]), steps(sys.argv[2])
print("gpt2 losses and norms:", "the same bits" if x == y and len(x) == 6 else "NOT the same", x[-1] if x else None)
PY
  for f in model.safetensors optimizer.safetensors; do
    cmp -s "/tmp/gpt2-$a/$f" "/tmp/gpt2-$b/$f" && echo "gpt2 $f: the same bytes" || echo "gpt2 $f: DIFFERENT"
  done | tee -a "$out/parity.txt"
}
gpt2_step() {
  local tag=$1; shift
  [ "$(left)" -gt 15 ] || { echo "$tag: no time left"; return; }
  env "$@" ./bin/vkern bench --suite train --backend cuda --model gpt2 --batch 16 --steps 30 --warmup 10 \
    --json "$out/step-$tag.json" > "$out/step-$tag.txt" 2>&1
  printf '%-14s %s\n' "$tag" "$(grep -E '^train_' "$out/step-$tag.txt" | head -1)"
}
tables() {
  bench_table > "$out/table.txt"
  [ -f "$out/anchors.jsonl" ] && anchor_table "$out/anchors.jsonl" >> "$out/table.txt"
  [ -f "$out/anchors-after.jsonl" ] && anchor_table "$out/anchors-after.jsonl" | sed 's/^anchor/after /' >> "$out/table.txt"
  cat "$out/table.txt"
}
floor_shares() {
  python3 - "$out" <<'PY' | tee "$out/shares.txt"
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench-*.json")), key=os.path.getmtime):
    rows = json.load(open(f))["results"]
    print(os.path.basename(f)[len("bench-"):-len(".json")], "  ".join(
        f"{r['name'].rsplit('_', 1)[-1]} {r['median_ns'] / 1e3:.1f} us {r.get('floor_share', 0):.3f}" for r in rows))
PY
}
train_steps() {
  local again=$#
  local bin=${1:-bin/vkern} args=(--batch 16 --steps 30 --warmup 10)
  [ $# -gt 0 ] && shift
  OUT=$out/train MODELS=gpt2 bash bench/cuda-train-bench.sh "${args[@]}" > "$out/train.txt" 2>&1
  tail -4 "$out/train.txt"
  [ "$again" -gt 0 ] && [ "$(left)" -gt 40 ] || return 0
  env "$@" "$bin" bench --suite train --backend cuda --model gpt2 "${args[@]}" \
    --anchors "$out/train/train-anchors.jsonl" --json "$out/train-again.json" > "$out/train-again.txt" 2>&1
  grep -E 'gpt2|torch.compile' "$out/train-again.txt" | head -3
}
verify() {
  local n=$1; shift
  run "$n" timeout "${VERIFY_TIMEOUT:-150}" bin/vkern verify --backend cuda "$@"
  grep -E 'PASSED|FAILED|INCORRECT' "$out/$n.txt" | tail -1
}
build_lab() {
  timeout 300 nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -DVKERN_GEMM_LAB_FEW "$@" -Ibin/labsrc \
    -o /tmp/gemm_lab bench/gemm_lab.cu -lcublas > "$out/lab-build.txt" 2>&1
  echo "lab build rc=$?" >> "$out/lab-build.txt"
}
lab_times() {
  local tag=$1 cases=$2; shift 2
  [ "$(left)" -gt 25 ] || return
  env "$@" GEMM_LAB_ONLY="$cases" timeout 60 /tmp/gemm_lab 6 > "$out/lab-$tag.txt" 2>&1
  printf '%-18s' "$tag"
  # A case line: its name (words before the MxNxK field), the shape,
  # cuBLAS's time ("…us"), TFLOP/s, then the ratio (cuBLAS / vkern) of
  # each variant run, variant 6's last.
  awk '$0 ~ /[0-9]+x[0-9]+x[0-9]+/ && $0 !~ /^#/ {
         for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+x[0-9]+x[0-9]+$/) break
         name = $1; for (j = 2; j < i; j++) name = name " " $j
         t = $(i + 1); sub("us", "", t)
         printf "  %s %.0f (cuBLAS %.0f)", name, t / $NF, t }' "$out/lab-$tag.txt"
  echo
}
ncu_lab() {
  local tag=$1 case=$2
  [ "$(left)" -gt 50 ] || return
  step "ncu: $tag ($case)"
  GEMM_LAB_ONLY="$case" timeout $(( $(left) - 25 )) ncu --clock-control none --set full --import-source no -k regex:product_wgmma \
    --launch-skip 2 -c 1 -f -o "/tmp/$tag" /tmp/gemm_lab 6 > "$out/ncu-$tag-run.txt" 2>&1
  echo "rc=$?"
  [ -f "/tmp/$tag.ncu-rep" ] || return
  ncu_report "$tag"
}
ncu_server() {
  local tag=$1 kernels=$2 count=$3
  shift 3
  [ "$(left)" -gt 60 ] || { echo "$tag: no time left"; return; }
  step "ncu, the server's parent: $tag ($kernels)"
  rm -f "/tmp/$tag.ncu-rep"
  # Who is whose parent, and in which group and state, 20 s in.
  (sleep 20; ps -eo pid,ppid,pgid,stat,etime,args | grep -E '[n]cu --log-file|/server$' > "$out/ncu-$tag-ps.txt") &
  local ps_pid=$!
  VKERN_START_TIMEOUT=${VKERN_START_TIMEOUT:-3m} \
    VKERN_SERVER_WRAPPER="ncu --log-file $out/ncu-$tag-log.txt -f -o /tmp/$tag --clock-control none --set full --import-source no -k regex:$kernels --launch-skip ${NCU_SKIP:-2} -c $count" \
    timeout -k 20 $(( $(left) - 40 )) "$@" > "$out/ncu-$tag-run.txt" 2>&1
  echo "rc=$?"
  kill "$ps_pid" 2>/dev/null
  wait "$ps_pid" 2>/dev/null
  [ -f "/tmp/$tag.ncu-rep" ] || { tail -3 "$out/ncu-$tag-run.txt"; tail -5 "$out/ncu-$tag-log.txt" 2>/dev/null; return; }
  ncu_report "$tag"
}
ncu_report() {
  local tag=$1
  ncu --import "/tmp/$tag.ncu-rep" --page details > "$out/ncu-$tag-details.txt" 2>&1
  ncu -i "/tmp/$tag.ncu-rep" --page source --print-source sass --csv > "/tmp/$tag-sass.csv" 2>&1
  python3 bench/ncu_sass_summary.py "/tmp/$tag-sass.csv" > "$out/ncu-$tag-sass-summary.txt" 2>&1
  grep -E '^    (Duration|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|DRAM Throughput|L2 Hit Rate|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Registers Per Thread)' \
    "$out/ncu-$tag-details.txt" | head -12
  sed -n '/stall reasons/,$p' "$out/ncu-$tag-sass-summary.txt" | head -6
  head -8 "$out/ncu-$tag-sass-summary.txt"
}
ncu_counts() {
  local tag=$1
  [ -f "/tmp/$tag.ncu-rep" ] || return
  ncu --import "/tmp/$tag.ncu-rep" --page raw --csv > "/tmp/$tag-raw.csv" 2>&1
  python3 - "/tmp/$tag-raw.csv" > "$out/ncu-$tag-counts.txt" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head, units, vals = rows[0], rows[1], rows[2]
want = ["gpu__time_duration.sum", "dram__bytes_read.sum", "lts__t_sectors_srcunit_tex_op_read.sum",
        "lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum", "lts__t_sectors.sum", "lts__t_bytes.sum",
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", "lts__throughput.avg.pct_of_peak_sustained_elapsed"]
for name in want:
    if name in head:
        i = head.index(name)
        print(f"{name:<72} {vals[i]:>16} {units[i]}")
PY
  cat "$out/ncu-$tag-counts.txt"
}
kernel_resources() {
  local kernel=$1 server
  server=$(find "$VKERN_CACHE" -name server -type f | head -1)
  [ -n "$server" ] || { echo "kernel_resources: no server built under $VKERN_CACHE"; return 1; }
  cuobjdump --dump-resource-usage "$server" > "$out/resources.txt" 2>&1
  python3 - "$out/resources.txt" "$kernel" > "$out/resources-$kernel.txt" <<'PY'
import re, sys
path, kernel = sys.argv[1], sys.argv[2]
name = None
for line in open(path):
    m = re.search(r"Function (\S*" + re.escape(kernel) + r"\S*):", line)
    if m:
        name = m.group(1)
        continue
    if name and "REG:" in line:
        tail = name[name.index(kernel) + len(kernel):]
        args = ",".join(a or b for a, b in re.findall(r"Li(-?\d+)E|Lb(\d)E", tail))
        print(args, " ".join(f for f in line.split() if f.split(":")[0] in ("REG", "STACK", "LOCAL", "SHARED")))
        name = None
PY
}
attention_labs() {
  local spec name flags pids=()
  for spec in "$@"; do
    name=${spec%%=*}
    [[ $name =~ ^[A-Za-z0-9_]+$ ]] || { echo "attention_labs: lab name \"$name\" must be letters, digits and _"; return 1; }
    flags=ATTENTION_LAB_FLAGS_$name  # more nvcc flags for this lab, e.g. -DVKERN_ATTENTION_HOPPER_FORWARD_MIN_BLOCKS=3
    rm -f "/tmp/lab-$name"
    # shellcheck disable=SC2086 # the flags are words
    timeout 240 nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v ${!flags:-} -I"${spec#*=}" \
      -o "/tmp/lab-$name" bench/attention_lab.cu > "$out/lab-$name-build.txt" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  for spec in "$@"; do
    name=${spec%%=*}
    [ -x "/tmp/lab-$name" ] || { echo "lab $name: build FAILED"; tail -5 "$out/lab-$name-build.txt"; continue; }
    awk -v lab="$name" '
      /Compiling entry function/ { k = ""; if (match($0, /(forward_hopper|backward_dkdv_hopper|backward_dq_hopper)/)) k = substr($0, RSTART, RLENGTH) }
      k != "" && /spill stores/ { stack = $1; spill = $5 }
      k != "" && /Used [0-9]+ registers/ { match($0, /Used [0-9]+/); printf "%s: %s %s registers, %s bytes spilled, %s bytes of stack\n", lab, k, substr($0, RSTART + 5, RLENGTH - 5), spill, stack; k = "" }
    ' "$out/lab-$name-build.txt" | tee -a "$out/ptxas.txt" | paste -sd ';' | cut -c1-330
    # ptxas serializes a kernel's wgmma (C7514, C7515) where non-wgmma
    # instructions read or write an accumulator of a wgmma still in its
    # pipeline stage: correct, but without the overlap.
    grep -i 'serialized' "$out/lab-$name-build.txt" | sed "s/^/$name: /" | tee -a "$out/ptxas.txt" | head -3 || true
  done
}
attention_rounds() {
  local rounds=$1 round name b
  shift
  for round in $(seq 1 "$rounds"); do
    for name in "$@"; do
      for b in 16 32; do
        [ -x "/tmp/lab-$name" ] || continue
        timeout 60 "/tmp/lab-$name" $b 1024 768 12 > "$out/lab-$name-$b-$round.txt" 2>&1 ||
          echo "lab $name B=$b round $round: rc $?"
        printf '%-5s B=%-3s r%s %s\n' "$name" $b $round \
          "$(grep -E '^(forward|backward), (wgmma|4 warps|mma.sync)|^bits' "$out/lab-$name-$b-$round.txt" | tr -s ' ' |
            sed -E 's/ [0-9.]+$//' | paste -sd ';')" | tee -a "$out/lab-table.txt"
      done
    done
  done
}
build_server() {
  local log="$out/build-$(basename "$1").txt"
  if ! "$1" build --backend cuda > "$log" 2>&1; then
    echo "build $1: FAILED"; grep -E 'error' "$log" | head -30; tail -20 "$log"; return 1
  fi
}
bench_ops() {
  local tag=$1 bin=$2 anchors=$3 op=$4 shapes=() s
  shift 4
  for s in "$@"; do shapes+=(--shape "$s"); done
  run "bench-$tag-$op" "$bin" bench --suite ops --backend cuda --op "$op" --runs "${RUNS:-20}" "${shapes[@]}" \
    --anchors "$anchors" --json "$out/bench-$tag-$op.json"
}
bench_table() {
  python3 - "$out" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench-*.json")), key=os.path.getmtime):
    tag = os.path.basename(f)[len("bench-"):-5]
    for r in json.load(open(f))["results"]:
        print(f"{tag:<26} {r['name']:<34} {r['median_ns'] / 1e6:9.4f} ms  ratio to {r.get('anchor', '-')[:14]}: {r.get('ratio', 0):.3f}")
PY
}
anchor_table() {
  python3 - "$1" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if l.strip():
        r = json.loads(l)
        print(f"anchor {r['op']:<12} {r['shape']:<24} {r['impl'][:40]:<40} {r['median_ms']:9.4f} ms")
PY
}
ncu_bench() {
  local tag=$1 shift=$2 op=$3 shape=$4
  [ "$(left)" -gt 90 ] || return
  step "ncu: $tag"
  VKERN_GEMM_SHIFT=$shift timeout $(( $(left) - 40 )) ncu --target-processes all --clock-control none --set full --import-source no \
    -k regex:product_wgmma --launch-skip 2 -c 1 -f -o "/tmp/$tag" \
    bin/vkern bench --suite ops --backend cuda --op "$op" --shape "$shape" --runs 3 > "$out/ncu-$tag-run.txt" 2>&1
  echo "rc=$?"
  [ -f "/tmp/$tag.ncu-rep" ] || { tail -5 "$out/ncu-$tag-run.txt"; return; }
  ncu_report "$tag"
}
