#!/usr/bin/env python3
"""PyTorch anchors for `vkern bench --suite train`: training steps of the
model vkern trains, timed on the GPU you run it on.

The model is vkern's (gpt/ and ../shared/TRAINING.md): token and learned
position embeddings, pre-LayerNorm blocks (eps 1e-5) of causal attention
(F.scaled_dot_product_attention(is_causal=True)) and an MLP of width 4C with
the tanh GELU, every linear layer with a bias, a final LayerNorm and a head
tied to the token embedding; no dropout. As on vkern's device the vocabulary
is padded to Vp, V rounded up to a multiple of 64 (50257 → 50304; 256 stays
256): wte has Vp rows, the padded ones zero, and the head adds a constant
bias of 0 for the V tokens and −inf for the rest, so their logits are −inf
and their gradients 0. The position table has T rows, the context timed, as
`vkern bench --suite train --context T` builds it.

A step is vkern's: the batch's tokens copied to the GPU, the forward and the
loss (F.cross_entropy over the Vp logits) in fp16 autocast, the backward of
the loss scaled by torch.amp.GradScaler (init 2^16, growth interval 2000),
unscale, clip_grad_norm_ to 1.0, torch.optim.AdamW(fused=True) with weight
decay 0.1 on the matrices only (decay on p.dim() >= 2, as nanoGPT and
parity.py), the scaler's update. Tokens are uniform in [0, V), drawn from a
seed. Modes: eager, and the model's forward with its loss under
torch.compile (default mode; the optimizer stays eager).

Each (model, mode) runs --warmup untimed steps (the compiled mode compiles
in its first ones), then --steps steps, each timed on the host with
torch.cuda.synchronize() before and after (time.perf_counter). Prints one
JSON line per (model, mode):

  {"anchor": "train", "model", "mode", "batch", "context", "vocab",
   "padded_vocab", "steps", "median_ms", "tokens_per_second", "skipped",
   "torch", "device"}

tokens_per_second is B·T over the median step; skipped counts timed steps
GradScaler skipped (a non-finite gradient: no update). Run it in the same
device call as `vkern bench --suite train --anchors FILE`
(bench/cuda-train-bench.sh does both):

  python3 bench/train_anchors.py > train-anchors.jsonl
  python3 bench/train_anchors.py --models gpt2 --modes eager --batch 8

With --gpus N (N ≥ 2) the same step runs data-parallel under PyTorch's
DistributedDataParallel, one process per GPU through NCCL (its default 25
MiB buckets, overlapped with the backward), each rank on its own --batch
sequences: the anchor for `vkern train --gpus N` (bench/cuda-dp-run.sh).
Rank 0 times the steps and prints the line, with "gpus": N and
tokens_per_second over all N·B sequences:

  python3 bench/train_anchors.py --models gpt2 --batch 16 --gpus 2
"""
import argparse, json, math, os, statistics, sys, time

# vkern's configurations (gpt/config.go) and `vkern train`'s default batch
# for each (cli/train.go), which `vkern bench --suite train` also takes.
CONFIGS = {
    "nano": dict(layers=4, heads=4, c=64, t=64, v=256, batch=16),
    "char": dict(layers=6, heads=6, c=384, t=256, v=256, batch=32),
    "gpt2": dict(layers=12, heads=12, c=768, t=1024, v=50257, batch=16),
}
VOCAB_ALIGN = 64  # gpt.Config.Vp's multiple


def padded(v):
    return (v + VOCAB_ALIGN - 1) // VOCAB_ALIGN * VOCAB_ALIGN


