"""Summarize a kernel's SASS as Nsight Compute exported it.

Reads the CSV of `ncu -i REPORT --page source --print-source sass --csv`
(bench/cuda-pending.sh's ncu part writes one a kernel) and prints the
instructions executed by opcode (predicate and modifiers dropped), each
opcode's share of the instructions and of the sampled warp stalls, then
the stall reasons' shares.

    python3 bench/ncu_sass_summary.py ncu-backward_dkdv_hopper-sass.csv
"""

import collections
import csv
import os
import re
import sys


def main(path):
    rows = list(csv.reader(open(path)))
    header = rows[1]
    col = {name: i for i, name in enumerate(header)}
    stall_cols = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    executed, sampled, stalls = collections.Counter(), collections.Counter(), collections.Counter()
    for row in rows[2:]:
        if len(row) < len(header):
            continue
        text = re.sub(r"^@!?U?P\w+\s+", "", row[col["Source"]].strip())
        op = text.split(" ")[0].split(".")[0]
        executed[op] += int(row[col["Instructions Executed"]] or 0)
        sampled[op] += int(row[col["Warp Stall Sampling (All Samples)"]] or 0)
        for c in stall_cols:
            stalls[c] += int(row[col[c]] or 0)
    total, samples, stall_total = sum(executed.values()), sum(sampled.values()), sum(stalls.values())
    print(f"{os.path.basename(path)}: {total} instructions executed (warp level), {samples} stall samples")
    for op, n in executed.most_common(30):
        print(f"{op:12s} {n:12d} {n / total:6.1%}  of the samples {sampled[op] / samples:6.1%}")
    print("stall reasons:")
    for c, n in stalls.most_common(12):
        print(f"  {c:25s} {n / stall_total:6.1%}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: ncu_sass_summary.py SASS.csv")
    main(sys.argv[1])
