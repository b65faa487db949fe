#!/usr/bin/env bash
# One call on a GPU machine: a cold build of the cuda kernel server, timed,
# with each translation unit's compile time from the build's manifest, then
# the cuda conformance suite (TestCUDABackendConformance) on that server.
# With BEFORE=path/to/an/older/vkern, that binary's cold build is timed
# first, in the same call, as the anchor (a unity build: one nvcc process).
# Two steps:
#
#   bash bench/cuda-build-run.sh build   # here, with Go: bin/vkern and bin/vkern.test
#   bash bench/cuda-build-run.sh         # there, from the repository root, nvcc on PATH
#
# The binaries are static (CGO_ENABLED=0) and carry the kernel sources.
# Writes the manifests, build logs and test output under $OUT; exits
# non-zero when the build fails, a test fails, or the tests skipped.
set -uo pipefail
if [ "${1:-}" = build ]; then
  set -e
  cd "$(dirname "$0")/.."
  CGO_ENABLED=0 go build -o bin/vkern ./cmd/vkern
  CGO_ENABLED=0 go test -c -o bin/vkern.test .
  ls -l bin/vkern bin/vkern.test
  exit 0
fi
out=${OUT:-/tmp/vkern-out}
mkdir -p "$out"
status=0
step() { printf '\n=== %s\n' "$*"; }

step machine
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "$(nproc) CPUs; $(uptime)"
command -v nvcc >/dev/null && nvcc --version | tail -2

# cold_build NAME VKERN: a build of the cuda server into an empty cache,
# its wall time, and the units' times from the manifest. Leaves the cache
# in $cache.
cold_build() {
  local name=$1 vk=$2 start end manifest
  cache=$(mktemp -d)
  start=$(date +%s.%N)
  if ! VKERN_CACHE=$cache "$vk" build --backend cuda > "$out/$name-build.txt" 2>&1; then
    cat "$out/$name-build.txt"
    return 1
  fi
  end=$(date +%s.%N)
  manifest=$(ls "$cache"/*/manifest.json)
  cp "$manifest" "$out/$name-manifest.json"
  cp "$(dirname "$manifest")/build.log" "$out/$name-build.log"
  echo "$name: cold vkern build --backend cuda, $(awk "BEGIN { printf \"%.1f\", $end - $start }") s wall (detection included)"
  python3 - "$manifest" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
units = m.get("units") or [m.get("main")]
secs = m.get("unit_seconds") or [m["build_seconds"]]
print(f"  build {m['build_seconds']:.1f} s: {len(units)} units, {sum(secs):.1f} s of compiles, link {m.get('link_seconds', 0):.1f} s")
for u, s in sorted(zip(units, secs), key=lambda p: -p[1]):
    print(f"  {s:7.1f} s  {u}")
EOF
}

if [ -n "${BEFORE:-}" ]; then
  step "anchor: cold build with $BEFORE"
  cold_build before "$BEFORE" || status=1
  rm -rf "$cache"
fi

step "cold build with bin/vkern"
if ! cold_build split bin/vkern; then
  echo "the cuda build failed"
  exit 1
fi

# The conformance suite on the server just built (a cache hit).
step "TestCUDABackendConformance"
VKERN_CACHE=$cache bin/vkern.test -test.run '^TestCUDABackendConformance$' -test.v 2>&1 | tee "$out/cuda-conformance.txt" |
  grep -E '^(--- |PASS|FAIL|ok)' || status=1
grep -q -- '--- FAIL' "$out/cuda-conformance.txt" && status=1
grep -q -- '--- SKIP' "$out/cuda-conformance.txt" && { echo "the tests skipped: is nvcc on PATH and the GPU visible?"; status=1; }
grep -q '^PASS' "$out/cuda-conformance.txt" || status=1
rm -rf "$cache"
exit $status
