// gemm, gemm_grad_a, gemm_grad_b, linear and linear_grad_w on Hopper (compute
// capability 9.0, built for sm_90a): the product Out = L · R of gemm.cuh (see
// its table of the five ops, their operand layouts and epilogues) with the
// bulk tensor copy engine (TMA) and warpgroup MMA (wgmma).
//
// Launch shape: a persistent 1-D grid of at most one block per multiprocessor
// (clusters of kCluster blocks along the rows), 384 threads = 3 warpgroups.
// Warpgroup 0 is the producer: it gives registers back (setmaxnreg.dec) and
// one of its threads walks the block's tiles, issuing TMA copies of a BM × 64
// slice of L and a 64 × BN slice of R per depth step into a kStages-deep ring
// of shared-memory stages (128-byte swizzle). Each stage has a full barrier
// (the copies' byte count completes it) and an empty barrier (one arrival per
// consumer warpgroup of every block in the cluster). Warpgroups 1 and 2 are
// consumers (setmaxnreg.inc): consumer c owns rows 64c .. 64c + 63 of the
// block's 128 × BN tile, holds its f32 accumulators in registers and issues
// four wgmma.mma_async.m64nBNk16 per stage, keeping one stage's products in
// flight while it releases the one before. After a tile's last stage each
// consumer warp stores its 16 rows: in the staged variants (S) through a
// 16-row × 128-byte shared-memory buffer per warp, so that every global store
// is 8 lanes × 16 bytes of one row; otherwise (and on edge tiles) straight
// from the accumulator fragments. Tiles are visited in groups of
// kGroupRows tile rows (column-major inside a group), unit = blockIdx /
// kCluster, unit += gridDim / kCluster, so the blocks running at once share
// operand panels in L2. With kCluster = 2, the two blocks of a cluster take
// vertically adjacent tiles that need the same R slice: each loads half of it
// and multicasts that half to both.
//
// Layouts: a depth-contiguous operand is K-major for wgmma (rows of 64
// depth terms = 128 bytes, one swizzle atom wide); the others (B of gemm, Aᵀ
// and dC of grad_b) are MN-major, loaded as 64-element-wide column panels of
// 64 depth rows, and the wgmma transpose bit is set for them.
//
// Facts relied on:
// - An f16·f16 product is exact in f32 and wgmma adds in f32, so integer
//   inputs whose partial sums stay below 2²⁴ give exact results (as in
//   gemm.cuh).
// - TMA zero-fills every element of a box outside the tensor (past the last
//   row, column or depth term, or before the first: the class tiles read
//   R's rows from n0 − shift, negative in a row's first tile; verified on
//   an H100, docs/lm-head-class-tiles-h100), so padded terms add +0 to
//   sums that are stored and Inf/NaN inputs propagate as in the plain
//   loop; accumulators of rows and columns past the edge are never stored.
//   The full barrier counts the whole box's bytes, filled or not.
// - TMA needs a 16-byte-aligned base and row strides that are multiples of 16
//   bytes (row length a multiple of 8 halves), and a box whose first element
//   is 16-byte aligned. gemm.cuh sends only such operands here (padding
//   others into scratch first, or taking the mma.sync path), but for an L
//   that is the only operand not aligned. That L is read as eight tensors
//   of every eighth row (row_shift.cuh), at aligned coordinates: by the
//   row-class launches (Tiles::kClassL, K-major L; Tiles::kDepthClassL,
//   MN-major L), whose consumer warps build their A fragments from them,
//   or, where VKERN_GEMM_SHIFT=1, by the shifting launches
//   (Tiles::kShiftL), whose producer shifts them into place in shared
//   memory. kDepthClassL's boxes start up to 48 halves before a row's
//   first element (column coordinates down to −48), which TMA fills with
//   zeros as it does past the end, counting them in the barrier's bytes;
//   no lane reads them. Every first tile of the head's dW starts there
//   (run and verified on an H100: docs/lm-head-dw-h100, call 11).
// - The tensor-map coordinates are int32: the dispatcher sends no matrix with
//   a dimension above INT32_MAX - 256. Every element index is int64_t.
// - Each output element is written exactly once, from its f32 accumulator
//   after the epilogue's additions (epilogue.cuh: the bias, the old value of
//   an output added into), which happen in the consumer's registers before
//   any store path (through the warp's own buffer in the staged epilogue,
//   with __syncwarp between its writes and reads); an f16 output is rounded
//   once (nearest-even).
// - A stage is refilled only after every consumer that reads it (in both
//   blocks of a cluster) has waited for its wgmma reads (wgmma.wait_group)
//   and arrived on its empty barrier.
//
// Availability: everything here is CUDA-only (VKERN_PTX_MMA). The kernel
// body exists only in the sm_90a pass (__CUDA_ARCH_FEAT_SM90_ALL); other
// passes get an empty kernel that traps, and available() asks wgmma.cuh's
// sm90a_loaded so the host launches the kernels only when the loaded module
// has the sm_90a body. Tensor maps come from the driver's
// cuTensorMapEncodeTiled, found through cudaGetDriverEntryPoint (no -lcuda),
// and are cached per (pointer, shape, box, swizzle, L2 promotion, device).
//
// Measured on an H100 (nvcc 12.4 build; timed interleaved with cublasGemmEx
// in one process, median of 20-25 over rotated operand sets; the GPU at its
// 700 W power cap during the large products, by nvidia-smi's clock-event
// reasons): the dispatched variant reached
// 1.10/1.11/1.12 of cuBLAS (gemm / grad_a / grad_b) at 4096³ (712-746
// TFLOP/s), 1.06/1.05/1.03 at 8192³, 1.03/1.06/1.05 at 8192×4096×11008,
// 1.41/1.45/1.45 at 1024³ and 2.06-2.23 at 4097×4099×4101 (padded operands);
// built with the device's nvcc 13.0, 1.00-1.06, 1.45-1.49 and 2.05-2.26 in
// the same call. Per-variant ratios are listed with the variants below.
#include <cstdint>
#include <type_traits>

#include "cuda/compat.h"
#include "cuda/env.h"
#include "cuda/occupancy.h"
#include "cuda/epilogue.cuh"
#include "cuda/row_shift.cuh"
#include "cuda/rows.cuh"
#include "cuda/staged_store.cuh"
#include "cuda/wgmma.cuh"

#if defined(VKERN_PTX_MMA)

#include <cuda.h>  // CUtensorMap and its enums only: the driver is reached through the runtime

