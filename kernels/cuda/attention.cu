// attention and attention_grad on the GPU: causal multi-head attention from
// the fused projection qkv f16 (B·T)×3C, f32 inside; the math of
// kernels/cpu/attention.cc, with scores in base 2 (s₂ = q·k·α·log₂e, p =
// exp2f(s₂ − m₂)) and lse = (m₂ + log2f(l))·ln 2.
//
// Three paths:
//
// - On Hopper (compute capability 9.0, the sm_90a build), the products of
//   both ops run on warpgroup MMA for heads of 32 < D ≤ 64 columns (D a
//   multiple of 8: the heads padded to DP = 64): variants 6 and 7 below, the kernels of the next path
//   with another source of operands (see backward_dkdv_hopper).
// - Tensor cores (CUDA, compute capability 8.0 or more, head size D ≤ 128,
//   padded to DP = 16, 32, 64 or 128 with zeros), flash-style: no T×T matrix
//   leaves the chip. Warps own 16 rows of a tile; tiles of 64 keys (or
//   queries) stream through two stages of shared memory by cp.async, the
//   next tile's copy in flight while this one is used (rows padded by 16
//   bytes: ldmatrix and the 32-bit fragment loads are free of bank
//   conflicts); the products are mma.sync.m16n8k16 (f16 × f16 + f32).
//   * forward_mma: a block of 4 warps per 64-row query tile, heaviest first;
//     S = Q·Kᵀ per key tile, the causal mask where a tile reaches past a
//     warp's first row (a warp skips key tiles wholly after its rows), an
//     online softmax (running max, rescales by exp2(m_old − m_new)), and O +=
//     P·V with P rounded once to f16. The row sums l add P in f32.
//   * backward: row_dots writes D = dy·y and lse₂ = lse·log₂e per row (f32
//     scratch); then
//     backward_dkdv_mma, one block per key tile (the first, heaviest, first),
//     walks the query tiles i ≥ j and keeps dk, dv in registers: Sᵀ = K·Qᵀ,
//     dPᵀ = V·dYᵀ, P = exp2(s₂ − lse₂), dS = P(dP − D), dv += Pᵀ·dY, dk +=
//     dSᵀ·Q; and backward_dq_mma, one block per query tile, walks the key
//     tiles j ≤ i: S, dP, P, dS again, dq += dS·K. Every sum has one order:
//     results are deterministic. P enters its products rounded once to f16;
//     dS, unbounded, is rounded once after scaling each row of a warp's tile
//     by the power of two that puts the row's largest |dS| in [2¹⁴, 2¹⁵)
//     (frexpf, ldexpf: exact), and the row's products are summed in f32 and
//     scaled back.
// - Exact rows (every other case: HIP, older GPUs, D > 128, and any call
//   whose inputs hold an infinity or a NaN): one warp per row of a head,
//   lanes across the head's columns (dot products reduced by shuffles), in
//   chunks of 128 columns; forward_rows takes the row's max in a first pass
//   and sums p and p·v with that max in a second (no rescales);
//   backward_dq_rows and backward_dkdv_rows recompute P and dS for each
//   pair. They follow the formula's IEEE rules exactly: a NaN or +Inf
//   score, or a row of only −Inf scores, makes the row NaN; 0·Inf is NaN;
//   pairs with j > i are never formed. (On tensor cores a masked key's
//   infinite v would meet p = 0 inside one mma: hence the route.)
//
// Which path a call takes is settled on the device, without a pass of its
// own: the flag word in scratch is cleared, and the tensor-core kernels set
// it when a tile they copied holds an infinity or a NaN (each tile of q, k
// and v is scanned by exactly one block: forward_mma (forward_hopper) its
// own query tile and the key tiles that start inside it; backward_dkdv_mma
// (backward_dkdv_hopper) its key tile and the query tile on its diagonal),
// as row_dots does for dy, y and lse; the
// exact kernels, launched after them, return at once when the flag is clear
// and otherwise write every output again. The host never waits.
//
// Accuracy, against the oracle's bounds (oracle/attention.go): products of
// f16 values are exact and mma.sync sums them in f32 (any order, fused);
// α·log₂e is rounded once on the host; exp2f and log2f are within 2 and 1
// ulps (the CUDA Math API's table; no -use_fast_math), and the tiles'
// exponentials (exp2_tile) are exp2f's bits where the result is normal and
// 0 where it would be under 2⁻¹²⁶ (the bound allows 2⁻¹²⁶ there); the online pass
// rescales once per 64 keys (the bound allows one per 16); P ∈ [0, 1]
// rounded to f16 errs by 2⁻¹¹·P + 2⁻²⁵, and dS, scaled, by 2⁻¹¹·|dS| + 2⁻³⁹
// of the largest |dS| of its tile row (the bound allows exactly these). f16
// outputs are rounded once (__float2half_rn).
//
// Scratch (rows.cuh's ScratchBuffer, kept between calls): a 16-byte flag
// word, and for attention_grad 8·B·H·T bytes of D and lse₂.
// cudaErrorMemoryAllocation when it cannot be had.
//
// Variants (at 16x1024x768x12 on an H100, against PyTorch's
// scaled_dot_product_attention in the math backend, f32, and its flash
// backend, f16):
//   1. (51fc9cd) mma.sync tiles of 64, P and dS split into two f16 halves
//      each (products twice), loads through registers (no cp.async), the
//      route by separate scans of every input: forward 0.344 ms (13.3× SDPA
//      math, 0.11 of the matmul floor, 0.39× SDPA flash), backward 1.223 ms
//      (3.71×, 0.07, 0.36× flash).
//   2. (733e9b6) P and scaled dS rounded once to f16, K/V (Q/dY) tiles in
//      two cp.async stages, B fragments by ldmatrix, the route folded into
//      the tiles' copies and row_dots (16-byte loads): forward 0.313 ms
//      (181 registers, two blocks an SM, 0.43× SDPA flash), backward 0.823
//      ms (0.54× flash).
//   3. forward: Q's A fragments by ldmatrix from shared memory each tile,
//      three blocks an SM (__launch_bounds__, the largest carveout), p =
//      exp2(fma(s, α₂, −m₂)) on unscaled scores, 32-bit tile offsets and
//      masks; backward: the same copies and masks (ldexpf kept: a built
//      power of two behind a range test made it 1.28× slower): forward
//      0.177 ms (0.77× SDPA flash at 0.135), backward 0.806 ms (0.55× flash
//      at 0.445); in the gpt2 step 0.185 and 0.837 ms a call (docs/
//      attention-h100/). Tried and dropped: backward A fragments from shared
//      memory (1.03 ms), sub-tiles of 32 (1.00–1.28 ms), the largest carveout
//      for the backward (1.06 ms), a 128-row forward block (0.202 ms).
//   4. Tried and dropped (2026-11-24): dq summed by backward_dkdv_mma, the
//      dq kernel gone. Each warp's dSᵀ went through shared memory (f32) to
//      rows of queries, scaled per row as backward_dq_mma scales them, and
//      times the key tile already held; the shares went into an f32 sum per
//      query tile in global memory in key-tile order (a count per tile, the
//      block of key tile kt waiting for count kt; items drawn by an atomic
//      ticket so that every wait is on a running block; the diagonal block
//      wrote f16 dq). dq came out the same bits as the dq kernel's, but the
//      backward took 0.954 ms against 0.806 at 16x1024x768x12 (0.486 vs
//      0.396 at B = 8, 0.176 vs 0.111 at B = 1), and the gpt2 step 44.27
//      ms against 42.80: the extra shared memory, barriers and f32 traffic
//      cost more than the recomputed S and dP saved.
//   5. (off unless $VKERN_ATTENTION_DQ=stored) dq from stored dS:
//      backward_dkdv_mma writes each pair's dS, scaled per query and
//      rounded to f16 as backward_dq_mma rounds it, with its shifts (221 MB
//      of scratch at 16x1024x768x12), and backward_dq_stored sums dS·K in
//      key-tile order: one product a pair instead of three, no
//      exponentials, 2 × 214 MB more memory traffic; deterministic, as
//      before. Verified (30 of 30, its planted defects caught), but the
//      gpt2 step took 42.39 ms against 41.65 with variant 3 (1.018×, one
//      H100 call, 2026-11-27 at f575dca's kernels): the traffic costs more
//      than the two products save.
//   6. (Hopper, DP = 64: backward_dkdv_hopper, backward_dq_hopper) the
//      backward's products on wgmma, every operand tile in shared memory
//      in wgmma's swizzled layout, P and dS as register fragments; the
//      same roundings, and on the lab's inputs the same bits as variant 3:
//      backward 0.555 ms against variant 3's 0.812 in the same call (1.46×;
//      SDPA flash took 0.445 in earlier calls). ptxas: 0 spills (dq), 8
//      bytes (dkdv) at three blocks an SM, where dkdv_mma spills 120.
//      Then S and dP in two groups, P formed while dP's products run: 0.553
//      ms against variant 3's 0.809 the next call, no change to measure.
//   7. (Hopper, DP = 64: forward_hopper) the forward's products on wgmma
//      the same way, a block of one warpgroup per 64-row query tile: 0.127
//      ms against variant 3's 0.175 in the same call (1.38×; SDPA flash
//      took 0.135 in earlier calls), the same bits on the lab's inputs;
//      0 spills at four blocks an SM. With variant 6, gpt2's step took
//      38.14 ms and 37.62 ms in two calls, 0.987× and 1.006× torch.compile
//      in the same call (41.61 ms, 0.926×, before; docs/
//      attention-hopper-h100/). $VKERN_ATTENTION=mma keeps variant 3 for
//      both ops.
//   8. (groups of 16 heads unless $VKERN_ATTENTION_HEAD_GROUP says
//      otherwise; 0 is the order of variants 6 and 7) variants 6 and 7
//      taking their items a group of heads at a time (tile_order.cuh), so
//      that the blocks running at once share a few heads' tiles in L2. In the
//      lab (2026-11-27, one H100 call, the same bits at every group), the
//      forward at 32x1024x768x12 took 0.232 ms with groups of 16 heads
//      against 0.324 over all heads at once (1.40×; the forward at B = 32
//      was 2.5 times its time at B = 16 in the gpt2 step's profile), and
//      the backward 1.053 against 1.075 ms; at 16x1024x768x12, 0.1274 and
//      0.5639 ms against 0.1276 and 0.5597 (groups of 8, 4 and 2 were
//      slower at both sizes: the heaviest tiles of later groups start
//      late). The next H100 call (67632c4): vkern verify 70 of 70 at the
//      default shapes and 10 of 10 at gpt2's with groups of 16, and gpt2's
//      step at B = 32 71.06 ms against 72.42 (1.019×), at B = 16 37.54
//      against 37.57, the same losses (docs/fixed-cost-h100/).
//   9. the Hopper backward's dS scaled into f16's range and its products
//      scaled back by multiplications by 2^∓shift (round_scaled,
//      add_scaled; ldexpf where a warp has a row shift below −127), the
//      mask tests of key_probabilities and query_probabilities taken out
//      of the tiles that need none, and the Hopper tiles' pointer aligned
//      without leaving shared memory (align_swizzle). Nsight Compute had
//      shown backward_dkdv_hopper (303.5 µs) and backward_dq_hopper
//      (182.5 µs) issuing an instruction every 1.8 cycles a scheduler, with
//      FMUL 27% and 39% of their instructions, most of them ldexpf's, and
//      the lse and D of dkdv's stage read by generic loads. Lab, one H100
//      call (2026-11-27), alternating builds: backward 0.4699 and 0.4705
//      ms against 0.5675 and 0.5593 (1.20×) at 16x1024x768x12, 0.8759 and
//      0.8833 against 1.0530 and 1.0508 (1.19×) at B = 32; the mma.sync
//      backward (variant 3, the mask tests alone) 0.68 against 0.81 ms;
//      within each build the wgmma outputs equal the mma.sync ones (largest
//      difference 0, as before; the lab printed no hashes yet, so base
//      against new was not compared bit for bit); dkdv's 8 bytes of spills
//      gone.
//   10. exp2_tile: the backward's and the forward's exponentials of a
//      tile as ex2.approx.ftz alone where every element of the warp is at
//      least −126 (exp2f's own instruction there; exp2f otherwise). Lab, one
//      H100 call (2026-11-27), alternating builds against variant 9: the
//      Hopper backward 0.4538 and 0.4466 ms against 0.4737 and 0.4755
//      (1.05×) at 16x1024x768x12, 0.8335 and 0.8451 against 0.8817 and
//      0.8905 at B = 32; the forward about 1% slower in all four pairs
//      (0.1323 and 0.1299 against 0.1291 and 0.1296 at B = 16, 0.2368 and
//      0.2364 against 0.2335 and 0.2344 at B = 32), and the mma.sync
//      backward 2% slower (0.6946 and 0.6953 against 0.6807 and 0.6815);
//      vkern verify 70 of 70 on both paths and 10 of 10 at
//      16x1024x768x12 (docs/attention-backward-h100/). y's bits differ
//      from variant 9's (online_softmax says why); the exponentials' do
//      not.
//   11. the Hopper kernels' accumulators that wgmma overwrites (S, dP, and
//      the scaled dS products) given no zeros first (wgmma_m64n64k16_set,
//      wgmma_m64n64k16_rs_set); add_scaled's fast path one fused
//      multiply-add an element; lse₂ = lse·log₂e formed once a row by
//      row_dots instead of once a tile pair by each backward kernel. The
//      same bits on the lab's inputs (every output's hash equal to
//      variant 10's; the fused addition differs only where a scaled
//      product is subnormal, see add_scaled). Lab, one H100 call
//      (2026-11-27), alternating builds: the Hopper backward 0.4405 and
//      0.4385 ms against 0.4530 and 0.4556 (1.03×) at 16x1024x768x12,
//      0.8171 and 0.8205 against 0.8446 and 0.8514 (1.04×) at B = 32; the
//      mma.sync backward 0.676 and 0.679 against 0.692 and 0.697; the
//      forward unchanged (0.130). Against SDPA in the same call:
//      attention_grad 0.4382 ms, the flash backend 0.4408 (1.006×), cuDNN
//      0.3560; attention 0.1309, flash 0.1363 (1.041×); in two runs of a
//      later call 1.010× and 1.012× (backward), 1.022× and 1.024×
//      (forward).
//   12. Tried and dropped (branch attention-held, 2026-11-28): the
//      item-fixed A tiles (Q in the forward, Q and dY in the dq kernel, K
//      and V in the dk/dv kernel) held as register fragments, so that S
//      and dP read only B from shared memory. Lab, one H200 call (no H100
//      was lent that day), against main in turn: the forward 0.1305 ms
//      against 0.1308 at 16x1024x768x12, the backward with Q and dY held
//      0.4115 against 0.4108; K and V held spilled 344 bytes at three
//      blocks an SM and took 0.482 ms. Shared-memory reads are not what
//      bounds these kernels (docs/attention-held-h200/).
//   13. Tried and dropped (branch attention-rescale, 2026-11-28):
//      online_softmax skipping the rescale of o and l in a warp none of
//      whose rows' maxima rose (exp2f(0) = 1: the same bits, which the lab
//      confirmed). Lab, one H200 call, against main in turn: the Hopper
//      forward 0.1340 and 0.1337 ms against 0.1301 and 0.1305 at
//      16x1024x768x12, 0.2430 and 0.2433 against 0.2368 and 0.2379 at B =
//      32; the mma.sync forward 2% slower too. The vote and the branch
//      cost more than the 34 multiplications a tile they save
//      (docs/attention-rescale-h200/).
//   14. exp2_tile as ex2.approx.ftz alone, without variant 10's test of
//      the warp's smallest argument (see exp2_tile); the oracle allows the
//      flushed results 2⁻¹²⁶ (oracle/attention.go). Nsight Compute on an
//      H200 had counted 2.2 FMNMX an element in forward_hopper, one of
//      them the test's (docs/attention-rescale-h200). Lab, one H200 call
//      (2026-11-28; no H100 was lent that day), against variant 11 in
//      turn: the Hopper forward 0.1201 and 0.1194 ms against 0.1297 and
//      0.1307 at 16x1024x768x12 (1.08–1.09×), 0.2169 and 0.2168 against
//      0.2359 and 0.2357 at B = 32; the Hopper backward 0.3968 and 0.3960
//      against 0.4063 and 0.4081 (1.02–1.03×); mma.sync 1.04× (forward)
//      and 1.02–1.03× (backward); vkern verify 70 of 70 on each path at the
//      default shapes and 10 of 10 at 16x1024x768x12 (docs/
//      attention-ftz-h200/).
//   15. copy_rows_sw with each thread's shared and global offsets stepped
//      16 rows at a time, and a whole tile copied with no tests (see
//      copy_rows_sw): Nsight Compute had counted about 100 instructions a
//      warp per tile pair for backward_dq_hopper's copies of K and V (8
//      cp.async), 183 for backward_dkdv_hopper's of Q, dY, lse₂ and D, and
//      144 for the forward's (docs/attention-rescale-h200). The same bits
//      (the lab's hashes equal variant 14's). Lab, one H200 call
//      (2026-11-28; no H100 was lent that day), builds in turn, two
//      rounds: the Hopper backward 0.3759 and 0.3776 ms against variant
//      14's 0.3978 and 0.3992 at 16x1024x768x12 (1.06×), 0.7072 and 0.7069
//      against 0.7458 and 0.7466 at B = 32 (1.06×); the forward 0.1178 and
//      0.1180 against 0.1197 and 0.1199 (1.02×); registers: forward 125
//      (116), dq 150 (144), dk/dv 168 (168), no spills
//      (docs/attention-copies-h200).
//   16. the route's scans of a tile (flag_tile, flag_specials) or the
//      tile's special_marks and test once, without a branch a word: about
//      97 instructions a warp per tile before (forward_hopper, Nsight
//      Compute). The same bits (the lab's hashes equal variant 15's); the
//      marks agree with special_halves' tests on all 2³² words (checked on
//      the host, 2026-11-28). Same H200 call, against variant 15: the
//      Hopper forward 0.1139 and 0.1136 ms against 0.1178 and 0.1180
//      (1.04×), 0.2058 and 0.2049 against 0.2146 and 0.2141 at B = 32; the
//      backward 0.3717 and 0.3703 against 0.3759 and 0.3776 (1.01×); the
//      mma.sync forward 1.05× and backward 1.03×.
//   17. the forward's finish (finish_rows, both tensor-core paths)
//      multiplies o by 1/l, one division a row, where it divided each
//      element: 32 IEEE divisions a thread of about 11 instructions each
//      (forward_hopper, Nsight Compute). y rounds twice where it rounded
//      once; the oracle's K takes one more u (oracle/attention.go). Same
//      H200 call, against variant 16: the Hopper forward 0.1068 and 0.1078
//      ms against 0.1139 and 0.1136 (1.05–1.07×), 0.1929 and 0.1934
//      against 0.2058 and 0.2049 at B = 32 (1.06–1.07×); the mma.sync
//      forward 1.05×; the backward, which reads y, unchanged (0.3703 and
//      0.3732); vkern verify 70 of 70 on
//      each path at the default shapes and 10 of 10 at 16x1024x768x12
//      (worst 0.901 and 0.998 of the bound), every planted attention defect
//      caught. Against SDPA in the same call: attention 0.1082 ms, the
//      flash backend 0.1352 (1.25×), cuDNN 0.0856; attention_grad 0.3741,
//      flash 0.4140 (1.11×), cuDNN 0.3212.
//   18. Tried and dropped (branch attention-overlap, 2026-11-28):
//      forward_hopper issuing the next key tile's S before this tile's
//      softmax, into a second S accumulator. Same bits, but ptxas
//      serialized its wgmma (C7515: non-wgmma instructions defining the
//      accumulator of a wgmma in the pipeline stage, online_softmax
//      rescaling o with the P·V into o in the same stage) and it spilled
//      16 bytes at four blocks an SM. Lab, one H200 call (no H100 was
//      lent that day), against main in turn: 0.1157 and 0.1155 ms against
//      0.1074 and 0.1069 at 16x1024x768x12, 0.2085 and 0.2088 against
//      0.1923 and 0.1931 at B = 32; at three blocks an SM (159 registers,
//      no spills) 0.1231 and 0.1235 (docs/attention-overlap-h200).
//   19. Tried and dropped (branch attention-fa3, 2026-11-28):
//      forward_hopper in FlashAttention-3's order within a warpgroup, S of
//      key tile kt and the P·V of tile kt − 1 issued together, the softmax
//      (statistics and P) beside the P·V and o rescaled after it, the
//      first tile peeled so that ptxas does not serialize the products
//      (it did, C7514, where one loop body branched on the P·V). Same bits
//      (o sees the same operations in the same order), 124 registers,
//      verified. Lab, two H200 calls, against main in turn: 0.1091 and
//      0.1092 ms against 0.1078 and 0.1078 at 16x1024x768x12, 0.1945 and
//      0.1945 against 0.1949 and 0.1942 at B = 32: with head size 64 a
//      tile's products hide little of its softmax
//      (docs/attention-fa3-h200).
//   20. (off unless $VKERN_ATTENTION_DQ=stored) variant 5 on the Hopper
//      path: backward_dkdv_hopper<true> stores each pair's dS as
//      backward_dkdv_mma<true> does, and backward_dq_stored sums dq from
//      them, instead of backward_dq_hopper's S, dP and dS again (131.7 µs
//      of the backward's 322 under Nsight Compute, variant 17). One H200
//      call (2026-11-28; no H100 was lent that day), against variant 17 in
//      the same server: verified (35 of 35, 15 of 15 at heads of 64, 1 of
//      1 at 16x1024x768x12), its three planted defects caught, the same
//      bits in 6 gpt2 steps; 168 registers and no spills either way. But
//      attention_grad took 481.2 and 481.8 µs against 372.6 and 373.2 at
//      16x1024x768x12 (1.29× slower), and the gpt2 step 32.96 ms against
//      31.60 and 31.63 (docs/attention-stored-h200): writing 214 MB of dS
//      and reading it back through mma.sync costs more than the two
//      products and the exponentials it saves.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/backend.h"
#include "cuda/compat.h"
#include "cuda/mma.cuh"
#include "cuda/row_scale.cuh"
#include "cuda/rows.cuh"
#include "cuda/tile_order.cuh"
#include "cuda/wgmma.cuh"

