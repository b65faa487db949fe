#!/usr/bin/env bash
# 2026-11-28, on an nvidia-h200: how far ahead layernorm_grad's rows
# kernel asks L2 for a thread's row, VKERN_LAYERNORM_PREFETCH=0 (none) to
# 3 rows of its own on, in one server; call 1 measured 1 against 0.
#   - verify layernorm_grad at 16384x768 as gpt2 runs it, at 2 ahead;
#   - vkern bench of layernorm_grad in its four forms at 16384x768, each
#     distance in turn, two rounds, with anchors.py's copy rate;
#   - gpt2 steps at 0, 1 and 2 ahead, alternating, as time allows.
# Run from the repository root with bin/ from `bash bench/prep-call.sh` and
# ../shared/bench/anchors.py copied to .anchors/anchors.py.
set -uo pipefail
NAME=call2
LIMIT=${LIMIT:-330}
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "build"
build_server bin/vkern || exit 1
step "verify"
VKERN_LAYERNORM_PREFETCH=2 VERIFY_TIMEOUT=60 verify verify-ln-gpt2 --op layernorm_grad \
  --shape 16384x768:residual=1,dx_sum=1 --shape 16384x768:dx_sum=1 --dist normal
step "anchors and bench"
shapes=(16384x768 16384x768:residual=1 16384x768:dx_sum=1 16384x768:residual=1,dx_sum=1)
python3 .anchors/anchors.py > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
for round in 1 2; do
  for ahead in 0 1 2 3; do
    VKERN_LAYERNORM_PREFETCH=$ahead bench_ops "ahead$ahead-$round" bin/vkern "$out/anchors.jsonl" layernorm_grad "${shapes[@]}"
  done
done
floor_shares
step "gpt2 steps, alternating"
one() {
  local tag=$1; shift
  [ "$(left)" -gt 15 ] || { echo "$tag: no time left"; return; }
  env "$@" ./bin/vkern bench --suite train --backend cuda --model gpt2 --batch 16 --steps 30 --warmup 10 \
    --json "$out/step-$tag.json" > "$out/step-$tag.txt" 2>&1
  printf '%-14s %s\n' "$tag" "$(grep -E '^train_' "$out/step-$tag.txt" | head -1)"
}
one ahead0-1 VKERN_LAYERNORM_PREFETCH=0
one ahead2-1 VKERN_LAYERNORM_PREFETCH=2
one ahead1-1 VKERN_LAYERNORM_PREFETCH=1
one ahead1-2 VKERN_LAYERNORM_PREFETCH=1
one ahead2-2 VKERN_LAYERNORM_PREFETCH=2
one ahead0-2 VKERN_LAYERNORM_PREFETCH=0