namespace {
namespace vkern_gemm_sm90 {

// ---------------------------------------------------------------------------
// Variants. BM = 128 (two consumer warpgroups of 64 rows), BK = 64.
template <int BN_, int STAGES_, int CLUSTER_, bool STAGED_EPILOGUE_ = false>
struct Config {
  static constexpr int BM = 128, BN = BN_, BK = 64, kStages = STAGES_, kCluster = CLUSTER_;
  static constexpr bool kStagedEpilogue = STAGED_EPILOGUE_;
  static constexpr int kThreads = 384;
  static constexpr int kLBytes = BM * BK * 2;
  static constexpr int kRBytes = BN * BK * 2;
  static constexpr int kStageBytes = kLBytes + kRBytes;
  // The staged epilogue gives each consumer warp a 16-row × 128-byte buffer.
  static constexpr int kEpilogueBytes = kStagedEpilogue ? 8 * 16 * 128 : 0;
  // Each consumer's copy of the tile's bias slice (BN halves), when the
  // epilogue adds one.
  static constexpr int kBiasBytes = 2 * BN * 2;
  // Stages, epilogue buffers, then full and empty barriers; 1 KB of slack to
  // align the stages to the 1024-byte period of the 128-byte swizzle.
  static constexpr int kSmemBytes = kStages * kStageBytes + kEpilogueBytes + kBiasBytes + 2 * kStages * 8 + 1024;
  static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 256, "wgmma wrappers exist for N = 64, 128, 192, 256");
  static_assert(kCluster == 1 || kCluster == 2, "clusters of 1 or 2 blocks");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
};

// The variants. Ratios are to cublasGemmEx with the same output type, timed
// interleaved in one process on an H100 (gemm / grad_a / grad_b; 4k = 4096³,
// L = 8192×4096×11008, 1k = 1024³), in the final lab run unless marked (b):
// an earlier run the same day, quoted with the comparison it was made
// against. The dispatcher (gemm.cuh, choose_sm90) uses WideS, MediumS and
// NarrowS. The epilogue's loads (bench/gemm_lab.cu, against cublasGemmEx
// without a bias, GPT-2's products at M = 16384): with the bias loaded per
// element, linear 16384×2304×768 took ~150 µs in vkern bench against
// ~91 µs without a bias; with the tile's slice staged in shared memory
// (cf87f43), 0.983 of cuBLAS with a bias of zeros and 1.029 without
// (471e06a).
// 128 × 256 tiles, 4 stages, stores from registers: 4k 1.05/1.00/1.00, L 1.01/0.95/0.99
using Wide = Config<256, 4, 1>;
// Wide in clusters of 2 sharing R by multicast: L 1.01/0.93/0.97 (b), Wide 1.01/0.95/0.98
using WideC2 = Config<256, 4, 2>;
// 128 × 128 tiles, 6 stages: 1k 1.28/1.18/1.19 (b)
using Medium = Config<128, 6, 1>;
// Medium in clusters of 2: 4k 1.03/1.00/0.99 (b), Wide 1.14/1.11/1.08
using MediumC2 = Config<128, 6, 2>;
// 128 × 64 tiles, 8 stages: 1k 1.35/1.27/1.35
using Narrow = Config<64, 8, 1>;
// Wide, epilogue through shared memory in 128-byte rows: 4k 1.09/1.11/1.10, L 1.03/1.05/1.04
using WideS = Config<256, 4, 1, true>;
// WideC2 with that epilogue: L 1.02/1.03/1.02 (b), WideS 1.02/1.03/1.02
using WideC2S = Config<256, 4, 2, true>;
// Narrow with that epilogue: 1k 1.47/1.41/1.54
using NarrowS = Config<64, 8, 1, true>;
// Medium with that epilogue: 1k 1.25/1.22/1.23; 1024×2048×4096 1.23/1.18/1.15 (WideS 0.79/1.20/1.19)
using MediumS = Config<128, 6, 1, true>;
// WideS with 128 × 192 tiles, for the grids where WideS leaves
// multiprocessors idle: the weight gradients of GPT-2's MLP, 768 × 3072
// and 3072 × 768 outputs, are 72 tiles of 128 × 256 for 132
// multiprocessors and 96 of 128 × 192: 0.127 ms against WideS's 0.159 at
// 16384 deep, 0.96-0.98 of cuBLAS (docs/dw-bn192-h100). gemm.cuh's
// bn192_pays chooses it.
using WideS192 = Config<192, 4, 1, true>;
// Tried and not kept (branch gelu-epilogue, docs/gelu-pre-tile-h100):
// WideSP, WideS's tiles for the GELU backward with pre's tile copied into
// shared memory by the producer under the tile's products, three stages:
// 0.2005 ms at c_proj's dx (16384×768×3072, gelu = 1) against WideS's
// 0.1815.
// WideS with 3 stages, for the shifting producer, whose raw slots take the
// fourth stage's shared memory (gemm.cuh, sm90_tiles_ran; measured in
// docs/row-shift-h100)
using WideS3 = Config<256, 3, 1, true>;
// Tried and not kept (docs/gemm-handoff-h200; the same bits throughout):
// WideH, the hand-off epilogue. The consumers leave a finished tile in a
// shared-memory buffer and go on to the next tile's products, while warps
// 1-3 of the producer warpgroup (otherwise waiting) finish and store it.
// - The tile in f32, so that those warps also applied the GELU's and the
//   residual's steps (calls 1 and 2): 128 × 192 tiles in three stages or
//   128 × 128 in five, since the buffer takes a stage or more. The GELU
//   products took 1.29-1.55 times WideS's time (c_fc's forward 196-207 µs
//   against 152-153, c_proj's dx through the GELU 234-249 against
//   157-159), the plain ones 1.1-1.3 times; the gpt2 step 33.0-35.0 ms
//   against 31.4-31.7. Three warps, one a scheduler, did not keep up with
//   the GELU's exponential and division, with 72 registers or with 168.
// - The tile in f16, for the products with no step after the bias (call
//   3): 128 × 192 tiles in four stages. Every product 1.04-1.07 times
//   WideS's time (linear 16384×2304×768 99.3-99.4 µs against 93.3-93.4,
//   linear_nt 16384×50304×768 1.99 ms against 1.87, gemm_grad_a
//   16384×3072×768 111.3-111.7 µs against 106.6-106.8); the gpt2 step
//   31.75 ms against 31.17-31.25. The narrower tile cost more than the
//   hidden epilogue saved.
// Tried and not kept (branch gemm-tma-store, docs/gemm-tma-store-h200; the
// same bits): WideST, WideS whose plain f16 chunks leave shared memory by
// TMA bulk tensor stores, from two 2 KB buffers a warp used in turn, so
// that the lanes go on to the next chunk while the copy engine writes.
// One H200 call, two rounds against WideS: linear_nt 16384×50304×768
// 1.867-1.890 ms against 1.857, linear 16384×2304×768 90.5-90.6 µs
// against 92.8-93.0, gemm_grad_a 16384×{2304,3072,768}×768 unchanged
// (81.2-81.5, 105.6-105.7 and 34.3 µs against 80.8, 105.0-105.1 and
// 34.3-34.4); the gpt2 step 31.26-31.40 ms against 31.08-31.66. Only
// c_attn's forward gained (1.03×), 28 µs a step over its 12 calls, less
// than the head's forward lost: the lanes' stores were not what held these
// products back.
// WideS in class tiles (product_wgmma's kOutClass; gemm.cuh,
// sm90_tiles_ran) for f16 outputs whose rows are not 16-byte aligned:
// linear_nt 16384×50257×768 2.09 ms, against 2.67 for WideS's staged store
// of unaligned rows and 2.08 for cuBLAS at 50304 (docs/lm-head-class-tiles-h100)

// A variant whose stage holds L as eight raw boxes, one per row class
// (row_shift.cuh), each kBoxRows rows of kRawHalves halves, unswizzled
// (WideSR, WideDC): the stage layout follows from those two numbers.
template <class Base, int kRawHalves, int kRows>
struct RawBoxes : Base {
  static constexpr int kBoxRows = kRows;  // rows of a class box (TMA's box_outer)
  static constexpr int kRawRowBytes = kRawHalves * 2;
  static constexpr int kClassBoxBytes = kBoxRows * kRawRowBytes;  // a multiple of 128, as TMA's destination must be
  static constexpr int kLBytes = vkern_shift::kClasses * kClassBoxBytes;
  static constexpr int kStageBytes = kLBytes + Base::kRBytes;
  static constexpr int kSmemBytes =
      Base::kStages * kStageBytes + Base::kEpilogueBytes + Base::kBiasBytes + 2 * Base::kStages * 8 + 1024;
  static_assert(kClassBoxBytes % 128 == 0, "a class box is a whole number of TMA's 128-byte destinations");
  static_assert(kLBytes % 1024 == 0, "R's panels stay 1024-byte aligned for the 128-byte swizzle");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
};

// WideC2S reading L in row classes into registers (Tiles::kClassL; gemm.cuh,
// sm90_tiles_ran): a stage's L is eight raw boxes, one per row class,
// of 16 rows × 72 halves (a row's 64 depth terms from any of the 8 halves
// its class's rows start at), unswizzled; R is shared by the cluster's two
// blocks. The head's dx, linear 16384×768×50257 (docs/lm-head-class-tiles-h100,
// docs/lm-head-dx-h100):
// - in one block (WideS's tiles), 2.18–2.19 ms, against 2.92 for WideS on
//   the padded copy, 1.64 for WideS at 50304 and 1.87 for cuBLAS there;
//   one word a fragment register where the shift is even, not two,
//   measured the same (2.19–2.23 ms);
// - the raw boxes without L2 promotion (kRawBoxPromotion): 1.86–1.98 ms;
// - in clusters of 2 sharing R, as here: 1.94–1.95 ms, against 1.94–2.00
//   in one block in the same call (call 5); 1.90 ms in call 6, 0.86–0.92
//   of cuBLAS at 50304.
struct WideSR : RawBoxes<WideC2S, 72, 16> {};  // 18 KB of L a stage

// WideS3 reading an MN-major L whose depth rows are not 16-byte aligned
// by the depth's row classes into registers (Tiles::kDepthClassL;
// gemm.cuh, sm90_tiles_ran): linear_grad_w's x at the head's dW,
// 16384×768×50257, where x is the logits gradient. A stage's L is eight
// raw boxes, one per class of its 64 depth rows, of 8 rows × 184 halves,
// unswizzled: a tile's 128 columns from any of the 8 halves the class's
// rows start at, after lead(j) halves that keep the four classes a warp's
// lanes read at once in four different 8-bank groups. The head's dW
// (docs/lm-head-dw-h100, call 11), against 3.05 ms for the padded copy
// and 1.79 for the aligned product at 50304:
// - here, with WideS3's staged epilogue in three stages: 2.02–2.03 ms,
//   0.91–0.95 of cuBLAS's dW.add_ at 50304;
// - on Wide, storing from registers in four stages: 2.11–2.13 ms.
// (Call 10's kernel, one class a stage, took 1.98–2.02 ms but summed the
// depth class by class, outside the TCFused bound: tag
// dw-depth-classes-call10.)
struct WideDC : RawBoxes<WideS3, 184, 8> {  // 23 KB of L a stage
  // The columns class j's box holds before the tile's first: 16·(j / 2).
  __host__ __device__ static constexpr int lead(int j) { return 16 * (j / 2); }
};

constexpr int kGroupRows = 8;  // tile rows per L2 group of the tile order

// How a launch reads L and lays out its tiles (product_wgmma).
enum class Tiles {
  kPlain,     // 128 consecutive rows a tile, L and R by TMA into wgmma's layout
  kShiftL,    // L's row classes by TMA into raw slots, shifted into place by the producer warpgroup
  kClassOut,  // a tile's rows one row class of the output, R's rows shifted by its offset
  kClassL,    // L's row classes by TMA into raw boxes, each consumer warp's A fragments built from one class's box
  kDepthClassL,  // L's depth rows' classes by TMA into raw boxes, A's fragments built from them
};

#if defined(VKERN_GEMM_TUNING)
}  // namespace vkern_gemm_sm90
}  // namespace
#include <cstdio>
namespace {
namespace vkern_gemm_sm90 {
int vk_gemm_tuning_sm90_group = 0;  // tests only: tile rows per group, 0 = kGroupRows
#endif

// ---------------------------------------------------------------------------
// Device side.

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// Arrives on the barrier at the same shared-memory offset in block `cta` of
// the cluster (this block included). The default .release.cta semantics are
// enough: what the arrival publishes is that this block's wgmma reads of the
// stage are complete (wgmma.wait_group), not any memory write; a
// .release.cluster arrival costs a MEMBAR.GPU per stage.
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t cta) {
  asm volatile(
      "{\n"
      ".reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(bar),
      "r"(cta)
      : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// All threads of all blocks of the cluster; not .aligned, since the producer
// warp arrives here diverged.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

// TMA: the box at (c0, c1) (innermost coordinate first) of the tensor `map`
// into shared memory at dst; its bytes complete_tx on bar.
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, uint32_t bar, int32_t c0, int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
// The same box into dst of every block in cta_mask, completing on the
// barrier at bar's offset in each.
__device__ __forceinline__ void tma_load_multicast(uint32_t dst, const CUtensorMap* map, uint32_t bar, int32_t c0,
                                                   int32_t c1, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, "
      "%3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(cta_mask)
      : "memory");
}

__device__ __forceinline__ void lds128(uint32_t addr, uint32_t (&w)[4]) {
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
               : "r"(addr));
}
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t w;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(w) : "r"(addr));
  return w;
}
// lds32_rows loads a word of eight consecutive depth rows of a 128-byte
// swizzled panel: w[j] from row0 + j·128 with its 16-byte unit x ^ j,
// where row0 (a multiple of 8 rows from the panel's start) holds unit x in
// its bits 4-6. One asm statement, so that the eight loads are in flight
// together (each lds32 is waited on before the next).
__device__ __forceinline__ void lds32_rows(uint32_t row0, uint32_t (&w)[8]) {
  asm volatile(
      "{\n"
      ".reg .b32 a<8>;\n"
      "xor.b32 a1, %8, 16;\n"
      "xor.b32 a2, %8, 32;\n"
      "xor.b32 a3, %8, 48;\n"
      "xor.b32 a4, %8, 64;\n"
      "xor.b32 a5, %8, 80;\n"
      "xor.b32 a6, %8, 96;\n"
      "xor.b32 a7, %8, 112;\n"
      "ld.shared.b32 %0, [%8];\n"
      "ld.shared.b32 %1, [a1+128];\n"
      "ld.shared.b32 %2, [a2+256];\n"
      "ld.shared.b32 %3, [a3+384];\n"
      "ld.shared.b32 %4, [a4+512];\n"
      "ld.shared.b32 %5, [a5+640];\n"
      "ld.shared.b32 %6, [a6+768];\n"
      "ld.shared.b32 %7, [a7+896];\n"
      "}\n"
      : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]), "=r"(w[4]), "=r"(w[5]), "=r"(w[6]), "=r"(w[7])
      : "r"(row0));
}
__device__ __forceinline__ void sts128(uint32_t addr, const uint32_t (&w)[4]) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
               : "memory");
}
// Makes this thread's writes to shared memory visible to the async proxy
// (wgmma's reads), ordered before a later barrier arrival.
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