#if defined(VKERN_ATTENTION_LAB)
int vk_attention_forward_warps = 4;  // bench/attention_lab.cu: forward_mma's warps, 4 or 8
#endif

namespace {
namespace vkern_attention {

using vkern_rows::aligned16;
using vkern_rows::ceil_div;
using vkern_rows::grid_for;
using vkern_rows::kLog2e;
using vkern_rows::ScratchBuffer;

constexpr float kLn2 = 0.6931471805599453f;
constexpr double kLog2eDouble = 1.4426950408889634;
constexpr int kThreads = 128;  // every kernel: 4 warps a block
constexpr int kRowCols = 4;    // columns per lane of one chunk of the exact kernels (128 a chunk)
constexpr int kFlagBytes = 16;
constexpr int kForwardWarps = 4;  // forward_mma's warps a block (16 query rows each)

// Head views. Row t of sequence b of an operand whose rows hold width values
// starts at (b·T + t)·width; head h of part p (q 0, k 1, v 2; y and dy have
// only part 0) at column p·C + h·D.
struct Heads {
  int64_t B, T, C, H, D;
  // group is the heads whose tiles the Hopper kernels take together
  // (tile_order.cuh); 0 for all of them. Their launchers set it.
  int64_t group = 0;
  __host__ __device__ int64_t head_count() const { return B * H; }
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += VK_SHFL_XOR(v, o);
  return v;
}

// head_dot is a·b over D columns, the same value in every lane.
__device__ __forceinline__ float head_dot(const __half* a, const __half* b, int64_t D, int lane) {
  float partial = 0.0f;
  for (int64_t c = lane; c < D; c += 32) partial += __half2float(a[c]) * __half2float(b[c]);
  return warp_sum(partial);
}

// ---------------------------------------------------------------------------
// The route and D.

// special_halves: whether either f16 of a pair is an infinity or a NaN
// (exponent bits all ones).
__device__ __forceinline__ bool special_halves(uint32_t w) {
  return (w & 0x7c00u) == 0x7c00u || (w & 0x7c000000u) == 0x7c000000u;
}

// special_marks marks the infinities and NaNs among the eight f16 of v
// without a branch (variant 16): each half's exponent field plus one
// carries into the half's top bit (bit 15 or 31) exactly when the field is
// all ones (0x7c00 + 0x0400 = 0x8000; the low half's sum never reaches bit
// 16), and the four words' sums are or-ed, so (marks & kSpecialMarks) != 0
// says whether any of them is special. The tile scans below or their marks
// and test once; with special_halves' tests, each word had taken two tests
// and a branch (about 97 instructions a warp per tile in forward_hopper,
// Nsight Compute, docs/attention-rescale-h200).
constexpr uint32_t kSpecialMarks = 0x80008000u;
__device__ __forceinline__ uint32_t special_marks(uint4 v) {
  const auto mark = [](uint32_t w) { return (w & 0x7c007c00u) + 0x04000400u; };
  return mark(v.x) | mark(v.y) | mark(v.z) | mark(v.w);
}

// row_dots: dsum[(b·H + h)·T + t] = Σ_c dy·y over head h of token row
// b·T + t, one thread per (row, head), in column order: 16-byte loads when
// vec8 (D, C multiples of 8, 16-byte aligned bases). With flag (the
// tensor-core route), it also sets *flag when any value of dy, y or lse is
// an infinity or a NaN: every one passes through here once. With lse2, it
// writes lse₂ = lse·log₂e (rounded once, as the kernels formed it from lse
// before) for the tensor-core kernels, which take P = exp2(s·α₂ − lse₂).
__global__ void row_dots(const __half* __restrict__ dy, const __half* __restrict__ y, const float* __restrict__ lse,
                         float* __restrict__ dsum, float* __restrict__ lse2, Heads a, bool vec8,
                         unsigned* __restrict__ flag) {
  const int64_t n = a.B * a.T * a.H;
  bool found = false;
  for (int64_t idx = blockIdx.x * int64_t{kThreads} + threadIdx.x; idx < n; idx += int64_t{gridDim.x} * kThreads) {
    const int64_t row = idx / a.H, h = idx % a.H;
    const __half* g = dy + row * a.C + h * a.D;
    const __half* v = y + row * a.C + h * a.D;
    float sum = 0.0f;
    if (vec8) {
      for (int64_t c = 0; c < a.D; c += 8) {
        const uint4 gw = *reinterpret_cast<const uint4*>(g + c), vw = *reinterpret_cast<const uint4*>(v + c);
        const uint32_t gs[4] = {gw.x, gw.y, gw.z, gw.w}, vs[4] = {vw.x, vw.y, vw.z, vw.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          found = found || special_halves(gs[e]) || special_halves(vs[e]);
          const float2 gf = __half22float2(*reinterpret_cast<const __half2*>(&gs[e]));
          const float2 vf = __half22float2(*reinterpret_cast<const __half2*>(&vs[e]));
          sum += gf.x * vf.x;
          sum += gf.y * vf.y;
        }
      }
    } else {
      for (int64_t c = 0; c < a.D; ++c) {
        const unsigned short gb = __half_as_ushort(g[c]), vb = __half_as_ushort(v[c]);
        found = found || (gb & 0x7c00u) == 0x7c00u || (vb & 0x7c00u) == 0x7c00u;
        sum += __half2float(g[c]) * __half2float(v[c]);
      }
    }
    const int64_t b = row / a.T, t = row % a.T, at = (b * a.H + h) * a.T + t;
    dsum[at] = sum;
    const float l = lse[at];
    if (flag != nullptr) found = found || (__float_as_uint(l) & 0x7f800000u) == 0x7f800000u;
    if (lse2 != nullptr) lse2[at] = l * kLog2e;
  }
  if (flag != nullptr && found) atomicOr(flag, 1u);
}

// ---------------------------------------------------------------------------
// Exact rows: a warp per row of a head. special: run only when *special is
// set (nullptr: always).

__global__ void __launch_bounds__(kThreads)
    forward_rows(const __half* __restrict__ qkv, __half* __restrict__ y, float* __restrict__ lse, Heads a,
                 float scale2, const unsigned* __restrict__ special) {
  if (special != nullptr && *special == 0) return;
  const int lane = threadIdx.x & 31;
  const int64_t rows = a.head_count() * a.T, width = 3 * a.C;
  for (int64_t w = (blockIdx.x * int64_t{kThreads} + threadIdx.x) / 32; w < rows;
       w += int64_t{gridDim.x} * (kThreads / 32)) {
    const int64_t bh = w / a.T, i = w % a.T, b = bh / a.H, h = bh % a.H;
    const __half* q = qkv + (b * a.T + i) * width + h * a.D;
    const __half* k = qkv + b * a.T * width + a.C + h * a.D;  // key j at k + j·width
    const __half* v = k + a.C;
    float m = vkern_rows::neg_inf();
    for (int64_t j = 0; j <= i; ++j) m = fmaxf(m, head_dot(q, k + j * width, a.D, lane) * scale2);
    for (int64_t c0 = 0; c0 < a.D; c0 += 32 * kRowCols) {
      float acc[kRowCols] = {};
      float l = 0.0f;
      for (int64_t j = 0; j <= i; ++j) {
        const float p = exp2f(head_dot(q, k + j * width, a.D, lane) * scale2 - m);
        l += p;
#pragma unroll
        for (int e = 0; e < kRowCols; ++e) {
          const int64_t c = c0 + lane + 32 * e;
          if (c < a.D) acc[e] += p * __half2float(v[j * width + c]);
        }
      }
#pragma unroll
      for (int e = 0; e < kRowCols; ++e) {
        const int64_t c = c0 + lane + 32 * e;
        if (c < a.D) y[(b * a.T + i) * a.C + h * a.D + c] = __float2half_rn(acc[e] / l);
      }
      if (c0 == 0 && lane == 0) lse[bh * a.T + i] = (m + log2f(l)) * kLn2;
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    backward_dq_rows(const __half* __restrict__ dy, const __half* __restrict__ qkv, const float* __restrict__ lse,
                     const float* __restrict__ dsum, __half* __restrict__ dqkv, Heads a, float scale, float scale2,
                     const unsigned* __restrict__ special) {
  if (special != nullptr && *special == 0) return;
  const int lane = threadIdx.x & 31;
  const int64_t rows = a.head_count() * a.T, width = 3 * a.C;
  for (int64_t w = (blockIdx.x * int64_t{kThreads} + threadIdx.x) / 32; w < rows;
       w += int64_t{gridDim.x} * (kThreads / 32)) {
    const int64_t bh = w / a.T, i = w % a.T, b = bh / a.H, h = bh % a.H;
    const __half* q = qkv + (b * a.T + i) * width + h * a.D;
    const __half* g = dy + (b * a.T + i) * a.C + h * a.D;
    const __half* k = qkv + b * a.T * width + a.C + h * a.D;
    const __half* v = k + a.C;
    const float lse2 = lse[bh * a.T + i] * kLog2e, d = dsum[bh * a.T + i];
    for (int64_t c0 = 0; c0 < a.D; c0 += 32 * kRowCols) {
      float acc[kRowCols] = {};
      for (int64_t j = 0; j <= i; ++j) {
        const float p = exp2f(head_dot(q, k + j * width, a.D, lane) * scale2 - lse2);
        const float ds = p * (head_dot(g, v + j * width, a.D, lane) - d);
#pragma unroll
        for (int e = 0; e < kRowCols; ++e) {
          const int64_t c = c0 + lane + 32 * e;
          if (c < a.D) acc[e] += ds * __half2float(k[j * width + c]);
        }
      }
#pragma unroll
      for (int e = 0; e < kRowCols; ++e) {
        const int64_t c = c0 + lane + 32 * e;
        if (c < a.D) dqkv[(b * a.T + i) * width + h * a.D + c] = __float2half_rn(acc[e] * scale);
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    backward_dkdv_rows(const __half* __restrict__ dy, const __half* __restrict__ qkv, const float* __restrict__ lse,
                       const float* __restrict__ dsum, __half* __restrict__ dqkv, Heads a, float scale, float scale2,
                       const unsigned* __restrict__ special) {
  if (special != nullptr && *special == 0) return;
  const int lane = threadIdx.x & 31;
  const int64_t rows = a.head_count() * a.T, width = 3 * a.C;
  for (int64_t w = (blockIdx.x * int64_t{kThreads} + threadIdx.x) / 32; w < rows;
       w += int64_t{gridDim.x} * (kThreads / 32)) {
    const int64_t bh = w / a.T, j = w % a.T, b = bh / a.H, h = bh % a.H;
    const __half* q = qkv + b * a.T * width + h * a.D;  // query i at q + i·width
    const __half* g = dy + b * a.T * a.C + h * a.D;     // and its dy at g + i·C
    const __half* k = qkv + (b * a.T + j) * width + a.C + h * a.D;
    const __half* v = k + a.C;
    for (int64_t c0 = 0; c0 < a.D; c0 += 32 * kRowCols) {
      float dk[kRowCols] = {}, dv[kRowCols] = {};
      for (int64_t i = j; i < a.T; ++i) {
        const __half* qi = q + i * width;
        const __half* gi = g + i * a.C;
        const float p = exp2f(head_dot(qi, k, a.D, lane) * scale2 - lse[bh * a.T + i] * kLog2e);
        const float ds = p * (head_dot(gi, v, a.D, lane) - dsum[bh * a.T + i]);
#pragma unroll
        for (int e = 0; e < kRowCols; ++e) {
          const int64_t c = c0 + lane + 32 * e;
          if (c < a.D) {
            dk[e] += ds * __half2float(qi[c]);
            dv[e] += p * __half2float(gi[c]);
          }
        }
      }
#pragma unroll
      for (int e = 0; e < kRowCols; ++e) {
        const int64_t c = c0 + lane + 32 * e;
        if (c < a.D) {
          __half* out = dqkv + (b * a.T + j) * width + h * a.D + c;
          out[a.C] = __float2half_rn(dk[e] * scale);
          out[2 * a.C] = __float2half_rn(dv[e]);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Tensor cores.
#if defined(VKERN_PTX_MMA)

using vkern_mma::cp_async_16;
using vkern_mma::cp_async_16_at;
using vkern_mma::cp_async_16_full_at;
using vkern_mma::cp_async_4;
using vkern_mma::cp_async_commit;
using vkern_mma::cp_async_wait;
using vkern_mma::ldmatrix_x4;
using vkern_mma::ldmatrix_x4_trans;
using vkern_mma::mma_16816;
using vkern_mma::pack_f16;
using vkern_scale::pow2;
using vkern_scale::shift_for;

constexpr int kTile = 64;  // keys of a streamed key tile; rows (queries or keys) of a backward block

// forward_mma's register budget, as a macro for the lab (bench/attention_lab.cu
// builds variants of it): blocks an SM it must fit.
#if !defined(VKERN_ATTENTION_FORWARD_MIN_BLOCKS)
#define VKERN_ATTENTION_FORWARD_MIN_BLOCKS 3
#endif
constexpr int kForwardMinBlocks = VKERN_ATTENTION_FORWARD_MIN_BLOCKS;

// lds32 reads the two halves at p (4-byte aligned) as one fragment register.
__device__ __forceinline__ uint32_t lds32(const __half* p) { return *reinterpret_cast<const uint32_t*>(p); }

// scaled is x·2^shift when kShift (ldexpf: exact, whatever the range; on
// sm_90 it was faster than a multiplication by a built power of two behind a
// range test, bench/attention_lab.cu), x otherwise.
template <bool kShift>
__device__ __forceinline__ float scaled(float x, int shift) {
  return kShift ? ldexpf(x, shift) : x;
}

// Shared-memory tiles: rows of DP halves, padded by 8 halves (16 bytes), so
// that ldmatrix's eight 16-byte rows and a warp's 32-bit fragment loads
// (rows g, columns 2t) fall in distinct banks.
template <int DP>
struct TileShape {
  static constexpr int kLd = DP + 8;
  static constexpr int kHalves = kTile * kLd;  // a tile of kTile rows
  static constexpr int kNTiles = DP / 8;       // n-tiles of an output row of DP columns
};

// copy_rows starts the copy of rows [row0, row0 + kRows) of a head (element
// (t, c) at src[t·width + c]) into dst, zero past T and past D, by kBlock
// threads: cp.async 16-byte copies when vec8 (D, C multiples of 8, 16-byte
// aligned base; the caller commits and waits), else 2-byte loads and stores.
// Offsets inside a tile are 32-bit (width < 2³¹/kRows).
template <int DP, int kRows, int kBlock>
__device__ __forceinline__ void copy_rows(__half* dst, const __half* src, int width, int64_t row0, int64_t T, int D,
                                          bool vec8) {
  constexpr int kLd = TileShape<DP>::kLd, kChunks = kRows * DP / 8;
  const __half* from = src + row0 * width;
  const int left = T - row0 < kRows ? static_cast<int>(T - row0) : kRows;
  if (vec8) {
#pragma unroll
    for (int k = 0; k < (kChunks + kBlock - 1) / kBlock; ++k) {
      const int idx = threadIdx.x + k * kBlock;
      if (kChunks % kBlock != 0 && idx >= kChunks) break;
      const int r = idx / (DP / 8), c = idx % (DP / 8) * 8;
      const bool in = r < left && c < D;
      cp_async_16(dst + r * kLd + c, in ? from + r * width + c : src, in ? 16 : 0);
    }
    return;
  }
  const unsigned short* s = reinterpret_cast<const unsigned short*>(from);
  unsigned short* d = reinterpret_cast<unsigned short*>(dst);
  for (int idx = threadIdx.x; idx < kRows * DP; idx += kBlock) {
    const int r = idx / DP, c = idx % DP;
    d[r * kLd + c] = r < left && c < D ? s[r * width + c] : 0;
  }
}

// copy_kv starts the copy of key tile row0 / kTile of a head into stage
// (keys, then values kHalves on): base is the head's q of token 0, its k
// C and its v 2C further.
template <int DP, int kBlock>
__device__ __forceinline__ void copy_kv(__half* stage, const __half* base, int C, int width, int64_t row0, int64_t T,
                                        int D, bool vec8) {
  copy_rows<DP, kTile, kBlock>(stage, base + C, width, row0, T, D, vec8);
  copy_rows<DP, kTile, kBlock>(stage + TileShape<DP>::kHalves, base + 2 * C, width, row0, T, D, vec8);
}

// copy_floats starts the copy of src[row0 .. row0 + kTile) into dst, zero
// past T (cp.async, 4 bytes a thread).
__device__ __forceinline__ void copy_floats(float* dst, const float* src, int64_t row0, int64_t T) {
  for (int r = threadIdx.x; r < kTile; r += kThreads) {
    const bool in = row0 + r < T;
    cp_async_4(dst + r, in ? src + row0 + r : src, in ? 4 : 0);
  }
}

// flag_specials sets *flag when any of the kRows × DP halves of a tile in
// shared memory is an infinity or a NaN (the route, folded into the tiles'
// loads).
template <int DP, int kRows, int kBlock>
__device__ __forceinline__ void flag_specials(const __half* tile, unsigned* flag) {
  constexpr int kLd = TileShape<DP>::kLd;
  uint32_t marks = 0;
  for (int idx = threadIdx.x; idx < kRows * DP / 8; idx += kBlock) {
    marks |= special_marks(*reinterpret_cast<const uint4*>(tile + idx / (DP / 8) * kLd + idx % (DP / 8) * 8));
  }
  if (marks & kSpecialMarks) atomicOr(flag, 1u);
}

// scores: x[n] += A·Bᵀ for 16 rows of tile a (from row a_row) against the 64
// rows of tile b (n-tile n: rows 8n .. 8n + 7 from b), over the head's
// columns. A's fragments come by ldmatrix (lanes 0–15 address rows a_row +
// lane at column 0, lanes 16–31 the same rows at column 8), two k-steps at a
// time, then B's (lane l addresses row 8n + l % 8, columns 8·(l / 8) of the
// pair); DP = 16 has one k-step, B read as two 32-bit loads.
template <int DP>
__device__ __forceinline__ void scores(const __half* a, int a_row, const __half* b, int lane, float (&x)[8][4]) {
  constexpr int kLd = TileShape<DP>::kLd;
  const __half* ap = a + (a_row + lane % 16) * kLd + (lane / 16) * 8;
  if constexpr (DP == 16) {
    uint32_t af[4];
    ldmatrix_x4(af, ap);
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const __half* p = b + (n * 8 + g) * kLd + 2 * t;
      mma_16816(x[n], af, lds32(p), lds32(p + 8));
    }
  } else {
    const __half* bp = b + (lane % 8) * kLd + (lane / 8) * 8;
#pragma unroll
    for (int kp = 0; kp < DP / 32; ++kp) {
      uint32_t a0[4], a1[4];
      ldmatrix_x4(a0, ap + kp * 32);
      ldmatrix_x4(a1, ap + kp * 32 + 16);
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        uint32_t bf[4];
        ldmatrix_x4(bf, bp + n * 8 * kLd + kp * 32);
        mma_16816(x[n], a0, bf[0], bf[1]);
        mma_16816(x[n], a1, bf[2], bf[3]);
      }
    }
  }
}

// a_fragments loads the A fragments of rows row, row + 8 (row = warp·16 +
// g) of a tile for every k-step over the head's columns.
template <int DP>
__device__ __forceinline__ void a_fragments(const __half* tile, int row, int t, uint32_t (&a)[DP / 16][4]) {
  constexpr int kLd = TileShape<DP>::kLd;
  const __half* p = tile + row * kLd + 2 * t;
#pragma unroll
  for (int k = 0; k < DP / 16; ++k) {
    a[k][0] = lds32(p + k * 16);
    a[k][1] = lds32(p + 8 * kLd + k * 16);
    a[k][2] = lds32(p + k * 16 + 8);
    a[k][3] = lds32(p + 8 * kLd + k * 16 + 8);
  }
}

// scores_held is scores with A's fragments already in registers (a, every
// k-step), against the 64 rows of tile b.
template <int DP>
__device__ __forceinline__ void scores_held(const uint32_t (&a)[DP / 16][4], const __half* b, int lane,
                                            float (&x)[8][4]) {
  constexpr int kLd = TileShape<DP>::kLd;
  if constexpr (DP == 16) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const __half* p = b + (n * 8 + g) * kLd + 2 * t;
      mma_16816(x[n], a[0], lds32(p), lds32(p + 8));
    }
  } else {
    const __half* bp = b + (lane % 8) * kLd + (lane / 8) * 8;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int kp = 0; kp < DP / 32; ++kp) {
        uint32_t bf[4];
        ldmatrix_x4(bf, bp + n * 8 * kLd + kp * 32);
        mma_16816(x[n], a[2 * kp], bf[0], bf[1]);
        mma_16816(x[n], a[2 * kp + 1], bf[2], bf[3]);
      }
    }
  }
}

// round_rows turns a warp's 16 × 64 accumulator tile x (8 n-tiles of 8
// columns) into the f16 A fragments of the four 16-column k-steps (n-tiles
// 2k and 2k + 1 make k-step k), each element v of the thread's row r (g,
// g + 8) taken as scale(v, r) and rounded once to nearest.
template <class Scale>
__device__ __forceinline__ void round_rows(const float (&x)[8][4], Scale scale, uint32_t (&a)[4][4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float(&n)[4] = x[2 * k + half];
      a[k][2 * half] = pack_f16(scale(n[0], 0), scale(n[1], 0));
      a[k][2 * half + 1] = pack_f16(scale(n[2], 1), scale(n[3], 1));
    }
  }
}

// round_tile is round_rows with each row r scaled by 2^−shift[r] when
// kShift (ldexpf), and as it is otherwise.
template <bool kShift>
__device__ __forceinline__ void round_tile(const float (&x)[8][4], const int (&shift)[2], uint32_t (&a)[4][4]) {
  round_rows(x, [&](float v, int r) { return scaled<kShift>(v, -shift[r]); }, a);
}

// row_shift sets shift[r] so that the largest |x| of the thread's row r
// across its quad (the row's 64 columns) lies in [2¹⁴, 2¹⁵) once scaled by
// 2^−shift[r]; 0 for a row of zeros.
__device__ __forceinline__ void row_shift(const float (&x)[8][4], int (&shift)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float largest = 0.0f;
#pragma unroll
    for (int n = 0; n < 8; ++n) largest = fmaxf(largest, fmaxf(fabsf(x[n][2 * r]), fabsf(x[n][2 * r + 1])));
    largest = fmaxf(largest, VK_SHFL_XOR(largest, 1));
    largest = fmaxf(largest, VK_SHFL_XOR(largest, 2));
    shift[r] = shift_for(largest);
  }
}

// pair_index is where the pair of query tile qt and key tile kt ≤ qt lies
// among a head's stored dS tiles: query tile after query tile, each one's
// key tiles in order.
__host__ __device__ __forceinline__ int64_t pair_index(int64_t qt, int64_t kt) { return qt * (qt + 1) / 2 + kt; }

// store_ds writes a warp's share of the dSᵀ tile x of backward_dkdv_mma or
// backward_dkdv_hopper (variants 5 and 20; the same fragments, rows the
// warp's 16 keys, columns the tile's 64 queries) to tile, key-major (key k's
// query c at tile[k·kTile + c]): each query's column scaled by 2^−shift, the
// shift that puts its largest |dS| over the tile's 64 keys in [2¹⁴, 2¹⁵),
// and rounded once to f16; the 64 shifts go to shifts. That is the rounding
// backward_dq_mma gives each row of its dS tile, so backward_dq_stored can
// sum dS·K from these without computing S and dP again. colmax (4·kTile
// floats) and col_shift (kTile ints) are the block's shared memory; every
// thread of the block calls it.
__device__ __forceinline__ void store_ds(const float (&x)[8][4], float* colmax, int* col_shift, __half* tile,
                                         int* shifts, int warp, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int n = 0; n < 8; ++n) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      float m = fmaxf(fabsf(x[n][c]), fabsf(x[n][2 + c]));  // rows g and g + 8
      m = fmaxf(m, VK_SHFL_XOR(m, 4));                      // the warp's 16 keys: its lanes of one t
      m = fmaxf(m, VK_SHFL_XOR(m, 8));
      m = fmaxf(m, VK_SHFL_XOR(m, 16));
      if (g == 0) colmax[warp * kTile + n * 8 + 2 * t + c] = m;
    }
  }
  __syncthreads();
  if (threadIdx.x < kTile) {
    const int c = threadIdx.x;
    const float largest =
        fmaxf(fmaxf(colmax[c], colmax[kTile + c]), fmaxf(colmax[2 * kTile + c], colmax[3 * kTile + c]));
    col_shift[c] = shift_for(largest);
    shifts[c] = col_shift[c];
  }
  __syncthreads();
  const int k0 = warp * 16 + g;
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    const int c = n * 8 + 2 * t, s0 = col_shift[c], s1 = col_shift[c + 1];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      *reinterpret_cast<__half2*>(tile + (k0 + 8 * r) * kTile + c) =
          __floats2half2_rn(ldexpf(x[n][2 * r], -s0), ldexpf(x[n][2 * r + 1], -s1));
    }
  }
}

// product: for each n-tile of DP columns, out[n] += A·B over four k-steps,
// where B is the tile (64 rows of the k dimension × DP, read transposed by
// ldmatrix; lane l addresses row l of each 32-row pair of k-steps). With
// kShift the product is summed apart and added scaled by 2^shift[row]
// (undoing round_tile's scale).
template <int DP, bool kShift>
__device__ __forceinline__ void product(const uint32_t (&a)[4][4], const __half* tile, int lane, const int (&shift)[2],
                                        float (&out)[DP / 8][4]) {
  constexpr int kLd = TileShape<DP>::kLd;
  const __half* rows = tile + lane * kLd;
#pragma unroll
  for (int n = 0; n < DP / 8; ++n) {
    float sum[4] = {};
    float(&acc)[4] = kShift ? sum : out[n];
#pragma unroll
    for (int kp = 0; kp < 2; ++kp) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, rows + kp * 32 * kLd + n * 8);
      mma_16816(acc, a[2 * kp], b[0], b[1]);
      mma_16816(acc, a[2 * kp + 1], b[2], b[3]);
    }
    if constexpr (kShift) {
#pragma unroll
      for (int e = 0; e < 4; ++e) out[n][e] += ldexpf(sum[e], shift[e / 2]);
    }
  }
}

