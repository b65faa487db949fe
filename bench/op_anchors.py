#!/usr/bin/env python3
"""PyTorch anchors for vkern's training ops, measured on the GPU you run it on.

Each CASE is ANCHOR=SHAPE: the name an op's anchor is reported under (its
contract's Anchor in op/*.go, else the op's own name) and the shape exactly
as vkern writes it, which is how `vkern bench --suite ops` finds the anchor.
`vkern bench --suite ops --op NAME --list` prints both for every case it
will time:

  bin/vkern bench --suite ops --op attention,linear --list | awk '{print $2"="$3}' \\
    | xargs python3 bench/op_anchors.py > op-anchors.jsonl

Prints one JSON object per line, as ../shared/bench/anchors.py does:
{"op", "shape", "impl", "median_ms", "gbps", "tflops", "device"}, each median
from triton's do_bench (25 ms warm-up, 200 ms of runs, L2 cleared before
each run, CUDA events around each). Run it in the same device call as
anchors.py (the copy bandwidth and the GEMM rates) and `vkern bench`.

The first line for an (op, shape) is the anchor vkern relates the case to:
the PyTorch calls that produce the same outputs, in the same element types,
from the same inputs (f16 activations, f32 accumulators where vkern adds
into one). Where PyTorch has no call that adds into an f32 accumulator, the
anchor adds with one more call, and an alternate under another op name
leaves that call out. Alternates are for reading, never matched:

  linear              F.linear(x, w, b), w N×K as nn.Linear holds it (cuBLAS);
                      with gelu=1, F.linear then F.gelu(approximate="tanh")
                      (pre and y, as vkern writes them)
    linear_kn         torch.addmm(b, x, W) / x @ W, W K×N as vkern holds it
    linear_product    with gelu=1 or residual=1: F.linear alone
                      with residual=1, the anchor is r + F.linear(x, w, b)
                      (nanoGPT's x = x + c_proj(h))
    linear_addmm_gelu with gelu=1: torch._addmm_activation(use_gelu=True),
                      cuBLASLt's fused GELU epilogue (y only, no pre)
  linear_grad_x       dy.mm(w), w N×K (nn.Linear's input gradient); with
                      gelu=1 then aten.gelu_backward(approximate="tanh")
    linear_grad_x_product  with gelu=1: the product alone
  linear_nt           F.linear(x, w, b), w N×K: linear_nt's own layout (cuBLAS)
  linear_grad_w       dW.add_(torch.mm(x.T, dy, out_dtype=float32)): cuBLAS
                      with f32 output, then the += (torch.addmm cannot add
                      an f16 product into an f32 tensor); with bias=1,
                      then db.add_(dy.sum(0, dtype=float32)) too
    linear_grad_w_product  the product alone, no accumulation
  bias_grad           db.add_(dy.sum(0, dtype=float32))
    bias_grad_sum     the sum alone
  attention           F.scaled_dot_product_attention(is_causal=True) in the
                      math backend, on q, k, v split from the fused
                      (B·T)×3C qkv into B×H×T×D views as GPT-2 does, and
                      y.transpose(1, 2).contiguous() back to (B·T)×C
    attention_flash, attention_cudnn  the same in those backends
  attention_backward  torch.autograd.grad(y, qkv, dy, retain_graph=True) of
                      that forward, its graph built once outside the timing:
                      SDPA's backward and the copies into the fused dqkv
    attention_backward_flash, attention_backward_cudnn
  layernorm           torch.native_layer_norm: y, mean and rstd
  layernorm_backward  aten.native_layer_norm_backward (dx, and dw, db in f16,
                      as PyTorch gives for f16 weights on CUDA), then dw, db
                      added into f32 accumulators; with residual=1, dx also
                      added into the residual stream's gradient (r += dx, as
                      autograd sums a pre-LayerNorm block's two branches);
                      with dx_sum=1, dx's column sums (f32) added into an
                      f32 accumulator too (the c_proj bias's gradient)
    layernorm_backward_f16_grads  the backward alone
  embedding           F.embedding(tokens, wte) + F.embedding(arange(T), wpe)
                      (nanoGPT's forward), i32 token ids
  embedding_backward  aten.embedding_dense_backward (f16, sort-based) added
                      into f32 dwte; dx summed over the batch into f32 dwpe
    embedding_backward_index_add  dwte.index_add_(0, tokens, dx.float())
                      (atomics: not deterministic)
  gelu_tanh           F.gelu(x, approximate="tanh")
  gelu_tanh_backward  aten.gelu_backward(dy, x, approximate="tanh")
  add                 torch.add(a, b, out=y)
  fill                y.fill_(value)
  global_norm         torch.linalg.vector_norm(g) and the count of non-finite
                      elements, isfinite(g).logical_not_().sum()
    global_norm_norm_only  the norm alone
  adamw               torch.optim.AdamW(fused=True).step() on one flat f32
                      parameter (its first step, which makes the state, is
                      untimed), then param16.copy_(param): the f16 copy vkern
                      writes in the same kernel
    adamw_step_only   the step alone

gbps is the vkern op's minimum traffic (op.MovedBytes: each operand once, an
accumulator twice) over the anchor's time, so that it reads like vkern
bench's GB/s; it is not the traffic PyTorch's calls make. tflops (the op's
conventional flop count) is given for the products only: bench/ops.go takes
the fastest tflops in the anchors file as the matmul rate of the floor.
"""
import argparse, json, math, sys
import torch
import torch.nn.functional as F
from triton.testing import do_bench

