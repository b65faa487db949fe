# Writes of a 16384 x N f16 matrix, packed rows of N halves (N = 50257: rows
# start anywhere) against N = 50304, in three patterns: a sequential copy,
# a transposed (tiled) copy, and a copy into a view of rows padded to 50304.
import torch
def t(f, n=20):
    for _ in range(3): f()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(); s.record()
    for _ in range(n): f()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / n
M = 16384
for N in (50304, 50257):
    dst = torch.empty(M, N, dtype=torch.half, device="cuda")
    src = torch.randn(M, N, device="cuda").half()
    srcT = torch.randn(N, M, device="cuda").half()
    big = torch.empty(M, 50304, dtype=torch.half, device="cuda")
    print(f"N {N}: sequential copy {t(lambda: dst.copy_(src)):.3f} ms, "
          f"transposed copy {t(lambda: dst.copy_(srcT.t())):.3f} ms, "
          f"into rows padded to 50304 {t(lambda: big[:, :N].copy_(src)):.3f} ms, "
          f"from rows padded to 50304 {t(lambda: dst.copy_(big[:, :N])):.3f} ms", flush=True)
    del dst, src, srcT, big