// store_rows writes a warp's 16 × DP accumulator tile, each element times
// factor[row] rounded once to f16, to rows row[r] (< T) of out (row t's
// column c at out[t·width + c]), columns below D: pairs as 32-bit stores when
// pairs (D even, out 4-byte aligned, width even).
template <int DP>
__device__ __forceinline__ void store_rows(const float (&x)[DP / 8][4], const float (&factor)[2], __half* out,
                                           int64_t width, const int64_t (&row)[2], int64_t T, int64_t D, int t,
                                           bool pairs) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= T) continue;
    __half* o = out + row[r] * width;
#pragma unroll
    for (int n = 0; n < DP / 8; ++n) {
      const int c = n * 8 + 2 * t;
      const float v0 = x[n][2 * r] * factor[r], v1 = x[n][2 * r + 1] * factor[r];
      if (pairs && c + 1 < D) {
        *reinterpret_cast<__half2*>(o + c) = __floats2half2_rn(v0, v1);
      } else {
        if (c < D) o[c] = __float2half_rn(v0);
        if (c + 1 < D) o[c + 1] = __float2half_rn(v1);
      }
    }
  }
}

// mask_after sets to −∞ the scores of keys after the query in a warp's
// 16 × 64 S tile whose keys start where r0 (the thread's first row, as a
// key of the tile) says.
__device__ __forceinline__ void mask_after(float (&s)[8][4], int r0, int t) {
#pragma unroll
  for (int n = 0; n < 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (n * 8 + 2 * t + (e & 1) > r0 + 8 * (e / 2)) s[n][e] = vkern_rows::neg_inf();
    }
  }
}