using vkern_wgmma::fence_registers;
using vkern_wgmma::named_barrier;
using vkern_wgmma::smem_desc;
using vkern_wgmma::wgmma;
using vkern_wgmma::wgmma_commit;
using vkern_wgmma::wgmma_fence;
using vkern_wgmma::wgmma_wait;

__device__ __forceinline__ void store_pair(float* p, float v0, float v1) {
  *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
}
__device__ __forceinline__ void store_pair(__half* p, float v0, float v1) {
  *reinterpret_cast<__half2*>(p) = __floats2half2_rn(v0, v1);
}
__device__ __forceinline__ void store_one(float* p, float v) { *p = v; }

// The staged epilogue's layout (staged_store.cuh): a warp's 16 × 128-byte
// buffer holds one chunk of its 16 rows at a time, 64 columns as f16
// (kHalf) or 32 as f32, each 16-byte unit of row r at unit ^ swizzle(r),
// which keeps both the fragment's pair writes and the rows' 16-byte reads
// free of bank conflicts. stage_chunk writes chunk c of a warp's accumulator fragment
// (acc[4j + 2h + e] is element (lane / 4 + 8h, 8j + 2·(lane % 4) + e) of
// its 16 rows); staged_unit is the offset of lane's 16 bytes of row r, its
// unit lane % 8.
template <bool kHalf, int N>
__device__ __forceinline__ void stage_chunk(unsigned char* buf, const float (&acc)[N], int c, int lane) {
  constexpr int kJPerChunk = kHalf ? 8 : 4;
#pragma unroll
  for (int jj = 0; jj < kJPerChunk; ++jj) {
    const int j = c * kJPerChunk + jj;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = lane / 4 + 8 * h;
      if constexpr (kHalf) {
        const int unit = jj ^ vkern_staged::swizzle<true>(r);
        *reinterpret_cast<__half2*>(buf + r * 128 + unit * 16 + (lane % 4) * 4) =
            __floats2half2_rn(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      } else {
        const int unit = (2 * jj + (lane % 4) / 2) ^ vkern_staged::swizzle<false>(r);
        *reinterpret_cast<float2*>(buf + r * 128 + unit * 16 + (lane % 2) * 8) =
            make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      }
    }
  }
}

template <bool kHalf>
__device__ __forceinline__ int staged_unit(int r, int lane) {
  return r * 128 + ((lane % 8) ^ vkern_staged::swizzle<kHalf>(r)) * 16;
}
__device__ __forceinline__ void store_one(__half* p, float v) { *p = __float2half_rn(v); }

// Unit u of the tile order → its first tile row (in units of kCluster tile
// rows) and tile column.
__device__ __forceinline__ void unit_origin(int64_t u, int64_t units_m, int64_t tiles_n, int group, int64_t* um,
                                            int64_t* tn) {
  const int64_t per_group = int64_t{group} * tiles_n;
  const int64_t first = u / per_group * group;
  const int64_t rows_in_group = units_m - first < group ? units_m - first : group;
  *um = first + u % per_group % rows_in_group;
  *tn = u % per_group / rows_in_group;
}

// The tiles' tile grid: tile rows and tile columns. Class tiles come 8 to
// a block of 8·BM rows, and their columns run to cols + 7 (product_wgmma).
template <class Cfg, Tiles kTiles>
__host__ __device__ __forceinline__ void tile_grid(int64_t rows, int64_t cols, int64_t* tiles_m, int64_t* tiles_n) {
  constexpr bool kOutClass = kTiles == Tiles::kClassOut;
  constexpr int64_t kClassRows = int64_t{vkern_shift::kClasses} * Cfg::BM;
  *tiles_m = kOutClass ? vkern_shift::kClasses * ((rows + kClassRows - 1) / kClassRows) : (rows + Cfg::BM - 1) / Cfg::BM;
  *tiles_n = (cols + (kOutClass ? vkern_shift::kClasses - 1 : 0) + Cfg::BN - 1) / Cfg::BN;
}

// Whether tiles kTiles serve a product of these layouts, output type and
// epilogue: the shifting producer an unaligned L that is not the K-major L
// of K-major R (which would share its row length), class tiles K-major L
// and R with an f16 output and at most a bias, L's row classes a K-major
// L, the depth's row classes an MN-major L of MN-major R; none of the
// row-class reads takes the residual or the GELU, which keeps the kernels
// built down.
// sums_columns says whether product_wgmma forms R's column sums
// (Epilogue::kColumnSums) itself, its kSums: plain tiles of an MN-major R
// without clusters. launch tells the caller so (Epilogue::summed); the
// other instances leave the sums to the caller.
template <class Cfg, bool kRDepth, class Epi, Tiles kTiles>
__host__ __device__ constexpr bool sums_columns() {
  return Epi::kColumnSums && kTiles == Tiles::kPlain && Cfg::kCluster == 1 && !kRDepth;
}

template <Tiles kTiles, bool kLDepth, bool kRDepth, typename Out, class Epi>
__host__ __device__ constexpr bool tiles_serve() {
  constexpr bool plain_epilogue = !Epi::kResidual && Epi::kGelu == vkern_epilogue::kNoGelu;
  switch (kTiles) {
    case Tiles::kShiftL: return !(kLDepth && kRDepth) && plain_epilogue;
    case Tiles::kClassOut: return kLDepth && kRDepth && sizeof(Out) == 2 && !Epi::kAccumulate && plain_epilogue;
    case Tiles::kClassL: return kLDepth && plain_epilogue;
    case Tiles::kDepthClassL: return !kLDepth && !kRDepth && plain_epilogue;
    default: return true;
  }
}

// The row-class tiles' tensors: an operand's eight row classes, and the
// shift of each (row_shift.cuh).
struct ClassMaps {
  CUtensorMap map[vkern_shift::kClasses];
  int32_t shift[vkern_shift::kClasses];
};
struct NoMaps {};
template <bool kClassed>
using ShiftMaps = std::conditional_t<kClassed, ClassMaps, NoMaps>;

// Shared memory the shifting producer adds after the barriers: its raw
// slots, 128-byte aligned, then their full and empty barriers.
template <bool kLDepth>
constexpr int shift_bytes() {
  using Raw = vkern_shift::Raw<kLDepth>;
  return 128 + Raw::kSlots * Raw::kSlotBytes + 2 * Raw::kSlots * 8;
}

