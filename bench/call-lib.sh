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
