#!/usr/bin/env bash
# One GPU call for the training ops at GPT-2's shapes (each op's Bench shapes
# in op/*.go: B=16, T=1024, C=768, H=12, V=50257), in parts, run in this
# order; name some to run only those:
#   bench   anchors.py (the copy bandwidth and cuBLAS rates of the floor) and
#           bench/op_anchors.py (each case's PyTorch equivalent), then
#           vkern bench --suite ops on the same cases against those anchors
#   verify  vkern verify of every op at its default shapes
#   gpt2    vkern verify of each training op at its Bench shapes, every
#           distribution (products over 2^33 multiply-adds are sampled)
# and the table of the bench part last. Expects bin/vkern built from this
# tree (for `vkern bench --list`) and a copy of ../shared/bench/anchors.py at
# $ANCHORS (default .anchors/anchors.py). Logs and reports go under $OUT.
#   bash bench/cuda-train-ops-run.sh             # all three
#   bash bench/cuda-train-ops-run.sh gpt2        # the large verification alone
#   OPS=linear,attention bash bench/cuda-train-ops-run.sh bench
set -uo pipefail
out=${OUT:-/tmp/vkern-out}
anchors=${ANCHORS:-.anchors/anchors.py}
mkdir -p "$out"
export VKERN_CACHE=${VKERN_CACHE:-/tmp/vkern-cache}
vk=bin/vkern
# The training ops ($OPS chooses some); gemm, softmax and cross_entropy are
# cuda-ops-run.sh's.
ops=${OPS:-add,gelu,gelu_grad,layernorm,layernorm_grad,embedding,embedding_grad,linear,linear_grad_w,linear_grad_x,linear_nt,bias_grad,attention,attention_grad,global_norm,adamw,fill}
parts=${*:-bench verify gpt2}
start=$(date +%s)
status=0
step() { printf '\n=== %s (at %d s)\n' "$*" $(( $(date +%s) - start )); }
# fail NAME: say that a step failed, show the tail of its stderr, and
# remember it for the exit status.
fail() { status=1; echo "FAILED: $1 (stderr tail below; whole in $out/$1.stderr)"; tail -5 "$out/$1.stderr"; }

# The cases the ops suite times: OP ANCHOR SHAPE, one a line.
$vk bench --suite ops --op "$ops" --list > "$out/cases.txt" ||
  { echo "vkern bench --list failed: bin/vkern must be built from this tree, and \$OPS name ops"; exit 2; }

bench_part() {
  step "anchors: copy and cuBLAS rates (anchors.py), then each case's PyTorch equivalent (op_anchors.py)"
  python3 "$anchors" --gemm 4096x4096x4096 8192x8192x8192 > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || fail anchors
  awk '{print $2 "=" $3}' "$out/cases.txt" | xargs python3 bench/op_anchors.py \
    >> "$out/anchors.jsonl" 2> "$out/op-anchors.stderr" || fail op-anchors
  echo "$(wc -l < "$out/anchors.jsonl") anchor lines in $out/anchors.jsonl"
  step "vkern bench --suite ops --backend cuda, $(wc -l < "$out/cases.txt") cases"
  $vk bench --suite ops --backend cuda --op "$ops" --anchors "$out/anchors.jsonl" \
    --json "$out/bench-ops.json" --svg "$out/bench-ops.svg" > "$out/bench-ops.txt" 2> "$out/bench-ops.stderr" || fail bench-ops
  [ -s "$out/bench-ops.json" ] && table > "$out/table.txt"
}

verify_part() {
  step "vkern verify --backend cuda, every op at its default shapes"
  $vk verify --backend cuda --json "$out/verify-default.json" --md "$out/verify-default.md" \
    > "$out/verify-default.txt" 2> "$out/verify-default.stderr" || fail verify-default
  tail -n +2 "$out/verify-default.txt"
}

gpt2_part() {
  step "vkern verify --backend cuda, each training op at its Bench shapes"
  local o
  for o in ${ops//,/ }; do
    local shapes=() log=verify-gpt2-$o t0=$(date +%s)
    mapfile -t shapes < <(awk -v o="$o" '$1 == o {print "--shape"; print $3}' "$out/cases.txt")
    if $vk verify --backend cuda --op "$o" "${shapes[@]}" --json "$out/$log.json" --md "$out/$log.md" \
      > "$out/$log.txt" 2> "$out/$log.stderr"; then
      printf '%-52s %d s\n' "$(grep "^$o " "$out/$log.txt")" $(( $(date +%s) - t0 ))
    else
      tail -n +2 "$out/$log.txt"; fail "$log"
    fi
  done
}

# table prints one line per case of bench-ops.json: vkern's median, the
# anchor's (ratio × ours), their ratio (above 1: vkern faster), the share of
# the floor, and the bars of issue 11: half the floor for every op, the
# math-backend SDPA's speed for attention, 0.9 of F.linear for linear.
table() {
  python3 - "$out/bench-ops.json" <<'EOF'
import json, re, sys
results = json.load(open(sys.argv[1]))["results"]
bars = {"linear": 0.9, "attention": 1.0}
print(f"{'op':<15} {'shape':<23} {'vkern ms':>9} {'anchor ms':>9} {'ratio':>6} {'floor':>6}  {'bars':<33} anchor")
for r in results:
    op, shape = re.match(r"(.*?)_(\d.*)", r["name"]).groups()
    ms, ratio, share = r["median_ns"] / 1e6, r.get("ratio", 0), r.get("floor_share", 0)
    met = [f"floor≥0.5 {'met' if share >= 0.5 else 'NOT met'}"]
    if op in bars:
        met.append(f"ratio≥{bars[op]:g} {'met' if ratio >= bars[op] else 'NOT met'}")
    anchor_ms = f"{ratio * ms:9.4f}" if ratio else f"{'-':>9}"
    print(f"{op:<15} {shape:<23} {ms:9.4f} {anchor_ms} {ratio:6.3f} {share:6.2f}  {', '.join(met):<33} {r.get('anchor', 'none')}")
EOF
}

# pack: the device tool returns at most 8 files, so everything but the
# summary files goes into one archive, also when the run is cut short.
pack() {
  trap - EXIT TERM INT
  (cd "$out" && find . -maxdepth 1 -type f ! -name logs.tar.gz ! -name table.txt ! -name bench-ops.json \
      ! -name anchors.jsonl ! -name bench-ops.svg -printf '%f\n' | tar czf logs.tar.gz --remove-files -T - 2>/dev/null)
}
trap 'pack; exit 143' TERM INT
trap pack EXIT

step "device"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader
step "vkern build --backend cuda"
$vk build --backend cuda > "$out/build.txt" 2> "$out/build.stderr" || { fail build; exit 1; }
for part in $parts; do
  case $part in
    bench) bench_part ;;
    verify) verify_part ;;
    gpt2) gpt2_part ;;
    *) echo "unknown part $part: want bench, verify or gpt2"; status=2 ;;
  esac
done
if [ -s "$out/table.txt" ]; then
  step "the training ops against PyTorch (ratio: anchor time / vkern's; floor: its share, bytes over copy or flops over cuBLAS)"
  cat "$out/table.txt"
fi
exit $status
