#!/usr/bin/env bash
# 2026-11-28, on an nvidia-h200 (no H100 was lent): the hand-off epilogue
# again (call 1: correct, the same bits, but slower: the finishing warps
# held 72 registers). Now every warp keeps the launch's 168 registers, the
# finishing warps ask L2 for a tile's side operand while they wait for it
# and keep 16 side loads in flight, and VKERN_GEMM_HANDOFF=f16 (f16128)
# hands off every f16 output of the wide tiles, the head's logits and the
# plain products among them. Each setting against VKERN_GEMM_HANDOFF=0 (the
# default) in the same server:
#   - ptxas's registers, stack and spills of the hand-off's instances;
#   - the planted GELU defects with "f16" (background);
#   - the conformance suite of the matrix-product family with "f16" and
#     "f16128";
#   - verify at shapes mixing handed-off and edge tiles, and at GPT-2's
#     GELU shapes (sampled);
#   - vkern bench of GPT-2's products with f16 outputs, each setting in
#     turn, twice, with anchors.py's rates;
#   - gpt2 (B 16), 6 steps with "0" and "f16": the same losses, norms and
#     checkpoint bytes;
#   - gpt2 steps, the settings alternating, as time allows.
# Run from the repository root with bin/ from `bash bench/prep-call.sh` and
# ../shared/bench/anchors.py copied to .anchors/anchors.py.
set -uo pipefail
NAME=call2
LIMIT=${LIMIT:-560}
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "build"
build_server bin/vkern || exit 1
kernel_resources product_wgmma
grep -E '^[^,]*,[^,]*,[^,]*,[^,]*,1,' "$out/resources-product_wgmma.txt" | head -40
echo "instances: $(wc -l < "$out/resources-product_wgmma.txt"), with a stack: $(grep -vc 'STACK:0 ' "$out/resources-product_wgmma.txt")"
step "planted GELU defects with the hand-off (background), conformance"
VKERN_GEMM_HANDOFF=f16 timeout 300 ./bin/vkern.test -test.run "TestPlantedDefectsInTheCUDAKernelsAreIncorrect/gelu" \
  -test.v > "$out/defects.txt" 2>&1 &
defects=$!
for setting in f16 f16128; do
  VKERN_GEMM_HANDOFF=$setting run "conformance-$setting" timeout 200 ./bin/vkern.test -test.v \
    -test.run '^TestCUDABackendConformance$/^(linear|linear_nt|linear_grad_x|gemm|gemm_grad_a|gemm_grad_b)$'
  grep -E '^(    )?--- (PASS|FAIL|SKIP)|^(ok|FAIL|PASS)' "$out/conformance-$setting.txt" | tail -7
done
step "verify"
for setting in f16 f16128; do
  VKERN_GEMM_HANDOFF=$setting VERIFY_TIMEOUT=120 verify "verify-$setting" --op linear --shape 4096x2048x256:gelu=1 \
    --shape 4000x2048x200:gelu=1 --shape 4000x2000x256:residual=1 --shape 4000x2000x256
  VKERN_GEMM_HANDOFF=$setting VERIFY_TIMEOUT=120 verify "verify-dx-$setting" --op linear_grad_x \
    --shape 4000x256x2048:gelu=1 --shape 4096x200x2048
  VKERN_GEMM_HANDOFF=$setting VERIFY_TIMEOUT=120 verify "verify-gemms-$setting" --op linear_nt,gemm,gemm_grad_a \
    --shape 4000x2000x256 --shape 4096x2048x264
done
VKERN_GEMM_HANDOFF=f16 VERIFY_TIMEOUT=150 verify verify-gpt2-f16 --op linear --shape 16384x3072x768:gelu=1 --dist normal
VKERN_GEMM_HANDOFF=f16 VERIFY_TIMEOUT=150 verify verify-gpt2-dx-f16 --op linear_grad_x \
  --shape 16384x768x3072:gelu=1 --dist normal
step "anchors and bench"
python3 .anchors/anchors.py > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
for round in 1 2; do
  for setting in 0 all all128 f16 f16128; do
    [ "$(left)" -gt 230 ] || break
    VKERN_GEMM_HANDOFF=$setting bench_ops "$setting-$round" bin/vkern "$out/anchors.jsonl" \
      linear 16384x3072x768:gelu=1 16384x768x3072:residual=1 16384x768x768:residual=1 16384x2304x768
    VKERN_GEMM_HANDOFF=$setting bench_ops "$setting-$round" bin/vkern "$out/anchors.jsonl" \
      linear_grad_x 16384x768x3072:gelu=1
    VKERN_GEMM_HANDOFF=$setting bench_ops "$setting-$round" bin/vkern "$out/anchors.jsonl" \
      linear_nt 16384x50304x768:bias=0
    VKERN_GEMM_HANDOFF=$setting bench_ops "$setting-$round" bin/vkern "$out/anchors.jsonl" \
      gemm_grad_a 16384x2304x768 16384x3072x768
  done
done
floor_shares
step "gpt2, 6 steps: 0, then f16"
args=(train --backend cuda --model gpt2 --batch 16 --steps 6 --warmup 2 --data kernels --eval-every 1000 --sample 0)
VKERN_GEMM_HANDOFF=0 run train-unset ./bin/vkern "${args[@]}" --out /tmp/gpt2-unset --json "$out/train-unset.json"
VKERN_GEMM_HANDOFF=f16 run train-f16 ./bin/vkern "${args[@]}" --out /tmp/gpt2-f16 --json "$out/train-f16.json"
python3 - "$out/train-unset.json" "$out/train-f16.json" <<'PY' | tee "$out/parity.txt"
import json, sys
def steps(p):
    return [(s["step"], s["loss"], s.get("grad_norm"), s.get("val_loss")) for s in json.load(open(p))["steps"]]
a, b = steps(sys.argv[1]), steps(sys.argv[2])
print("gpt2 losses and norms:", "the same bits" if a == b and len(a) == 6 else "NOT the same", a[-1] if a else None)
PY
for f in model.safetensors optimizer.safetensors; do
  cmp -s "/tmp/gpt2-unset/$f" "/tmp/gpt2-f16/$f" && echo "gpt2 $f: the same bytes" || echo "gpt2 $f: DIFFERENT"
done | tee -a "$out/parity.txt"
wait $defects
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt"
echo "defects caught: $(grep -cE '^    --- PASS' "$out/defects.txt"), missed: $(grep -cE '^    --- FAIL' "$out/defects.txt")"
step "gpt2 steps, alternating"
one() {
  local tag=$1; shift
  [ "$(left)" -gt 15 ] || { echo "$tag: no time left"; return; }
  env "$@" ./bin/vkern bench --suite train --backend cuda --model gpt2 --batch 16 --steps 30 --warmup 10 \
    --json "$out/step-$tag.json" > "$out/step-$tag.txt" 2>&1
  printf '%-14s %s\n' "$tag" "$(grep -E '^train_' "$out/step-$tag.txt" | head -1)"
}
one unset-1
one f16-1 VKERN_GEMM_HANDOFF=f16
one all-1 VKERN_GEMM_HANDOFF=all
one f16128-1 VKERN_GEMM_HANDOFF=f16128
one f16-2 VKERN_GEMM_HANDOFF=f16
one unset-2
one all-2 VKERN_GEMM_HANDOFF=all
