#!/usr/bin/env bash
# Where WideS's GELU epilogues spend their time, on main, through
# bench/gemm_lab.cu (-DVKERN_GEMM_LAB_FEW): the MLP's c_fc forward with
# the GELU ("fwd fc gelu") and c_proj's dx through it ("dx fc.proj gelu"),
# against the same products without it ("fwd fc", "dx fc.proj"), all at
# 16384 rows, variant 6 (WideS):
#   - the lab's times, twice;
#   - Nsight Compute (--set full) of the GELU backward and of its plain
#     product, then of the forward with the GELU, as time allows: the
#     stall reasons and the top opcodes, for the next attempt at the
#     epilogue (WideSP, docs/gelu-pre-tile-h100, did not pay).
# Run from the repository root with bin/ from `bash bench/prep-call.sh`.
set -uo pipefail
NAME=call1
LIMIT=300
source bench/call-lib.sh
step "build the lab"
build_lab
grep -q "lab build rc=0" "$out/lab-build.txt" || { echo "build FAILED"; tail -20 "$out/lab-build.txt"; exit 1; }
step "the lab"
cases="fwd fc,fwd fc gelu,dx fc.proj,dx fc.proj gelu"
lab_times "lab-1" "$cases"
lab_times "lab-2" "$cases"
ncu_lab gelu-bwd "dx fc.proj gelu"
ncu_lab plain-fc "fwd fc"
ncu_lab gelu-fwd "fwd fc gelu"