// product_wgmma: see the file comment. L(i, p) is L[i·ldl + p] when kLDepth,
// else L[p·ldl + i]; R(p, j) is R[j·ldr + p] when kRDepth, else R[p·ldr + j];
// the tensor maps hold those ld's. epi finishes each element (epilogue.cuh).
// With kLShift, map_l is unused: the producer warpgroup reads L's row
// classes (maps_shift) into raw slots and shifts each unit of the tile into
// its stage (row_shift.cuh); a stage is full when R's bytes have landed and
// its four warps have arrived.
//
// With kOutClass (an f16 output whose rows do not start 16-byte aligned;
// K-major L and R), a tile's 128 rows are one row class of the output: rows
// c, c + 8, c + 16, … of a block of 1024 (tile row um is class um % 8 of
// block um / 8), read from L through the class's tensor map
// (maps_shift.map[c]: every eighth row of L from row c). Row c + 8i of the
// output starts shift_c = maps_shift.shift[c] halves past a 16-byte
// boundary, the same for every i, so the tile computes columns n0 − shift_c
// … n0 − shift_c + BN − 1 (R's rows from n0 − shift_c; TMA fills the rows
// before 0 with zeros) and every 16-byte unit of its rows is a whole unit
// of memory: the staged store writes them as it writes aligned rows. The
// depth is untouched, so every sum is the one the aligned kernel forms.
// Column tiles run to cols + 7, so that the last class's shifted tiles
// cover the row's end.
//
// With kClassL (an L whose rows are not 16-byte aligned, K-major; WideSR),
// the producer copies each of L's row classes (row_shift.cuh) with TMA into
// a raw box of 16 rows × 72 halves per stage, at an aligned column of the
// class's tensor, unswizzled. Consumer warp q (0 … 7) owns the tile's rows
// q, q + 8, …, q + 120: one class, whose rows start shift_q halves into
// the box. It builds its wgmma A fragments from the box with 4-byte loads
// (two words and a byte permute a pair when shift_q is odd) and issues
// wgmma with A from registers: the depth terms of each 16-deep step are
// the aligned kernel's, from k = 0, so every sum is the one it forms.
//
// With kDepthClassL (an MN-major L whose depth rows are not 16-byte
// aligned, MN-major R; WideDC), the producer copies each of the stage's 8
// row classes of L's depth rows (8 rows each) with TMA into a raw box, as
// WideDC describes, and R as the plain tiles do. Depth row κ of a stage
// is row κ / 8 of class κ % 8's box, whose rows start shift_c + lead(c)
// halves in. A lane's A fragment registers pair depth rows 2·(lane % 4)
// + 8h + 16·kk and the next, of classes 2·(lane % 4) and 2·(lane % 4) + 1
// for every kk and h, so each lane reads two boxes at two fixed offsets,
// with 2-byte loads. The depth terms of each 16-deep step are the aligned
// kernel's, in order, so every sum is the one it forms.
template <class Cfg, bool kLDepth, bool kRDepth, typename Out, class Epi, Tiles kTiles = Tiles::kPlain>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    product_wgmma(const __grid_constant__ CUtensorMap map_l, const __grid_constant__ CUtensorMap map_r,
                  const __grid_constant__ ShiftMaps<kTiles != Tiles::kPlain> maps_shift, Out* __restrict__ out,
                  Epi epi, int64_t rows, int64_t cols, int64_t depth, int group_rows) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool kLShift = kTiles == Tiles::kShiftL, kOutClass = kTiles == Tiles::kClassOut,
                 kClassL = kTiles == Tiles::kClassL, kDepthClassL = kTiles == Tiles::kDepthClassL,
                 kRegisterA = kClassL || kDepthClassL;  // A's fragments from registers
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, kStages = Cfg::kStages, kCluster = Cfg::kCluster;
  static_assert(tiles_serve<kTiles, kLDepth, kRDepth, Out, Epi>(), "tiles_serve says which products the tiles take");
  static_assert(kTiles == Tiles::kPlain || kClassL || kCluster == 1,
                "the class tiles and the shifting producer run without clusters");
  static_assert(!kClassL || (BM == 128 && BK == 64 && Cfg::kLBytes == WideSR::kLBytes), "L in row classes: WideSR's stages");
  static_assert(!kDepthClassL || (BM == 128 && BK == 64 && Cfg::kLBytes == WideDC::kLBytes && kCluster == 1),
                "the depth's row classes: WideDC's class boxes");
  constexpr int kClassRows = vkern_shift::kClasses * BM;  // output rows per block of class tiles
  constexpr int kConsumers = 2;
  // R's column sums (Epilogue::kColumnSums; linear_grad_w's db with
  // VKERN_GEMM_FUSED_DB=1), formed by the producer warpgroup's warps 1-3
  // from the stages: plain tiles of an MN-major R without clusters; 3 more
  // arrivals a stage's release. With the first row tile summing all of a
  // column tile's columns, one load in flight at a time, it was correct on
  // the H100 (docs/dw-bias-h100, call 1) but 3.7 times the product's time
  // at 16384x768x3072 (0.466 ms against 0.127): the summing row tile held
  // the grid back (plain loads, eight rows in flight, 0.516 ms: call 2,
  // branch dw-bias-fast). Now every row tile sums its share of the
  // columns, eight rows' loads in flight: correct, and still slower than
  // bias_grad's kernel after the product on an H200 (docs/
  // dw-bias-shares-h200: 0.228 ms against 0.163 at 16384x3072x768:bias=1,
  // the product alone 0.126), the summers setting the stages' pace.
  constexpr bool kSums = sums_columns<Cfg, kRDepth, Epi, kTiles>();
  constexpr int kSummers = kSums ? 3 : 0;
  static_assert(!kSums || BK == 64, "a stage's depth rows are one of bias_grad's blocks (oracle.BiasGradRowBlock)");
  extern __shared__ unsigned char smem_raw[];
  const uint32_t smem = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t epilogue0 = smem + kStages * Cfg::kStageBytes;  // staged epilogue buffers
  const uint32_t bias0 = epilogue0 + Cfg::kEpilogueBytes;         // consumer c's bias slice at bias0 + 2·BN·c
  const uint32_t full0 = bias0 + Cfg::kBiasBytes;                 // full[s] at full0 + 8s
  const uint32_t empty0 = full0 + kStages * 8;                // empty[s] at empty0 + 8s
  using Raw = vkern_shift::Raw<kLDepth>;
  const uint32_t raw0 = (empty0 + kStages * 8 + 127u) & ~127u;  // kLShift: raw slot r at raw0 + r·kSlotBytes
  const uint32_t raw_full0 = raw0 + Raw::kSlots * Raw::kSlotBytes;  // raw_full[r] at raw_full0 + 8r
  const uint32_t raw_empty0 = raw_full0 + 8 * Raw::kSlots;           // raw_empty[r] at raw_empty0 + 8r

  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full0 + 8 * s, kLShift ? 5 : 1);  // kLShift: R's expect_tx and the four producer warps
      mbar_init(empty0 + 8 * s, kConsumers * kCluster + kSummers);
    }
    if constexpr (kLShift) {
      for (int r = 0; r < Raw::kSlots; ++r) {
        mbar_init(raw_full0 + 8 * r, 1);
        mbar_init(raw_empty0 + 8 * r, 4);
      }
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if constexpr (kCluster > 1) {
    cluster_sync();
  } else {
    __syncthreads();
  }

  const uint32_t rank = kCluster > 1 ? cluster_rank() : 0;
  int64_t tiles_m, tiles_n;
  tile_grid<Cfg, kTiles>(rows, cols, &tiles_m, &tiles_n);
  const int64_t units_m = (tiles_m + kCluster - 1) / kCluster;
  const int64_t units = units_m * tiles_n;
  const int64_t first_unit = blockIdx.x / kCluster, unit_step = gridDim.x / kCluster;
  const int64_t steps = (depth + BK - 1) / BK;
  const int group = group_rows / kCluster > 0 ? group_rows / kCluster : 1;  // in units

  // The producer's copy of a depth step's R slice (rows or panels from p0,
  // columns from n0) into the stage at sr, its bytes completing full: this
  // block's 1/kCluster share, multicast to the cluster.
  auto copy_r = [&](uint32_t sr, uint32_t full, int32_t p0, int32_t n0) {
    if constexpr (kRDepth) {
      constexpr int kShare = BN / kCluster;  // rows of R per block
      const uint32_t dst = sr + rank * kShare * 128;
      if constexpr (kCluster > 1) {
        tma_load_multicast(dst, &map_r, full, p0, n0 + rank * kShare, (1u << kCluster) - 1);
      } else {
        tma_load(dst, &map_r, full, p0, n0);
      }
    } else {
      constexpr int kShare = BK / kCluster;  // depth rows per panel per block
#pragma unroll
      for (int b = 0; b < BN / 64; ++b) {
        const uint32_t dst = sr + b * 8192 + rank * kShare * 128;
        if constexpr (kCluster > 1) {
          tma_load_multicast(dst, &map_r, full, n0 + 64 * b, p0 + rank * kShare, (1u << kCluster) - 1);
        } else {
          tma_load(dst, &map_r, full, n0 + 64 * b, p0);
        }
      }
    }
  };

  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if constexpr (kLShift) {
      const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
      // Thread 0 copies item q's raw boxes (the block's q-th depth step,
      // tile u's step k) into raw slot q % kSlots.
      auto copy_raw = [&](int64_t u, int64_t k, int64_t q) {
        const int r = static_cast<int>(q % Raw::kSlots);
        mbar_wait(raw_empty0 + 8 * r, static_cast<uint32_t>((q / Raw::kSlots) & 1) ^ 1);
        mbar_expect_tx(raw_full0 + 8 * r, Raw::kSlotBytes);
        int64_t um, tn;
        unit_origin(u, units_m, tiles_n, group, &um, &tn);
        const int32_t m0 = static_cast<int32_t>(um * BM), p0 = static_cast<int32_t>(k * BK);
#pragma unroll
        for (int j = 0; j < vkern_shift::kClasses; ++j) {
          const uint32_t dst = raw0 + r * Raw::kSlotBytes + j * Raw::kClassBytes;
          if constexpr (kLDepth) {
            tma_load(dst, &maps_shift.map[j], raw_full0 + 8 * r, p0, m0 / vkern_shift::kClasses);
          } else {
            tma_load(dst, &maps_shift.map[j], raw_full0 + 8 * r, m0, p0 / vkern_shift::kClasses);
          }
        }
      };
      // Thread 0's cursor of copies, kSlots − 1 items ahead of the shifts.
      int64_t ahead_u = first_unit, ahead_k = 0, ahead_q = 0;
      auto copy_next = [&] {
        if (ahead_u >= units || steps == 0) return;
        copy_raw(ahead_u, ahead_k, ahead_q++);
        if (++ahead_k == steps) {
          ahead_k = 0;
          ahead_u += unit_step;
        }
      };
      if (threadIdx.x == 0) {
        for (int i = 0; i < Raw::kSlots - 1; ++i) copy_next();
      }
      int stage = 0;
      uint32_t phase = 0;
      int64_t q = 0;
      for (int64_t u = first_unit; u < units; u += unit_step) {
        int64_t um, tn;
        unit_origin(u, units_m, tiles_n, group, &um, &tn);
        const int32_t n0 = static_cast<int32_t>(tn * BN);
        for (int64_t k = 0; k < steps; ++k, ++q) {
          const uint32_t full = full0 + 8 * stage;
          const uint32_t sl = smem + stage * Cfg::kStageBytes, sr = sl + Cfg::kLBytes;
          if (threadIdx.x == 0) {
            // The raw boxes kSlots − 1 items on, then R's slice for this one.
            copy_next();
            const int32_t p0 = static_cast<int32_t>(k * BK);
            mbar_wait(empty0 + 8 * stage, phase ^ 1);
            mbar_expect_tx(full, Cfg::kRBytes);
            copy_r(sr, full, p0, n0);
          }
          const int r = static_cast<int>(q % Raw::kSlots);
          mbar_wait(raw_full0 + 8 * r, static_cast<uint32_t>((q / Raw::kSlots) & 1));
          mbar_wait(empty0 + 8 * stage, phase ^ 1);
          const uint32_t raw = raw0 + r * Raw::kSlotBytes;
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int j = 2 * warp + c;
            const int shift = maps_shift.shift[j];
#pragma unroll
            for (int round = 0; round < Raw::kRounds; ++round) {
              const vkern_shift::Unit t = vkern_shift::unit_of<kLDepth>(j, round, lane);
              const uint32_t from = raw + vkern_shift::raw_offset<kLDepth>(t);
              uint32_t a[4], b[4], v[4];
              lds128(from, a);
              lds128(from + 16, b);
              vkern_shift::shift_units(a, b, shift, v);
              sts128(sl + vkern_shift::tile_offset(t), v);
            }
          }
          fence_async_shared();  // the tile's units before wgmma reads them
          __syncwarp();
          if (lane == 0) {
            mbar_arrive(full);
            mbar_arrive(raw_empty0 + 8 * r);
          }
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    } else if (threadIdx.x == 0) {
      int stage = 0;
      uint32_t phase = 0;
      for (int64_t u = first_unit; u < units; u += unit_step) {
        int64_t um, tn;
        unit_origin(u, units_m, tiles_n, group, &um, &tn);
        int32_t m0 = static_cast<int32_t>((um * kCluster + rank) * BM);
        int32_t n0 = static_cast<int32_t>(tn * BN);
        const CUtensorMap* l_map = &map_l;
        if constexpr (kOutClass) {
          // Class um % 8: its rows from (um / 8)·128, R's from n0 − shift.
          const int c = static_cast<int>(um % vkern_shift::kClasses);
          l_map = &maps_shift.map[c];
          m0 = static_cast<int32_t>(um / vkern_shift::kClasses * BM);
          n0 -= maps_shift.shift[c];
        }
        for (int64_t k = 0; k < steps; ++k) {
          const int32_t p0 = static_cast<int32_t>(k * BK);
          const uint32_t full = full0 + 8 * stage;
          mbar_wait(empty0 + 8 * stage, phase ^ 1);
          mbar_expect_tx(full, Cfg::kStageBytes);
          const uint32_t sl = smem + stage * Cfg::kStageBytes, sr = sl + Cfg::kLBytes;
          if constexpr (kDepthClassL) {
            // Depth rows p0 + j, p0 + j + 8, …: 8 rows of class j from
            // class row p0 / 8, columns m0 − lead(j) … of the class's tensor.
            const int32_t class_row = p0 / vkern_shift::kClasses;
#pragma unroll
            for (int j = 0; j < vkern_shift::kClasses; ++j) {
              tma_load(sl + j * WideDC::kClassBoxBytes, &maps_shift.map[j], full, m0 - WideDC::lead(j), class_row);
            }
          } else if constexpr (kClassL) {
            // Rows m0 + j, m0 + j + 8, …: 16 rows of class j from class row
            // m0 / 8, columns p0 … p0 + 71 of the class's tensor.
#pragma unroll
            for (int j = 0; j < vkern_shift::kClasses; ++j) {
              tma_load(sl + j * WideSR::kClassBoxBytes, &maps_shift.map[j], full, p0, m0 / vkern_shift::kClasses);
            }
          } else if constexpr (kLDepth) {
            tma_load(sl, l_map, full, p0, m0);  // box 64 × 128
          } else {
            tma_load(sl, &map_l, full, m0, p0);  // two 64 × 64 panels
            tma_load(sl + 8192, &map_l, full, m0 + 64, p0);
          }
          copy_r(sr, full, p0, n0);
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    } else if constexpr (kSums) {
      if (threadIdx.x >= 32) {
        // R's column sums, each column tile's shared among its row tiles:
        // unit (um, tn) sums column pairs [um·share, (um + 1)·share) of
        // column tile tn, share = ⌈(BN/2) / units_m⌉, so that no unit
        // holds the grid back (where um = 0 summed them all, the product
        // took 3.7 times as long). Summer i (warps 1-3, i = threadIdx.x −
        // 32) takes the unit's pairs i and i + 96; pair c is the tile's
        // columns 2c and 2c + 1: panel c / 32, word c % 4 of 16-byte unit
        // (c % 32) / 4 of each depth row (depth row p of a panel is 128
        // bytes at p·128, unit x at x ^ (p % 8): TMA's 128-byte swizzle).
        // A stage (64 depth rows from a multiple of 64) is summed from −0
        // in ascending depth order, eight rows' words loaded at once
        // (lds32_rows), its sum added to the pair's total in stage order,
        // and db[j] = db[j] + total after the last: bias_grad's structure,
        // whose bound the oracle derives (BiasGradRowBlock). Every warp
        // waits for and releases every stage, so that the stages' phases
        // stay in step with the producer's.
        constexpr int kPairs = BN / 2, kSummerThreads = 96, kOwn = (kPairs + kSummerThreads - 1) / kSummerThreads;
        const int summer = threadIdx.x - 32, lane = threadIdx.x % 32;
        const int64_t share = (kPairs + units_m - 1) / units_m;
        int stage = 0;
        uint32_t phase = 0;
        for (int64_t u = first_unit; u < units; u += unit_step) {
          int64_t um, tn;
          unit_origin(u, units_m, tiles_n, group, &um, &tn);
          int pair[kOwn];  // the tile's pair c, or −1 where this thread sums none
#pragma unroll
          for (int i = 0; i < kOwn; ++i) {
            const int64_t offset = summer + int64_t{kSummerThreads} * i, c = um * share + offset;
            pair[i] = offset < share && c < kPairs ? static_cast<int>(c) : -1;
          }
          float total[kOwn][2];
#pragma unroll
          for (int i = 0; i < kOwn; ++i) total[i][0] = total[i][1] = -0.0f;
          for (int64_t k = 0; k < steps; ++k) {
            mbar_wait(full0 + 8 * stage, phase);
            const uint32_t sr = smem + stage * Cfg::kStageBytes + Cfg::kLBytes;
            const int live = depth - k * BK < BK ? static_cast<int>(depth - k * BK) : BK;
#pragma unroll
            for (int i = 0; i < kOwn; ++i) {
              const int c = pair[i];
              if (c < 0) continue;
              // Depth row p's word: unit0 + p·128 with unit x ^ (p % 8).
              const uint32_t unit0 = sr + (c / 32) * 8192 + (c % 4) * 4;
              const int x = c % 32 / 4;
              float lo = -0.0f, hi = -0.0f;
              if (live == BK) {
#pragma unroll 1
                for (int p0 = 0; p0 < BK; p0 += 8) {
                  uint32_t w[8];
                  lds32_rows(unit0 + p0 * 128 + (x << 4), w);
#pragma unroll
                  for (int j = 0; j < 8; ++j) {
                    lo = lo + vkern_rows::half_lo(w[j]);
                    hi = hi + vkern_rows::half_hi(w[j]);
                  }
                }
              } else {
                for (int p = 0; p < live; ++p) {
                  const uint32_t word = lds32(unit0 + p * 128 + ((x ^ (p % 8)) << 4));
                  lo = lo + vkern_rows::half_lo(word);
                  hi = hi + vkern_rows::half_hi(word);
                }
              }
              total[i][0] = total[i][0] + lo;
              total[i][1] = total[i][1] + hi;
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(empty0 + 8 * stage);
            if (++stage == kStages) {
              stage = 0;
              phase ^= 1;
            }
          }
          if (steps > 0) {
#pragma unroll
            for (int i = 0; i < kOwn; ++i) {
              if (pair[i] < 0) continue;
              const int64_t j = tn * BN + 2 * pair[i];
              if (j < cols) epi.column_sums[j] = epi.column_sums[j] + total[i][0];
              if (j + 1 < cols) epi.column_sums[j + 1] = epi.column_sums[j + 1] + total[i][1];
            }
          }
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int consumer = warpgroup - 1;
    const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
    const bool releaser = threadIdx.x % 128 == 0;
    // Descriptors of stage 0 at depth step 0; a stage adds kStageBytes and a
    // 16-deep step adds 32 bytes (K-major, inside the swizzle atom) or two
    // 8-row groups, 2048 bytes (MN-major).
    const uint64_t desc_l0 = smem_desc(smem + consumer * 8192, kLDepth ? 16 : 8192, 1024);
    const uint64_t desc_r0 = smem_desc(smem + Cfg::kLBytes, kRDepth ? 16 : 8192, 1024);
    constexpr uint32_t kLStep = kLDepth ? 32 : 2048, kRStep = kRDepth ? 32 : 2048;
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    int stage = 0;
    uint32_t phase = 0;
    const bool pairs_aligned = vkern_shift::rows_aligned(out, cols, sizeof(Out), 2 * sizeof(Out));
    const bool rows_aligned16 = vkern_shift::rows_aligned(out, cols, sizeof(Out), 16);
    // kClassL: this warp's class q and, in a stage, the offset of its first
    // fragment word: box q, row lane / 4, the word holding column shift_q +
    // 2·(lane % 4); an odd shift takes each pair from two words.
    uint32_t a_offset = 0, a_select = 0x3210u;
    if constexpr (kClassL) {
      const int q = 4 * consumer + warp, shift = maps_shift.shift[q];
      a_offset = q * WideSR::kClassBoxBytes + (lane / 4) * WideSR::kRawRowBytes + (shift + 2 * (lane % 4)) / 2 * 4;
      if (shift % 2 != 0) a_select = 0x5432u;
    }
    // kDepthClassL: in a stage, the offsets of this lane's column 64·consumer
    // + 16·warp + lane / 4 in the first row of class 2·(lane % 4)'s box
    // (a_offset: the fragment registers' low halves) and of the next
    // class's (a_offset_hi: their high halves).
    uint32_t a_offset_hi = 0;
    if constexpr (kDepthClassL) {
      const int t = lane % 4, column = 64 * consumer + 16 * warp + lane / 4;
      a_offset = 2 * t * WideDC::kClassBoxBytes + 2 * (column + maps_shift.shift[2 * t] + WideDC::lead(2 * t));
      a_offset_hi =
          (2 * t + 1) * WideDC::kClassBoxBytes + 2 * (column + maps_shift.shift[2 * t + 1] + WideDC::lead(2 * t + 1));
    }
    for (int64_t u = first_unit; u < units; u += unit_step) {
      int64_t um, tn;
      unit_origin(u, units_m, tiles_n, group, &um, &tn);
      // The tile's first output row and column, and the distance between
      // its rows (8 for class tiles).
      int64_t m0 = (um * kCluster + rank) * BM, n0 = tn * BN, step = 1;
      if constexpr (kOutClass) {
        const int c = static_cast<int>(um % vkern_shift::kClasses);
        m0 = um / vkern_shift::kClasses * kClassRows + c;
        n0 -= maps_shift.shift[c];
        step = vkern_shift::kClasses;
      }
      if constexpr (kClassL) step = vkern_shift::kClasses;
      // The warp's first output row (its rows are slab, slab + step, …) and
      // the tile's last row.
      const int64_t slab = kClassL ? m0 + 4 * consumer + warp : m0 + step * (64 * consumer + 16 * warp);
      const int64_t last_row = kClassL ? m0 + BM - 1 : m0 + step * (BM - 1);
      // The bias of two of the tile's columns, loaded now so that its
      // latency hides under the tile's products; the epilogue shares the
      // slice through shared memory.
      uint32_t bias_pair = 0;
      if constexpr (Epi::kBias) {
        const int t = threadIdx.x % 128;
        if (2 * t < BN) bias_pair = epi.bias_pair(n0 + 2 * t, cols);
      }
      // The GELU backward's pre for this warpgroup's 64 rows, into L2 under
      // the products (no-op for the other epilogues).
      epi.template prefetch_pre<64, BN>(m0 + 64 * consumer, n0, rows, cols, threadIdx.x % 128, 128);
      int prev = 0;
      // One depth step: wait for its stage, issue its products (kClassL,
      // kDepthClassL: after building A's fragments from the stage's raw
      // boxes into a, which no product in flight reads), then release the
      // stage before it once that one's products are done (kClassL,
      // kDepthClassL: and with them a_before, the fragments they read).
      auto depth_step = [&](int64_t k, uint32_t (&a)[BK / 16][4], uint32_t (&a_before)[BK / 16][4]) {
        mbar_wait(full0 + 8 * stage, phase);
        const uint64_t stage_off = static_cast<uint64_t>(stage * Cfg::kStageBytes) >> 4;
        if constexpr (kDepthClassL) {
          const uint32_t boxes = smem + stage * Cfg::kStageBytes;
#pragma unroll
          for (int kk = 0; kk < BK / 16; ++kk) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              // Fragment register i: column lane / 4 + 8·(i % 2) of the
              // warp's 16, depth rows 16·kk + 8·(i / 2) + 2·(lane % 4) and
              // the next (the low half the first): row 2·kk + i / 2 of
              // their classes' boxes.
              const uint32_t at = boxes + (2 * kk + i / 2) * WideDC::kRawRowBytes + (i % 2) * 16;
              uint16_t lo, hi;
              asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(lo) : "r"(at + a_offset));
              asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(hi) : "r"(at + a_offset_hi));
              a[kk][i] = static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
            }
          }
        } else if constexpr (kClassL) {
          const uint32_t box = smem + stage * Cfg::kStageBytes + a_offset;
#pragma unroll
          for (int kk = 0; kk < BK / 16; ++kk) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              // Fragment register i: row lane / 4 + 8·(i % 2), depth
              // 16·kk + 2·(lane % 4) + 8·(i / 2) and the next.
              const uint32_t at = box + (i % 2) * 8 * WideSR::kRawRowBytes + 32 * kk + 16 * (i / 2);
              uint32_t w0, w1;
              asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(w0) : "r"(at));
              asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(w1) : "r"(at + 4));
              a[kk][i] = __byte_perm(w0, w1, a_select);
            }
          }
        }
        fence_registers(acc);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
          if constexpr (kRegisterA) {
            vkern_wgmma::wgmma_m64n256k16_rs<kRDepth ? 0 : 1>(acc, a[kk], desc_r0 + stage_off + (kk * kRStep >> 4),
                                                               k > 0 || kk > 0);
          } else {
            wgmma<BN, kLDepth ? 0 : 1, kRDepth ? 0 : 1>(acc, desc_l0 + stage_off + (kk * kLStep >> 4),
                                                        desc_r0 + stage_off + (kk * kRStep >> 4), k > 0 || kk > 0);
          }
        }
        wgmma_commit();
        wgmma_wait<1>();  // the previous step's products are done: release its stage
        fence_registers(acc);
        if constexpr (kRegisterA) fence_registers(a_before);
        if (k > 0 && releaser) {
#pragma unroll
          for (int c = 0; c < kCluster; ++c) {
            if constexpr (kCluster > 1) {
              mbar_arrive_cluster(empty0 + 8 * prev, c);
            } else {
              mbar_arrive(empty0 + 8 * prev);
            }
          }
        }
        prev = stage;
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      };
      // kClassL, kDepthClassL: two sets of fragments in turn, so that a
      // step's loads never overwrite the registers of the step still in
      // flight.
      uint32_t a0[BK / 16][4] = {}, a1[BK / 16][4] = {};
      int64_t k = 0;
      if constexpr (kRegisterA) {
        for (; k + 1 < steps; k += 2) {
          depth_step(k, a0, a1);
          depth_step(k + 1, a1, a0);
        }
      }
      for (; k < steps; ++k) depth_step(k, a0, a1);
      wgmma_wait<0>();
      if constexpr (kRegisterA) {
        fence_registers(a0);
        fence_registers(a1);
      }
      fence_registers(acc);
      if (releaser) {
#pragma unroll
        for (int c = 0; c < kCluster; ++c) {
          if constexpr (kCluster > 1) {
            mbar_arrive_cluster(empty0 + 8 * prev, c);
          } else {
            mbar_arrive(empty0 + 8 * prev);
          }
        }
      }

      // Epilogue.
      const int64_t row = slab + step * (lane / 4);
      const int64_t col = n0 + 2 * (lane % 4);
      if (m0 >= rows) continue;  // the second tile of a cluster past the last row
      // The epilogue's additions (epilogue.cuh), in the accumulators, before
      // any store: acc[4j + e] is element (row + 8·(e/2), col + 8j + e%2).
      // Their loads are issued together, not one element at a time: the
      // bias from the consumer's slice in shared memory, the old values
      // of an output added into in chunks of 32 a thread.
      if constexpr (Epi::kBias) {
        unsigned char* const slice = smem_raw + (bias0 - smem_u32(smem_raw)) + consumer * BN * 2;
        named_barrier(1 + consumer);  // every thread is done with the previous tile's slice
        const int t = threadIdx.x % 128;
        if (2 * t < BN) *reinterpret_cast<uint32_t*>(slice + 4 * t) = bias_pair;
        named_barrier(1 + consumer);
        const __half2* const pairs = reinterpret_cast<const __half2*>(slice);
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          const float2 b = __half22float2(pairs[(8 * j + 2 * (lane % 4)) / 2]);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            acc[4 * j + 2 * h] = acc[4 * j + 2 * h] + b.x;
            acc[4 * j + 2 * h + 1] = acc[4 * j + 2 * h + 1] + b.y;
          }
        }
      }
      if constexpr (Epi::kAccumulate) {
        static_assert(sizeof(Out) == sizeof(float), "only f32 outputs are added into");
        constexpr int kChunkJ = 8;
#pragma unroll
        for (int j0 = 0; j0 < BN / 8; j0 += kChunkJ) {
          float old[4 * kChunkJ];
#pragma unroll
          for (int jj = 0; jj < kChunkJ; ++jj) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int64_t r = row + 8 * step * (e >> 1), c = col + 8 * (j0 + jj) + (e & 1);
              old[4 * jj + e] = r < rows && c < cols ? out[r * cols + c] : 0.0f;
            }
          }