// exp2_tile sets each of a thread's 32 elements x to 2^x by
// ex2.approx.ftz alone (MUFU.EX2, variant 14). That instruction is exp2f's
// own for x ≥ −126, whose results are normal: on an H100 the two gave the
// same bits for every float in [−126, 128] and every NaN
// (bench/exp2_check.cu, 2026-11-27). Below −126, exp2f takes it on x/2 and
// squares the result, to give the subnormals; ex2.approx.ftz flushes them
// to +0, an absolute error under 2⁻¹²⁶, which oracle/attention.go allows
// (P·V's and dv's products, with P rounded to f16, lose anything under
// 2⁻²⁵ anyway; l, which sums P unrounded, and dS, which is scaled per tile
// row before its rounding, can see the difference, and the bound takes it
// in). The variant list says what the test before it cost.
__device__ __forceinline__ void exp2_tile(float (&x)[8][4]) {
#pragma unroll
  for (int n = 0; n < 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) x[n][e] = vk_ex2_ftz(x[n][e]);
  }
}

// online_softmax takes a tile of scores s into the thread's two rows'
// running max m (of s·α₂), sum l (this thread's columns) and output o: the
// max raised to the tile's, l and o rescaled by exp2(m_old − m_new), and s
// replaced by p = exp2(s·α₂ − m), added into l. Whether nvcc fuses l's
// rescale with the first addition into it (an FFMA in forward_hopper's
// SASS) depends on what lies between them: it did before variant 10,
// variant 10's branch in exp2_tile stopped it, and since variant 14 took
// that branch out y's bits changed again (the SASS not read); within the
// bound either way.
template <int N>
__device__ __forceinline__ void online_softmax(float (&s)[8][4], float (&m)[2], float (&l)[2], float (&o)[N][4],
                                               float scale2) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float largest = vkern_rows::neg_inf();
#pragma unroll
    for (int n = 0; n < 8; ++n) largest = fmaxf(largest, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
    largest = fmaxf(largest, VK_SHFL_XOR(largest, 1));
    largest = fmaxf(largest, VK_SHFL_XOR(largest, 2));
    const float m_new = fmaxf(m[r], largest * scale2);
    const float m_use = m_new == vkern_rows::neg_inf() ? 0.0f : m_new;  // a row with no key yet
    const float rescale = exp2f(m[r] - m_use);
    m[r] = m_new;
    l[r] *= rescale;
#pragma unroll
    for (int n = 0; n < N; ++n) {
      o[n][2 * r] *= rescale;
      o[n][2 * r + 1] *= rescale;
    }
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      s[n][2 * r] = fmaf(s[n][2 * r], scale2, -m_use);
      s[n][2 * r + 1] = fmaf(s[n][2 * r + 1], scale2, -m_use);
    }
  }
  exp2_tile(s);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int n = 0; n < 8; ++n) l[r] += s[n][2 * r] + s[n][2 * r + 1];
  }
}

// finish_rows ends the forward of the thread's rows row[r] < T: l summed
// over the quad, o multiplied by its reciprocal (variant 17: an IEEE
// division is about 11 instructions, 32 a thread, where one division and
// 32 products round twice, which oracle/attention.go allows), lse written
// (by one lane of the quad),
// then o stored to y (row t's column c at y[t·C + c]) as store_rows stores.
template <int DP>
__device__ __forceinline__ void finish_rows(float (&o)[DP / 8][4], const float (&m)[2], float (&l)[2],
                                            const int64_t (&row)[2], __half* y, float* lse_bh, Heads a, int t,
                                            bool vec8) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += VK_SHFL_XOR(l[r], 1);
    l[r] += VK_SHFL_XOR(l[r], 2);
    if (row[r] >= a.T) continue;
    const float inv = 1.0f / l[r];  // one division a row, two roundings an element (variant 17)
#pragma unroll
    for (int n = 0; n < DP / 8; ++n) {
      o[n][2 * r] = __fmul_rn(o[n][2 * r], inv);
      o[n][2 * r + 1] = __fmul_rn(o[n][2 * r + 1], inv);
    }
    if (t == 0) lse_bh[row[r]] = (m[r] + log2f(l[r])) * kLn2;
  }
  const float one[2] = {1.0f, 1.0f};
  store_rows<DP>(o, one, y, a.C, row, a.T, a.D, t, vec8);
}

// forward_mma: a block of W warps owns kRows = 16·W query rows of one (b,
// h), heaviest (last) tile first; the key and value tiles stream through two
// stages of shared memory (the next pair's cp.async in flight while this
// pair is used). Scores stay unscaled until the exponent: p = exp2(s·α₂ −
// m₂), one fused multiply-add, m₂ = (max s)·α₂ (α₂ > 0 keeps the max).
template <int DP, int W>
__global__ void __launch_bounds__(32 * W, kForwardMinBlocks)
    forward_mma(const __half* __restrict__ qkv, __half* __restrict__ y, float* __restrict__ lse, Heads a,
                float scale2, bool vec8, unsigned* __restrict__ flag) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // the host never launches this below compute capability 8.0
#else
  using S = TileShape<DP>;
  constexpr int kRows = 16 * W, kBlock = 32 * W;
  extern __shared__ uint4 attention_shared[];
  __half* qs = reinterpret_cast<__half*>(attention_shared);
  __half* stages = qs + kRows * S::kLd;  // stage s: keys at + 2s·kHalves, values at + (2s + 1)·kHalves
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int width = static_cast<int>(3 * a.C), C = static_cast<int>(a.C), D = static_cast<int>(a.D);
  const int64_t tiles = ceil_div(a.T, kRows), heads = a.head_count();
  const int no_shift[2] = {0, 0};
  for (int64_t item = blockIdx.x; item < heads * tiles; item += gridDim.x) {
    const int64_t qt = tiles - 1 - item / heads, bh = item % heads, b = bh / a.H, h = bh % a.H;
    const __half* base = qkv + b * a.T * width + h * a.D;  // q of token 0; k at + C, v at + 2C
    const int64_t q0 = qt * kRows, end = q0 + kRows < a.T ? q0 + kRows : a.T;
    const int64_t last = (end - 1) / kTile;  // key tiles 0 .. last
    const int64_t first_row = q0 + warp * 16, row[2] = {first_row + g, first_row + g + 8};
    __syncthreads();  // the last item's reads of every stage are done
    copy_rows<DP, kRows, kBlock>(qs, base, width, q0, a.T, D, vec8);
    copy_kv<DP, kBlock>(stages, base, C, width, 0, a.T, D, vec8);
    cp_async_commit();
    float o[S::kNTiles][4] = {};
    float m[2] = {vkern_rows::neg_inf(), vkern_rows::neg_inf()}, l[2] = {0.0f, 0.0f};
    for (int64_t kt = 0; kt <= last; ++kt) {
      const __half* ks = stages + (kt & 1) * 2 * S::kHalves;
      const __half* vs = ks + S::kHalves;
      if (kt < last) {
        copy_kv<DP, kBlock>(stages + (~kt & 1) * 2 * S::kHalves, base, C, width, (kt + 1) * kTile, a.T, D, vec8);
      }
      cp_async_commit();
      cp_async_wait<1>();  // all but the group just started: this pair (and q)
      __syncthreads();
      if (kt == 0) flag_specials<DP, kRows, kBlock>(qs, flag);
      if (kt * kTile >= q0) {  // the key tile of rows in this block's own query tile: scanned here, once
        flag_specials<DP, kTile, kBlock>(ks, flag);
        flag_specials<DP, kTile, kBlock>(vs, flag);
      }
      if (kt * kTile <= first_row + 15) {  // some key at or before some row of the warp's (same for the warp)
        float s[8][4] = {};
        scores<DP>(qs, warp * 16, ks, lane, s);
        if (kt * kTile + kTile - 1 > first_row) {  // keys after some row of the warp's: mask them
          mask_after(s, static_cast<int>(row[0] - kt * kTile), t);
        }
        online_softmax(s, m, l, o, scale2);
        uint32_t pa[4][4];
        round_tile<false>(s, no_shift, pa);
        product<DP, false>(pa, vs, lane, no_shift, o);
      }
      __syncthreads();  // this stage's reads are done before the next pair is copied over it
    }
    finish_rows<DP>(o, m, l, row, y + b * a.T * a.C + h * a.D, lse + bh * a.T, a, t, vec8);
  }
#endif
}

// key_probabilities sets P = exp2(s₂ − lse₂) in the backward_dkdv kernels'
// Sᵀ tile x (rows keys, columns queries), 0 for a pair whose query comes
// before its key (on the diagonal tile) or lies past T (valid queries);
// lse2 holds the tile's 64 queries' lse₂ (row_dots).
__device__ __forceinline__ void key_probabilities(float (&x)[8][4], bool diagonal, int valid, int warp, int lane,
                                                  float scale2, const float* lse2) {
  const int g = lane / 4, t = lane % 4, k0 = warp * 16 + g;  // the thread's first key, in the tile
  if (!diagonal && valid == kTile) {  // every pair of the tile is formed: no test an element
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) x[n][e] = fmaf(x[n][e], scale2, -lse2[n * 8 + 2 * t + (e & 1)]);
    }
    exp2_tile(x);
    return;
  }
#pragma unroll
  for (int n = 0; n < 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = n * 8 + 2 * t + (e & 1);
      const bool pair = (!diagonal || col >= k0 + 8 * (e / 2)) && col < valid;
      x[n][e] = pair ? exp2f(fmaf(x[n][e], scale2, -lse2[col])) : 0.0f;
    }
  }
}

// key_ds turns dPᵀ into dSᵀ = Pᵀ(dPᵀ − D), D per query (the tile's 64 in d).
__device__ __forceinline__ void key_ds(float (&dp)[8][4], const float (&p)[8][4], int lane, const float* d) {
  const int t = lane % 4;
#pragma unroll
  for (int n = 0; n < 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dp[n][e] = p[n][e] * (dp[n][e] - d[n * 8 + 2 * t + (e & 1)]);
  }
}

// query_probabilities sets P = exp2(s₂ − lse₂) in the backward_dq kernels'
// S tile p (rows queries, columns keys), 0 for a key after its query on the
// diagonal tile; lse2 is the thread's two rows'.
__device__ __forceinline__ void query_probabilities(float (&p)[8][4], bool diagonal, int warp, int lane, float scale2,
                                                    const float (&lse2)[2]) {
  const int t = lane % 4, r0 = warp * 16 + lane / 4;  // the thread's first row, in the tile
  if (!diagonal) {  // every pair of the tile is formed: no test an element
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) p[n][e] = fmaf(p[n][e], scale2, -lse2[e / 2]);
    }
    exp2_tile(p);
    return;
  }
