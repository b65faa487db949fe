#!/usr/bin/env bash
# 2026-11-28, on an nvidia-h200 (no H100 was lent). Two changes, each
# against its old path in the same server:
#   - WideH: the hand-off epilogue with the tile in f16 (calls 1 and 2 handed
#     it off in f32 and were slower), for f16 products with no step after
#     the bias, in 128 × 192 tiles of four stages; VKERN_GEMM_HANDOFF=1 (off
#     by default);
#   - layernorm's forward with two rows a warp in flight;
#     VKERN_LAYERNORM_PAIRS=0 (on by default) turns it off.
# Steps:
#   - ptxas's registers, stack and spills of WideH's instances;
#   - planted layernorm defects with the pairs, and the hand-off's (background);
#   - the conformance suite of the matrix-product family with the hand-off,
#     and of layernorm;
#   - verify at shapes mixing handed-off and edge tiles, at GPT-2's shapes
#     (sampled), and layernorm at its defaults, an odd row count and
#     16384x768;
#   - vkern bench of GPT-2's plain f16 products and of layernorm, old and
#     new in turn, twice, with anchors.py's rates;
#   - gpt2 (B 16), 6 steps with both old and both new: the same losses,
#     norms and checkpoint bytes;
#   - gpt2 steps, alternating, as time allows.
# Run from the repository root with bin/ from `bash bench/prep-call.sh` and
# ../shared/bench/anchors.py copied to .anchors/anchors.py.
set -uo pipefail
NAME=call3
LIMIT=${LIMIT:-560}
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "build"
build_server bin/vkern || exit 1
kernel_resources product_wgmma
grep -E '^192,4,1,0,1,' "$out/resources-product_wgmma.txt"
echo "instances: $(wc -l < "$out/resources-product_wgmma.txt"), with a stack: $(grep -vc 'STACK:0 ' "$out/resources-product_wgmma.txt")"
step "planted layernorm and hand-off defects (background), conformance"
timeout 300 ./bin/vkern.test -test.run "TestPlantedDefectsInTheCUDAKernelsAreIncorrect/(layernorm|Hopper_hand-off)" \
  -test.v > "$out/defects.txt" 2>&1 &
defects=$!
VKERN_GEMM_HANDOFF=1 run conformance-handoff timeout 200 ./bin/vkern.test -test.v \
  -test.run '^TestCUDABackendConformance$/^(linear|linear_nt|linear_grad_x|gemm|gemm_grad_a|gemm_grad_b)$'
grep -E '^(    )?--- (PASS|FAIL|SKIP)|^(ok|FAIL|PASS)' "$out/conformance-handoff.txt" | tail -7
run conformance-layernorm timeout 120 ./bin/vkern.test -test.v -test.run '^TestCUDABackendConformance$/^layernorm$'
grep -E '^(    )?--- (PASS|FAIL|SKIP)|^(ok|FAIL|PASS)' "$out/conformance-layernorm.txt" | tail -2
step "verify"
VKERN_GEMM_HANDOFF=1 VERIFY_TIMEOUT=120 verify verify-handoff --op linear,linear_nt,gemm \
  --shape 4000x2000x256 --shape 4096x2048x264 --shape 4096x1920x200
VKERN_GEMM_HANDOFF=1 VERIFY_TIMEOUT=120 verify verify-handoff-dx --op gemm_grad_a \
  --shape 4000x256x2000 --shape 4096x264x2048 --shape 4096x200x1920
VKERN_GEMM_HANDOFF=1 VERIFY_TIMEOUT=150 verify verify-handoff-gpt2 --op linear --shape 16384x2304x768 \
  --shape 16384x768x50304:bias=0 --dist normal
VKERN_GEMM_HANDOFF=1 VERIFY_TIMEOUT=150 verify verify-handoff-head --op linear_nt --shape 16384x50304x768:bias=0 \
  --dist normal
