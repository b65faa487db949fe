#!/usr/bin/env python3
"""CPU anchors for `vkern bench --suite core`, measured on the machine you run it on.

Prints one JSON object per line in the format of ../shared/bench/anchors.py:
{"op", "shape", "impl", "median_ms", "tflops", "device"}. The gemm anchor is
numpy's float32 matmul (OpenBLAS, all cores) at the same size: it reads twice
the bytes of vkern's f16 inputs, but at 1024³ both are bound by arithmetic.
gemm_grad_a and gemm_grad_b are the same products with a transposed operand,
and gemm_f64 is numpy's float64 matmul, the anchor of the float64 oracle.

Needs numpy: bench/install-cpu-anchors.sh installs Debian's python3-numpy.

  python3 bench/cpu_anchors.py --n 1024 > anchors.jsonl
"""
import argparse, json, platform, statistics, time
import numpy as np

def median_ms(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter(); fn(); times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)

def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--reps", type=int, default=9)
    a = p.parse_args()
    n, shape = a.n, f"{a.n}x{a.n}x{a.n}"
    rng = np.random.default_rng(0)
    device = platform.processor() or platform.machine()
    cases = [("gemm", np.float32, "numpy float32 A @ B (OpenBLAS)", lambda x, y: x @ y),
             ("gemm_grad_a", np.float32, "numpy float32 dC @ B.T (OpenBLAS)", lambda x, y: x @ y.T),
             ("gemm_grad_b", np.float32, "numpy float32 A.T @ dC (OpenBLAS)", lambda x, y: x.T @ y),
             ("gemm_f64", np.float64, "numpy float64 A @ B (OpenBLAS)", lambda x, y: x @ y)]
    for op, dtype, impl, fn in cases:
        x = rng.standard_normal((n, n)).astype(dtype)
        y = rng.standard_normal((n, n)).astype(dtype)
        ms = median_ms(lambda: fn(x, y), a.reps)
        print(json.dumps({"op": op, "shape": shape, "impl": impl, "median_ms": round(ms, 4),
                          "tflops": round(2 * n**3 / ms / 1e9, 4), "device": device}), flush=True)

if __name__ == "__main__":
    main()
