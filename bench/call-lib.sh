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
#               ncu-TAG-*.txt; prints the headline metrics. (In calls 2-4 of
#               docs/lm-head-class-tiles-h100 the kernel server did not start
#               under ncu; bench/gemm_lab.cu is the way that has worked.)
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
  ncu --import "/tmp/$tag.ncu-rep" --page details > "$out/ncu-$tag-details.txt" 2>&1
  ncu -i "/tmp/$tag.ncu-rep" --page source --print-source sass --csv > "/tmp/$tag-sass.csv" 2>&1
  python3 bench/ncu_sass_summary.py "/tmp/$tag-sass.csv" > "$out/ncu-$tag-sass-summary.txt" 2>&1
  grep -E '^    (Duration|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|DRAM Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Registers Per Thread|Shared Memory Configuration Size)' "$out/ncu-$tag-details.txt" | head -14
  tail -12 "$out/ncu-$tag-sass-summary.txt"
}