f16, f32, i32 = torch.float16, torch.float32, torch.int32


def bench(fn):
    return do_bench(fn, warmup=25, rep=200, return_mode="median")


def emit(op, shape, impl, ms, nbytes=None, flops=None):
    rec = {"op": op, "shape": shape, "impl": impl, "median_ms": round(ms, 6),
           "device": torch.cuda.get_device_name(0)}
    if flops: rec["tflops"] = round(flops / ms / 1e9, 2)
    if nbytes: rec["gbps"] = round(nbytes / ms / 1e6, 1)
    print(json.dumps(rec), flush=True)


def randn(*size, dtype=f16):
    return torch.randn(*size, device="cuda", dtype=dtype)


def parse(shape):
    """vkern's shape syntax: dimensions joined by x, then :name=value,..."""
    dims, _, settings = shape.partition(":")
    params = {}
    for field in filter(None, settings.split(",")):
        name, _, value = field.partition("=")
        params[name.strip()] = float(value)
    return [int(d) for d in dims.split("x")], params


# Each anchor takes the shape string, its dimensions and its settings, and
# emits its lines. Tensors are drawn N(0, 1), as vkern bench draws its inputs.

def f_linear(name, shape, dims, p):
    """Times F.linear(x, W, b), W N×K, under the anchor name; returns the
    tensors and figures for the variants a caller adds."""
    m, n, k = dims
    bias = int(p.get("bias", 1))
    x, w = randn(m, k), randn(n, k)
    b = randn(n) if bias else None
    nbytes, flops = 2 * (m * k + k * n + bias * n + m * n), 2.0 * m * n * k
    plus = " + bias" if bias else ""
    emit(name, shape, f"F.linear (cuBLAS), weight N×K{plus}", bench(lambda: F.linear(x, w, b)), nbytes, flops)
    return x, w, b, nbytes, flops


def linear(shape, dims, p):
    if int(p.get("gelu", 0)):
        return linear_gelu(shape, dims, p)
    if int(p.get("residual", 0)):
        return linear_residual(shape, dims, p)
    x, w, b, nbytes, flops = f_linear("linear", shape, dims, p)
    wkn = w.t().contiguous()
    if b is not None:
        emit("linear_kn", shape, "torch.addmm(b, x, W), W K×N", bench(lambda: torch.addmm(b, x, wkn)), nbytes, flops)
    else:
        emit("linear_kn", shape, "x @ W, W K×N", bench(lambda: x @ wkn), nbytes, flops)