#pragma unroll
  for (int n = 0; n < 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int j = n * 8 + 2 * t + (e & 1);
      p[n][e] = j > r0 + 8 * (e / 2) ? 0.0f : exp2f(fmaf(p[n][e], scale2, -lse2[e / 2]));
    }
  }
}

// query_ds turns dP into dS = P(dP − D), D per row (the thread's two in d).
__device__ __forceinline__ void query_ds(float (&dp)[8][4], const float (&p)[8][4], const float (&d)[2]) {
#pragma unroll
  for (int n = 0; n < 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dp[n][e] = p[n][e] * (dp[n][e] - d[e / 2]);
  }
}

// backward_dkdv_mma: a block of 4 warps owns a key tile of one (b, h) (the
// first, heaviest, first) and keeps its dk and dv in registers while the
// query tiles i ≥ j stream through two stages of shared memory (q, dy, and
// the rows' lse and D): Sᵀ = K·Qᵀ, dPᵀ = V·dYᵀ, P = exp2(s₂ − lse₂), dS =
// P(dP − D), dv += Pᵀ·dY, dk += dSᵀ·Q. K's and V's A fragments stay in
// registers. With kStoreDS it also writes each pair's dS for
// backward_dq_stored (store_ds): tiles to ds_out, shifts to shifts_out,
// pair pair_index(i, j) of head bh at bh·pairs.
template <int DP, bool kStoreDS>
__global__ void __launch_bounds__(kThreads)
    backward_dkdv_mma(const __half* __restrict__ dy, const __half* __restrict__ qkv, const float* __restrict__ lse2,
                      const float* __restrict__ dsum, __half* __restrict__ dqkv, Heads a, float scale, float scale2,
                      bool vec8, unsigned* __restrict__ flag, __half* __restrict__ ds_out,
                      int* __restrict__ shifts_out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  using S = TileShape<DP>;
  constexpr int kStage = 2 * S::kHalves * 2 + 2 * kTile * 4;  // bytes: q, dy, lse₂, D
  extern __shared__ uint4 attention_shared[];
  __half* ks = reinterpret_cast<__half*>(attention_shared);
  __half* vs = ks + S::kHalves;
  char* stages = reinterpret_cast<char*>(vs + S::kHalves);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int width = static_cast<int>(3 * a.C), C = static_cast<int>(a.C), D = static_cast<int>(a.D);
  const int64_t tiles = ceil_div(a.T, kTile), heads = a.head_count();
  const int no_shift[2] = {0, 0};
  for (int64_t item = blockIdx.x; item < heads * tiles; item += gridDim.x) {
    const int64_t kt = item / heads, bh = item % heads, b = bh / a.H, h = bh % a.H;
    const __half* base = qkv + b * a.T * width + h * a.D;
    const __half* dy_base = dy + b * a.T * a.C + h * a.D;
    const float* lse2_bh = lse2 + bh * a.T;
    const float* dsum_bh = dsum + bh * a.T;
    // stage_copy starts the copy of query tile qt's rows into stage st.
    auto stage_copy = [&](int64_t qt, int st) {
      char* p = stages + st * kStage;
      copy_rows<DP, kTile, kThreads>(reinterpret_cast<__half*>(p), base, width, qt * kTile, a.T, D, vec8);
      copy_rows<DP, kTile, kThreads>(reinterpret_cast<__half*>(p) + S::kHalves, dy_base, C, qt * kTile, a.T, D, vec8);
      float* rows = reinterpret_cast<float*>(p + 2 * S::kHalves * 2);
      copy_floats(rows, lse2_bh, qt * kTile, a.T);
      copy_floats(rows + kTile, dsum_bh, qt * kTile, a.T);
    };
    __syncthreads();  // the last item's reads of every tile are done
    copy_kv<DP, kThreads>(ks, base, C, width, kt * kTile, a.T, D, vec8);  // vs follows ks
    stage_copy(kt, 0);
    cp_async_commit();
    const int64_t key[2] = {kt * kTile + warp * 16 + g, kt * kTile + warp * 16 + g + 8};
    uint32_t ka[DP / 16][4], va[DP / 16][4];
    float dk[S::kNTiles][4] = {}, dv[S::kNTiles][4] = {};
    for (int64_t qt = kt; qt < tiles; ++qt) {
      const int st = static_cast<int>((qt - kt) & 1);
      if (qt + 1 < tiles) stage_copy(qt + 1, st ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
      __syncthreads();
      const char* p = stages + st * kStage;
      const __half* qs = reinterpret_cast<const __half*>(p);
      const __half* gs = qs + S::kHalves;
      const float* lse2_s = reinterpret_cast<const float*>(p + 2 * S::kHalves * 2);
      const float* ds = lse2_s + kTile;
      const bool diagonal = qt == kt;
      if (diagonal) {
        flag_specials<DP, kTile, kThreads>(ks, flag);
        flag_specials<DP, kTile, kThreads>(vs, flag);
        flag_specials<DP, kTile, kThreads>(qs, flag);  // query tile kt's q, once
      }
      if (diagonal) {
        a_fragments<DP>(ks, warp * 16 + g, t, ka);
        a_fragments<DP>(vs, warp * 16 + g, t, va);
      }
      // Queries left of the tile's rows in T: all of them but in the last tile.
      const int valid = a.T - qt * kTile < kTile ? static_cast<int>(a.T - qt * kTile) : kTile;
      float p_t[8][4] = {}, dp[8][4] = {};  // Pᵀ and dPᵀ, then dSᵀ: rows keys, columns queries
      scores_held<DP>(ka, qs, lane, p_t);
      scores_held<DP>(va, gs, lane, dp);
      key_probabilities(p_t, diagonal, valid, warp, lane, scale2, lse2_s);
      key_ds(dp, p_t, lane, ds);
      uint32_t fa[4][4];
      round_tile<false>(p_t, no_shift, fa);
      product<DP, false>(fa, gs, lane, no_shift, dv);
      if constexpr (kStoreDS) {
        float* colmax = reinterpret_cast<float*>(stages + 2 * kStage);
        const int64_t pair = bh * (tiles * (tiles + 1) / 2) + pair_index(qt, kt);
        store_ds(dp, colmax, reinterpret_cast<int*>(colmax + 4 * kTile), ds_out + pair * kTile * kTile,
                 shifts_out + pair * kTile, warp, lane);
      }
      int shift[2];
      row_shift(dp, shift);
      round_tile<true>(dp, shift, fa);
      product<DP, true>(fa, qs, lane, shift, dk);
      __syncthreads();  // this stage's reads are done before the tile after next is copied over it
    }
    const float dk_factor[2] = {scale, scale}, dv_factor[2] = {1.0f, 1.0f};
    __half* out = dqkv + b * a.T * width + h * a.D;
    store_rows<DP>(dk, dk_factor, out + a.C, width, key, a.T, a.D, t, vec8);
    store_rows<DP>(dv, dv_factor, out + 2 * a.C, width, key, a.T, a.D, t, vec8);
  }
#endif
}

// backward_dq_mma: a block of 4 warps owns a query tile (heaviest first) and
// keeps its dq in registers while the key tiles j ≤ i stream through two
// stages of shared memory: S, dP, P and dS again, dq += dS·K. Q's and dY's
// A fragments stay in registers.
template <int DP>
__global__ void __launch_bounds__(kThreads)
    backward_dq_mma(const __half* __restrict__ dy, const __half* __restrict__ qkv, const float* __restrict__ lse2,
                    const float* __restrict__ dsum, __half* __restrict__ dqkv, Heads a, float scale, float scale2,
                    bool vec8) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  using S = TileShape<DP>;
  extern __shared__ uint4 attention_shared[];
  __half* qs = reinterpret_cast<__half*>(attention_shared);
  __half* gs = qs + S::kHalves;
  __half* stages = gs + S::kHalves;  // stage s: keys at + 2s·kHalves, values at + (2s + 1)·kHalves
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int width = static_cast<int>(3 * a.C), C = static_cast<int>(a.C), D = static_cast<int>(a.D);
  const int64_t tiles = ceil_div(a.T, kTile), heads = a.head_count();
  for (int64_t item = blockIdx.x; item < heads * tiles; item += gridDim.x) {
    const int64_t qt = tiles - 1 - item / heads, bh = item % heads, b = bh / a.H, h = bh % a.H;
    const __half* base = qkv + b * a.T * width + h * a.D;
    __syncthreads();  // the last item's reads of every tile are done
    copy_rows<DP, kTile, kThreads>(qs, base, width, qt * kTile, a.T, D, vec8);
    copy_rows<DP, kTile, kThreads>(gs, dy + b * a.T * a.C + h * a.D, C, qt * kTile, a.T, D, vec8);
    copy_kv<DP, kThreads>(stages, base, C, width, 0, a.T, D, vec8);
    cp_async_commit();
    const int64_t row[2] = {qt * kTile + warp * 16 + g, qt * kTile + warp * 16 + g + 8};
    float l2[2], d[2];  // the thread's rows' lse₂ and D
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l2[r] = row[r] < a.T ? lse2[bh * a.T + row[r]] : 0.0f;
      d[r] = row[r] < a.T ? dsum[bh * a.T + row[r]] : 0.0f;
    }
    uint32_t qa[DP / 16][4], ga[DP / 16][4];
    float dq[S::kNTiles][4] = {};
    for (int64_t kt = 0; kt <= qt; ++kt) {
      const __half* ks = stages + (kt & 1) * 2 * S::kHalves;
      const __half* vs = ks + S::kHalves;
      if (kt < qt) {
        copy_kv<DP, kThreads>(stages + (~kt & 1) * 2 * S::kHalves, base, C, width, (kt + 1) * kTile, a.T, D, vec8);
      }
      cp_async_commit();
      cp_async_wait<1>();
      __syncthreads();
      if (kt == 0) {
        a_fragments<DP>(qs, warp * 16 + g, t, qa);
        a_fragments<DP>(gs, warp * 16 + g, t, ga);
      }
      float p[8][4] = {}, dp[8][4] = {};  // P and dP, then dS
      scores_held<DP>(qa, ks, lane, p);
      scores_held<DP>(ga, vs, lane, dp);
      query_probabilities(p, kt == qt, warp, lane, scale2, l2);
      query_ds(dp, p, d);
      int shift[2];
      row_shift(dp, shift);
      uint32_t fa[4][4];
      round_tile<true>(dp, shift, fa);
      product<DP, true>(fa, ks, lane, shift, dq);
      __syncthreads();  // this stage's reads are done before the tile after next is copied over it
    }
    const float dq_factor[2] = {scale, scale};
    store_rows<DP>(dq, dq_factor, dqkv + b * a.T * width + h * a.D, width, row, a.T, a.D, t, vec8);
  }
#endif
}

// backward_dq_stored: backward_dq_mma from the dS that backward_dkdv_mma or
// backward_dkdv_hopper stores (variants 5 and 20: launch_backward_mma,
// launch_backward_hopper). A block of 4 warps owns a query tile
// (heaviest first) and keeps its dq in registers while the pairs' dS tiles
// (key-major), their shifts and the key tiles j ≤ i stream through two
// stages of shared memory: dq += 2^shift·(dS·K) per query row and key tile,
// the sums of backward_dq_mma, in the same order, from the same roundings.
// A's fragments come from the key-major tile by ldmatrix.trans: for k-step
// k, lanes 0–7 address keys 16k + 0..7 at the warp's first query q0, lanes
// 8–15 the same keys at q0 + 8, lanes 16–31 keys 16k + 8..15 likewise.
template <int DP>
__global__ void __launch_bounds__(kThreads)
    backward_dq_stored(const __half* __restrict__ qkv, const __half* __restrict__ ds, const int* __restrict__ shifts,
                       __half* __restrict__ dqkv, Heads a, float scale, bool vec8) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  using S = TileShape<DP>;
  using P = TileShape<kTile>;  // a pair's dS: kTile keys of kTile queries
  constexpr int kStage = (P::kHalves + S::kHalves) * 2 + kTile * 4;  // bytes: dS, keys, shifts
  extern __shared__ uint4 attention_shared[];
  char* stages = reinterpret_cast<char*>(attention_shared);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int width = static_cast<int>(3 * a.C), D = static_cast<int>(a.D);
  const int64_t tiles = ceil_div(a.T, kTile), heads = a.head_count(), pairs = tiles * (tiles + 1) / 2;
  const int q0 = warp * 16;  // the warp's first query, in the tile
  for (int64_t item = blockIdx.x; item < heads * tiles; item += gridDim.x) {
    const int64_t qt = tiles - 1 - item / heads, bh = item % heads, b = bh / a.H, h = bh % a.H;
    const __half* keys = qkv + b * a.T * width + h * a.D + a.C;
    const int64_t first = bh * pairs + pair_index(qt, 0);  // pairs (qt, 0 .. qt) follow it
    // stage_copy starts the copy of key tile kt's pair into stage st.
    auto stage_copy = [&](int64_t kt, int st) {
      char* p = stages + st * kStage;
      copy_rows<kTile, kTile, kThreads>(reinterpret_cast<__half*>(p), ds + (first + kt) * kTile * kTile, kTile, 0,
                                        kTile, kTile, true);
      copy_rows<DP, kTile, kThreads>(reinterpret_cast<__half*>(p) + P::kHalves, keys, width, kt * kTile, a.T, D, vec8);
      copy_floats(reinterpret_cast<float*>(p + (P::kHalves + S::kHalves) * 2),
                  reinterpret_cast<const float*>(shifts + (first + kt) * kTile), 0, kTile);
    };
    __syncthreads();  // the last item's reads of every stage are done
    stage_copy(0, 0);
    cp_async_commit();
    const int64_t row[2] = {qt * kTile + q0 + g, qt * kTile + q0 + g + 8};
    float dq[S::kNTiles][4] = {};
    for (int64_t kt = 0; kt <= qt; ++kt) {
      const int st = static_cast<int>(kt & 1);
      if (kt < qt) stage_copy(kt + 1, st ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
      __syncthreads();
      const char* p = stages + st * kStage;
      const __half* dss = reinterpret_cast<const __half*>(p);
      const __half* ks = dss + P::kHalves;
      const int* sh = reinterpret_cast<const int*>(p + (P::kHalves + S::kHalves) * 2);
      uint32_t fa[4][4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        ldmatrix_x4_trans(fa[k], dss + (16 * k + (lane & 7) + (lane >> 4) * 8) * P::kLd + q0 + (lane >> 3 & 1) * 8);
      }
      const int shift[2] = {sh[q0 + g], sh[q0 + g + 8]};
      product<DP, true>(fa, ks, lane, shift, dq);
      __syncthreads();  // this stage's reads are done before the pair after next is copied over it
    }
    const float dq_factor[2] = {scale, scale};
    store_rows<DP>(dq, dq_factor, dqkv + b * a.T * width + h * a.D, width, row, a.T, a.D, t, vec8);
  }
#endif
}

