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
