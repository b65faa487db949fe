#!/usr/bin/env bash
# Call 12's planted defects of the depth's row classes did not finish
# within 150 s (call 11's took 75-82 s), and call 12's ops bench ran after
# them, with their children possibly still at work. This call:
#   - times the head's dW on the default path (kDepthClassL), with
#     VKERN_GEMM_DEPTH_CLASSES=0 (the padded copy) and at 50304, with
#     cuBLAS before and after, before anything else runs;
#   - runs the five defects with the time left, a snapshot of the busiest
#     processes at 60 s and 150 s into them.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call13
LIMIT=500
source bench/call-lib.sh
step "build"
build_server bin/vkern || exit 1
step "anchors and bench"
python3 bench/op_anchors.py linear_grad_w=16384x768x50304 > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
bench_ops "classes" bin/vkern "$out/anchors.jsonl" linear_grad_w 16384x768x50257
VKERN_GEMM_DEPTH_CLASSES=0 bench_ops "padded" bin/vkern "$out/anchors.jsonl" linear_grad_w 16384x768x50257 16384x768x50304
bench_ops "classes-again" bin/vkern "$out/anchors.jsonl" linear_grad_w 16384x768x50257
python3 bench/op_anchors.py linear_grad_w=16384x768x50304 > "$out/anchors-after.jsonl" 2> "$out/anchors-after.stderr" || echo "anchors: FAILED"
tables
step "planted defects of the depth's row classes"
snap() { sleep "$1"; { date; ps -eo pid,etime,pcpu,rss,args --sort=-pcpu | cut -c1-200 | head -25; nvidia-smi; } > "$out/ps-$1.txt" 2>&1; }
snap 60 & snap 150 &
run defects timeout $(( $(left) - 10 )) ./bin/vkern.test \
  -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^Hopper_depth_classes' -test.v
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt" | tail -7
kill %1 %2 2> /dev/null
