#!/usr/bin/env bash
# For an H200 (or H100) call: WideST, the Hopper GEMM's plain f16 stores made
# by the bulk copy engine (TMA) from the staged epilogue's buffers, two a
# warp in turn, against WideS's lanes storing them (VKERN_GEMM_TMA_STORE=1
# against unset) in the same server. Written 2026-11-28 at the end of a
# session with no device time left; run the next session, rebased on main's
# review mends, which it verifies too.
#   - ptxas's registers, stack and spills of WideST's instances;
#   - the bulk stores' planted defects and the staged epilogue's rounding
#     defects (background);
#   - the conformance suite of the matrix products with the bulk stores;
#   - verify at shapes mixing whole and edge tiles, and at GPT-2's plain f16
#     products (sampled);
#   - vkern bench of GPT-2's plain f16 products, each setting in turn,
#     twice, with anchors.py's rates;
#   - gpt2 (B 16), 6 steps each way: the same losses, norms and bytes;
#   - gpt2 steps, alternating, as time allows.
# Run from the repository root with bin/ from `bash bench/prep-call.sh` and
# ../shared/bench/anchors.py copied to .anchors/anchors.py.
set -uo pipefail
NAME=call1
LIMIT=${LIMIT:-540}
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "build"
build_server bin/vkern || exit 1
kernel_resources product_wgmma
grep -E '^256,4,1,1,1,' "$out/resources-product_wgmma.txt"
step "planted defects (background), conformance"
timeout 300 ./bin/vkern.test -test.v \
  -test.run "TestPlantedDefectsInTheCUDAKernelsAreIncorrect/(Hopper_bulk_stores|Hopper:_staged_f16_epilogue)" \
  > "$out/defects.txt" 2>&1 &
defects=$!
VKERN_GEMM_TMA_STORE=1 run conformance timeout 200 ./bin/vkern.test -test.v \
  -test.run '^TestCUDABackendConformance$/^(linear|linear_nt|linear_grad_x|gemm|gemm_grad_a|gemm_grad_b)$'
grep -E '^(    )?--- (PASS|FAIL|SKIP)|^(ok|FAIL|PASS)' "$out/conformance.txt" | tail -7
step "verify"
# f16 outputs only (gemm's is f32): linear and linear_nt are M×N, gemm_grad_a
# and linear_grad_x M×K.
VKERN_GEMM_TMA_STORE=1 VERIFY_TIMEOUT=120 verify verify-mixed --op linear,linear_nt \
  --shape 4000x2000x256 --shape 4096x2048x264 --shape 4096x1920x200
VKERN_GEMM_TMA_STORE=1 VERIFY_TIMEOUT=120 verify verify-mixed-dx --op gemm_grad_a,linear_grad_x \
  --shape 4000x256x2000 --shape 4096x264x2048 --shape 4096x200x1920
VKERN_GEMM_TMA_STORE=1 VERIFY_TIMEOUT=150 verify verify-gpt2 --op linear --shape 16384x2304x768 --dist normal
VKERN_GEMM_TMA_STORE=1 VERIFY_TIMEOUT=150 verify verify-head --op linear_nt --shape 16384x50304x768:bias=0 --dist normal
# main's two review mends (9f1bab5: prefetch_pre through vk_prefetch_l2;
# f5d53d8: layernorm's pairs chosen under if constexpr), first built here.
VERIFY_TIMEOUT=120 verify verify-mends --op layernorm,linear_grad_x
VERIFY_TIMEOUT=120 verify verify-mends-gpt2 --op linear_grad_x --shape 16384x768x3072:gelu=1 --dist normal
step "anchors and bench"
python3 .anchors/anchors.py > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
for round in 1 2; do
  for setting in 0 1; do
    [ "$(left)" -gt 200 ] || break
    VKERN_GEMM_TMA_STORE=$setting bench_ops "tma$setting-$round" bin/vkern "$out/anchors.jsonl" \
      linear 16384x2304x768
    VKERN_GEMM_TMA_STORE=$setting bench_ops "tma$setting-$round" bin/vkern "$out/anchors.jsonl" \
      linear_nt 16384x50304x768:bias=0
    VKERN_GEMM_TMA_STORE=$setting bench_ops "tma$setting-$round" bin/vkern "$out/anchors.jsonl" \
      gemm_grad_a 16384x2304x768 16384x3072x768 16384x768x768
  done
done
floor_shares
step "gpt2, 6 steps each way"
gpt2_parity lanes "VKERN_GEMM_TMA_STORE=0" bulk "VKERN_GEMM_TMA_STORE=1"
wait $defects
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt"
echo "defects caught: $(grep -cE '^    --- PASS' "$out/defects.txt"), missed: $(grep -cE '^    --- FAIL' "$out/defects.txt")"
step "gpt2 steps, alternating"
gpt2_step lanes-1 VKERN_GEMM_TMA_STORE=0
gpt2_step bulk-1 VKERN_GEMM_TMA_STORE=1
gpt2_step bulk-2 VKERN_GEMM_TMA_STORE=1
gpt2_step lanes-2 VKERN_GEMM_TMA_STORE=0