// ---------------------------------------------------------------------------
// The Hopper kernels (variants 6 and 7): backward_dkdv_mma, backward_dq_mma
// and forward_mma with their products on warpgroup MMA (wgmma.cuh), for
// heads of 32 < D ≤ 64 columns (D a multiple of 8, 16-byte aligned rows) on
// compute capability 9.0 with the sm_90a bodies loaded. A block is one warpgroup; its four warps own the
// same rows of the tile as before, and a wgmma accumulator of 64 × 64 holds
// for each thread exactly the elements of the mma.sync kernels' float[8][4]
// (rows 16·warp + g and + 8, columns 8n + 2t and + 1), so the masks, the
// exponentials, the per-row shifts and the f16 roundings are the same
// functions. What changes is where operands come from: every tile lies in
// shared memory in the layout wgmma reads (rows of 64 halves, 128-byte
// swizzle), and both operands of S and dP are read from there by
// descriptor, as are the B operands of dv, dk and dq (the same q, dy and k
// tiles, read MN-major); P and the scaled dS go in as register A fragments
// (round_tile's). No ldmatrix, and no K, V (Q, dY) fragments held in
// registers. The scaled products (dk += 2^shift·(dSᵀ·Q), dq likewise) are
// summed apart over the tile's 64 terms and added as product<DP, true> adds
// them. Accuracy: the same claims as the mma.sync path (exact f16 products,
// f32 sums in any order, P and dS rounded once).

using vkern_wgmma::fence_registers;
using vkern_wgmma::smem_desc;
using vkern_wgmma::wgmma_commit;
using vkern_wgmma::wgmma_fence;
using vkern_wgmma::wgmma_m64n64k16;
using vkern_wgmma::wgmma_m64n64k16_rs;
using vkern_wgmma::wgmma_m64n64k16_rs_set;
using vkern_wgmma::wgmma_m64n64k16_set;
using vkern_wgmma::wgmma_wait;

constexpr int kSwTile = kTile * 128;  // bytes of a swizzled tile: 64 rows of 64 halves

// The Hopper kernels' register budgets, as blocks an SM (the lab builds
// others): the backward's, the forward's.
#if !defined(VKERN_ATTENTION_HOPPER_MIN_BLOCKS)
#define VKERN_ATTENTION_HOPPER_MIN_BLOCKS 3
#endif
constexpr int kHopperMinBlocks = VKERN_ATTENTION_HOPPER_MIN_BLOCKS;
#if !defined(VKERN_ATTENTION_HOPPER_FORWARD_MIN_BLOCKS)
#define VKERN_ATTENTION_HOPPER_FORWARD_MIN_BLOCKS 4
#endif
constexpr int kHopperForwardMinBlocks = VKERN_ATTENTION_HOPPER_FORWARD_MIN_BLOCKS;

// Dynamic shared memory of the Hopper backward: two tiles that stay (K and V,
// or Q and dY) and two that stream in two stages, two stages of 64 lse and
// 64 D (dkdv), and 1 KB to align the tiles to the swizzle's 1024-byte
// period; of the forward: Q, and K and V in two stages.
constexpr int kHopperSmem = 6 * kSwTile + 2 * 2 * kTile * 4 + 1024;
// backward_dkdv_hopper<true> adds store_ds's column maxima and shifts
// (4·kTile floats and kTile ints) after the stages' rows.
constexpr int kHopperStoredSmem = kHopperSmem + 5 * kTile * 4;
constexpr int kHopperForwardSmem = 5 * kSwTile + 1024;

// align_swizzle is the first 1024-byte boundary at or after p, a pointer
// into shared memory. It steps p itself rather than rounding its address
// as an integer, so that the compiler still sees shared memory in what is
// read through it: rounded as an integer, the stage's lse and D were read
// by generic loads (LD) in backward_dkdv_hopper's SASS; stepped, no Hopper
// kernel has one (docs/attention-backward-h100/).
__device__ __forceinline__ unsigned char* align_swizzle(void* p) {
  unsigned char* const c = static_cast<unsigned char*>(p);
  return c + ((1024u - vkern_mma::smem_addr(c) % 1024u) % 1024u);
}

// copy_rows_sw starts the copy of rows [row0, row0 + 64) of a head
// (element (t, c) at src[t·width + c]) into the swizzled tile at shared
// address dst, 16 bytes a cp.async, zero past T and past D (D a multiple of
// 8, rows 16-byte aligned): unit u (halves 8u .. 8u + 7) of row r lands at
// r·128 + 16·(u ^ r % 8). A thread copies unit u = threadIdx.x % 8 of rows
// r₀ + 16k, k < 4 (r₀ = threadIdx.x / 8), which share the swizzle (r % 8
// = r₀ % 8): they land at at + 2048k and come from byte offsets a step
// of 16 rows apart, so a whole tile (every row below T, every unit within
// D) takes an address addition a copy and no tests (variant 15; the
// copies had cost about 100 instructions a warp per pair of tiles in
// backward_dq_hopper, 183 in backward_dkdv_hopper: Nsight Compute,
// docs/attention-rescale-h200).
__device__ __forceinline__ void copy_rows_sw(uint32_t dst, const __half* src, int width, int64_t row0, int64_t T,
                                             int D) {
  static_assert(kTile * 8 / kThreads == 4, "a thread copies 4 rows of a tile");
  const int r0 = static_cast<int>(threadIdx.x) / 8, u = static_cast<int>(threadIdx.x) % 8;
  const uint32_t at = dst + r0 * 128 + ((u ^ (r0 & 7)) << 4);
  const char* from = reinterpret_cast<const char*>(src + row0 * width) + 2 * (r0 * width + 8 * u);
  const int64_t step = int64_t{32} * width;  // bytes from row r to row r + 16
  const bool cols = 8 * u < D;
  if (T - row0 >= kTile && cols) {
#pragma unroll
    for (int k = 0; k < 4; ++k) cp_async_16_full_at(at + 2048 * k, from + k * step);
    return;
  }
  const int64_t left = T - row0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const bool in = r0 + 16 * k < left && cols;
    cp_async_16_at(at + 2048 * k, in ? from + k * step : reinterpret_cast<const char*>(src), in ? 16 : 0);
  }
}

// async_visible makes this thread's finished cp.async writes to shared
// memory visible to wgmma's reads (the async proxy); a barrier after it
// makes every thread's visible.
__device__ __forceinline__ void async_visible() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// flag_tile sets *flag when any half of a swizzled tile is an infinity or a
// NaN.
__device__ __forceinline__ void flag_tile(const unsigned char* tile, unsigned* flag) {
  uint32_t marks = 0;
#pragma unroll
  for (int k = 0; k < kSwTile / 16 / kThreads; ++k) {
    marks |= special_marks(*reinterpret_cast<const uint4*>(tile + 16 * (threadIdx.x + k * kThreads)));
  }
  if (marks & kSpecialMarks) {
    atomicOr(flag, 1u);
  }
}

// flat views a thread's share of a 64 × 64 tile as wgmma's accumulator.
__device__ __forceinline__ float (&flat(float (&x)[8][4]))[32] { return reinterpret_cast<float(&)[32]>(x); }

// keep_fragments pins A fragments until here (after the wait of the group
// that reads them), so that their registers are not reused while wgmma may
// still read them.
__device__ __forceinline__ void keep_fragments(uint32_t (&a)[4][4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    asm volatile("" : "+r"(a[k][0]), "+r"(a[k][1]), "+r"(a[k][2]), "+r"(a[k][3])::"memory");
  }
}

// tile_products: x = A·Bᵀ over 64 columns, A and B swizzled 64-row tiles read
// K-major (S = Q·Kᵀ, Sᵀ = K·Qᵀ and the dP likewise); not waited for. x's
// old value is not read: it needs none.
__device__ __forceinline__ void tile_products(float (&x)[8][4], uint32_t a, uint32_t b) {
  const uint64_t da = smem_desc(a, 16, 1024), db = smem_desc(b, 16, 1024);
  wgmma_m64n64k16_set<0, 0>(flat(x), da, db);
#pragma unroll
  for (int kk = 1; kk < 4; ++kk) wgmma_m64n64k16<0, 0>(flat(x), da + 2 * kk, db + 2 * kk, 1);
}

// fragment_products: x (+)= F·B, F the 64 × 64 A fragments (f) and B a
// swizzled tile read MN-major (its rows the sum's index: queries for dv and
// dk, keys for dq); not waited for. kAccumulate false overwrites x without
// reading it.
template <bool kAccumulate>
__device__ __forceinline__ void fragment_products(float (&x)[8][4], const uint32_t (&f)[4][4], uint32_t b) {
  const uint64_t db = smem_desc(b, 8192, 1024);
  if constexpr (kAccumulate) {
    wgmma_m64n64k16_rs<1>(flat(x), f[0], db, 1);
  } else {
    wgmma_m64n64k16_rs_set<1>(flat(x), f[0], db);
  }
#pragma unroll
  for (int kk = 1; kk < 4; ++kk) wgmma_m64n64k16_rs<1>(flat(x), f[kk], db + 128 * kk, 1);
}

// The Hopper kernels scale dS's rows into f16's range and their products
// back (round_scaled, add_scaled) by multiplying by 2^∓shift as a float,
// where every row of the warp allows it. ldexpf, which the mma.sync kernels
// keep, takes any exponent: ptxas makes it three multiplications an element
// and the code that splits the exponent (backward_dkdv_hopper executed 388
// FMULs in a warp's 1,424 instructions a tile pair, Nsight Compute,
// 2026-11-27). A multiplication by a power of two that is a float rounds
// the exact product once, as ldexpf (0 ulps, the CUDA Math API's table)
// does, and nvcc keeps subnormals (-ftz=false), so the bits are the same
// (row_scale.cuh's pow2; kernels/testdata/row_scale_check.cc holds the
// host's multiplication to the host's ldexp for every such power). Since
// variant 11 add_scaled fuses the scaling back with its addition, which
// gives those bits wherever the scaled product is normal and differs (more
// accurate, within the bound) where it is subnormal: there the Hopper
// backward may differ from the mma.sync one.

// fast_shifts says whether every row shift of the warp is at least
// kFastShiftMin (−127), so that 2^−shift and 2^shift are both floats
// (shift_for gives at most 114, at an infinity, and at least −163). Below
// lie rows whose largest |dS| is under 2⁻¹¹³; there the warp takes ldexpf.
__device__ __forceinline__ bool fast_shifts(const int (&shift)[2]) {
  return __all_sync(0xffffffffu, shift[0] >= vkern_scale::kFastShiftMin && shift[1] >= vkern_scale::kFastShiftMin);
}

// round_scaled is round_tile<true> for the Hopper kernels: the same
// roundings, each row scaled by a multiplication by 2^−shift where
// fast_shifts allows.
__device__ __forceinline__ void round_scaled(const float (&x)[8][4], const int (&shift)[2], uint32_t (&a)[4][4]) {
  if (!fast_shifts(shift)) {
    round_tile<true>(x, shift, a);
    return;
  }
  const float f[2] = {pow2(-shift[0]), pow2(-shift[1])};
  round_rows(x, [&](float v, int r) { return __fmul_rn(v, f[r]); }, a);
}

// add_scaled adds part, each row r of the thread scaled by 2^shift[r], to
// x: a product of round_scaled's fragments scaled back. Where fast_shifts
// allows, each element takes one fused multiply-add, which rounds the exact
// part·2^shift + x once: wherever the scaled term is normal (and finite)
// it is exact, so these are the bits of the unfused multiplication and
// addition (ldexpf's path, below); where it is subnormal (a row whose
// products are under 2⁻¹²⁶) the unfused form would round it first, and the
// fused one, nearer the exact sum, is within the same bound, which takes
// each addition of the sum as one rounding in any order
// (oracle/attention.go).
__device__ __forceinline__ void add_scaled(float (&x)[8][4], const float (&part)[8][4], const int (&shift)[2]) {
  if (!fast_shifts(shift)) {
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) x[n][e] += ldexpf(part[n][e], shift[e / 2]);
    }
    return;
  }
  const float f[2] = {pow2(shift[0]), pow2(shift[1])};
#pragma unroll
  for (int n = 0; n < 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) x[n][e] = __fmaf_rn(part[n][e], f[e / 2], x[n][e]);
  }
}