def linear_gelu(shape, dims, p):
    """linear with gelu=1 writes pre = x·W + b and y = gelu(pre): PyTorch's
    eager MLP does it as F.linear then F.gelu, which is the anchor."""
    m, n, k = dims
    bias = int(p.get("bias", 1))
    x, w = randn(m, k), randn(n, k)
    b = randn(n) if bias else None
    nbytes, flops = 2 * (m * k + k * n + bias * n + 2 * m * n), 2.0 * m * n * k
    plus = " + bias" if bias else ""

    def both():
        pre = F.linear(x, w, b)
        return pre, F.gelu(pre, approximate="tanh")
    emit("linear", shape, f"F.linear (cuBLAS), weight N×K{plus}, then F.gelu(approximate=\"tanh\")", bench(both), nbytes, flops)
    emit("linear_product", shape, f"F.linear alone{plus}", bench(lambda: F.linear(x, w, b)), nbytes, flops)
    if b is not None:
        # cuBLASLt's own GELU epilogue (tanh form), which writes y but not pre.
        emit("linear_addmm_gelu", shape, "torch._addmm_activation(b, x, W, use_gelu=True), no pre",
             bench(lambda: torch._addmm_activation(b, x, w.t(), use_gelu=True)), nbytes, flops)


def linear_residual(shape, dims, p):
    """linear with residual=1 writes y = x·W + b + r: nanoGPT's
    x = x + self.c_proj(h), F.linear then the add, is the anchor."""
    m, n, k = dims
    bias = int(p.get("bias", 1))
    x, w, r = randn(m, k), randn(n, k), randn(m, n)
    b = randn(n) if bias else None
    nbytes, flops = 2 * (m * k + k * n + bias * n + 2 * m * n), 2.0 * m * n * k
    plus = " + bias" if bias else ""
    emit("linear", shape, f"r + F.linear(x, w{', b' if bias else ''}) (cuBLAS, then the add)", bench(lambda: r + F.linear(x, w, b)), nbytes, flops)
    emit("linear_product", shape, f"F.linear alone{plus}", bench(lambda: F.linear(x, w, b)), nbytes, flops)


def linear_grad_x(shape, dims, p):
    """dx = dy·Wᵀ, times gelu′(pre) with gelu=1: nn.Linear's input gradient
    (dy.mm(w), w N×K as nn.Linear holds it), then aten.gelu_backward."""
    m, n, k = dims
    gelu = int(p.get("gelu", 0))
    dy, w = randn(m, n), randn(n, k)
    pre = randn(m, k) if gelu else None
    nbytes, flops = 2 * (m * n + k * n + (1 + gelu) * m * k), 2.0 * m * n * k
    if gelu:
        def both():
            return torch.ops.aten.gelu_backward(dy.mm(w), pre, approximate="tanh")
        emit("linear_grad_x", shape, 'dy.mm(w) (cuBLAS), then aten.gelu_backward(approximate="tanh")', bench(both), nbytes, flops)
        emit("linear_grad_x_product", shape, "dy.mm(w) alone", bench(lambda: dy.mm(w)), nbytes, flops)
    else:
        emit("linear_grad_x", shape, "dy.mm(w) (cuBLAS), w N×K", bench(lambda: dy.mm(w)), nbytes, flops)


def linear_nt(shape, dims, p):
    f_linear("linear_nt", shape, dims, p)


def linear_grad_w(shape, dims, p):
    m, n, k = dims
    accumulate = int(p.get("accumulate", 1))
    x, dy = randn(m, k), randn(m, n)
    dw = torch.zeros(k, n, device="cuda", dtype=f32)
    xt = x.t()
    nbytes, flops = 2 * (m * k + m * n) + 2 * 4 * k * n, 2.0 * m * n * k
    product = lambda: torch.mm(xt, dy, out_dtype=f32)
    impl = "torch.mm(x.T, dy, out_dtype=float32)"
    try:
        product()
    except (TypeError, RuntimeError):
        product, impl = (lambda: torch.mm(xt, dy)), "torch.mm(x.T, dy) (f16 out: this torch has no out_dtype)"
    if int(p.get("bias", 0)):
        # With bias=1, db += dy's column sums too: PyTorch's two calls.
        db = torch.zeros(n, device="cuda", dtype=f32)
        weight = (lambda: dw.add_(product())) if accumulate else product
        both = lambda: (weight(), db.add_(dy.sum(0, dtype=f32)))
        name = f"dW.add_({impl})" if accumulate else impl
        emit("linear_grad_w", shape, f"{name}, db.add_(dy.sum(0, dtype=float32))", bench(both),
             nbytes + 2 * 4 * n, flops)
    elif accumulate:
        emit("linear_grad_w", shape, f"dW.add_({impl})", bench(lambda: dw.add_(product())), nbytes, flops)
        emit("linear_grad_w_product", shape, impl, bench(product), nbytes, flops)
    else:
        emit("linear_grad_w", shape, impl, bench(product), nbytes, flops)


