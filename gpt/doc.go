// Package gpt trains GPT-2-family models on a vkern device: the model of
// ../shared/TRAINING.md (token and position embeddings, pre-LayerNorm
// blocks of causal attention and a tanh-GELU MLP, a final LayerNorm and a
// head tied to the token embedding; no dropout) in the configurations
// Nano, Char and GPT2.
//
// # Where things live
//
// A Model's parameters, gradients, AdamW moments and activations are
// device buffers: five parameter arenas (f32 masters, f16 working copy, f32
// gradients, two f32 moments) laid out alike, each tensor at an offset
// aligned so that its views start on vkern.ViewAlign, with the decayed
// matrices first so that each AdamW group is one range; and one
// allocation of activations cut into views. The host sends each batch's
// tokens and reads back the per-row losses, the squared gradient norm and
// the count of non-finite gradients, nothing else.
//
// # The padded vocabulary
//
// On the device the vocabulary is padded to Vp, V rounded up to a multiple
// of 64 (Config.Vp: GPT-2's 50257 becomes 50304, as in llm.c and nanoGPT;
// nano's and char's 256 stay 256), so that every row of the logits and of
// their gradient is 16-byte aligned, as the GPU GEMMs' TMA and 16-byte
// copies and cross_entropy's vector loads want (at 50257 the head's GEMMs
// pad their operands into scratch or take a slower path). wte, in every
// arena, has Vp rows; rows V … Vp−1 are zero. The head is linear_nt(ln_f(x), wte, headBias) with a constant
// bias of 0 for the V tokens and −Inf for the padded columns, so their
// logits are exactly −Inf: with a finite row maximum m, exp(−Inf − m) = 0,
// so cross_entropy over Vp columns gives the loss over V (up to the order
// of its sum) and a gradient of exactly +0 in the padded columns. Then
// dwte's padded rows are sums of zeros, exactly 0, and AdamW keeps them 0:
// with g = m = v = 0 and p = 0 its step is p·(1 − lr·wd) − η·0/(0 + eps)
// = 0 (eps > 0 by its contract). No token reaches them: the embedding and
// its gradient read wte's first V rows, so their kernels refuse a token ≥
// V, and `vkern train` and `vkern eval` check the corpus against V
// (data.Corpus.Check) before they start; a label in [V, Vp), which
// cross_entropy's kernels would accept, would get a loss of +Inf. Outside the device everything has V:
// checkpoints hold wte and its moments as Hugging Face's V × C (loading
// pads with zeros, so a resumed run continues bit for bit), and the float64
// reference is unpadded. With V a multiple of 64 nothing changes: the head
// adds a bias of zeros, and a run's losses are the same bits as with the
// head of gemm_grad_a.
//
// # A step
//
// A step is two programs (program.go), each a list of op calls sent as one
// vkern RunBatch: first, clearing the gradient accumulators that the
// backward adds into (the products' weight gradients are written whole by
// the first micro-batch's linear_grad_w instead), then for each of the K
// micro-batches the forward, cross_entropy (its gradient scaled by the
// loss scale over K) and the backward, then global_norm over all
// gradients; second, when every gradient is finite, AdamW on each group
// with the gradient multiplied by the clipping factor over the loss scale.
// The first is the same calls step after step while the loss scale holds:
// it is built and checked against the ops' contracts once
// (vkern.Device.Prepare) and resent as it is, so the host's work between
// the device's programs is the transfers and the decision. On one GPU the
// server replays it as a CUDA graph from its second step (PROTOCOL.md,
// RUN_BATCH); a data-parallel step's program holds collectives, which it
// never captures.
//
// The arithmetic is PyTorch's fp16 autocast with GradScaler, so that the
// parity script (bench/parity.py) compares like with like: f16 weights and
// activations in the kernels, f32 accumulation, f32 master weights and
// moments, the loss in f32; dynamic loss scaling from 2¹⁶ (halved and the
// step skipped on any non-finite gradient, doubled after 2000 clean
// steps); global-norm clipping of the unscaled gradient as
// torch.nn.utils.clip_grad_norm_; torch.optim.AdamW; nanoGPT's warm-up and
// cosine schedule. One difference is deliberate and measured by the parity
// runs: the residual stream is f16 here, where autocast keeps it in f32.
//
// Every kernel is deterministic, so a run is a function of its seed: the
// initialisation (each tensor from its own PCG stream), the batches (package
// data) and the order of every sum. A checkpoint (Save, Load) holds the
// masters, the moments and the State, so a resumed run continues bit for
// bit.
//
// # Across GPUs
//
// A Trainer with Parallel set trains data-parallel (parallel.go): one
// replica per rank, each on its contiguous block of the step's
// micro-batches; the gradients all-reduced in buckets as the backward
// finishes them (NCCL, in the kernel servers, overlapped with the rest of
// the backward on GPUs; on the host for cpu ranks); every rank's losses
// and norm gathered, so that every rank takes the same step. OpenParallel
// starts the ranks of this process and meets the others (package
// collective); a rank that dies or hangs ends every rank's step with an
// error naming it.
//
// # Checking a step
//
// Beyond each op's own verification (package verify):
//   - Reference is a float64 GPT composed from the ops' oracles, over the
//     unpadded vocabulary; the test suite compares a whole step's loss and
//     gradients with it under a tolerance derived from the ops' bounds (at
//     nano, and at a V of 300 that the device pads to 320), and checks the
//     gradients against central differences of the loss.
//   - Trainer.StepVerified runs a real step one call at a time and checks
//     every call against the oracle of its actual inputs (live.go), as
//     `vkern train --verify-every N` does.
package gpt