// backward_dkdv_hopper is backward_dkdv_mma on wgmma: dv += Pᵀ·dY is
// issued as soon as P is rounded and runs while dS is formed. With
// kStoreDS (variant 20) it also writes each pair's dS for
// backward_dq_stored, as backward_dkdv_mma does (store_ds, its column
// maxima in shared memory after the stages' rows).
template <bool kStoreDS>
__global__ void __launch_bounds__(kThreads, kHopperMinBlocks)
    backward_dkdv_hopper(const __half* __restrict__ dy, const __half* __restrict__ qkv, const float* __restrict__ lse2,
                         const float* __restrict__ dsum, __half* __restrict__ dqkv, Heads a, float scale,
                         float scale2, unsigned* __restrict__ flag, __half* __restrict__ ds_out,
                         int* __restrict__ shifts_out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint4 attention_shared[];
  unsigned char* const ks = align_swizzle(attention_shared);
  unsigned char* const vs = ks + kSwTile;
  unsigned char* const stages = vs + kSwTile;  // stage s: q at 2s·kSwTile, dy after it
  float* const stage_rows = reinterpret_cast<float*>(stages + 4 * kSwTile);  // stage s: lse₂ at 2s·kTile, D after it
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int width = static_cast<int>(3 * a.C), C = static_cast<int>(a.C), D = static_cast<int>(a.D);
  const int64_t tiles = ceil_div(a.T, kTile), heads = a.head_count();
  const int no_shift[2] = {0, 0};
  const uint32_t k_addr = vkern_mma::smem_addr(ks), v_addr = vkern_mma::smem_addr(vs);
  const uint32_t stage_addr = vkern_mma::smem_addr(stages);
  for (int64_t item = blockIdx.x; item < heads * tiles; item += gridDim.x) {
    int64_t kt, bh;
    vkern_tiles::tile_item(item, heads, a.group, tiles, &kt, &bh);
    const int64_t b = bh / a.H, h = bh % a.H;
    const __half* base = qkv + b * a.T * width + h * a.D;
    const __half* dy_base = dy + b * a.T * a.C + h * a.D;
    const float* lse2_bh = lse2 + bh * a.T;
    const float* dsum_bh = dsum + bh * a.T;
    // stage_copy starts the copy of query tile qt's rows into stage st.
    auto stage_copy = [&](int64_t qt, int st) {
      copy_rows_sw(stage_addr + 2 * st * kSwTile, base, width, qt * kTile, a.T, D);
      copy_rows_sw(stage_addr + (2 * st + 1) * kSwTile, dy_base, C, qt * kTile, a.T, D);
      copy_floats(stage_rows + 2 * st * kTile, lse2_bh, qt * kTile, a.T);
      copy_floats(stage_rows + (2 * st + 1) * kTile, dsum_bh, qt * kTile, a.T);
    };
    __syncthreads();  // the last item's reads of every tile are done
    copy_rows_sw(k_addr, base + C, width, kt * kTile, a.T, D);
    copy_rows_sw(v_addr, base + 2 * C, width, kt * kTile, a.T, D);
    stage_copy(kt, 0);
    cp_async_commit();
    const int64_t key[2] = {kt * kTile + warp * 16 + g, kt * kTile + warp * 16 + g + 8};
    float dk[8][4] = {}, dv[8][4] = {};
    for (int64_t qt = kt; qt < tiles; ++qt) {
      const int st = static_cast<int>((qt - kt) & 1);
      if (qt + 1 < tiles) stage_copy(qt + 1, st ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
      async_visible();
      __syncthreads();
      const unsigned char* qs = stages + 2 * st * kSwTile;
      const uint32_t q_addr = stage_addr + 2 * st * kSwTile, g_addr = q_addr + kSwTile;
      const float* lse2_s = stage_rows + 2 * st * kTile;
      const float* ds = lse2_s + kTile;
      const bool diagonal = qt == kt;
      if (diagonal) {
        flag_tile(ks, flag);
        flag_tile(vs, flag);
        flag_tile(qs, flag);  // query tile kt's q, once
      }
      float p_t[8][4], dp[8][4];  // Pᵀ and dPᵀ, then dSᵀ: rows keys, columns queries (set by tile_products)
      wgmma_fence();
      tile_products(p_t, k_addr, q_addr);
      wgmma_commit();
      tile_products(dp, v_addr, g_addr);
      wgmma_commit();
      wgmma_wait<1>();  // Sᵀ is done: P is formed while dPᵀ's products run
      fence_registers(flat(p_t));
      const int valid = a.T - qt * kTile < kTile ? static_cast<int>(a.T - qt * kTile) : kTile;
      key_probabilities(p_t, diagonal, valid, warp, lane, scale2, lse2_s);
      uint32_t fp[4][4];
      round_tile<false>(p_t, no_shift, fp);
      wgmma_wait<0>();
      fence_registers(flat(dp));
      wgmma_fence();
      fragment_products<true>(dv, fp, g_addr);  // dv += Pᵀ·dY, while dS is formed
      wgmma_commit();
      key_ds(dp, p_t, lane, ds);
      if constexpr (kStoreDS) {
        float* colmax = stage_rows + 4 * kTile;
        const int64_t pair = bh * (tiles * (tiles + 1) / 2) + pair_index(qt, kt);  // the pair's place among the tiles
        store_ds(dp, colmax, reinterpret_cast<int*>(colmax + 4 * kTile), ds_out + pair * kTile * kTile,
                 shifts_out + pair * kTile, warp, lane);
      }
      int shift[2];
      row_shift(dp, shift);
      uint32_t fd[4][4];
      round_scaled(dp, shift, fd);
      float part[8][4];  // set by fragment_products
      wgmma_fence();
      fragment_products<false>(part, fd, q_addr);  // (2^−shift·dSᵀ)·Q
      wgmma_commit();
      wgmma_wait<0>();
      keep_fragments(fp);
      keep_fragments(fd);
      fence_registers(flat(dv));
      fence_registers(flat(part));
      add_scaled(dk, part, shift);
      __syncthreads();  // this stage's reads are done before the tile after next is copied over it
    }
    const float dk_scale[2] = {scale, scale}, ones[2] = {1.0f, 1.0f};
    __half* out = dqkv + b * a.T * width + h * a.D;
    store_rows<64>(dk, dk_scale, out + a.C, width, key, a.T, a.D, t, true);
    store_rows<64>(dv, ones, out + 2 * a.C, width, key, a.T, a.D, t, true);
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // the host launches this only when the sm_90a body is loaded (hopper)
#endif
}

// backward_dq_hopper is backward_dq_mma on wgmma.
__global__ void __launch_bounds__(kThreads, kHopperMinBlocks)
    backward_dq_hopper(const __half* __restrict__ dy, const __half* __restrict__ qkv, const float* __restrict__ lse2,
                       const float* __restrict__ dsum, __half* __restrict__ dqkv, Heads a, float scale,
                       float scale2) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint4 attention_shared[];
  unsigned char* const qs = align_swizzle(attention_shared);
  unsigned char* const gs = qs + kSwTile;
  unsigned char* const stages = gs + kSwTile;  // stage s: keys at 2s·kSwTile, values after them
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int width = static_cast<int>(3 * a.C), C = static_cast<int>(a.C), D = static_cast<int>(a.D);
  const int64_t tiles = ceil_div(a.T, kTile), heads = a.head_count();
  const uint32_t q_addr = vkern_mma::smem_addr(qs), g_addr = vkern_mma::smem_addr(gs);
  const uint32_t stage_addr = vkern_mma::smem_addr(stages);
  for (int64_t item = blockIdx.x; item < heads * tiles; item += gridDim.x) {
    int64_t rank, bh;
    vkern_tiles::tile_item(item, heads, a.group, tiles, &rank, &bh);
    const int64_t qt = tiles - 1 - rank, b = bh / a.H, h = bh % a.H;
    const __half* base = qkv + b * a.T * width + h * a.D;
    // kv_copy starts the copy of key tile kt's keys and values into stage st.
    auto kv_copy = [&](int64_t kt, int st) {
      copy_rows_sw(stage_addr + 2 * st * kSwTile, base + C, width, kt * kTile, a.T, D);
      copy_rows_sw(stage_addr + (2 * st + 1) * kSwTile, base + 2 * C, width, kt * kTile, a.T, D);
    };
    __syncthreads();  // the last item's reads of every tile are done
    copy_rows_sw(q_addr, base, width, qt * kTile, a.T, D);
    copy_rows_sw(g_addr, dy + b * a.T * a.C + h * a.D, C, qt * kTile, a.T, D);
    kv_copy(0, 0);
    cp_async_commit();
    const int64_t row[2] = {qt * kTile + warp * 16 + g, qt * kTile + warp * 16 + g + 8};
    float l2[2], d[2];  // the thread's rows' lse₂ and D
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l2[r] = row[r] < a.T ? lse2[bh * a.T + row[r]] : 0.0f;
      d[r] = row[r] < a.T ? dsum[bh * a.T + row[r]] : 0.0f;
    }
    float dq[8][4] = {};
    for (int64_t kt = 0; kt <= qt; ++kt) {
      const int st = static_cast<int>(kt & 1);
      if (kt < qt) kv_copy(kt + 1, st ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
      async_visible();
      __syncthreads();
      const uint32_t k_addr = stage_addr + 2 * st * kSwTile, v_addr = k_addr + kSwTile;
      float p[8][4], dp[8][4];  // P and dP, then dS (set by tile_products)
      wgmma_fence();
      tile_products(p, q_addr, k_addr);
      wgmma_commit();
      tile_products(dp, g_addr, v_addr);
      wgmma_commit();
      wgmma_wait<1>();  // S is done: P is formed while dP's products run
      fence_registers(flat(p));
      query_probabilities(p, kt == qt, warp, lane, scale2, l2);
      wgmma_wait<0>();
      fence_registers(flat(dp));
      query_ds(dp, p, d);
      int shift[2];
      row_shift(dp, shift);
      uint32_t fd[4][4];
      round_scaled(dp, shift, fd);
      float part[8][4];  // set by fragment_products
      wgmma_fence();
      fragment_products<false>(part, fd, k_addr);  // (2^−shift·dS)·K
      wgmma_commit();
      wgmma_wait<0>();
      keep_fragments(fd);
      fence_registers(flat(part));
      add_scaled(dq, part, shift);
      __syncthreads();  // this stage's reads are done before the tile after next is copied over it
    }
    const float dq_factor[2] = {scale, scale};
    store_rows<64>(dq, dq_factor, dqkv + b * a.T * width + h * a.D, width, row, a.T, a.D, t, true);
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // the host launches this only when the sm_90a body is loaded (hopper)
#endif
}

// forward_hopper is forward_mma on wgmma (W = 4: a block of one warpgroup
// owns a query tile of 64 rows): S = Q·Kᵀ from the swizzled tiles by
// descriptor, the same mask and online softmax, O += P·V with P as register
// fragments and V read MN-major.
__global__ void __launch_bounds__(kThreads, kHopperForwardMinBlocks)
    forward_hopper(const __half* __restrict__ qkv, __half* __restrict__ y, float* __restrict__ lse, Heads a,
                   float scale2, unsigned* __restrict__ flag) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint4 attention_shared[];
  unsigned char* const qs = align_swizzle(attention_shared);
  unsigned char* const stages = qs + kSwTile;  // stage s: keys at 2s·kSwTile, values after them
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int width = static_cast<int>(3 * a.C), C = static_cast<int>(a.C), D = static_cast<int>(a.D);
  const int64_t tiles = ceil_div(a.T, kTile), heads = a.head_count();
  const int no_shift[2] = {0, 0};
  const uint32_t q_addr = vkern_mma::smem_addr(qs), stage_addr = vkern_mma::smem_addr(stages);
  for (int64_t item = blockIdx.x; item < heads * tiles; item += gridDim.x) {
    int64_t rank, bh;
    vkern_tiles::tile_item(item, heads, a.group, tiles, &rank, &bh);
    const int64_t qt = tiles - 1 - rank, b = bh / a.H, h = bh % a.H;
    const __half* base = qkv + b * a.T * width + h * a.D;  // q of token 0; k at + C, v at + 2C
    // kv_copy starts the copy of key tile kt's keys and values into stage st.
    auto kv_copy = [&](int64_t kt, int st) {
      copy_rows_sw(stage_addr + 2 * st * kSwTile, base + C, width, kt * kTile, a.T, D);
      copy_rows_sw(stage_addr + (2 * st + 1) * kSwTile, base + 2 * C, width, kt * kTile, a.T, D);
    };
    const int64_t row[2] = {qt * kTile + warp * 16 + g, qt * kTile + warp * 16 + g + 8};
    __syncthreads();  // the last item's reads of every stage are done
    copy_rows_sw(q_addr, base, width, qt * kTile, a.T, D);
    kv_copy(0, 0);
    cp_async_commit();
    float o[8][4] = {};
    float m[2] = {vkern_rows::neg_inf(), vkern_rows::neg_inf()}, l[2] = {0.0f, 0.0f};
    for (int64_t kt = 0; kt <= qt; ++kt) {
      const int st = static_cast<int>(kt & 1);
      if (kt < qt) kv_copy(kt + 1, st ^ 1);
      cp_async_commit();
      cp_async_wait<1>();  // all but the group just started: this pair (and q)
      async_visible();
      __syncthreads();
      const uint32_t k_addr = stage_addr + 2 * st * kSwTile, v_addr = k_addr + kSwTile;
      if (kt == 0) flag_tile(qs, flag);
      if (kt == qt) {  // the key tile of this block's own query rows: scanned here, once
        flag_tile(stages + 2 * st * kSwTile, flag);
        flag_tile(stages + (2 * st + 1) * kSwTile, flag);
      }
      float s[8][4];  // S: tile_products sets it
      wgmma_fence();
      tile_products(s, q_addr, k_addr);
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(flat(s));
      if (kt == qt) mask_after(s, warp * 16 + g, t);
      online_softmax(s, m, l, o, scale2);
      uint32_t pa[4][4];
      round_tile<false>(s, no_shift, pa);
      wgmma_fence();
      fragment_products<true>(o, pa, v_addr);  // O += P·V
      wgmma_commit();
      wgmma_wait<0>();
      keep_fragments(pa);
      fence_registers(flat(o));
      __syncthreads();  // this stage's reads are done before the next pair is copied over it
    }
    finish_rows<64>(o, m, l, row, y + b * a.T * a.C + h * a.D, lse + bh * a.T, a, t, true);
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // the host launches this only when the sm_90a body is loaded (hopper)
#endif
}

// Dynamic shared memory of each kernel, in bytes.
template <int DP, int W>
constexpr int forward_smem() {
  return (16 * W + 4 * kTile) * TileShape<DP>::kLd * 2;
}
template <int DP, bool kStoreDS>
constexpr int dkdv_smem() {
  // K and V, two stages of q, dy, lse and D, and store_ds's column maxima
  // and shifts.
  return 2 * TileShape<DP>::kHalves * 2 + 2 * (2 * TileShape<DP>::kHalves * 2 + 2 * kTile * 4) +
         (kStoreDS ? 5 * kTile * 4 : 0);
}
template <int DP>
constexpr int dq_smem() {
  return 6 * TileShape<DP>::kHalves * 2;
}
template <int DP>
constexpr int dq_stored_smem() {
  return 2 * ((TileShape<kTile>::kHalves + TileShape<DP>::kHalves) * 2 + kTile * 4);
}

// allow_smem raises a kernel's dynamic shared-memory limit to bytes and,
// with carveout, asks for the largest shared-memory carveout (the default
// one holds two forward blocks an SM where their registers allow three; the
// mma.sync backward kernels, two a SM by their registers, keep the default
// and its larger L1; the Hopper kernels, whose operands all come through
// shared memory, ask for it), once per device (devices < 64).
template <class Kernel>
cudaError_t allow_smem(Kernel kernel, int bytes, bool carveout, int device, uint64_t* raised) {
  if (*raised >> device & 1u) return cudaSuccess;
  const void* k = reinterpret_cast<const void*>(kernel);
  cudaError_t err = carveout ? cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, 100) : cudaSuccess;
  if (err == cudaSuccess && bytes > 48 * 1024) {
    err = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  }
  if (err == cudaSuccess) *raised |= uint64_t{1} << device;
  return err;
}

template <int DP, int W>
cudaError_t launch_forward_warps(const __half* qkv, __half* y, float* lse, Heads a, float scale2, bool vec8,
                                 unsigned* flag, int device, cudaStream_t s) {
  static uint64_t raised;
  const cudaError_t err = allow_smem(forward_mma<DP, W>, forward_smem<DP, W>(), true, device, &raised);
  if (err != cudaSuccess) return err;
  const unsigned grid = grid_for(a.head_count() * ceil_div(a.T, 16 * W));
  forward_mma<DP, W><<<grid, 32 * W, forward_smem<DP, W>(), s>>>(qkv, y, lse, a, scale2, vec8, flag);
  return cudaGetLastError();
}

template <int DP>
cudaError_t launch_forward_mma(const __half* qkv, __half* y, float* lse, Heads a, float scale2, bool vec8,
                               unsigned* flag, int device, cudaStream_t s) {
#if defined(VKERN_ATTENTION_LAB)
  if (vk_attention_forward_warps == 8) return launch_forward_warps<DP, 8>(qkv, y, lse, a, scale2, vec8, flag, device, s);
#endif
  return launch_forward_warps<DP, kForwardWarps>(qkv, y, lse, a, scale2, vec8, flag, device, s);
}

// launch_backward_mma launches the tensor-core backward: dk and dv, then dq,
// computing S and dP again (backward_dq_mma), or from the dS tiles
// backward_dkdv_mma stores in ds and shifts when they are not null
// (backward_dq_stored).
template <int DP>
cudaError_t launch_backward_mma(const __half* dy, const __half* qkv, const float* lse2, const float* dsum,
                                __half* dqkv, Heads a, float scale, float scale2, bool vec8, unsigned* flag,
                                __half* ds, int* shifts, int device, cudaStream_t s) {
  const unsigned grid = grid_for(a.head_count() * ceil_div(a.T, kTile));
  if (ds != nullptr) {
    static uint64_t raised_dkdv, raised_dq;
    cudaError_t err = allow_smem(backward_dkdv_mma<DP, true>, dkdv_smem<DP, true>(), false, device, &raised_dkdv);
    if (err == cudaSuccess) err = allow_smem(backward_dq_stored<DP>, dq_stored_smem<DP>(), false, device, &raised_dq);
    if (err != cudaSuccess) return err;
    backward_dkdv_mma<DP, true><<<grid, kThreads, dkdv_smem<DP, true>(), s>>>(dy, qkv, lse2, dsum, dqkv, a, scale,
                                                                              scale2, vec8, flag, ds, shifts);
    backward_dq_stored<DP><<<grid, kThreads, dq_stored_smem<DP>(), s>>>(qkv, ds, shifts, dqkv, a, scale, vec8);
    return cudaGetLastError();
  }
  static uint64_t raised_dkdv, raised_dq;
  cudaError_t err = allow_smem(backward_dkdv_mma<DP, false>, dkdv_smem<DP, false>(), false, device, &raised_dkdv);
  if (err == cudaSuccess) err = allow_smem(backward_dq_mma<DP>, dq_smem<DP>(), false, device, &raised_dq);
  if (err != cudaSuccess) return err;
  backward_dkdv_mma<DP, false><<<grid, kThreads, dkdv_smem<DP, false>(), s>>>(dy, qkv, lse2, dsum, dqkv, a, scale,
                                                                              scale2, vec8, flag, nullptr, nullptr);
  backward_dq_mma<DP><<<grid, kThreads, dq_smem<DP>(), s>>>(dy, qkv, lse2, dsum, dqkv, a, scale, scale2, vec8);
  return cudaGetLastError();
}

// head_group is the Hopper kernels' heads a group (tile_order.cuh):
// $VKERN_ATTENTION_HEAD_GROUP, read once, 0 meaning all heads at once (the
// order of variants 6 and 7 as first measured); 16 unless set, the fastest
// group in the lab (variant 8 in the list above).
// The lab sets it directly.
#if defined(VKERN_ATTENTION_LAB)
int64_t vk_attention_head_group = 16;
int64_t head_group() { return vk_attention_head_group; }
#else
int64_t head_group() {
  static const int64_t group = [] {
    const char* v = std::getenv("VKERN_ATTENTION_HEAD_GROUP");
    return v != nullptr ? std::max<int64_t>(0, std::atoll(v)) : int64_t{16};
  }();
  return group;
}
#endif

// launch_forward_hopper launches variant 7's forward.
cudaError_t launch_forward_hopper(const __half* qkv, __half* y, float* lse, Heads a, float scale2, unsigned* flag,
                                  int device, cudaStream_t s) {
  a.group = head_group();
  static uint64_t raised;
  const cudaError_t err = allow_smem(forward_hopper, kHopperForwardSmem, true, device, &raised);
  if (err != cudaSuccess) return err;
  const unsigned grid = grid_for(a.head_count() * ceil_div(a.T, kTile));
  forward_hopper<<<grid, kThreads, kHopperForwardSmem, s>>>(qkv, y, lse, a, scale2, flag);
  return cudaGetLastError();
}

// launch_backward_hopper launches variant 6's dk and dv, then dq: from
// the dS tiles backward_dkdv_hopper stores in ds and shifts when they are
// not null (variant 20, backward_dq_stored on mma.sync), else computing S
// and dP again (backward_dq_hopper).
cudaError_t launch_backward_hopper(const __half* dy, const __half* qkv, const float* lse2, const float* dsum,
                                   __half* dqkv, Heads a, float scale, float scale2, unsigned* flag, __half* ds,
                                   int* shifts, int device, cudaStream_t s) {
  a.group = head_group();
  const unsigned grid = grid_for(a.head_count() * ceil_div(a.T, kTile));
  if (ds != nullptr) {
    static uint64_t raised_dkdv, raised_dq;
    cudaError_t err = allow_smem(backward_dkdv_hopper<true>, kHopperStoredSmem, true, device, &raised_dkdv);
    if (err == cudaSuccess) err = allow_smem(backward_dq_stored<64>, dq_stored_smem<64>(), false, device, &raised_dq);
    if (err != cudaSuccess) return err;
    backward_dkdv_hopper<true><<<grid, kThreads, kHopperStoredSmem, s>>>(dy, qkv, lse2, dsum, dqkv, a, scale, scale2,
                                                                          flag, ds, shifts);
    backward_dq_stored<64><<<grid, kThreads, dq_stored_smem<64>(), s>>>(qkv, ds, shifts, dqkv, a, scale, true);
    return cudaGetLastError();
  }
  static uint64_t raised_dkdv, raised_dq;
  cudaError_t err = allow_smem(backward_dkdv_hopper<false>, kHopperSmem, true, device, &raised_dkdv);
  if (err == cudaSuccess) err = allow_smem(backward_dq_hopper, kHopperSmem, true, device, &raised_dq);
  if (err != cudaSuccess) return err;
  backward_dkdv_hopper<false><<<grid, kThreads, kHopperSmem, s>>>(dy, qkv, lse2, dsum, dqkv, a, scale, scale2, flag,
                                                                   nullptr, nullptr);
  backward_dq_hopper<<<grid, kThreads, kHopperSmem, s>>>(dy, qkv, lse2, dsum, dqkv, a, scale, scale2);
  return cudaGetLastError();
}

#endif  // VKERN_PTX_MMA

// ---------------------------------------------------------------------------
// Host side.

ScratchBuffer g_scratch;  // the route flag, then D (attention_grad), then the stored dS and shifts

#if defined(VKERN_PTX_MMA)
// kStoredDSLimit caps the stored dS (variants 5 and 20) of one call:
// 2 B·H·P·(kTile² + 2·kTile) bytes for the P = n(n+1)/2 tile pairs of
// n = ⌈T/64⌉ tiles, 221 MB at gpt2's 16x1024x768x12. Past it, or when the
// memory cannot be had, dq computes S and dP again.
constexpr int64_t kStoredDSLimit = int64_t{1} << 30;

// dq_from_stored_ds says whether attention_grad's dq comes from the dS tiles
// the dk/dv kernel stores (variants 5 and 20, attention.cu's list), or from
// S and dP computed again: $VKERN_ATTENTION_DQ = "stored" or "recompute",
// read once; recompute unless set (both measured slower in the step). The
// lab sets it directly.
#if defined(VKERN_ATTENTION_LAB)
bool vk_attention_dq_stored = false;
bool dq_from_stored_ds() { return vk_attention_dq_stored; }
#else
bool dq_from_stored_ds() {
  static const bool stored = [] {
    const char* v = std::getenv("VKERN_ATTENTION_DQ");
    return v != nullptr && std::strcmp(v, "stored") == 0;
  }();
  return stored;
}
#endif

// hopper_chosen says whether attention and attention_grad may take the
// Hopper kernels (variants 6 and 7): unless $VKERN_ATTENTION = "mma", read
// once, which keeps the mma.sync kernels for comparison. The lab sets it
// directly.
#if defined(VKERN_ATTENTION_LAB)
bool vk_attention_hopper = true;
bool hopper_chosen() { return vk_attention_hopper; }
#else
bool hopper_chosen() {
  static const bool chosen = [] {
    const char* v = std::getenv("VKERN_ATTENTION");
    return v == nullptr || std::strcmp(v, "mma") != 0;
  }();
  return chosen;
}
#endif

// hopper says whether device runs the Hopper kernels: chosen, and wgmma.cuh's
// sm90a_loaded (compute capability 9.0, the sm_90a bodies in this unit's
// module there).
bool hopper(int device) { return hopper_chosen() && vkern_wgmma::sm90a_loaded(device); }
#endif  // VKERN_PTX_MMA

#if defined(VKERN_PTX_MMA)
// padded_head is the tensor-core head width for D, or 0 where the exact
// kernels serve.
int padded_head(int64_t D) {
  for (int dp = 16; dp <= 128; dp *= 2) {
    if (D <= dp) return dp;
  }
  return 0;
}

// clear_flag enqueues the route's start: the flag word cleared (the
// tensor-core kernels and row_dots set it when they meet an infinity or a
// NaN).
cudaError_t clear_flag(unsigned* flag, cudaStream_t s) { return cudaMemsetAsync(flag, 0, sizeof(unsigned), s); }

// tensor_cores says whether the current device (set in *device) runs the
// tensor-core path: compute capability 8.0 or more, read once per device.
bool tensor_cores(int* device) {
  static int major_of[64];  // 0: not read yet
  if (cudaGetDevice(device) != cudaSuccess || *device < 0 || *device >= 64) return false;
  int& major = major_of[*device];
  if (major == 0 && cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, *device) != cudaSuccess) {
    major = 0;
    return false;
  }
  return major >= 8;
}
#endif

