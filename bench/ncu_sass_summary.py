"""Summarize a kernel's SASS as Nsight Compute exported it.

Reads the CSV of `ncu -i REPORT --page source --print-source sass --csv`
(bench/cuda-pending.sh's ncu part writes one a kernel) and prints the
instructions executed by opcode (predicate and modifiers dropped), each
opcode's share of the instructions and of the sampled warp stalls, the
stall reasons' shares, and then the kernel's code by how often it ran:
the instructions grouped by their execution count (a loop body's count is
its trips times the warps; code run once an item has the items' count),
and each stretch of at least RUN consecutive instructions (12 unless
given) with one count, by its opcodes, so that a loop's parts can be told
from what runs once an item.

    python3 bench/ncu_sass_summary.py ncu-backward_dkdv_hopper-sass.csv [RUN]
"""

import collections
import csv
import os
import re
import sys


def main(path, run):
    rows = list(csv.reader(open(path)))
    header = rows[1]
    col = {name: i for i, name in enumerate(header)}
    stall_cols = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    executed, sampled, stalls = collections.Counter(), collections.Counter(), collections.Counter()
    sequence = []  # (opcode, times executed), in address order
    for row in rows[2:]:
        if len(row) < len(header):
            continue
        text = re.sub(r"^@!?U?P\w+\s+", "", row[col["Source"]].strip())
        op = text.split(" ")[0].split(".")[0]
        executed[op] += int(row[col["Instructions Executed"]] or 0)
        sequence.append((op, int(row[col["Instructions Executed"]] or 0)))
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

    by_count = collections.Counter()
    stretches = []  # [count, first index, ops]
    for i, (op, n) in enumerate(sequence):
        by_count[n] += 1
        if stretches and stretches[-1][0] == n:
            stretches[-1][2].append(op)
        else:
            stretches.append([n, i, [op]])
    print("instructions by execution count (the largest shares):")
    for n, k in sorted(((n, k) for n, k in by_count.items() if n > 0), key=lambda item: -item[0] * item[1])[:6]:
        print(f"  {k:5d} instructions run {n:9d} times: {n * k / total:6.1%}")
    print(f"stretches of {run}+ consecutive instructions with one count:")
    for n, first, ops in stretches:
        if n > 0 and len(ops) >= run:
            top = ", ".join(f"{o} {c}" for o, c in collections.Counter(ops).most_common(6))
            print(f"  from instruction {first:5d}: {len(ops):4d} instructions, {n:9d} times: {top}")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and not sys.argv[2].isdigit()):
        sys.exit("usage: ncu_sass_summary.py SASS.csv [RUN]")
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) == 3 else 12)
