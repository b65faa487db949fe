#!/usr/bin/env bash
# Call 3 (2026-11-28, nineteenth session): the layernorm_grad and bias_grad
# profiles of calls 1 and 2, in one process, now that $VKERN_START_TIMEOUT
# bounds a slow start (b1add5b; in call 2 each server under ncu was killed
# at the call's 60 s). One `vkern bench` runs layernorm_grad at 16384x768
# (plain) and 16384x768:residual=1,dx_sum=1 (the gpt2 step's) and bias_grad
# at 16384x768, a timed run after five untimed each (--runs 1); ncu profiles
# every launch of layernorm_grad_rows, layernorm_grad_params and span_sums
# (30 in all) with the full set. Printed: each kernel's grid, duration,
# throughputs, occupancy and issue figures, the sixth launch of each
# kernel and case; kept: the details page of all 30 and the SASS summaries
# of the three kernels' last launches.
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call3
LIMIT=${LIMIT:-480}
source bench/call-lib.sh
export VKERN_CUDA_ARCH=90a VKERN_START_TIMEOUT=4m  # one build, with and without ncu; no GPU probe under ncu
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$out/nvidia-smi.txt"
step "build (sm_90a)"
build_server bin/vkern || exit 1
step "ncu: layernorm_grad and bias_grad at 16384x768"
timeout $(( $(left) - 60 )) ncu --target-processes all --clock-control none --set full --import-source no \
  -k "regex:layernorm_grad_rows|layernorm_grad_params|span_sums" -c 30 -f -o /tmp/rows \
  bin/vkern bench --suite ops --backend cuda --op layernorm_grad --op bias_grad --runs 1 \
  --shape 16384x768 --shape 16384x768:residual=1,dx_sum=1 > "$out/ncu-rows-run.txt" 2>&1
echo "rc=$?"
tail -4 "$out/ncu-rows-run.txt"
[ -f /tmp/rows.ncu-rep ] || exit 0
ncu --import /tmp/rows.ncu-rep --page details > "$out/ncu-rows-details.txt" 2>&1
python3 - "$out/ncu-rows-details.txt" <<'PY' | tee "$out/ncu-rows-summary.txt"
import re, sys
want = ["Duration", "DRAM Throughput", "Memory Throughput", "L2 Cache Throughput", "Compute (SM) Throughput",
        "Achieved Occupancy", "Theoretical Occupancy", "Registers Per Thread", "Issue Slots Busy",
        "Warp Cycles Per Issued Instruction", "No Eligible", "L2 Hit Rate", "Waves Per SM"]
kernels, cur = [], None
for line in open(sys.argv[1]):
    m = re.match(r"  (\S.*?)\((.*)\) \((\d+), \d+, \d+\)x\((\d+), \d+, \d+\), Context", line)
    if m:
        name = re.sub(r"^.*::", "", m.group(1).split("<")[0])
        cur = {"name": name, "grid": m.group(3), "block": m.group(4)}
        kernels.append(cur)
        continue
    if cur is None:
        continue
    for w in want:
        m = re.match(r"    " + re.escape(w) + r"\s+(\S+)?\s+([\d.,]+)\s*$", line)
        if m and w not in cur:
            cur[w] = m.group(2) + ("" if m.group(1) in (None, "%") else " " + m.group(1)) + ("%" if m.group(1) == "%" else "")
seen = {}
for i, k in enumerate(kernels):
    seen[k["name"]] = seen.get(k["name"], 0) + 1
    print(f"#{i:2d} {k['name']:<24} launch {seen[k['name']]} grid {k['grid']}x{k['block']}: " +
          ", ".join(f"{w} {k[w]}" for w in want if w in k))
PY
for kernel in layernorm_grad_rows layernorm_grad_params span_sums; do
  ncu -i /tmp/rows.ncu-rep -k "regex:$kernel" --page source --print-source sass --csv > "/tmp/$kernel-sass.csv" 2>&1
  python3 bench/ncu_sass_summary.py "/tmp/$kernel-sass.csv" > "$out/ncu-$kernel-sass-summary.txt" 2>&1
  echo "== $kernel"; sed -n '/stall reasons/,$p' "$out/ncu-$kernel-sass-summary.txt" | head -8
done