VERIFY_TIMEOUT=120 verify verify-layernorm --op layernorm
VERIFY_TIMEOUT=120 verify verify-layernorm-shapes --op layernorm --shape 1001x768 --shape 16384x768 --shape 7x96
step "anchors and bench"
python3 .anchors/anchors.py > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
for round in 1 2; do
  for setting in 0 1; do
    [ "$(left)" -gt 240 ] || break
    VKERN_GEMM_HANDOFF=$setting bench_ops "handoff$setting-$round" bin/vkern "$out/anchors.jsonl" \
      linear 16384x2304x768 16384x768x50304:bias=0
    VKERN_GEMM_HANDOFF=$setting bench_ops "handoff$setting-$round" bin/vkern "$out/anchors.jsonl" \
      linear_nt 16384x50304x768:bias=0
    VKERN_GEMM_HANDOFF=$setting bench_ops "handoff$setting-$round" bin/vkern "$out/anchors.jsonl" \
      gemm_grad_a 16384x2304x768 16384x3072x768 16384x768x768
    VKERN_LAYERNORM_PAIRS=$setting bench_ops "pairs$setting-$round" bin/vkern "$out/anchors.jsonl" \
      layernorm 16384x768
  done
done
floor_shares
step "gpt2, 6 steps: both old, then both new"
args=(train --backend cuda --model gpt2 --batch 16 --steps 6 --warmup 2 --data kernels --eval-every 1000 --sample 0)
VKERN_GEMM_HANDOFF=0 VKERN_LAYERNORM_PAIRS=0 run train-old ./bin/vkern "${args[@]}" --out /tmp/gpt2-old \
  --json "$out/train-old.json"
VKERN_GEMM_HANDOFF=1 VKERN_LAYERNORM_PAIRS=1 run train-new ./bin/vkern "${args[@]}" --out /tmp/gpt2-new \
  --json "$out/train-new.json"
python3 - "$out/train-old.json" "$out/train-new.json" <<'PY' | tee "$out/parity.txt"
import json, sys
def steps(p):
    return [(s["step"], s["loss"], s.get("grad_norm"), s.get("val_loss")) for s in json.load(open(p))["steps"]]
a, b = steps(sys.argv[1]), steps(sys.argv[2])
print("gpt2 losses and norms:", "the same bits" if a == b and len(a) == 6 else "NOT the same", a[-1] if a else None)
PY
for f in model.safetensors optimizer.safetensors; do
  cmp -s "/tmp/gpt2-old/$f" "/tmp/gpt2-new/$f" && echo "gpt2 $f: the same bytes" || echo "gpt2 $f: DIFFERENT"
done | tee -a "$out/parity.txt"
wait $defects
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt" | grep -v -- "--- PASS: .*layernorm_grad" | head -20
echo "defects caught: $(grep -cE '^    --- PASS' "$out/defects.txt"), missed: $(grep -cE '^    --- FAIL' "$out/defects.txt")"
step "gpt2 steps, alternating"
one() {
  local tag=$1; shift
  [ "$(left)" -gt 15 ] || { echo "$tag: no time left"; return; }
  env "$@" ./bin/vkern bench --suite train --backend cuda --model gpt2 --batch 16 --steps 30 --warmup 10 \
    --json "$out/step-$tag.json" > "$out/step-$tag.txt" 2>&1
  printf '%-14s %s\n' "$tag" "$(grep -E '^train_' "$out/step-$tag.txt" | head -1)"
}
one old-1 VKERN_GEMM_HANDOFF=0 VKERN_LAYERNORM_PAIRS=0
one new-1 VKERN_GEMM_HANDOFF=1 VKERN_LAYERNORM_PAIRS=1
one handoff-1 VKERN_GEMM_HANDOFF=1 VKERN_LAYERNORM_PAIRS=0
one pairs-1 VKERN_GEMM_HANDOFF=0 VKERN_LAYERNORM_PAIRS=1
one new-2 VKERN_GEMM_HANDOFF=1 VKERN_LAYERNORM_PAIRS=1
one old-2 VKERN_GEMM_HANDOFF=0 VKERN_LAYERNORM_PAIRS=0
