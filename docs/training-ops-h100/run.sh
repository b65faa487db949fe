#!/usr/bin/env bash
# The training ops at GPT-2's shapes on main, and where a gpt2 step's time
# goes: bench/cuda-train-ops-run.sh's bench and verify parts (every
# training op against its PyTorch anchor and floor; every op verified at
# its default shapes), then gpt's TestProfileStep at B 16 (each call of a
# step timed by the server). Run from the repository root with bin/ from
# `bash bench/prep-call.sh` and ../shared/bench/anchors.py copied to
# .anchors/anchors.py.
set -uo pipefail
NAME=run
LIMIT=420
source bench/call-lib.sh
step "build"
build_server bin/vkern || exit 1
step "training ops: bench and verify"
OUT=$out/ops bash bench/cuda-train-ops-run.sh bench verify > "$out/run-bench-verify.txt" 2>&1 || echo "train ops: FAILED"
tail -40 "$out/run-bench-verify.txt"
step "gpt2 step profile, B 16"
(cd gpt && VKERN_PROFILE=cuda timeout 120 ../bin/gpt.test -test.run TestProfileStep -test.v) > "$out/profile-gpt2-b16.txt" 2>&1 ||
  echo "profile: FAILED"
head -40 "$out/profile-gpt2-b16.txt"
