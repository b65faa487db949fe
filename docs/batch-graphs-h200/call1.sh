#!/usr/bin/env bash
# A repeated RUN_BATCH replayed as a CUDA graph (kernels/cuda/device.cu,
# BatchGraphs; branch batch-graphs): its first nvcc build, its tests, the
# same bits as launching entry by entry, and the training steps with and
# without it. Written on 2026-11-28 for an H200 (no H100 was lent that
# day); each figure is a ratio within this call.
#   - the kernel server (bin/vkern), then replay_test.go's CUDA tests
#     (bin/vkern.test): a batch run seven times with new data, each run's
#     outputs checked exactly, its graph log's counts, VKERN_GRAPHS=0, and
#     a bad VKERN_GRAPHS refused;
#   - vkern train, char (20 steps, B 32) and gpt2 (10 steps, B 16), with
#     VKERN_GRAPHS=0 and =1: the checkpoints' four files compared byte for
#     byte, and each run's graph log;
#   - char at B 64 and gpt2 at B 16: bench/cuda-train-bench.sh (PyTorch
#     eager and torch.compile, then vkern with graphs), then vkern with
#     VKERN_GRAPHS=0, =1 and =0 again against the same anchors;
#   - where gpt2's gradient batch was refused a graph, the same with
#     VKERN_BIAS_GRAD_SPANS=0 (bias_grad's cooperative launch is the one
#     launch of that batch a capture might not take).
# Here: bash bench/prep-call.sh, bin/corpus.txt (the first 20 MB of the Go
# sources); then with bin/ carried: bash docs/batch-graphs-h200/call1.sh
set -uo pipefail
NAME=call1
LIMIT=${LIMIT:-400}
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "the kernel server"
build_server bin/vkern || exit 1
step "replay_test.go on cuda"
run tests timeout 120 ./bin/vkern.test -test.run 'TestCUDAReplaysARepeatedBatch|TestCUDARefusesAnUnknownGraphsSetting' -test.v
grep -E '^(=== RUN|--- |    --- |ok|PASS|FAIL)|replay_test' "$out/tests.txt" | head -20
step "the same bits: vkern train with VKERN_GRAPHS=0 and =1"
same_bits() {  # same_bits MODEL BATCH STEPS
  local m=$1 b=$2 steps=$3 g
  for g in 0 1; do
    [ "$(left)" -gt 60 ] || return
    VKERN_GRAPHS=$g VKERN_GRAPHS_LOG=$out/graphs-train-$m-$g.log run "train-$m-graphs$g" timeout 120 bin/vkern train \
      --backend cuda --model "$m" --data bin/corpus.txt --batch "$b" --steps "$steps" --eval-every 1000 --sample 0 \
      --out "/tmp/run-$m-$g"
    grep -E 'median|vkern train:' "$out/train-$m-graphs$g.txt" | sed "s/^/graphs $g: /"
  done
  for f in config.json model.safetensors optimizer.safetensors train_state.json; do
    if cmp -s "/tmp/run-$m-0/$f" "/tmp/run-$m-1/$f"; then echo "$m $f: the same bytes"; else echo "$m $f: DIFFER"; fi
  done | tee "$out/same-bits-$m.txt"
  cat "$out/graphs-train-$m-1.log"
  rm -rf "/tmp/run-$m-0" "/tmp/run-$m-1"
}
same_bits char 32 20
same_bits gpt2 16 10
step "steps: PyTorch, then vkern with graphs on and off in turn"
steps() {  # steps MODEL BATCH [ENV...]: anchors once, then 1, 0, 1, 0
  local m=$1 b=$2 tag g r
  shift 2
  local args=(--batch "$b" --steps 30 --warmup 10)
  [ -s "$out/$m/train-anchors.jsonl" ] ||
    OUT=$out/$m MODELS=$m VKERN_GRAPHS_LOG=$out/graphs-bench-$m.log bash bench/cuda-train-bench.sh "${args[@]}" \
      > "$out/$m.txt" 2>&1
  for r in 1 2; do
    for g in 0 1; do
      [ "$(left)" -gt 25 ] || return
      tag=$m${1:+-$1}-graphs$g-$r
      env "$@" VKERN_GRAPHS=$g bin/vkern bench --suite train --backend cuda --model "$m" "${args[@]}" \
        --anchors "$out/$m/train-anchors.jsonl" --json "$out/bench-$tag.json" > "$out/bench-$tag.txt" 2>&1 ||
        echo "bench-$tag: FAILED"
      printf '%-32s %s\n' "$tag" "$(grep -E "^train_|torch.compile|host's phases" "$out/bench-$tag.txt" | tr -s ' ' | paste -sd ' ')" |
        tee -a "$out/steps-table.txt"
    done
  done
}
steps char 64
steps gpt2 16
if grep -q refused "$out/graphs-bench-gpt2.log" 2>/dev/null; then
  step "gpt2 with bias_grad's tiles (VKERN_BIAS_GRAD_SPANS=0)"
  steps gpt2 16 VKERN_BIAS_GRAD_SPANS=0
fi
step "table"
cat "$out/same-bits-char.txt" "$out/same-bits-gpt2.txt" 2>/dev/null
cat "$out"/graphs-*.log 2>/dev/null
cat "$out/char/table.txt" "$out/gpt2/table.txt" 2>/dev/null
cat "$out/steps-table.txt"