def bias_grad(shape, dims, p):
    m, n = dims
    dy = randn(m, n)
    db = torch.zeros(n, device="cuda", dtype=f32)
    nbytes = 2 * m * n + 2 * 4 * n
    emit("bias_grad", shape, "db.add_(dy.sum(0, dtype=float32))",
         bench(lambda: db.add_(dy.sum(0, dtype=f32))), nbytes)
    emit("bias_grad_sum", shape, "dy.sum(0, dtype=float32)", bench(lambda: dy.sum(0, dtype=f32)), nbytes)


def sdpa_backends():
    """(suffix, backend, description) for each SDPA backend timed; math first."""
    from torch.nn.attention import SDPBackend
    allowed = getattr(torch.backends.cuda, "fp16_bf16_reduction_math_sdp_allowed", None)
    math_note = "math backend"
    if allowed is not None:
        math_note += ", f16 reductions allowed" if allowed() else ", computing in f32 (PyTorch's default)"
    out = [("", SDPBackend.MATH, math_note), ("_flash", SDPBackend.FLASH_ATTENTION, "flash backend")]
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):
        out.append(("_cudnn", SDPBackend.CUDNN_ATTENTION, "cuDNN backend"))
    return out


def attention_forward(b, t, c, h):
    """GPT-2's attention from the fused qkv (B·T)×3C to y (B·T)×C."""
    d = c // h
    def forward(qkv):
        q, k, v = (z.view(b, t, h, d).transpose(1, 2) for z in qkv.view(b, t, 3 * c).split(c, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).contiguous().view(b * t, c)
    return forward


def attention(shape, dims, p):
    from torch.nn.attention import sdpa_kernel
    b, t, c, h = dims
    forward = attention_forward(b, t, c, h)
    qkv = randn(b * t, 3 * c)
    nbytes = 2 * (3 * b * t * c + b * t * c) + 4 * b * h * t
    for suffix, backend, note in sdpa_backends():
        try:
            with sdpa_kernel(backend):
                ms = bench(lambda: forward(qkv))
        except RuntimeError as e:
            print(f"op_anchors: attention{suffix} {shape}: {note} not available here: {str(e).splitlines()[0]}", file=sys.stderr)
            continue
        emit("attention" + suffix, shape, f"F.scaled_dot_product_attention(is_causal=True), {note}, from fused qkv", ms, nbytes)


def attention_backward(shape, dims, p):
    from torch.nn.attention import sdpa_kernel
    b, t, c, h = dims
    forward = attention_forward(b, t, c, h)
    nbytes = 2 * (b * t * c + 3 * b * t * c + b * t * c + 3 * b * t * c) + 4 * b * h * t
    for suffix, backend, note in sdpa_backends():
        qkv = randn(b * t, 3 * c).requires_grad_(True)
        try:
            with sdpa_kernel(backend):
                y = forward(qkv)
            dy = torch.randn_like(y)
            ms = bench(lambda: torch.autograd.grad(y, qkv, dy, retain_graph=True))
        except RuntimeError as e:
            print(f"op_anchors: attention_backward{suffix} {shape}: {note} not available here: {str(e).splitlines()[0]}", file=sys.stderr)
            continue
        finally:
            y = None
        emit("attention_backward" + suffix, shape,
             f"autograd.grad of SDPA(is_causal=True), {note}, to the fused dqkv (graph built untimed)", ms, nbytes)


def layernorm(shape, dims, p):
    r, c = dims
    eps = p.get("eps", 1e-5)
    x, w, b = randn(r, c), randn(c), randn(c)
    nbytes = 2 * (2 * r * c + 2 * c) + 2 * 4 * r
    emit("layernorm", shape, "torch.native_layer_norm (y, mean, rstd)",
         bench(lambda: torch.native_layer_norm(x, (c,), w, b, eps)), nbytes)


def layernorm_backward(shape, dims, p):
    r, c = dims
    residual = int(p.get("residual", 0))
    dx_sum = int(p.get("dx_sum", 0))
    x, w, b, dy = randn(r, c), randn(c), randn(c), randn(r, c)
    res = randn(r, c)
    _, mean, rstd = torch.native_layer_norm(x, (c,), w, b, 1e-5)
    dw32 = torch.zeros(c, device="cuda", dtype=f32)
    db32 = torch.zeros(c, device="cuda", dtype=f32)
    ds32 = torch.zeros(c, device="cuda", dtype=f32)
    nbytes = 2 * (3 * r * c + c) + 2 * 4 * r + (2 + dx_sum) * 2 * 4 * c + residual * 2 * r * c
    backward = lambda: torch.ops.aten.native_layer_norm_backward(dy, x, (c,), mean, rstd, w, b, [True, True, True])
    def accumulate():
        dx, dw, db = backward()
        if residual:
            res.add_(dx)
        dw32.add_(dw)
        db32.add_(db)
        if dx_sum:
            ds32.add_((res if residual else dx).sum(0, dtype=f32))
    what = ("aten.native_layer_norm_backward, " + ("dx added into r, " if residual else "") + "dw and db (f16) added into f32"
            + (", the column sums of " + ("r" if residual else "dx") + " added into f32" if dx_sum else ""))
    emit("layernorm_backward", shape, what, bench(accumulate), nbytes)
    emit("layernorm_backward_f16_grads", shape, "aten.native_layer_norm_backward (dx, dw, db in f16)", bench(backward), nbytes)


def token_ids(b, t, v):
    return torch.randint(0, v, (b * t,), device="cuda", dtype=i32)


def embedding(shape, dims, p):
    b, t, c, v = dims
    tokens, wte, wpe = token_ids(b, t, v), randn(v, c), randn(t, c)
    pos = torch.arange(t, device="cuda", dtype=i32)
    nbytes = 4 * b * t + 2 * (v * c + t * c + b * t * c)
    fn = lambda: (F.embedding(tokens.view(b, t), wte) + F.embedding(pos, wpe)).view(b * t, c)
    emit("embedding", shape, "F.embedding(tokens, wte) + F.embedding(arange(T), wpe), i32 ids", bench(fn), nbytes)


def embedding_backward(shape, dims, p):
    b, t, c, v = dims
    tokens, dx = token_ids(b, t, v), randn(b * t, c)
    dwte = torch.zeros(v, c, device="cuda", dtype=f32)
    dwpe = torch.zeros(t, c, device="cuda", dtype=f32)
    nbytes = 2 * b * t * c + 4 * b * t + 2 * 4 * (v * c + t * c)
    def dense():
        dwte.add_(torch.ops.aten.embedding_dense_backward(dx, tokens, v, -1, False))
        dwpe.add_(dx.view(b, t, c).sum(0, dtype=f32))
    emit("embedding_backward", shape,
         "aten.embedding_dense_backward (f16, sort-based) added into f32 dwte; dx.sum over B into f32 dwpe", bench(dense), nbytes)
    long_tokens = tokens.long()
    def index_add():
        dwte.index_add_(0, long_tokens, dx.float())
        dwpe.add_(dx.view(b, t, c).sum(0, dtype=f32))
    emit("embedding_backward_index_add", shape,
         "dwte.index_add_(0, tokens, dx.float()) (atomics, not deterministic); dx.sum over B into dwpe", bench(index_add), nbytes)


def gelu_tanh(shape, dims, p):
    n, = dims
    x = randn(n)
    emit("gelu_tanh", shape, 'F.gelu(x, approximate="tanh")', bench(lambda: F.gelu(x, approximate="tanh")), 2 * 2 * n)


def gelu_tanh_backward(shape, dims, p):
    n, = dims
    x, dy = randn(n), randn(n)
    emit("gelu_tanh_backward", shape, 'aten.gelu_backward(dy, x, approximate="tanh")',
         bench(lambda: torch.ops.aten.gelu_backward(dy, x, approximate="tanh")), 3 * 2 * n)


def add(shape, dims, p):
    n, = dims
    a, b, y = randn(n), randn(n), torch.empty(n, device="cuda", dtype=f16)
    emit("add", shape, "torch.add(a, b, out=y)", bench(lambda: torch.add(a, b, out=y)), 3 * 2 * n)


def fill(shape, dims, p):
    n, = dims
    value = p.get("value", 0.0)
    y = torch.empty(n, device="cuda", dtype=f32)
    emit("fill", shape, f"y.fill_({value:g}), f32", bench(lambda: y.fill_(value)), 4 * n)


def global_norm(shape, dims, p):
    n, = dims
    g = randn(n, dtype=f32)
    nbytes = 4 * n + 4 + 4
    def both():
        torch.linalg.vector_norm(g)
        torch.isfinite(g).logical_not_().sum(dtype=i32)
    emit("global_norm", shape, "torch.linalg.vector_norm(g) + isfinite(g).logical_not_().sum(), f32", bench(both), nbytes)
    emit("global_norm_norm_only", shape, "torch.linalg.vector_norm(g), f32", bench(lambda: torch.linalg.vector_norm(g)), nbytes)


def adamw(shape, dims, p):
    n, = dims
    # t and grad_scale do not change the work; the step counts from 1.
    param = torch.nn.Parameter(randn(n, dtype=f32))
    param.grad = randn(n, dtype=f32)
    opt = torch.optim.AdamW([param], lr=p.get("lr", 1e-3), betas=(p.get("beta1", 0.9), p.get("beta2", 0.999)),
                            eps=p.get("eps", 1e-8), weight_decay=p.get("weight_decay", 0.01), fused=True)
    opt.step()  # makes the state (m, v, step): untimed
    param16 = torch.empty(n, device="cuda", dtype=f16)
    nbytes = 4 * n * 2 + 4 * n + 4 * n * 2 * 2 + 2 * n
    def step_and_copy():
        opt.step()
        param16.copy_(param.detach())
    emit("adamw", shape, "torch.optim.AdamW(fused=True).step() + param16.copy_(param)", bench(step_and_copy), nbytes)
    emit("adamw_step_only", shape, "torch.optim.AdamW(fused=True).step()", bench(opt.step), nbytes)


# Each anchor and its shape syntax in vkern (op/*.go).
ANCHORS = {f.__name__: (f, syntax) for f, syntax in (
    (linear, "MxNxK[:bias=0|1,gelu=0|1,residual=0|1]"), (linear_grad_x, "MxNxK[:gelu=0|1]"), (linear_nt, "MxNxK[:bias=0|1]"), (linear_grad_w, "MxNxK[:accumulate=0|1]"), (bias_grad, "MxN"),
    (attention, "BxTxCxH"), (attention_backward, "BxTxCxH"),
    (layernorm, "RxC[:eps=E]"), (layernorm_backward, "RxC[:residual=0|1,dx_sum=0|1]"),
    (embedding, "BxTxCxV"), (embedding_backward, "BxTxCxV"),
    (gelu_tanh, "N"), (gelu_tanh_backward, "N"), (add, "N"), (fill, "N[:value=X]"),
    (global_norm, "N"), (adamw, "N[:lr=…,beta1=…,beta2=…,eps=…,weight_decay=…]"))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="+", metavar="ANCHOR=SHAPE")
    args = ap.parse_args()
    cases = []
    for case in args.cases:
        name, sep, shape = case.partition("=")
        if not sep or name not in ANCHORS:
            ap.error(f"case {case!r}: want ANCHOR=SHAPE with ANCHOR one of {', '.join(ANCHORS)} "
                     "(the gemm and softmax anchors are ../shared/bench/anchors.py's)")
        syntax = ANCHORS[name][1]
        try:
            dims, params = parse(shape)
        except ValueError:
            dims = None
        if dims is None or len(dims) != len(syntax.split(":")[0].strip("[").split("x")):
            ap.error(f"case {case!r}: {name}'s shapes are written {syntax}, as vkern writes them")
        if (name, shape) not in [(n, s) for n, s, _, _ in cases]:
            cases.append((name, shape, dims, params))
    torch.manual_seed(0)
    failed = 0
    for name, shape, dims, params in cases:
        try:
            ANCHORS[name][0](shape, dims, params)
        except Exception as e:  # one anchor's failure (memory, a missing kernel) leaves the others to run
            failed += 1
            print(f"op_anchors: {name} {shape}: {type(e).__name__}: {e}", file=sys.stderr)
        torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
