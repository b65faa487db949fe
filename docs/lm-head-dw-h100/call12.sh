#!/usr/bin/env bash
# kDepthClassL as the default (WideDC, the staged epilogue in three stages,
# call 11's faster variant), and every training op against PyTorch at
# GPT-2's shapes with the head's three products now read in place:
#   - verify the depth classes on their default path: linear_grad_w at
#     call 11's odd shapes and gemm_grad_b (its A is the same MN-major L),
#     all three distributions; the gemm family at its default shapes;
#   - the depth classes' five planted defects, without the opt-in;
#   - bench/cuda-train-ops-run.sh's bench and verify parts for every
#     training op and linear_nt (anchors.py and op_anchors.py in the same
#     call), its files under ops/;
#   - with the time left, the head's dW at the distributions call 11 did
#     not run (integer, special).
# Run from the repository root with bin/ from `bash bench/prep-call.sh` and
# ../shared/bench/anchors.py copied to .anchors/anchors.py.
set -uo pipefail
NAME=call12
LIMIT=540
source bench/call-lib.sh
step "build"
build_server bin/vkern || exit 1
step "verify"
verify verify-gemm-family --op linear,linear_grad_w,linear_nt,linear_grad_x,gemm,gemm_grad_a,gemm_grad_b
verify verify-depth-classes --op linear_grad_w --shape 2051x768x4097 --shape 1025x520x4097:accumulate=1 \
  --shape 1024x520x4099 --dist integer --dist normal --dist special
verify verify-depth-classes-grad-b --op gemm_grad_b --shape 2051x768x4097 --shape 1031x1024x4099 \
  --dist integer --dist normal --dist special
step "planted defects of the depth's row classes"
run defects timeout 150 ./bin/vkern.test \
  -test.run 'TestPlantedDefectsInTheCUDAKernelsAreIncorrect/^Hopper_depth_classes' -test.v
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt" | tail -7
step "the training ops against PyTorch"
OUT=$out/ops OPS=add,gelu,gelu_grad,layernorm,layernorm_grad,embedding,embedding_grad,linear,linear_grad_w,linear_nt,bias_grad,attention,attention_grad,global_norm,adamw,fill \
  timeout $(( $(left) - 60 )) bash bench/cuda-train-ops-run.sh bench verify > "$out/ops.txt" 2>&1
echo "ops: rc=$?"
grep -E '^(=== |FAILED|PASSED|INCORRECT)' "$out/ops.txt"
step "the head's dW, integer and special"
[ "$(left)" -gt 130 ] && VERIFY_TIMEOUT=$(( $(left) - 15 )) verify verify-head-dw --op linear_grad_w \
  --shape 16384x768x50257 --dist integer --dist special
cat "$out/ops/table.txt" 2>/dev/null