def build(torch, nn, F, layers, heads, c, t, v, vp):
    """vkern's GPT as torch modules; returns the model, whose forward(x, y)
    is the mean cross-entropy loss."""

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn, self.c_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)

        def forward(self, x):
            b, n, _ = x.shape
            q, k, w = (z.view(b, n, heads, c // heads).transpose(1, 2) for z in self.c_attn(x).split(c, dim=2))
            y = F.scaled_dot_product_attention(q, k, w, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(b, n, c))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn = nn.LayerNorm(c, eps=1e-5), Attention()
            self.ln_2 = nn.LayerNorm(c, eps=1e-5)
            self.c_fc, self.c_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vp, c), nn.Embedding(t, c)
            self.h = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(c, eps=1e-5)
            bias = torch.zeros(vp)
            bias[v:] = -math.inf
            self.register_buffer("head_bias", bias)
            self.register_buffer("pos", torch.arange(t))

        def forward(self, x, y):
            h = self.wte(x) + self.wpe(self.pos)
            for block in self.h:
                h = block(h)
            logits = F.linear(self.ln_f(h), self.wte.weight, self.head_bias)
            return F.cross_entropy(logits.view(-1, vp), y.reshape(-1))

    model = GPT()
    # GPT-2's initialisation, as gpt/params.go: N(0, 0.02), the projections
    # into the residual stream N(0, 0.02/√(2·layers)), biases 0, LayerNorm
    # weights 1; the padded rows of wte 0.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("c_proj.weight") else 0.02
                p.normal_(0.0, std)
            elif not name.endswith(".weight"):  # biases
                p.zero_()
        model.wte.weight[v:].zero_()
    return model


def time_mode(torch, nn, F, name, mode, b, t, vp, steps, warmup, seed, rank=0, world=1):
    cfg = CONFIGS[name]
    v = cfg["v"]
    torch.manual_seed(seed)  # every rank builds the same model (DDP also broadcasts rank 0's)
    model = build(torch, nn, F, cfg["layers"], cfg["heads"], cfg["c"], t, v, vp).cuda()
    trained = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel
        trained = DistributedDataParallel(model, device_ids=[rank])
        torch.manual_seed(seed + rank)  # each rank its own batches
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    scaler = torch.amp.GradScaler("cuda", init_scale=65536.0, growth_interval=2000)
    loss_of = torch.compile(trained) if mode == "compile" else trained
    # A few distinct batches of T + 1 tokens, in pinned host memory, copied
    # to the GPU in each step as a training loop copies its batch.
    windows = [torch.randint(0, v, (b, t + 1), dtype=torch.int64).pin_memory() for _ in range(4)]

    def step(i):
        w = windows[i % len(windows)].cuda(non_blocking=True)
        x, y = w[:, :-1], w[:, 1:]
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_of(x, y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    for i in range(warmup):
        step(i)
    times, skipped = [], 0
    for i in range(warmup, warmup + steps):
        scale = scaler.get_scale()  # read outside the timing: it waits for the GPU
        torch.cuda.synchronize()
        start = time.perf_counter()
        step(i)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        skipped += scaler.get_scale() < scale  # GradScaler halves the scale on a skipped step
    median_ms = statistics.median(times) * 1e3
    rec = {"anchor": "train", "model": name, "mode": mode, "batch": b, "context": t, "vocab": v, "padded_vocab": vp,
           "steps": steps, "median_ms": round(median_ms, 4),
           "tokens_per_second": round(world * b * t / median_ms * 1e3, 1),
           "skipped": skipped, "torch": torch.__version__, "device": torch.cuda.get_device_name(rank)}
    if world > 1:
        rec["gpus"] = world
    return rec


def ddp_rank(rank, world, port, jobs, steps, warmup, seed):
    """One process of a --gpus run: rank `rank` of `world`, on GPU `rank`;
    rank 0 prints each job's line."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dist.init_process_group("nccl", rank=rank, world_size=world)
    try:
        for m, mode, b, t, vp in jobs:
            rec = time_mode(torch, nn, F, m, mode, b, t, vp, steps, warmup, seed, rank, world)
            if mode == "compile":
                torch.compiler.reset()
            torch.cuda.empty_cache()
            if rank == 0:
                print(json.dumps(rec), flush=True)
    finally:
        dist.destroy_process_group()


def names(ap, flag, value, choices):
    out = [s.strip() for s in value.split(",") if s.strip()]
    for s in out:
        if s not in choices:
            ap.error(f"{flag} {s!r}: want one or more of {', '.join(choices)}, comma-separated")
    if not out:
        ap.error(f"{flag} is empty")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="char,gpt2", help="comma-separated: nano, char, gpt2 (default char,gpt2)")
    ap.add_argument("--modes", default="eager,compile", help="comma-separated: eager, compile (default both)")
    ap.add_argument("--batch", type=int, default=0, help="sequences per step (default: the model's, as vkern train's)")
    ap.add_argument("--context", type=int, default=0, help="T, at most the model's context (default: the model's)")
    ap.add_argument("--steps", type=int, default=30, help="timed steps (default 30)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first (default 10)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gpus", type=int, default=1, help="data-parallel over this many GPUs under DDP (default 1: no DDP)")
    ap.add_argument("--port", type=int, default=29933, help="the ranks' meeting port with --gpus (default 29933)")
    pad = ap.add_mutually_exclusive_group()
    pad.add_argument("--padded", dest="padded", action="store_true", default=True,
                     help="pad the vocabulary to a multiple of 64, as vkern does (default)")
    pad.add_argument("--unpadded", dest="padded", action="store_false",
                     help="V logits, no padding (vkern bench refuses to pair these with its padded steps)")
    a = ap.parse_args()
    models = names(ap, "--models", a.models, list(CONFIGS))
    modes = names(ap, "--modes", a.modes, ["eager", "compile"])
    if a.gpus < 1:
        ap.error(f"--gpus {a.gpus}: want at least 1")
    if a.steps < 1 or a.warmup < 0 or a.batch < 0 or a.context < 0:
        ap.error(f"--steps {a.steps} (want ≥ 1), --warmup {a.warmup}, --batch {a.batch}, --context {a.context} (want ≥ 0)")
    for m in models:
        if a.context > CONFIGS[m]["t"]:
            ap.error(f"--context {a.context}: {m}'s context is {CONFIGS[m]['t']}")

    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    if not torch.cuda.is_available():
        sys.exit(f"train_anchors: no CUDA device (torch {torch.__version__}, built for CUDA {torch.version.cuda}); "
                 "run it on the GPU machine, in the same call as vkern bench --suite train --backend cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    if a.gpus > 1:
        if torch.cuda.device_count() < a.gpus:
            sys.exit(f"train_anchors: --gpus {a.gpus}, but {torch.cuda.device_count()} GPU(s) here")
        jobs = []
        for m in models:
            cfg = CONFIGS[m]
            vp = padded(cfg["v"]) if a.padded else cfg["v"]
            jobs += [(m, mode, a.batch or cfg["batch"], a.context or cfg["t"], vp) for mode in modes]
        import torch.multiprocessing as mp
        mp.spawn(ddp_rank, args=(a.gpus, a.port, jobs, a.steps, a.warmup, a.seed), nprocs=a.gpus)
        return 0

    failed = 0
    for m in models:
        cfg = CONFIGS[m]
        b, t = a.batch or cfg["batch"], a.context or cfg["t"]
        vp = padded(cfg["v"]) if a.padded else cfg["v"]
        for mode in modes:
            print(f"train_anchors: {m} {mode}, B {b}, T {t}, V {cfg['v']} (Vp {vp}): "
                  f"{a.warmup} warm-up and {a.steps} timed steps", file=sys.stderr, flush=True)
            try:
                rec = time_mode(torch, nn, F, m, mode, b, t, vp, a.steps, a.warmup, a.seed)
            except Exception as e:  # one mode's failure (memory, the compiler) leaves the others to run
                failed += 1
                print(f"train_anchors: {m} {mode}: {type(e).__name__}: {e}", file=sys.stderr)
                continue
            finally:
                if mode == "compile":
                    torch.compiler.reset()  # the compiled graphs hold the model's memory
                torch.cuda.empty_cache()
            print(json.dumps(rec), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