// blocks_for is the grid of a grid-stride kernel with threads threads, at
// most 8,192 blocks: the exact kernels are launched on every call and must
// cost little when the flag sends them home.
unsigned blocks_for(int64_t threads) { return static_cast<unsigned>(std::min<int64_t>(ceil_div(threads, kThreads), 8192)); }

cudaError_t forward(const __half* qkv, __half* y, float* lse, Heads a, cudaStream_t s) {
  const float scale2 = static_cast<float>(kLog2eDouble / std::sqrt(static_cast<double>(a.D)));
  const unsigned* special = nullptr;
#if defined(VKERN_PTX_MMA)
  int device = 0;
  const int dp = padded_head(a.D);
  if (dp != 0 && tensor_cores(&device)) {
    void* scratch = nullptr;
    cudaError_t err = g_scratch.get(kFlagBytes, &scratch);
    if (err != cudaSuccess) return err;
    unsigned* flag = static_cast<unsigned*>(scratch);
    err = clear_flag(flag, s);
    if (err != cudaSuccess) return err;
    const bool vec8 = a.D % 8 == 0 && aligned16(qkv) && aligned16(y);
    if (dp == 64 && vec8 && hopper(device)) {
      err = launch_forward_hopper(qkv, y, lse, a, scale2, flag, device, s);
    } else if (dp == 16) {
      err = launch_forward_mma<16>(qkv, y, lse, a, scale2, vec8, flag, device, s);
    } else if (dp == 32) {
      err = launch_forward_mma<32>(qkv, y, lse, a, scale2, vec8, flag, device, s);
    } else if (dp == 64) {
      err = launch_forward_mma<64>(qkv, y, lse, a, scale2, vec8, flag, device, s);
    } else {
      err = launch_forward_mma<128>(qkv, y, lse, a, scale2, vec8, flag, device, s);
    }
    if (err != cudaSuccess) return err;
    special = flag;
  }
#endif
  forward_rows<<<blocks_for(a.head_count() * a.T * 32), kThreads, 0, s>>>(qkv, y, lse, a, scale2, special);
  return cudaGetLastError();
}

cudaError_t backward(const __half* dy, const __half* qkv, const __half* y, const float* lse, __half* dqkv, Heads a,
                     cudaStream_t s) {
  const double alpha = 1.0 / std::sqrt(static_cast<double>(a.D));
  const float scale = static_cast<float>(alpha), scale2 = static_cast<float>(alpha * kLog2eDouble);
  const int64_t rows = a.head_count() * a.T;
  // Scratch: the flag, D, lse₂, and (16-byte aligned) any stored dS and
  // shifts.
  const int64_t base_bytes = (kFlagBytes + 2 * rows * static_cast<int64_t>(sizeof(float)) + 15) / 16 * 16;
  void* scratch = nullptr;
  cudaError_t err = cudaErrorMemoryAllocation;
  __half* ds = nullptr;
  int* shifts = nullptr;
#if defined(VKERN_PTX_MMA)
  const int64_t tiles = ceil_div(a.T, kTile), pairs = a.head_count() * (tiles * (tiles + 1) / 2);
  const int64_t ds_bytes = pairs * kTile * kTile * 2, stored_bytes = ds_bytes + pairs * kTile * 4;
  if (dq_from_stored_ds() && stored_bytes <= kStoredDSLimit &&
      g_scratch.get(base_bytes + stored_bytes, &scratch) == cudaSuccess) {
    err = cudaSuccess;
    ds = reinterpret_cast<__half*>(static_cast<char*>(scratch) + base_bytes);
    shifts = reinterpret_cast<int*>(static_cast<char*>(scratch) + base_bytes + ds_bytes);
  }
#endif
  if (ds == nullptr) err = g_scratch.get(base_bytes, &scratch);
  if (err != cudaSuccess) return err;
  unsigned* flag = static_cast<unsigned*>(scratch);
  float* dsum = reinterpret_cast<float*>(static_cast<char*>(scratch) + kFlagBytes);
  float* lse2 = dsum + rows;
  const bool vec8 = a.D % 8 == 0 && aligned16(dy) && aligned16(y);
  const unsigned* special = nullptr;
#if defined(VKERN_PTX_MMA)
  int device = 0;
  const int dp = padded_head(a.D);
  if (dp != 0 && tensor_cores(&device)) {
    err = clear_flag(flag, s);
    if (err != cudaSuccess) return err;
    row_dots<<<blocks_for(rows), kThreads, 0, s>>>(dy, y, lse, dsum, lse2, a, vec8, flag);
    const bool tiles16 = vec8 && aligned16(qkv) && aligned16(dqkv);
    if (dp == 64 && tiles16 && hopper(device)) {
      err = launch_backward_hopper(dy, qkv, lse2, dsum, dqkv, a, scale, scale2, flag, ds, shifts, device, s);
    } else if (dp == 16) {
      err = launch_backward_mma<16>(dy, qkv, lse2, dsum, dqkv, a, scale, scale2, tiles16, flag, ds, shifts, device, s);
    } else if (dp == 32) {
      err = launch_backward_mma<32>(dy, qkv, lse2, dsum, dqkv, a, scale, scale2, tiles16, flag, ds, shifts, device, s);
    } else if (dp == 64) {
      err = launch_backward_mma<64>(dy, qkv, lse2, dsum, dqkv, a, scale, scale2, tiles16, flag, ds, shifts, device, s);
    } else {
      err = launch_backward_mma<128>(dy, qkv, lse2, dsum, dqkv, a, scale, scale2, tiles16, flag, ds, shifts, device, s);
    }
    if (err != cudaSuccess) return err;
    special = flag;
  }
#endif
  if (special == nullptr) row_dots<<<blocks_for(rows), kThreads, 0, s>>>(dy, y, lse, dsum, nullptr, a, vec8, nullptr);
  const unsigned grid = blocks_for(rows * 32);
  backward_dq_rows<<<grid, kThreads, 0, s>>>(dy, qkv, lse, dsum, dqkv, a, scale, scale2, special);
  backward_dkdv_rows<<<grid, kThreads, 0, s>>>(dy, qkv, lse, dsum, dqkv, a, scale, scale2, special);
  return cudaGetLastError();
}

}  // namespace vkern_attention
}  // namespace

#if !defined(VKERN_ATTENTION_LAB)
namespace vkern {

// The ops' entries (kernels.cu lists them).
cudaError_t run_attention(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_attention;
  const vkern_attention::Heads a{c.params[param::B], c.params[param::T], c.params[param::C], c.params[param::H],
                                 c.params[param::C] / c.params[param::H]};
  return vkern_attention::forward(c.ptr<const __half>(buf::qkv), c.ptr<__half>(buf::y), c.ptr<float>(buf::lse), a, s);
}

cudaError_t run_attention_grad(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_attention_grad;
  const vkern_attention::Heads a{c.params[param::B], c.params[param::T], c.params[param::C], c.params[param::H],
                                 c.params[param::C] / c.params[param::H]};
  return vkern_attention::backward(c.ptr<const __half>(buf::dy), c.ptr<const __half>(buf::qkv),
                                   c.ptr<const __half>(buf::y), c.ptr<const float>(buf::lse),
                                   c.ptr<__half>(buf::dqkv), a, s);
}

}  // namespace vkern
#endif  // VKERN_ATTENTION_LAB
