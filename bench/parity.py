#!/usr/bin/env python3
"""PyTorch parity for `vkern train` (TRAINING.md, level 4).

Loads vkern's initial checkpoint into transformers.GPT2LMHeadModel, replays
the exact batches vkern trained on (vkern train --batches FILE writes them),
and trains with the same hyperparameters (read from the checkpoint's
train_state.json): fp16 autocast + GradScaler(init 2^16, growth interval 2000)
+ AdamW (decay on matrices only), gradient clipping at the unscaled norm,
nanoGPT's warm-up + cosine schedule. It runs once in fp16 autocast and once in
fp32, and prints vkern's loss beside both, per step, with the largest relative
differences. With --eval it also evaluates a checkpoint on the validation
windows of a one-file corpus, to compare with `vkern eval`.

  python3 parity.py --init DIR --batches FILE --vkern-json FILE [--json OUT]
  python3 parity.py --eval DIR --data FILE --windows N
"""
import argparse, json, math, os, sys

import numpy as np
import torch
import torch.nn.functional as F
from transformers import GPT2LMHeadModel


def load(dir, device):
    m = GPT2LMHeadModel.from_pretrained(dir, torch_dtype=torch.float32)
    return m.to(device)


def lr_at(h, s):
    # nanoGPT's schedule, as gpt.Hyper.LRAt.
    if s < h["warmup"]:
        return h["lr"] * (s + 1) / (h["warmup"] + 1)
    if s >= h["lr_steps"] or h["lr_steps"] <= h["warmup"]:
        return h["min_lr"]
    ratio = (s - h["warmup"]) / (h["lr_steps"] - h["warmup"])
    return h["min_lr"] + 0.5 * (1 + math.cos(math.pi * ratio)) * (h["lr"] - h["min_lr"])


def batches(path, steps, rows, t):
    a = np.fromfile(path, dtype=np.uint16)
    want = steps * rows * (t + 1)
    if a.size < want:
        sys.exit(f"parity: {path} holds {a.size} tokens, fewer than {steps} steps of {rows} windows of {t + 1}")
    return torch.from_numpy(a[:want].astype(np.int64)).view(steps, rows, t + 1)


def train(init, run, data, steps, amp, device):
    model = load(init, device)
    model.train()
    h = run["hyper"]
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.dim() >= 2 else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": h["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"])
    scaler = torch.amp.GradScaler("cuda", init_scale=65536.0, growth_interval=2000, enabled=amp)
    b, k = run["batch"], run["accum"]
    losses = []
    for s in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(h, s)
        opt.zero_grad(set_to_none=True)
        step_loss = 0.0
        for j in range(k):
            w = data[s, j * b:(j + 1) * b].to(device)
            x, y = w[:, :-1], w[:, 1:]
            with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
                logits = model(x).logits
            loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))
            step_loss += loss.item() / k
            scaler.scale(loss / k).backward()
        scaler.unscale_(opt)
        if h["clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), h["clip"])
        scaler.step(opt)
        scaler.update()
        losses.append(step_loss)
    return losses


def evaluate(dir, data_path, windows, device):
    model = load(dir, device)
    model.eval()
    t = model.config.n_positions
    raw = np.fromfile(data_path, dtype=np.uint8)
    val = raw[len(raw) - len(raw) // 20:]  # package data: the last 5% of a lone file
    n = min(windows, len(val) // (t + 1)) if windows > 0 else len(val) // (t + 1)
    total, count = 0.0, 0
    with torch.no_grad():
        for w in range(n):
            win = torch.from_numpy(val[w * (t + 1):(w + 1) * (t + 1)].astype(np.int64)).to(device)
            logits = model(win[None, :-1]).logits.double()
            total += F.cross_entropy(logits[0], win[1:], reduction="sum").item()
            count += t
    return total / count, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", help="vkern's initial checkpoint folder (vkern train --steps 0)")
    ap.add_argument("--batches", help="the batches vkern trained on (vkern train --batches)")
    ap.add_argument("--vkern-json", help="vkern train --json of the run")
    ap.add_argument("--steps", type=int, default=0, help="steps to compare (default: all of vkern's)")
    ap.add_argument("--json", help="write the comparison here")
    ap.add_argument("--eval", help="evaluate this checkpoint folder instead")
    ap.add_argument("--data", help="with --eval: the one text file vkern eval read")
    ap.add_argument("--windows", type=int, default=64)
    a = ap.parse_args()
    device = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    if a.eval:
        loss, n = evaluate(a.eval, a.data, a.windows, device)
        print(json.dumps({"impl": "transformers.GPT2LMHeadModel", "loss": loss, "windows": n}))
        return

    run = json.load(open(os.path.join(a.init, "train_state.json")))
    vk = json.load(open(a.vkern_json))
    vloss = [r["loss"] for r in vk["steps"]]
    steps = a.steps or len(vloss)
    cfg = json.load(open(os.path.join(a.init, "config.json")))
    t = cfg["n_positions"]
    data = batches(a.batches, steps, run["batch"] * run["accum"], t)
    torch.manual_seed(0)
    fp16 = train(a.init, vk_run(run, vk), data, steps, True, device)
    fp32 = train(a.init, vk_run(run, vk), data, steps, False, device)
    print(f"{'step':>5} {'vkern':>9} {'torch fp16':>10} {'torch fp32':>10} {'rel(vk,16)':>10} {'rel(16,32)':>10}")
    worst, worst_ref = 0.0, 0.0
    rows = []
    for s in range(steps):
        r = abs(vloss[s] - fp16[s]) / abs(fp16[s])
        r32 = abs(fp16[s] - fp32[s]) / abs(fp32[s])
        worst, worst_ref = max(worst, r), max(worst_ref, r32)
        rows.append({"step": s, "vkern": vloss[s], "torch_fp16": fp16[s], "torch_fp32": fp32[s]})
        if s < 10 or s % max(1, steps // 20) == 0 or s == steps - 1:
            print(f"{s:5d} {vloss[s]:9.4f} {fp16[s]:10.4f} {fp32[s]:10.4f} {r:10.2e} {r32:10.2e}")
    print(f"largest relative difference over {steps} steps: vkern vs torch fp16 {worst:.3e}; torch fp16 vs fp32 {worst_ref:.3e}")
    if a.json:
        json.dump({"steps": rows, "max_rel_vkern_fp16": worst, "max_rel_fp16_fp32": worst_ref,
                   "device": torch.cuda.get_device_name(0), "torch": torch.__version__}, open(a.json, "w"), indent=1)


def vk_run(run, vk):
    # The hyperparameters of the run that was compared: vkern's --json has
    # them whole (the initial checkpoint's may be a --steps 0 run's).
    r = dict(run)
    r["hyper"] = vk["hyper"]
    r["batch"], r["accum"] = vk["batch"], vk["accum"]
    return r


if __name__ == "__main__":
    main()
