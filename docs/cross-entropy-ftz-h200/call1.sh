#!/usr/bin/env bash
# 2026-11-28 (eighteenth session), on an nvidia-h200 (no H100 was lent):
# cross_entropy's row kernel with its exponentials by the EX2 instruction
# alone (variant 4) against exp2f (variant 2, VKERN_CROSS_ENTROPY_FTZ=0) in
# the same server.
#   - registers and SASS counts (instructions, MUFU.EX2) of the row kernel
#     GPT-2's head takes (512 threads, 128 elements, 16-byte vectors), both
#     settings;
#   - the planted cross_entropy defects, the new one among them
#     (background), and the conformance suite of cross_entropy;
#   - verify cross_entropy at its default shapes and at 2048 rows of 50,304
#     and 50,257, both settings;
#   - vkern bench of cross_entropy at GPT-2's and the issue's shapes, each
#     setting in turn, twice, with anchors.py's copy rate;
#   - gpt2 (B 16), 6 steps each way: the same losses, norms and bytes
#     (expected unless a term falls under 2⁻¹²⁶);
#   - Nsight Compute of the row kernel, each setting, as time allows;
#   - gpt2 steps, alternating, as time allows.
# Run from the repository root with bin/ from `bash bench/prep-call.sh` and
# ../shared/bench/anchors.py copied to .anchors/anchors.py.
set -uo pipefail
NAME=call1
LIMIT=${LIMIT:-560}
source bench/call-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "build"
build_server bin/vkern || exit 1
kernel_resources cross_entropy_rows
grep -E '^512,1,128,8,' "$out/resources-cross_entropy_rows.txt"
server=$(find "$VKERN_CACHE" -name server -type f | head -1)
cuobjdump -sass "$server" > /tmp/server.sass 2>&1
python3 - /tmp/server.sass > "$out/sass-counts.txt" <<'PY'
import re, sys
fn, counts = None, {}
for line in open(sys.argv[1]):
    m = re.search(r"Function : (\S+)", line)
    if m:
        fn = m.group(1) if "cross_entropy_rowsILi512ELi1ELi128ELi8E" in m.group(1) else None
        if fn: counts[fn] = {"instructions": 0, "MUFU.EX2": 0, "FMUL": 0, "FSETP": 0}
        continue
    if fn and re.match(r"\s+/\*[0-9a-f]{4}\*/\s", line):
        c = counts[fn]; c["instructions"] += 1
        for k in ("MUFU.EX2", "FMUL", "FSETP"):
            if k in line: c[k] += 1
for fn, c in counts.items():
    print("ftz" if "Lb1E" in fn else "exp2f", c, fn)
PY
cat "$out/sass-counts.txt" | cut -c1-110
step "planted defects (background), conformance"
timeout 300 ./bin/vkern.test -test.run "TestPlantedDefectsInTheCUDAKernelsAreIncorrect/(cross_entropy|unaligned_rows'_last)" \
  -test.v > "$out/defects.txt" 2>&1 &
defects=$!
run conformance timeout 150 ./bin/vkern.test -test.v -test.run '^TestCUDABackendConformance$/^(cross_entropy|softmax)$'
grep -E '^(    )?--- (PASS|FAIL|SKIP)|^(ok|FAIL|PASS)' "$out/conformance.txt"
step "verify"
VERIFY_TIMEOUT=120 verify verify-ce --op cross_entropy
VERIFY_TIMEOUT=120 verify verify-ce-2048 --op cross_entropy --shape 2048x50304 --shape 2048x50257:ignore_index=-100
VKERN_CROSS_ENTROPY_FTZ=0 VERIFY_TIMEOUT=120 verify verify-ce-exp2f --op cross_entropy
step "anchors and bench"
shapes=(16384x50304:grad_scale=1024 8192x50304 8192x50257 4096x50257)
python3 .anchors/anchors.py > "$out/anchors.jsonl" 2> "$out/anchors.stderr" || echo "anchors: FAILED"
for round in 1 2; do
  VKERN_CROSS_ENTROPY_FTZ=0 bench_ops "exp2f-$round" bin/vkern "$out/anchors.jsonl" cross_entropy "${shapes[@]}"
  bench_ops "ftz-$round" bin/vkern "$out/anchors.jsonl" cross_entropy "${shapes[@]}"
done
floor_shares
step "gpt2, 6 steps each way"
gpt2_parity exp2f "VKERN_CROSS_ENTROPY_FTZ=0" ftz "VKERN_CROSS_ENTROPY_FTZ=1"
wait $defects
grep -E '^(    --- |--- |ok|FAIL$|PASS$)' "$out/defects.txt"
echo "defects caught: $(grep -cE '^    --- PASS' "$out/defects.txt"), missed: $(grep -cE '^    --- FAIL' "$out/defects.txt")"
for setting in 1 0; do
  [ "$(left)" -gt 150 ] || break
  step "ncu: cross_entropy_rows, VKERN_CROSS_ENTROPY_FTZ=$setting"
  VKERN_CROSS_ENTROPY_FTZ=$setting timeout 100 ncu --target-processes all --clock-control none --set full --import-source no \
    -k regex:cross_entropy_rows --launch-skip 2 -c 1 -f -o "/tmp/ce-ftz$setting" \
    bin/vkern bench --suite ops --backend cuda --op cross_entropy --shape 16384x50304:grad_scale=1024 --runs 3 \
    > "$out/ncu-ce-ftz$setting-run.txt" 2>&1
  echo "rc=$?"
  [ -f "/tmp/ce-ftz$setting.ncu-rep" ] && ncu_report "ce-ftz$setting"
done
step "gpt2 steps, alternating"
gpt2_step exp2f-1 VKERN_CROSS_ENTROPY_FTZ=0
gpt2_step ftz-1 VKERN_CROSS_ENTROPY_FTZ=1
gpt2_step ftz-2 VKERN_CROSS_ENTROPY_FTZ=1
gpt2_step exp2f-2 VKERN_CROSS_ENTROPY_FTZ=0
