#!/usr/bin/env bash
# Builds here what a GPU call carries in bin/ (run's carry: ["bin"]): the
# CLI, the root package's and gpt's test binaries, and the kernel sources
# the labs compile (bench/labsrc). With a base commit, also that commit's
# CLI into bin/vkern-base (its kernel server inside: cuda-pending.sh's
# unaligned part), its lab sources into bin/labsrc-base (labab) and its gpt
# tests, with this tree's gpt/profile_test.go and gpt/gpt_test.go for
# BenchmarkStepTransfers, into bin/gpt-base.test (the transfers part; left
# out, with a message, where the base's gpt package cannot take them).
# Then the checks a GPU call would otherwise be the first to fail: the
# planted defects' snippets against the sources, and the Hopper code's
# syntax (.ci/sm90-syntax-check).
#   bash bench/prep-call.sh [BASE]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
base=${1:-}

CGO_ENABLED=0 go build -o bin/vkern ./cmd/vkern
CGO_ENABLED=0 go test -c -o bin/vkern.test .
CGO_ENABLED=0 go test -c -o bin/gpt.test ./gpt
rm -rf bin/labsrc
go run ./bench/labsrc bin/labsrc > /dev/null
if [ -n "$base" ]; then
  wt=$(mktemp -d)
  rmdir "$wt"
  git worktree add -q "$wt" "$base"
  trap 'git -C "$root" worktree remove --force "$wt"' EXIT
  rm -rf bin/labsrc-base bin/gpt-base.test bin/vkern-base
  (cd "$wt" && go run ./bench/labsrc "$root/bin/labsrc-base" > /dev/null)
  (cd "$wt" && CGO_ENABLED=0 go build -o "$root/bin/vkern-base" ./cmd/vkern)
  cp gpt/profile_test.go gpt/gpt_test.go "$wt/gpt/"
  if ! (cd "$wt" && CGO_ENABLED=0 go test -c -o "$root/bin/gpt-base.test" ./gpt 2> /dev/null); then
    echo "prep-call: $base's gpt package does not build with this tree's profile tests; no bin/gpt-base.test"
  fi
fi
go test . -run 'TestPlantedDefectSnippetsMatchTheSources' -count=1
bash .ci/sm90-syntax-check
du -sh bin
