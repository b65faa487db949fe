#!/usr/bin/env bash
# The gpt2 and char steps on attention's variants 15-17 (merged as 27b5404),
# and the checks of a real run. Written and run on 2026-11-28, on an H200
# (no H100 was lent that day):
#   - the kernel servers of bin/vkern (main at 27b5404) and bin/vkern-base
#     (main before the merge, 5d3bdf8), built in parallel;
#   - gpt2 at B = 16: bench/cuda-train-bench.sh (PyTorch eager and
#     torch.compile, then vkern), then vkern-base, vkern and vkern-base
#     again against the same anchors;
#   - char at B = 64, the issue's batch, the same way (vkern alone);
#   - gpt2's step call by call (gpt's TestProfileStep);
#   - vkern train --verify-every 5 on a real char run (20 steps) and gpt's
#     whole-step check on cuda.
# Here: bash bench/prep-call.sh 5d3bdf8, bin/corpus.txt (the first 20 MB
# of the Go sources), then with bin/ carried: bash docs/attention-copies-h200/call2.sh
set -uo pipefail
NAME=call2
LIMIT=560
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "servers: main and its base, in parallel"
build_server bin/vkern-base > "$out/server-base-status.txt" 2>&1 &
base_pid=$!
build_server bin/vkern || exit 1
wait $base_pid
cat "$out/server-base-status.txt"
step "gpt2, B 16: PyTorch, then vkern; then base, new, base against the same anchors"
args=(--batch 16 --steps 30 --warmup 10)
OUT=$out/train MODELS=gpt2 bash bench/cuda-train-bench.sh "${args[@]}" > "$out/train.txt" 2>&1
tail -6 "$out/train.txt"
for tag in base-1 new-2 base-2; do
  bin=bin/vkern; [ "${tag%-*}" = base ] && bin=bin/vkern-base
  "$bin" bench --suite train --backend cuda --model gpt2 "${args[@]}" --anchors "$out/train/train-anchors.jsonl" \
    --json "$out/train-$tag.json" > "$out/train-$tag.txt" 2>&1 || echo "train-$tag: FAILED"
  printf '%-7s %s\n' "$tag" "$(grep -E "^train_gpt2|torch.compile" "$out/train-$tag.txt" | tr -s " " | paste -sd " ")"
done
step "char, B 64"
[ "$(left)" -gt 200 ] &&
  OUT=$out/char MODELS=char bash bench/cuda-train-bench.sh --batch 64 --steps 30 --warmup 10 > "$out/char.txt" 2>&1
tail -6 "$out/char.txt"
step "gpt2's step call by call"
[ "$(left)" -gt 120 ] &&
  run profile-gpt2-b16 env VKERN_PROFILE=cuda VKERN_PROFILE_MODEL=gpt2 VKERN_PROFILE_B=16 \
    ./bin/gpt.test -test.run 'TestProfileStep$' -test.v
grep -E '^(attention|kernels)' "$out/profile-gpt2-b16.txt"
step "vkern train --verify-every 5: char, 20 steps"
[ "$(left)" -gt 100 ] &&
  run verify-every-char timeout $(( $(left) - 40 )) bin/vkern train --backend cuda --model char --data bin/corpus.txt \
    --steps 20 --verify-every 5 --eval-every 1000 --sample 0 --out "$out/run-verify-char"
rm -rf "$out/run-verify-char"
grep -E 'verif|vkern train:' "$out/verify-every-char.txt" | tail -6
step "the whole step on cuda against the float64 model"
[ "$(left)" -gt 40 ] &&
  (cd gpt && run wholestep timeout $(( $(left) - 10 )) ../bin/gpt.test -test.run 'TestAStepOnCUDAMatchesTheFloat64Model' -test.v)
grep -E '^(--- |ok|PASS|FAIL)' "$out/wholestep.txt" | tail -3
step "table"
cat "$out/train/table.txt" 2>/dev/null
for tag in base-1 new-2 base-2; do printf '%-7s %s\n' "$tag" "$(grep -E "^train_gpt2|torch.compile" "$out/train-$tag.txt" | tr -s " " | paste -sd " ")"; done
cat "$out/char/table.txt" 2>/dev/null