#pragma unroll
          for (int i = 0; i < 4 * kChunkJ; ++i) acc[4 * j0 + i] = old[i] + acc[4 * j0 + i];
        }
      }
      // The residual and GELU steps: on the rows read back from shared
      // memory where the staged epilogue runs (quad: 8-byte accesses of the
      // residual and pre along a row, a few registers at a time), else here
      // on the fragments in pairs.
      const bool interior = last_row < rows && n0 >= 0 && n0 + BN <= cols;
      constexpr bool kQuads = sizeof(Out) == 2 && (Epi::kResidual || Epi::kGelu != vkern_epilogue::kNoGelu);
      const bool staged =
          Cfg::kStagedEpilogue && interior && (rows_aligned16 || kOutClass) && (!kQuads || epi.quads_aligned());
      if constexpr (Epi::kResidual) {
        if (!staged) {
          // The residual's elements, in pairs, 32 a thread at a time.
          const bool paired = cols % 2 == 0 && (reinterpret_cast<uintptr_t>(epi.residual) & 3) == 0;
          constexpr int kChunkJ = 8;
#pragma unroll
          for (int j0 = 0; j0 < BN / 8; j0 += kChunkJ) {
            float2 r[2 * kChunkJ];
#pragma unroll
            for (int jj = 0; jj < kChunkJ; ++jj) {
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                r[2 * jj + h] = epi.residual_pair(row + 8 * step * h, col + 8 * (j0 + jj), rows, cols, paired);
              }
            }
#pragma unroll
            for (int jj = 0; jj < kChunkJ; ++jj) {
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                acc[4 * (j0 + jj) + 2 * h] = acc[4 * (j0 + jj) + 2 * h] + r[2 * jj + h].x;
                acc[4 * (j0 + jj) + 2 * h + 1] = acc[4 * (j0 + jj) + 2 * h + 1] + r[2 * jj + h].y;
              }
            }
          }
        }
      }
      if constexpr (Epi::kGelu != vkern_epilogue::kNoGelu) {
        if (!staged) {
          // The GELU step, a pair of columns at a time: pre's pair written
          // (forward) or read (backward) in one 4-byte access where aligned.
          const bool paired = cols % 2 == 0 && (reinterpret_cast<uintptr_t>(epi.pre) & 3) == 0;
#pragma unroll
          for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int64_t r = row + 8 * step * h;
              if (r < rows) epi.gelu_pair(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1], r, col + 8 * j, cols, paired);
            }
          }
        }
      }
      unsigned char* const buf = smem_raw + (epilogue0 - smem_u32(smem_raw)) + (4 * consumer + warp) * 2048;
      if (kQuads && staged) {
        // As the staged store below, but through f32 rows (chunks of 32
        // columns, the f32 output's layout): each lane reads four
        // consecutive elements of a row, applies the residual or GELU step
        // to them (quad), and stores them as four f16 in one 8-byte store.
        // The side operand's quads of chunk c + 1 are loaded while chunk c
        // is staged and stored.
        auto quad_at = [&](int c, int it) {
          return (slab + step * (4 * it + lane / 8)) * cols + n0 + c * 32 + (lane % 8) * 4;
        };
        uint2 side[4], next[4] = {};
#pragma unroll
        for (int it = 0; it < 4; ++it) side[it] = Epi::kSideIn ? epi.side(quad_at(0, it)) : make_uint2(0u, 0u);
#pragma unroll
        for (int c = 0; c < BN / 32; ++c) {
          if (Epi::kSideIn && c + 1 < BN / 32) {
#pragma unroll
            for (int it = 0; it < 4; ++it) next[it] = epi.side(quad_at(c + 1, it));
          }
          stage_chunk<false>(buf, acc, c, lane);
          __syncwarp();
#pragma unroll
          for (int it = 0; it < 4; ++it) {
            const float4 q = *reinterpret_cast<const float4*>(buf + staged_unit<false>(4 * it + lane / 8, lane));
            float v[4] = {q.x, q.y, q.z, q.w};
            const int64_t at = quad_at(c, it);
            epi.quad(v, side[it], at);
            const __half2 lo = __floats2half2_rn(v[0], v[1]), hi = __floats2half2_rn(v[2], v[3]);
            *reinterpret_cast<uint2*>(out + at) =
                make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
          }
          __syncwarp();
#pragma unroll
          for (int it = 0; it < 4; ++it) side[it] = next[it];
        }
      } else if (staged) {
        // Through this warp's 16 × 128-byte buffer, one chunk of 128 bytes
        // per row at a time (stage_chunk), then each row goes out as 8
        // lanes × 16 bytes.
        constexpr bool kHalf = sizeof(Out) == 2;
        constexpr int kChunkCols = kHalf ? 64 : 32;
#pragma unroll
        for (int c = 0; c < BN / kChunkCols; ++c) {
          stage_chunk<kHalf>(buf, acc, c, lane);
          __syncwarp();
#pragma unroll
          for (int it = 0; it < 4; ++it) {
            const int r = 4 * it + lane / 8;
            const uint4 v = *reinterpret_cast<const uint4*>(buf + staged_unit<kHalf>(r, lane));
            Out* const dst = out + (slab + step * r) * cols + n0 + c * kChunkCols + (lane % 8) * (kChunkCols / 8);
            *reinterpret_cast<uint4*>(dst) = v;
          }
          __syncwarp();
        }
      } else if (sizeof(Out) == 2 && Cfg::kStagedEpilogue && interior && !kOutClass && !kClassL) {
        // f16 rows that do not start 16-byte aligned (or whose side
        // operand's do not, which kept the staged path above off): the
        // fragments staged as there, then out through store_chunk_any
        // (staged_store.cuh).
#pragma unroll
        for (int c = 0; c < BN / 64; ++c) {
          stage_chunk<true>(buf, acc, c, lane);
          __syncwarp();
          vkern_staged::store_chunk_any(buf, reinterpret_cast<uint16_t*>(out + slab * cols + n0 + c * 64), cols, lane);
          __syncwarp();
        }
      } else if (pairs_aligned && interior) {
        Out* p = out + row * cols + col;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          store_pair(p + 8 * j, acc[4 * j], acc[4 * j + 1]);
          store_pair(p + 8 * step * cols + 8 * j, acc[4 * j + 2], acc[4 * j + 3]);
        }
      } else {
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          const int64_t c = col + 8 * j;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int64_t r = row + 8 * step * h;
            if (r >= rows) continue;
            Out* p = out + r * cols + c;
            if (c >= 0 && c < cols) store_one(p, acc[4 * j + 2 * h]);
            if (c + 1 >= 0 && c + 1 < cols) store_one(p + 1, acc[4 * j + 2 * h + 1]);
          }
        }
      }
    }
  }
  if constexpr (kCluster > 1) {
    // No block may leave while a peer can still multicast into its shared
    // memory or arrive on its barriers.
    cluster_sync();
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // the host launches this only when the sm_90a body is loaded (available())
#endif
}

// ---------------------------------------------------------------------------
// Host side.

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's cuTensorMapEncodeTiled, or nullptr when the driver has none.
EncodeTiled encode_tiled() {
  static const EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found);
#else
    const cudaError_t err = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &found);
#endif
    if (err != cudaSuccess || found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      p = nullptr;
    }
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

// available: compute capability 9.0, the sm_90a bodies loaded
// (wgmma.cuh's sm90a_loaded, read once per device), and a driver that
// encodes tensor maps.
bool available(int device, int cc_major, int cc_minor) {
  return cc_major == 9 && cc_minor == 0 && vkern_wgmma::sm90a_loaded(device) && encode_tiled() != nullptr;
}

// A 2-D f16 tensor map: `inner` contiguous elements per row, `outer` rows
// `ld` elements apart, boxes of box_inner × box_outer with the 128-byte
// swizzle (or none: swizzle false), zero fill outside, each L2 miss a box
// row makes promoted to l2 (256 B unless said). Cached per (pointer,
// shape, box, swizzle, promotion, device): the kernel server runs one
// request at a time, so the cache needs no lock.
bool tensor_map(CUtensorMap* map, int device, const __half* base, int64_t inner, int64_t outer, int64_t ld,
                uint32_t box_inner, uint32_t box_outer, bool swizzle = true,
                CUtensorMapL2promotion l2 = CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
  struct Entry {
    const void* base;
    int64_t inner, outer, ld;
    uint32_t box_inner, box_outer;
    bool swizzle;
    CUtensorMapL2promotion l2;
    int device;
    CUtensorMap map;
  };
  constexpr int kEntries = 32;  // a shifting or class-tile launch takes 9
  static Entry cache[kEntries];
  static int used = 0, next = 0;
  for (int i = 0; i < used; ++i) {
    const Entry& e = cache[i];
    if (e.base == base && e.inner == inner && e.outer == outer && e.ld == ld && e.box_inner == box_inner &&
        e.box_outer == box_outer && e.swizzle == swizzle && e.l2 == l2 && e.device == device) {
      *map = e.map;
      return true;
    }
  }
  const EncodeTiled encode = encode_tiled();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(outer)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * 2};
  const cuuint32_t box[2] = {box_inner, box_outer};
  const cuuint32_t elem_strides[2] = {1, 1};
  CUtensorMap m;
  if (encode(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, const_cast<__half*>(base), dims, strides, box, elem_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
             l2,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
    return false;
  }
  Entry& e = cache[used < kEntries ? used++ : next++ % kEntries];
  e = Entry{base, inner, outer, ld, box_inner, box_outer, swizzle, l2, device, m};
  *map = m;
  return true;
}

// The L2 promotion of the raw boxes' maps (kShiftL, kClassL, kDepthClassL):
// none. Their rows, 8·ld halves apart and 8 (kDepthClassL: 56) halves
// wider than the tile, start anywhere in a 256-byte block. With every map
// promoting each miss to 256 B, the head's dx (16384×768×50257) read 4.1
// GB from DRAM for its 1.65 GB L, against 2.2 GB for the aligned product,
// and took 2.16–2.20 ms; with none on these maps, 1.86–1.87 ms. Turning
// off R's promotion instead measured about the same in the lab; the
// aligned products keep theirs (docs/lm-head-dx-h100, calls 2 and 3).
constexpr CUtensorMapL2promotion kRawBoxPromotion = CU_TENSOR_MAP_L2_PROMOTION_NONE;

// class_maps makes the tensors of L's row classes (row_shift.cuh): class
// j of its `stored` rows, `inner` halves of each read, in boxes of
// box_inner × box_outer (swizzled or raw), and the class's shift. Raw
// boxes get kRawBoxPromotion, swizzled ones the maps' usual 256 B. False
// when L has fewer rows than classes or a map cannot be made.
bool class_maps(ClassMaps* maps, int device, const __half* L, int64_t ldl, int64_t stored, int64_t inner,
                uint32_t box_inner, uint32_t box_outer, bool swizzle) {
  const CUtensorMapL2promotion l2 = swizzle ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B : kRawBoxPromotion;
  if (stored < vkern_shift::kClasses) return false;
  for (int j = 0; j < vkern_shift::kClasses; ++j) {
    const vkern_shift::Class c = vkern_shift::class_of(reinterpret_cast<uintptr_t>(L), ldl, stored, inner, j);
    if (!tensor_map(&maps->map[j], device, reinterpret_cast<const __half*>(c.base), c.inner, c.rows, c.row_stride / 2,
                    box_inner, box_outer, swizzle, l2)) {
      return false;
    }
    maps->shift[j] = c.shift;
  }
  return true;
}

// shift_chosen says whether the server's environment sets
// VKERN_GEMM_SHIFT=1, which lets gemm.cuh send an unaligned L to the
// shifting producer (slower than the padded copy so far: docs/row-shift-h100).
bool shift_chosen() {
  static const bool chosen = vkern_env::on_off("VKERN_GEMM_SHIFT", false);
  return chosen;
}

// bn192_chosen is false where the server's environment sets
// VKERN_GEMM_BN192=0, which keeps WideS where bn192_pays would choose
// WideS192, to time one against the other.
bool bn192_chosen() {
  static const bool chosen = vkern_env::on_off("VKERN_GEMM_BN192", true);
  return chosen;
}

// depth_classes_chosen is false where the server's environment sets
// VKERN_GEMM_DEPTH_CLASSES=0, which sends an unaligned MN-major L to the
// padded copy rather than kDepthClassL (WideDC), to time one against the
// other.
bool depth_classes_chosen() {
  static const bool chosen = vkern_env::on_off("VKERN_GEMM_DEPTH_CLASSES", true);
  return chosen;
}

// launch runs variant Cfg with the tiles kTiles (see product_wgmma): the
// shifting producer and L's row classes take any ld and base of L and at
// least 8 stored rows, class tiles at least 8 rows, the depth's row
// classes at least 8 depth rows. *launched is false (and nothing is
// enqueued) when a tensor map cannot be made; the caller then takes
// another path.
template <class Cfg, bool kLDepth, bool kRDepth, typename Out, class Epi, Tiles kTiles = Tiles::kPlain>
cudaError_t launch(int device, int multiprocessors, const __half* L, int64_t ldl, const __half* R, int64_t ldr,
                   Out* out, const Epi& epi, int64_t rows, int64_t cols, int64_t depth, cudaStream_t s,
                   bool* launched) {
  *launched = false;
  constexpr int64_t kMaxDim = INT32_MAX - 256;  // int32 box coordinates, a box past the edge included
  if (rows > kMaxDim || cols > kMaxDim || depth > kMaxDim) return cudaSuccess;
  constexpr bool kLShift = kTiles == Tiles::kShiftL, kOutClass = kTiles == Tiles::kClassOut,
                 kDepthClassL = kTiles == Tiles::kDepthClassL;
  CUtensorMap map_l = {}, map_r;
  ShiftMaps<kTiles != Tiles::kPlain> maps_shift;
  bool maps = tensor_map(&map_r, device, R, kRDepth ? depth : cols, kRDepth ? cols : depth, ldr, 64,
                         kRDepth ? Cfg::BN / Cfg::kCluster : 64 / Cfg::kCluster);
  if constexpr (kDepthClassL) {
    maps = maps && class_maps(&maps_shift, device, L, ldl, depth, rows, Cfg::kRawRowBytes / 2, Cfg::kBoxRows, false);
  } else if constexpr (kLShift) {
    using Raw = vkern_shift::Raw<kLDepth>;
    maps = maps && class_maps(&maps_shift, device, L, ldl, kLDepth ? rows : depth, kLDepth ? depth : rows, Raw::kWidth,
                              Raw::kRows, false);
  } else if constexpr (kTiles == Tiles::kClassL) {
    maps = maps && class_maps(&maps_shift, device, L, ldl, rows, depth, Cfg::kRawRowBytes / 2, Cfg::kBoxRows, false);
  } else if constexpr (kOutClass) {
    // L's rows are aligned, so its classes start where their rows do (shift
    // 0), read as the plain tiles read L; the shifts are the output's.
    maps = maps && class_maps(&maps_shift, device, L, ldl, rows, depth, 64, 128, true);
    for (int c = 0; c < vkern_shift::kClasses; ++c) {
      maps_shift.shift[c] = vkern_shift::class_of(reinterpret_cast<uintptr_t>(out), cols, rows, cols, c).shift;
    }
  } else {
    maps = maps && tensor_map(&map_l, device, L, kLDepth ? depth : rows, kLDepth ? rows : depth, ldl, 64,
                              kLDepth ? 128 : 64);
  }
  if (!maps) return cudaSuccess;

  auto kernel = product_wgmma<Cfg, kLDepth, kRDepth, Out, Epi, kTiles>;
  constexpr int kSmemBytes = Cfg::kSmemBytes + (kLShift ? shift_bytes<kLDepth>() : 0);
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
  constexpr int kMaxDevices = 64;
  static int max_clusters[kMaxDevices];  // per device: 0 unknown
  if (device < 0 || device >= kMaxDevices) return cudaSuccess;
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = Cfg::kCluster;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.blockDim = dim3(Cfg::kThreads);
  config.dynamicSmemBytes = kSmemBytes;
  config.stream = s;
  config.attrs = attribute;
  config.numAttrs = Cfg::kCluster > 1 ? 1 : 0;
  if (max_clusters[device] == 0) {
    cudaError_t err = cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (err != cudaSuccess) return err;
    // One block per multiprocessor (the shared memory allows no more); with
    // clusters, as many as can be resident at once, which a multiprocessor
    // count that is odd per GPC can make fewer than multiprocessors / 2.
    int n = multiprocessors;
    if (Cfg::kCluster > 1) {
      config.gridDim = dim3(multiprocessors / Cfg::kCluster * Cfg::kCluster);
      err = cudaOccupancyMaxActiveClusters(&n, kernel, &config);
      if (err != cudaSuccess || n < 1) {
        (void)cudaGetLastError();
        n = multiprocessors / Cfg::kCluster;
      }
    }
    max_clusters[device] = n;
#if defined(VKERN_GEMM_TUNING)
    fprintf(stderr, "sm90 variant BN=%d stages=%d cluster=%d: %d clusters resident\n", Cfg::BN, Cfg::kStages,
            Cfg::kCluster, n);
#endif
  }
  int64_t tiles_m, tiles_n;
  tile_grid<Cfg, kTiles>(rows, cols, &tiles_m, &tiles_n);
  const int64_t units = (tiles_m + Cfg::kCluster - 1) / Cfg::kCluster * tiles_n;
  int64_t resident = max_clusters[device];
  if (vkern_occupancy::g_lent_multiprocessors > 0) {
    // Leave the collectives' multiprocessors free (occupancy.h).
    resident -= (vkern_occupancy::g_lent_multiprocessors + Cfg::kCluster - 1) / Cfg::kCluster;
    if (resident < 1) resident = 1;
  }
  int64_t clusters = units < resident ? units : resident;
  if (const int per = vkern_occupancy::g_units_per_cluster; per > 0) {
    // Collectives may hold multiprocessors: small shares, handed out by
    // the hardware as multiprocessors come free (occupancy.h).
    const int64_t wide = (units + per - 1) / per;
    if (wide > clusters) clusters = wide < (INT32_MAX / Cfg::kCluster) ? wide : INT32_MAX / Cfg::kCluster;
  }
  config.gridDim = dim3(static_cast<unsigned>(clusters * Cfg::kCluster));
  int group_rows = kGroupRows;
#if defined(VKERN_GEMM_TUNING)
  if (vk_gemm_tuning_sm90_group > 0) group_rows = vk_gemm_tuning_sm90_group;
#endif
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, map_l, map_r, maps_shift, out, epi, rows, cols, depth, group_rows);
  if (err != cudaSuccess) return err;
  *launched = true;
  if constexpr (sums_columns<Cfg, kRDepth, Epi, kTiles>()) {
    if (epi.summed != nullptr) *epi.summed = true;
  }
  return cudaSuccess;
}

}  // namespace vkern_gemm_sm90
}  // namespace

#endif  // VKERN_PTX_MMA
