// The matmul family's product on the GPU, for gemm, gemm_grad_a and
// gemm_grad_b (gemm.cu), linear and linear_nt (linear.cu, linear_nt.cu),
// linear_grad_w and linear_grad_x (linear_grad.cu): f16 operands, f32
// accumulation on tensor cores.
//
// The ops are one product, Out (rows × cols) = L (rows × depth) · R (depth × cols),
// with each operand read in the layout it is stored in, and an epilogue
// (epilogue.cuh) for the last three:
//
//   op             L                    R                    depth  Out             epilogue
//   gemm           A   (depth-contig)   B   (col-contig)     K      C  f32 M×N
//   gemm_grad_a    dC  (depth-contig)   Bᵀ  (depth-contig)   N      dA f16 M×K
//   gemm_grad_b    Aᵀ  (row-contig)     dC  (col-contig)     M      dB f16 K×N
//   linear         x   (depth-contig)   W   (col-contig)     K      y  f16 M×N      + b[col] (bias = 1)
//   linear_nt      x   (depth-contig)   Wᵀ  (depth-contig)   K      y  f16 M×N      + b[col] (bias = 1)
//   linear_grad_w  xᵀ  (row-contig)     dy  (col-contig)     M      dW f32 K×N      dW_old + (accumulate = 1)
//
// "depth-contig" means consecutive reduction terms are adjacent in memory.
// Shared memory keeps each tile in its global layout; ldmatrix reads the
// depth-contiguous tiles and ldmatrix.trans the others, so no operand is ever
// transposed in memory.
//
// Launch shape (tensor-core path): a 1-D grid, one block per BM × BN output
// tile, tiles visited in groups of kGroupRows tile rows so that neighbouring
// blocks share operand panels in L2. Each block has WARPS_M × WARPS_N warps;
// a warp owns a (BM/WARPS_M) × (BN/WARPS_N) sub-tile of f32 accumulators in
// registers and issues mma.sync.m16n8k16 (f16 × f16 + f32). The depth is
// walked in BK steps through a STAGES-deep ring of shared-memory tiles filled
// by cp.async (16-byte copies, zero-filled past the matrix edge), so the
// loads of later steps overlap the products of the current one. Tile rows are
// padded by 16 bytes, which makes both ldmatrix and the 16-byte copies free
// of bank conflicts.
//
// Facts relied on:
// - An f16·f16 product is exact in f32, and the tensor cores add in f32 (with
//   truncation, which the oracle's bound u = 2⁻²³ covers). Integer inputs whose
//   partial sums stay below 2²⁴ give exact results.
// - Tiles are zero-filled past the last row, column and reduction term. The
//   padded terms multiply zero by zero, so they add +0 and Inf/NaN inputs
//   propagate as in the plain loop; padded rows and columns feed only
//   accumulators that are never stored. (The IEEE behaviour of the MMA on
//   Inf/NaN operands is checked on the device by the test harness.)
// - 16-byte copies need 16-byte-aligned global addresses: that holds for every
//   tile chunk when an operand's row length is a multiple of 8 elements and
//   its base is 16-byte aligned. An operand that is not (odd K, say) is
//   copied once into scratch with padded rows when the product is large
//   (pad_rows; see product_tensor_cores), or else read in place by the same
//   kernel instantiated with a staged element-wise loader (kAligned = false):
//   2-byte loads into registers, issued before a step's products and written
//   to shared memory after them.
// - A block whose tile lies inside the output, on a step inside the depth,
//   copies without any bounds arithmetic (copy_async_full).
// - Every element index is int64_t; tile indices are int64_t too.
// - Each output element is written exactly once, from its f32 accumulator
//   after the epilogue's additions in registers; an f16 output is rounded
//   once (__float2half_rn: nearest-even, overflow to ±Inf). The epilogue is
//   part of every kernel's own store phase: no pass over the output of its
//   own.
//
// HIP: the tensor-core path is inline PTX and is compiled only under CUDA
// (VKERN_PTX_MMA, compat.h). Under HIP, and on CUDA devices older than
// compute capability 8.0, product_simt runs instead: 64 × 64 tiles through
// shared memory, a 4 × 4 block of outputs per thread, f32 FMAs (the products
// are exact, so FMA and multiply-then-add agree). Defining
// VKERN_GEMM_PORTABLE forces that path on CUDA too, so it can be tested there.
//
// Compute capability 9.0 with the sm_90a body loaded: aligned (or padded)
// operands go to the TMA + wgmma kernels of gemm_sm90.cu instead
// (choose_sm90 below), large products with unaligned f16 output rows in
// class tiles (sm90_tiles_ran); the mma.sync kernels serve every other
// device, and unaligned operands of products too small to pad.
//
// Measured on an H100, mma.sync path (nvcc 13.0, timed interleaved with
// torch.mm in one process): 295-315 TFLOP/s at 4096³ (0.44-0.50 of cuBLAS),
// 288-302 at 8192³ and 8192×4096×11008 (0.39-0.41); 4097×4099×4101 (padded
// path) 207-224, 1.6× torch.mm there. The Hopper path: 1.00-1.12 of
// cublasGemmEx at 4096³, 8192³ and 8192×4096×11008, 1.4-1.5 at 1024³
// (gemm_sm90.cu has the figures).
//
// Tuning hook (tests only): built with VKERN_GEMM_TUNING, the global
// vk_gemm_tuning_config picks the tile configuration (the ids listed at
// choose_config) for every shape; -1 keeps the normal choice.
#ifndef VKERN_CUDA_GEMM_CUH
#define VKERN_CUDA_GEMM_CUH

#include <cstdint>

#include "core/backend.h"
#include "cuda/capture.h"
#include "cuda/compat.h"
#include "cuda/epilogue.cuh"
#include "cuda/mma.cuh"
#include "cuda/gemm_sm90.cu"  // its wgmma kernels, which only product launches
#include "cuda/ops.cuh"
#include "cuda/rows.cuh"

#if defined(VKERN_GEMM_TUNING)
extern int vk_gemm_tuning_config;  // defined in gemm.cu
extern int vk_gemm_tuning_sm90;    // -1 the normal choice, 0 never wgmma, else a choose_sm90 id
#endif

namespace {
namespace vkern_gemm {

using vkern_epilogue::NoEpilogue;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

__device__ __forceinline__ void store_one(float* out, int64_t index, float v) { out[index] = v; }
__device__ __forceinline__ void store_one(__half* out, int64_t index, float v) { out[index] = __float2half_rn(v); }

// ---------------------------------------------------------------------------
// Tensor-core path.
#if defined(VKERN_PTX_MMA)

#if defined(VKERN_GEMM_PORTABLE)
constexpr bool kForcePortable = true;
#else
constexpr bool kForcePortable = false;
#endif

constexpr int kGroupRows = 8;  // tile rows per L2 group of the grid order
constexpr int kPad = 8;        // halves of padding per shared-memory tile row (16 bytes)

// Device facts the dispatcher needs, read once per device.
struct DeviceInfo {
  int multiprocessors;
  int cc_major;
  int cc_minor;
};

cudaError_t device_info(DeviceInfo* info, int* device_out) {
  constexpr int kMaxDevices = 64;
  static DeviceInfo cache[kMaxDevices];
  static bool known[kMaxDevices];
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device < 0 || device >= kMaxDevices) return cudaErrorInvalidValue;
  if (!known[device]) {
    DeviceInfo d{};
    err = cudaDeviceGetAttribute(&d.multiprocessors, cudaDevAttrMultiProcessorCount, device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&d.cc_minor, cudaDevAttrComputeCapabilityMinor, device);
    if (err != cudaSuccess) return err;
    cache[device] = d;
    known[device] = true;
  }
  *info = cache[device];
  *device_out = device;
  return cudaSuccess;
}

// Stores two horizontally adjacent outputs (row, col) and (row, col + 1),
// col even, the second only if col + 1 < cols. pairs_aligned says that cols
// is even and out is aligned to a pair, so every pair is one vector store.
__device__ __forceinline__ void store_pair(float* out, int64_t row, int64_t col, int64_t cols, bool pairs_aligned,
                                           float v0, float v1) {
  float* p = out + row * cols + col;
  if (pairs_aligned) {
    *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
    return;
  }
  p[0] = v0;
  if (col + 1 < cols) p[1] = v1;
}

__device__ __forceinline__ void store_pair(__half* out, int64_t row, int64_t col, int64_t cols, bool pairs_aligned,
                                           float v0, float v1) {
  __half* p = out + row * cols + col;
  if (pairs_aligned) {
    *reinterpret_cast<__half2*>(p) = __floats2half2_rn(v0, v1);
    return;
  }
  p[0] = __float2half_rn(v0);
  if (col + 1 < cols) p[1] = __float2half_rn(v1);
}

template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int STAGES_, int MIN_BLOCKS_>
struct TileConfig {
  static constexpr int BM = BM_, BN = BN_, BK = BK_;
  static constexpr int kWarpsM = WARPS_M_, kWarpsN = WARPS_N_;
  static constexpr int kStages = STAGES_, kMinBlocks = MIN_BLOCKS_;
  static constexpr int kThreads = 32 * WARPS_M_ * WARPS_N_;
  static constexpr int kWarpM = BM_ / WARPS_M_, kWarpN = BN_ / WARPS_N_;
  static constexpr int kMmaM = kWarpM / 16, kMmaN = kWarpN / 8;
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0 && BK_ % 16 == 0, "warp tile must be whole m16n16k16 steps");
  static_assert(kWarpsM * kWarpM == BM_ && kWarpsN * kWarpN == BN_, "warps must tile the block tile");
};

// The configurations, with gemm 4096³ TFLOP/s on an H100 (the aligned loader
// as it is now; the ones marked * were measured with an earlier loader that
// computed bounds on every step, about 5-10% slower across the board).
// The dispatcher uses LargeK64, Medium and Small (choose_config).
using ConfigLarge = TileConfig<128, 256, 32, 2, 4, 4, 1>;      // 8 warps of 64×64: 279
using ConfigMedium = TileConfig<128, 128, 32, 2, 2, 4, 2>;     // 4 warps of 64×64: 289
using ConfigSmall = TileConfig<64, 64, 32, 2, 2, 4, 4>;        // 4 warps of 32×32: 162*, for small grids
using ConfigMedium8 = TileConfig<128, 128, 32, 2, 4, 4, 2>;    // 8 warps of 64×32: 248*
using ConfigLargeK64 = TileConfig<128, 256, 64, 2, 4, 3, 1>;   // 8 warps of 64×64, BK 64: 318
using ConfigTall = TileConfig<256, 128, 32, 4, 2, 4, 1>;       // 8 warps of 64×64: 222*
using ConfigMediumK64 = TileConfig<128, 128, 64, 2, 2, 3, 2>;  // 4 warps of 64×64, BK 64: 260*
using ConfigMedium5 = TileConfig<128, 128, 32, 2, 2, 5, 2>;    // 4 warps of 64×64, 5 stages: 291
// The staged loader (unaligned operands) holds a step's loads in registers
// across the products, so its tiles keep fewer accumulators per thread.
using ConfigUnalignedMedium = TileConfig<128, 128, 32, 2, 4, 4, 1>;  // 8 warps of 64×32
using ConfigUnalignedSmall = TileConfig<64, 64, 32, 2, 2, 4, 2>;     // 4 warps of 32×32

// Shared-memory tile of an operand: kOuter rows of kInner contiguous halves
// (plus padding). A depth-contiguous operand has the depth as kInner.
template <class Cfg, bool kDepthContig, bool kIsL>
struct TileShape {
  static constexpr int kSpan = kIsL ? Cfg::BM : Cfg::BN;  // rows (L) or columns (R) per tile
  static constexpr int kOuter = kDepthContig ? kSpan : Cfg::BK;
  static constexpr int kInner = kDepthContig ? Cfg::BK : kSpan;
  static constexpr int kLd = kInner + kPad;
  static constexpr int kHalves = kOuter * kLd;
};

template <class Cfg, bool kLDepth, bool kRDepth>
constexpr int smem_bytes() {
  return Cfg::kStages *
         (TileShape<Cfg, kLDepth, true>::kHalves + TileShape<Cfg, kRDepth, false>::kHalves) * 2;
}

using vkern_mma::cp_async_16;
using vkern_mma::cp_async_16_full;
using vkern_mma::cp_async_commit;
using vkern_mma::cp_async_wait;
using vkern_mma::ldmatrix_x4;
using vkern_mma::ldmatrix_x4_trans;
using vkern_mma::mma_16816;

// TileMap: which global element each 16-byte chunk of a kOuter × kInner
// shared-memory tile holds: chunk c of the tile is row c / (kInner/8), halves
// 8·(c % (kInner/8)) .. +7, and thread tid handles chunks tid, tid + kThreads, …
// Global element (outer, inner) is g[outer·ld + inner]; rows at or past
// outer_end and halves at or past inner_end are zero.
template <int kOuter, int kInner, int kLd, int kThreads>
struct TileMap {
  static constexpr int kChunksPerRow = kInner / 8;
  static constexpr int kChunksPerThread = kOuter * kChunksPerRow / kThreads;
  static_assert(kOuter * kChunksPerRow % kThreads == 0, "tile chunks must divide evenly among the threads");

  __device__ static int row(int i, int tid) { return (i * kThreads + tid) / kChunksPerRow; }
  __device__ static int col(int i, int tid) { return (i * kThreads + tid) % kChunksPerRow * 8; }

  // How many of the chunk's 8 halves lie inside the matrix (0..8).
  __device__ static int valid(int64_t go, int64_t gi, int64_t outer_end, int64_t inner_end) {
    const int64_t left = go < outer_end ? inner_end - gi : 0;
    return left >= 8 ? 8 : left > 0 ? static_cast<int>(left) : 0;
  }

  // Aligned operands: 16-byte cp.async per chunk, zero-filled past the edge.
  __device__ static void copy_async(__half* tile, const __half* g, int64_t ld, int64_t outer0, int64_t outer_end,
                                    int64_t inner0, int64_t inner_end, int tid) {
#pragma unroll
    for (int i = 0; i < kChunksPerThread; ++i) {
      const int64_t go = outer0 + row(i, tid), gi = inner0 + col(i, tid);
      const int n = valid(go, gi, outer_end, inner_end);
      cp_async_16(tile + row(i, tid) * kLd + col(i, tid), n > 0 ? g + go * ld + gi : g, n * 2);
    }
  }

  // The same for a tile wholly inside the matrix: no bounds, and one address
  // computation per thread (a thread's chunks are kRowStep rows apart).
  __device__ static void copy_async_full(__half* tile, const __half* g, int64_t ld, int64_t outer0, int64_t inner0,
                                         int tid) {
    constexpr int kRowStep = kThreads / kChunksPerRow;
    static_assert(kThreads % kChunksPerRow == 0, "a thread's chunks must share a column");
    const __half* src = g + (outer0 + row(0, tid)) * ld + inner0 + col(0, tid);
    __half* dst = tile + row(0, tid) * kLd + col(0, tid);
    const int64_t src_step = kRowStep * ld;
#pragma unroll
    for (int i = 0; i < kChunksPerThread; ++i) cp_async_16_full(dst + i * kRowStep * kLd, src + i * src_step);
  }
};

// StagedTile: the loader for operands whose rows are not 16-byte aligned.
// fetch issues 2-byte loads into registers (one half per register); commit,
// called after the current step's products, packs them into shared memory,
// so the loads' latency overlaps the tensor-core work.
template <int kOuter, int kInner, int kLd, int kThreads>
struct StagedTile {
  using Map = TileMap<kOuter, kInner, kLd, kThreads>;
  uint32_t h[Map::kChunksPerThread][8];

  __device__ void fetch(const __half* g, int64_t ld, int64_t outer0, int64_t outer_end, int64_t inner0,
                        int64_t inner_end, int tid) {
#pragma unroll
    for (int i = 0; i < Map::kChunksPerThread; ++i) {
      const int64_t go = outer0 + Map::row(i, tid), gi = inner0 + Map::col(i, tid);
      const int n = Map::valid(go, gi, outer_end, inner_end);
      const unsigned short* src = reinterpret_cast<const unsigned short*>(g) + (n > 0 ? go * ld + gi : 0);
#pragma unroll
      for (int e = 0; e < 8; ++e) h[i][e] = e < n ? __ldg(src + e) : 0u;
    }
  }

  __device__ void commit(__half* tile, int tid) const {
#pragma unroll
    for (int i = 0; i < Map::kChunksPerThread; ++i) {
      *reinterpret_cast<uint4*>(tile + Map::row(i, tid) * kLd + Map::col(i, tid)) =
          make_uint4(h[i][0] | h[i][1] << 16, h[i][2] | h[i][3] << 16, h[i][4] | h[i][5] << 16, h[i][6] | h[i][7] << 16);
    }
  }
};

// multiply_tiles: acc += the warp's share of one step's products, from the
// shared-memory tiles tl (L) and tr (R). Per-lane ldmatrix row addresses
// follow the fragment layouts of mma.m16n8k16: matrix q of an x4 load takes
// its row addresses from lanes 8q..8q+7.
template <class Cfg, bool kLDepth, bool kRDepth>
__device__ __forceinline__ void multiply_tiles(const __half* tl, const __half* tr,
                                               float (&acc)[Cfg::kMmaM][Cfg::kMmaN][4], int warp_m, int warp_n,
                                               int lane) {
  using LS = TileShape<Cfg, kLDepth, true>;
  using RS = TileShape<Cfg, kRDepth, false>;
  constexpr int kMmaM = Cfg::kMmaM, kMmaN = Cfg::kMmaN;
  const int lane_row8 = lane & 7;
  const int lane_bit3 = (lane >> 3) & 1;
  const int lane_bit4 = lane >> 4;
#pragma unroll
  for (int kk = 0; kk < Cfg::BK; kk += 16) {
    uint32_t a[kMmaM][4];
    uint32_t b[kMmaN][2];
#pragma unroll
    for (int i = 0; i < kMmaM; ++i) {
      const int m = warp_m + i * 16;
      if (kLDepth) {  // tile[m][p]: matrices (m0-7,p0-7) (m8-15,p0-7) (m0-7,p8-15) (m8-15,p8-15)
        ldmatrix_x4(a[i], tl + (m + lane_row8 + lane_bit3 * 8) * LS::kLd + kk + lane_bit4 * 8);
      } else {  // tile[p][m], transposed on load; same four matrices
        ldmatrix_x4_trans(a[i], tl + (kk + lane_row8 + lane_bit4 * 8) * LS::kLd + m + lane_bit3 * 8);
      }
    }
#pragma unroll
    for (int j = 0; j < kMmaN; j += 2) {
      const int n = warp_n + j * 8;
      uint32_t r4[4];
      if (kRDepth) {  // tile[n][p]: (n0-7,p0-7) (n0-7,p8-15) (n8-15,p0-7) (n8-15,p8-15)
        ldmatrix_x4(r4, tr + (n + lane_row8 + lane_bit4 * 8) * RS::kLd + kk + lane_bit3 * 8);
      } else {  // tile[p][n], transposed on load; same four matrices
        ldmatrix_x4_trans(r4, tr + (kk + lane_row8 + lane_bit3 * 8) * RS::kLd + n + lane_bit4 * 8);
      }
      b[j][0] = r4[0];
      b[j][1] = r4[1];
      b[j + 1][0] = r4[2];
      b[j + 1][1] = r4[3];
    }
#pragma unroll
    for (int i = 0; i < kMmaM; ++i)
#pragma unroll
      for (int j = 0; j < kMmaN; ++j) mma_16816(acc[i][j], a[i], b[j][0], b[j][1]);
  }
}

// product_mma: see the file comment. L(i, p) is L[i·ldl + p] when kLDepth,
// else L[p·ldl + i]; R(p, j) is R[j·ldr + p] when kRDepth, else R[p·ldr + j].
template <class Cfg, bool kLDepth, bool kRDepth, bool kAligned, typename Out, class Epi>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    product_mma(const __half* __restrict__ L, int64_t ldl, const __half* __restrict__ R, int64_t ldr,
                Out* __restrict__ out, Epi epi, int64_t rows, int64_t cols, int64_t depth) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // the host never launches this below compute capability 8.0
#else
  using LS = TileShape<Cfg, kLDepth, true>;
  using RS = TileShape<Cfg, kRDepth, false>;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, kStages = Cfg::kStages;
  constexpr int kMmaM = Cfg::kMmaM, kMmaN = Cfg::kMmaN;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* const sL = reinterpret_cast<__half*>(smem_raw);
  __half* const sR = sL + kStages * LS::kHalves;

  // Tile order: groups of kGroupRows tile rows, column-major inside a group.
  const int64_t tiles_m = (rows + BM - 1) / BM;
  const int64_t tiles_n = (cols + BN - 1) / BN;
  const int64_t tile = blockIdx.x;
  const int64_t per_group = int64_t{kGroupRows} * tiles_n;
  const int64_t first_m = tile / per_group * kGroupRows;
  const int64_t group_rows = tiles_m - first_m < kGroupRows ? tiles_m - first_m : kGroupRows;
  const int64_t m0 = (first_m + tile % per_group % group_rows) * BM;
  const int64_t n0 = tile % per_group / group_rows * BN;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int warp_m = warp / Cfg::kWarpsN * Cfg::kWarpM;  // first row of the warp's sub-tile
  const int warp_n = warp % Cfg::kWarpsN * Cfg::kWarpN;  // first column

  float acc[kMmaM][kMmaN][4];
#pragma unroll
  for (int i = 0; i < kMmaM; ++i)
#pragma unroll
    for (int j = 0; j < kMmaN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  const int64_t steps = (depth + BK - 1) / BK;
  using LMap = TileMap<LS::kOuter, LS::kInner, LS::kLd, Cfg::kThreads>;
  using RMap = TileMap<RS::kOuter, RS::kInner, RS::kLd, Cfg::kThreads>;
  // Tile origins of step `step` in (outer, inner) order, per the layouts.
  auto l_origin = [&](int64_t step, int64_t* o0, int64_t* oe, int64_t* i0, int64_t* ie) {
    if (kLDepth) { *o0 = m0; *oe = rows; *i0 = step * BK; *ie = depth; }
    else { *o0 = step * BK; *oe = depth; *i0 = m0; *ie = rows; }
  };
  auto r_origin = [&](int64_t step, int64_t* o0, int64_t* oe, int64_t* i0, int64_t* ie) {
    if (kRDepth) { *o0 = n0; *oe = cols; *i0 = step * BK; *ie = depth; }
    else { *o0 = step * BK; *oe = depth; *i0 = n0; *ie = cols; }
  };

  if constexpr (kAligned) {
    // Blocks whose tile lies inside the output skip all bounds checks on
    // every step but a partial last one.
    const bool interior = m0 + BM <= rows && n0 + BN <= cols;
    auto copy_step = [&](int stage, int64_t step) {
      int64_t o0, oe, i0, ie;
      if (interior && (step + 1) * BK <= depth) {
        l_origin(step, &o0, &oe, &i0, &ie);
        LMap::copy_async_full(sL + stage * LS::kHalves, L, ldl, o0, i0, tid);
        r_origin(step, &o0, &oe, &i0, &ie);
        RMap::copy_async_full(sR + stage * RS::kHalves, R, ldr, o0, i0, tid);
        return;
      }
      l_origin(step, &o0, &oe, &i0, &ie);
      LMap::copy_async(sL + stage * LS::kHalves, L, ldl, o0, oe, i0, ie, tid);
      r_origin(step, &o0, &oe, &i0, &ie);
      RMap::copy_async(sR + stage * RS::kHalves, R, ldr, o0, oe, i0, ie, tid);
    };
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < steps) copy_step(s, s);
      cp_async_commit();
    }
    for (int64_t step = 0; step < steps; ++step) {
      cp_async_wait<kStages - 2>();
      __syncthreads();
      // Refill the stage that every warp finished with in the previous step.
      const int64_t next = step + kStages - 1;
      if (next < steps) copy_step(static_cast<int>(next % kStages), next);
      cp_async_commit();
      const int stage = static_cast<int>(step % kStages);
      multiply_tiles<Cfg, kLDepth, kRDepth>(sL + stage * LS::kHalves, sR + stage * RS::kHalves, acc, warp_m, warp_n, lane);
    }
    cp_async_wait<0>();
  } else {
    StagedTile<LS::kOuter, LS::kInner, LS::kLd, Cfg::kThreads> l_regs;
    StagedTile<RS::kOuter, RS::kInner, RS::kLd, Cfg::kThreads> r_regs;
    auto fetch_step = [&](int64_t step) {
      int64_t o0, oe, i0, ie;
      l_origin(step, &o0, &oe, &i0, &ie);
      l_regs.fetch(L, ldl, o0, oe, i0, ie, tid);
      r_origin(step, &o0, &oe, &i0, &ie);
      r_regs.fetch(R, ldr, o0, oe, i0, ie, tid);
    };
    auto commit_step = [&](int stage) {
      l_regs.commit(sL + stage * LS::kHalves, tid);
      r_regs.commit(sR + stage * RS::kHalves, tid);
    };
    for (int s = 0; s < kStages - 1 && s < steps; ++s) {
      fetch_step(s);
      commit_step(s);
    }
    for (int64_t step = 0; step < steps; ++step) {
      __syncthreads();
      const int64_t next = step + kStages - 1;
      if (next < steps) fetch_step(next);
      const int stage = static_cast<int>(step % kStages);
      multiply_tiles<Cfg, kLDepth, kRDepth>(sL + stage * LS::kHalves, sR + stage * RS::kHalves, acc, warp_m, warp_n, lane);
      // The stage written here was last read in the previous step, before
      // this step's barrier; it is next read after a later barrier.
      if (next < steps) commit_step(static_cast<int>(next % kStages));
    }
  }

  // Accumulator layout: element e of acc[i][j] is at row lane/4 (+8 for
  // e >= 2) and column 2·(lane%4) (+1 for odd e) of the 16×8 block.
  if constexpr (Epi::kAny) {
#pragma unroll
    for (int i = 0; i < kMmaM; ++i) {
      const int64_t r0 = m0 + warp_m + i * 16 + (lane >> 2);
#pragma unroll
      for (int j = 0; j < kMmaN; ++j) {
        const int64_t c0 = n0 + warp_n + j * 8 + (lane & 3) * 2;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t r = r0 + 8 * (e >> 1), c = c0 + (e & 1);
          if (r < rows && c < cols) acc[i][j][e] = epi.apply(acc[i][j][e], out, r, c, cols);
        }
      }
    }
  }
  const bool pairs_aligned = vkern_shift::rows_aligned(out, cols, sizeof(Out), 2 * sizeof(Out));
#pragma unroll
  for (int i = 0; i < kMmaM; ++i) {
    const int64_t row = m0 + warp_m + i * 16 + (lane >> 2);
#pragma unroll
    for (int j = 0; j < kMmaN; ++j) {
      const int64_t col = n0 + warp_n + j * 8 + (lane & 3) * 2;
      if (col >= cols) continue;
      if (row < rows) store_pair(out, row, col, cols, pairs_aligned, acc[i][j][0], acc[i][j][1]);
      if (row + 8 < rows) store_pair(out, row + 8, col, cols, pairs_aligned, acc[i][j][2], acc[i][j][3]);
    }
  }
#endif
}

template <class Cfg, bool kLDepth, bool kRDepth, bool kAligned, typename Out, class Epi>
cudaError_t launch_mma(int device, const __half* L, int64_t ldl, const __half* R, int64_t ldr, Out* out, const Epi& epi,
                       int64_t rows, int64_t cols, int64_t depth, cudaStream_t s) {
  constexpr int kSmem = smem_bytes<Cfg, kLDepth, kRDepth>();
  auto kernel = product_mma<Cfg, kLDepth, kRDepth, kAligned, Out, Epi>;
  // The dynamic shared-memory limit is raised once per device (devices < 64).
  static uint64_t raised;
  if (!(raised >> device & 1u)) {
    const cudaError_t err =
        cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (err != cudaSuccess) return err;
    raised |= uint64_t{1} << device;
  }
  const int64_t tiles = ceil_div(rows, Cfg::BM) * ceil_div(cols, Cfg::BN);
  if (tiles > INT32_MAX) return cudaErrorInvalidValue;
  kernel<<<static_cast<unsigned>(tiles), Cfg::kThreads, kSmem, s>>>(L, ldl, R, ldr, out, epi, rows, cols, depth);
  return cudaGetLastError();
}

// Tile configuration ids, as the tuning hook numbers them:
//   0 ConfigLarge  1 ConfigMedium  2 ConfigSmall  3 ConfigMedium8
//   4 ConfigLargeK64  5 ConfigTall  6 ConfigMediumK64  7 ConfigMedium5
// choose_config picks among 4, 1 and 2: on an H100, 128 × 256 × 64 tiles
// were the fastest of these at 4096³ and 8192³ for all three ops; smaller
// tiles take over while a grid of them would leave multiprocessors idle.
int choose_config(int64_t rows, int64_t cols, int multiprocessors) {
  if (ceil_div(rows, 128) * ceil_div(cols, 256) >= multiprocessors) return 4;
  if (ceil_div(rows, 128) * ceil_div(cols, 128) >= multiprocessors) return 1;
  return 2;
}

// launch_aligned runs configuration `config` on operands whose rows are
// 16-byte aligned.
template <bool kLDepth, bool kRDepth, typename Out, class Epi>
cudaError_t launch_aligned(int config, int device, const __half* L, int64_t ldl, const __half* R, int64_t ldr, Out* out,
                           const Epi& epi, int64_t rows, int64_t cols, int64_t depth, cudaStream_t s) {
#define VKERN_LAUNCH(Cfg) \
  launch_mma<Cfg, kLDepth, kRDepth, true>(device, L, ldl, R, ldr, out, epi, rows, cols, depth, s)
  switch (config) {
    case 4: return VKERN_LAUNCH(ConfigLargeK64);
    case 2: return VKERN_LAUNCH(ConfigSmall);
#if defined(VKERN_GEMM_TUNING) && !defined(VKERN_GEMM_LAB_FEW)
    case 0: return VKERN_LAUNCH(ConfigLarge);
    case 3: return VKERN_LAUNCH(ConfigMedium8);
    case 5: return VKERN_LAUNCH(ConfigTall);
    case 6: return VKERN_LAUNCH(ConfigMediumK64);
    case 7: return VKERN_LAUNCH(ConfigMedium5);
#endif
    default: return VKERN_LAUNCH(ConfigMedium);
  }
#undef VKERN_LAUNCH
}

// Unaligned operands (a row length that is not a multiple of 8, or a base
// that is not 16-byte aligned). On Hopper, a large product whose only
// unaligned operand is L, when choose_sm90 picks the 128 × 256 variant,
// reads L in place, the depth in order:
// - K-major L (gemm's A, linear's x: the logits gradient in the dx of
//   GPT-2's head at its vocabulary of 50257), with an output whose rows
//   are aligned: WideSR's consumer warps build their wgmma A fragments from
//   L's row classes (gemm_sm90.cu, Tiles::kClassL; no residual or GELU
//   epilogue, which keeps the kernels built down), in clusters of 2 sharing
//   R. The head's dx took 1.90 ms against 2.92 with the padded copy and
//   1.64 for the aligned product (docs/lm-head-class-tiles-h100,
//   docs/lm-head-dx-h100).
// - Where the server's environment sets VKERN_GEMM_SHIFT=1, an MN-major L
//   too (grad_b's A, linear_grad_w's x: the head's dW): WideS3's producer
//   copies L's row classes with TMA and shifts each row into place in
//   shared memory (row_shift.cuh). Verified, but slower than the padded
//   copy (the head's dW 4.13–4.54 ms against 2.99–3.02: docs/row-shift-h100), so it
//   is off by default.
// - MN-major L of MN-major R (gemm_grad_b's A, linear_grad_w's x: the
//   head's dW, where x is the logits gradient): WideDC's consumer warps
//   build their A fragments from raw boxes of the depth's row classes,
//   the depth in order (gemm_sm90.cu, Tiles::kDepthClassL). The head's dW
//   took 2.02–2.03 ms against 3.05 with the padded copy, 0.91–0.95 of
//   cuBLAS's dW.add_ at 50304 (docs/lm-head-dw-h100).
//   VKERN_GEMM_DEPTH_CLASSES=0 in the server's environment sends it to
//   the padded copy instead, to time one against the other; where
//   VKERN_GEMM_SHIFT=1, the shifting producer takes it first.
// linear_nt's L and R share their row length, so never only L is
// unaligned. Other large products first copy each such operand into
// scratch with its rows padded to a multiple of 64 halves (one pass over
// the operand, a few percent of the product's time) and run the aligned
// kernels: at 64, each 128-byte row of a TMA box starts on a 128-byte
// line, as it does in an operand whose rows are a multiple of 64 long
// (GPT-2's, the vocabulary padded to 50304), where at 8 it would straddle
// two. Small products, or when the scratch cannot be had, use the staged
// loader in place. (A Hopper variant whose producer reads such rows in
// place with 16-byte copies and shifts them into TMA's layout, branch
// lm-head-in-place, took 3.8–5.3 ms at the head's dx, 16384×768×50257,
// against 2.9 for the padded copy and TMA: docs/lm-head-in-place-h100.)
constexpr double kPadMinWork = 1 << 30;           // rows · cols · depth from which padding pays
// The scratch cap for the padded copies: 2 GiB, so that GPT-2's logits
// gradient at the vocabulary as it is (16384 × 50257 halves, 1.65 GB), the
// operand of the head's dx and dW products, is padded rather than read two
// bytes at a time.
constexpr size_t kPadMaxBytes = size_t{2} << 30;

// pad_rows copies rows × cols halves (row length cols) to dst with row
// length ld_dst (a multiple of 8), zero past column cols.
__global__ void __launch_bounds__(256)
    pad_rows(const __half* __restrict__ src, int64_t rows, int64_t cols, __half* __restrict__ dst, int64_t ld_dst) {
  const int64_t chunks_per_row = ld_dst / 8;
  const int64_t chunks = rows * chunks_per_row;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = c / chunks_per_row, c0 = c % chunks_per_row * 8;
    const unsigned short* from = reinterpret_cast<const unsigned short*>(src) + r * cols + c0;
    uint32_t w[4];
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
      const uint32_t lo = c0 + e < cols ? __ldg(from + e) : 0u;
      const uint32_t hi = c0 + e + 1 < cols ? __ldg(from + e + 1) : 0u;
      w[e / 2] = lo | hi << 16;
    }
    *reinterpret_cast<uint4*>(dst + r * ld_dst + c0) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// pad_scratch returns at least bytes of device memory kept for later calls
// (see ops.cuh; rows.cuh's ScratchBuffer, the lane's under way), or nullptr
// when it cannot be had (or not now, during a batch's capture: capture.h),
// where the staged loader runs instead.
void* pad_scratch(size_t bytes) {
  static vkern_rows::ScratchBuffer buffer;
  void* p = nullptr;
  if (buffer.get(bytes, &p) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return p;
}

int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// grid_cost is the model choose_sm90 and bn192_pays (below) pick tiles
// by: a grid's waves of 128-row tiles bn columns wide over the
// multiprocessors, each wave weighing a tile's weight.
double grid_cost(int64_t rows, int64_t cols, int bn, double weight, int multiprocessors) {
  return weight * static_cast<double>(ceil_div(ceil_div(rows, 128) * ceil_div(cols, bn), multiprocessors));
}

// Hopper variants (gemm_sm90.cu), as the tuning hook numbers them:
//   1 Wide (128 × 256)  2 WideC2 (the same, clusters of 2)  3 Medium (128 × 128)
//   4 MediumC2  5 Narrow (128 × 64)  6 WideS  7 WideC2S  8 NarrowS  9 MediumS
//   10 WideS192 (128 × 192, for short grids; bn192_pays)
//   (S: epilogue staged through shared memory)
// choose_sm90 picks among 6, 9 and 8 the tile width whose grid finishes
// first: waves of tiles over the multiprocessors, each wave weighted by a
// tile's time relative to a 128 × 128 tile of Wide (measured on an H100:
// Wide runs at ~1.2× Medium's and ~2× Narrow's rate on large products, so a
// 128 × 256 tile costs 2, 128 × 128 costs 1.2 and 128 × 64 costs 1). At
// 1024³ this picks Narrow (128 tiles, one wave), which measured 1.2-1.5×
// cuBLAS there, against 0.7-0.8 for Wide. Returns 0 for the mma.sync path
// (never, on a device where the Hopper kernels are available).
int choose_sm90(int64_t rows, int64_t cols, int64_t depth, int multiprocessors) {
  (void)depth;
  const double wide = grid_cost(rows, cols, 256, 2.0, multiprocessors);
  const double medium = grid_cost(rows, cols, 128, 1.2, multiprocessors);
  const double narrow = grid_cost(rows, cols, 64, 1.0, multiprocessors);
  if (wide <= medium && wide <= narrow) return 6;
  return medium <= narrow ? 9 : 8;
}

// bn192_pays says whether 128 × 192 tiles (WideS192) finish the grid of a
// product that choose_sm90 gives 128 × 256 tiles sooner, by its model
// with a 128 × 192 tile weighted 1.6, between Wide's 2 and Medium's 1.2.
// Yes for the MLP's weight gradients in GPT-2, 768 × 3072 and 3072 × 768
// outputs: 72 tiles of 128 × 256 or 96 of 128 × 192 on 132
// multiprocessors, one wave either way, so the smaller tile is the shorter
// wave. They took 0.127-0.129 ms in WideS192 against 0.159-0.163 in
// WideS, 0.96-0.98 of cuBLAS's dW.add_ against 0.76-0.78
// (docs/dw-bn192-h100). The attention's weight gradients are not asked:
// choose_sm90 gives 768 × 2304 MediumS and 768 × 768 NarrowS. No for
// 16384-row outputs (384 to 25,000 tiles, several waves).
// VKERN_GEMM_BN192=0 turns it off, to time one against the other.
bool bn192_pays(int64_t rows, int64_t cols, int multiprocessors) {
  return vkern_gemm_sm90::bn192_chosen() &&
         grid_cost(rows, cols, 192, 1.6, multiprocessors) < grid_cost(rows, cols, 256, 2.0, multiprocessors);
}

template <bool kLDepth, bool kRDepth, typename Out, class Epi>
cudaError_t launch_sm90(int variant, int device, int multiprocessors, const __half* L, int64_t ldl, const __half* R,
                        int64_t ldr, Out* out, const Epi& epi, int64_t rows, int64_t cols, int64_t depth,
                        cudaStream_t s, bool* launched) {
  namespace h = vkern_gemm_sm90;
#define VKERN_LAUNCH(Cfg)                                                                                    \
  h::launch<h::Cfg, kLDepth, kRDepth, Out, Epi>(device, multiprocessors, L, ldl, R, ldr, out, epi, rows, cols, depth, \
                                                s, launched)
  switch (variant) {
    case 6: return VKERN_LAUNCH(WideS);
    case 8: return VKERN_LAUNCH(NarrowS);
    case 9: return VKERN_LAUNCH(MediumS);
    case 10: return VKERN_LAUNCH(WideS192);
#if defined(VKERN_GEMM_TUNING) && !defined(VKERN_GEMM_LAB_FEW)
    case 1: return VKERN_LAUNCH(Wide);
    case 2: return VKERN_LAUNCH(WideC2);
    case 3: return VKERN_LAUNCH(Medium);
    case 4: return VKERN_LAUNCH(MediumC2);
    case 5: return VKERN_LAUNCH(Narrow);
    case 7: return VKERN_LAUNCH(WideC2S);
#endif
    default: *launched = false; return cudaSuccess;
  }
#undef VKERN_LAUNCH
}

// sm90_tiles_ran runs variant Cfg with the tiles kTiles (gemm_sm90.cu)
// where they serve the product's layouts, output and epilogue (its
// tiles_serve), and says whether it launched or failed, *err then holding
// the result; false means it launched nothing. The tiles: the shifting
// producer (WideS3), class tiles for f16 output rows that do not start
// 16-byte aligned (WideS: GPT-2's logits at V = 50257, linear_nt
// 16384×50257×768 from 2.67 ms with the staged store of unaligned rows to
// 2.09, cuBLAS's time at 50304), L's row classes (WideSR: the head's
// dx; docs/lm-head-class-tiles-h100, docs/lm-head-dx-h100), and the row
// classes of an MN-major L's depth rows (WideDC: the head's dW;
// docs/lm-head-dw-h100).
template <class Cfg, vkern_gemm_sm90::Tiles kTiles, bool kLDepth, bool kRDepth, typename Out, class Epi>
bool sm90_tiles_ran(int device, int multiprocessors, const __half* L, int64_t ldl, const __half* R, int64_t ldr,
                    Out* out, const Epi& epi, int64_t rows, int64_t cols, int64_t depth, cudaStream_t s,
                    cudaError_t* err) {
  namespace h = vkern_gemm_sm90;
  if constexpr (h::tiles_serve<kTiles, kLDepth, kRDepth, Out, Epi>()) {
    bool launched = false;
    *err = h::launch<Cfg, kLDepth, kRDepth, Out, Epi, kTiles>(device, multiprocessors, L, ldl, R, ldr, out, epi, rows,
                                                               cols, depth, s, &launched);
    return *err != cudaSuccess || launched;
  }
  return false;
}

template <bool kLDepth, bool kRDepth, typename Out, class Epi>
cudaError_t product_tensor_cores(const DeviceInfo& info, int device, const __half* L, int64_t ldl, const __half* R,
                                 int64_t ldr, Out* out, const Epi& epi, int64_t rows, int64_t cols, int64_t depth,
                                 cudaStream_t s) {
  const int multiprocessors = info.multiprocessors;
  int config = choose_config(rows, cols, multiprocessors);
  int sm90 = vkern_gemm_sm90::available(device, info.cc_major, info.cc_minor)
                 ? choose_sm90(rows, cols, depth, multiprocessors)
                 : 0;
#if defined(VKERN_GEMM_TUNING)
  if (vk_gemm_tuning_config >= 0) config = vk_gemm_tuning_config;
  if (vk_gemm_tuning_sm90 >= 0 && vkern_gemm_sm90::available(device, info.cc_major, info.cc_minor)) {
    sm90 = vk_gemm_tuning_sm90;
  }
#endif
  const bool large = static_cast<double>(rows) * static_cast<double>(cols) * static_cast<double>(depth) >= kPadMinWork;
  // Aligned operands: the Hopper kernels where chosen, else mma.sync. A
  // large product whose f16 output rows are not 16-byte aligned runs in
  // class tiles where the 128 × 256 variant is chosen (gemm_sm90.cu).
  namespace h = vkern_gemm_sm90;
  cudaError_t tiles_err = cudaSuccess;  // a row-class launch's result (sm90_tiles_ran)
  const bool out_aligned = vkern_shift::rows_aligned(out, cols, sizeof(Out), 16);
  auto run_aligned = [&](const __half* l, int64_t ld_l, const __half* r, int64_t ld_r) {
    if (sm90 == 6 && large && !out_aligned && rows >= 8 &&
        sm90_tiles_ran<h::WideS, h::Tiles::kClassOut, kLDepth, kRDepth>(device, multiprocessors, l, ld_l, r, ld_r, out,
                                                                         epi, rows, cols, depth, s, &tiles_err)) {
      return tiles_err;
    }
    if (sm90 != 0) {
      bool launched = false;
      const int variant = sm90 == 6 && bn192_pays(rows, cols, multiprocessors) ? 10 : sm90;
      const cudaError_t err = launch_sm90<kLDepth, kRDepth, Out, Epi>(variant, device, multiprocessors, l, ld_l, r,
                                                                       ld_r, out, epi, rows, cols, depth, s, &launched);
      if (err != cudaSuccess || launched) return err;
    }
    return launch_aligned<kLDepth, kRDepth, Out, Epi>(config, device, l, ld_l, r, ld_r, out, epi, rows, cols, depth, s);
  };
  const bool l_aligned = vkern_shift::rows_aligned(L, ldl, 2, 16);
  const bool r_aligned = vkern_shift::rows_aligned(R, ldr, 2, 16);
  if (l_aligned && r_aligned) return run_aligned(L, ldl, R, ldr);
  const bool only_l = large && !l_aligned && r_aligned && sm90 == 6;  // L read in place, in row classes
  if (only_l && h::shift_chosen() &&
      sm90_tiles_ran<h::WideS3, h::Tiles::kShiftL, kLDepth, kRDepth>(device, multiprocessors, L, ldl, R, ldr, out, epi,
                                                                     rows, cols, depth, s, &tiles_err)) {
    return tiles_err;
  }
  if (only_l && out_aligned &&
      sm90_tiles_ran<h::WideSR, h::Tiles::kClassL, kLDepth, kRDepth>(device, multiprocessors, L, ldl, R, ldr, out, epi,
                                                                     rows, cols, depth, s, &tiles_err)) {
    return tiles_err;
  }
  if (only_l && h::depth_classes_chosen() &&
      sm90_tiles_ran<h::WideDC, h::Tiles::kDepthClassL, kLDepth, kRDepth>(device, multiprocessors, L, ldl, R, ldr, out,
                                                                          epi, rows, cols, depth, s, &tiles_err)) {
    return tiles_err;
  }
  if (large) {
    // Stored shapes: L is rows × depth (kLDepth) or depth × rows, R is
    // cols × depth (kRDepth) or depth × cols; the row length is ld.
    const int64_t l_stored_rows = kLDepth ? rows : depth, r_stored_rows = kRDepth ? cols : depth;
    const int64_t l_ld = round_up(ldl, 64), r_ld = round_up(ldr, 64);
    const int64_t l_bytes = l_aligned ? 0 : round_up(l_stored_rows * l_ld * 2, 256);
    const int64_t r_bytes = r_aligned ? 0 : round_up(r_stored_rows * r_ld * 2, 256);
    void* buffer = static_cast<size_t>(l_bytes + r_bytes) <= kPadMaxBytes ? pad_scratch(l_bytes + r_bytes) : nullptr;
    if (buffer != nullptr) {
      __half* padded = static_cast<__half*>(buffer);
      const int blocks = 4 * multiprocessors;
      if (!l_aligned) {
        pad_rows<<<blocks, 256, 0, s>>>(L, l_stored_rows, ldl, padded, l_ld);
        L = padded;
        ldl = l_ld;
        padded += l_bytes / 2;
      }
      if (!r_aligned) {
        pad_rows<<<blocks, 256, 0, s>>>(R, r_stored_rows, ldr, padded, r_ld);
        R = padded;
        ldr = r_ld;
      }
      const cudaError_t err = cudaGetLastError();
      if (err != cudaSuccess) return err;
      return run_aligned(L, ldl, R, ldr);
    }
  }
  if (config == 2) {
    return launch_mma<ConfigUnalignedSmall, kLDepth, kRDepth, false>(device, L, ldl, R, ldr, out, epi, rows, cols,
                                                                     depth, s);
  }
  return launch_mma<ConfigUnalignedMedium, kLDepth, kRDepth, false>(device, L, ldl, R, ldr, out, epi, rows, cols,
                                                                    depth, s);
}

#endif  // VKERN_PTX_MMA

// ---------------------------------------------------------------------------
// Portable path (HIP, pre-Ampere CUDA, or VKERN_GEMM_PORTABLE).

constexpr int kSimtTile = 64;    // outputs per tile side
constexpr int kSimtDepth = 16;   // reduction terms per shared-memory step
constexpr int kSimtThreads = 256;  // 16 × 16 threads, 4 × 4 outputs each

template <bool kLDepth, bool kRDepth, typename Out, class Epi>
__global__ void __launch_bounds__(kSimtThreads)
    product_simt(const __half* __restrict__ L, int64_t ldl, const __half* __restrict__ R, int64_t ldr,
                 Out* __restrict__ out, Epi epi, int64_t rows, int64_t cols, int64_t depth) {
  __shared__ float sL[kSimtDepth][kSimtTile + 1];
  __shared__ float sR[kSimtDepth][kSimtTile + 1];
  const int64_t tiles_n = (cols + kSimtTile - 1) / kSimtTile;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) / tiles_n * kSimtTile;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) % tiles_n * kSimtTile;
  const int tid = threadIdx.x;
  const int ty = tid / 16, tx = tid % 16;
  float acc[4][4] = {};
  for (int64_t p0 = 0; p0 < depth; p0 += kSimtDepth) {
#pragma unroll
    for (int q = 0; q < kSimtTile * kSimtDepth / kSimtThreads; ++q) {
      const int e = q * kSimtThreads + tid;
      // Consecutive threads read consecutive elements of the stored layout.
      const int lp = kLDepth ? e % kSimtDepth : e / kSimtTile;
      const int li = kLDepth ? e / kSimtDepth : e % kSimtTile;
      const int64_t gi = m0 + li, gp = p0 + lp;
      sL[lp][li] = gi < rows && gp < depth ? __half2float(kLDepth ? L[gi * ldl + gp] : L[gp * ldl + gi]) : 0.0f;
      const int rp = kRDepth ? e % kSimtDepth : e / kSimtTile;
      const int rj = kRDepth ? e / kSimtDepth : e % kSimtTile;
      const int64_t gj = n0 + rj, gq = p0 + rp;
      sR[rp][rj] = gj < cols && gq < depth ? __half2float(kRDepth ? R[gj * ldr + gq] : R[gq * ldr + gj]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int p = 0; p < kSimtDepth; ++p) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = sL[p][ty * 4 + i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = sR[p][tx * 4 + j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
  if constexpr (Epi::kAny) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t r = m0 + ty * 4 + i, c = n0 + tx * 4 + j;
        if (r < rows && c < cols) acc[i][j] = epi.apply(acc[i][j], out, r, c, cols);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t row = m0 + ty * 4 + i;
    if (row >= rows) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t col = n0 + tx * 4 + j;
      if (col < cols) store_one(out, row * cols + col, acc[i][j]);
    }
  }
}

template <bool kLDepth, bool kRDepth, typename Out, class Epi>
cudaError_t product_portable(const __half* L, int64_t ldl, const __half* R, int64_t ldr, Out* out, const Epi& epi,
                             int64_t rows, int64_t cols, int64_t depth, cudaStream_t s) {
  const int64_t tiles = ceil_div(rows, kSimtTile) * ceil_div(cols, kSimtTile);
  if (tiles > INT32_MAX) return cudaErrorInvalidValue;
  product_simt<kLDepth, kRDepth, Out, Epi>
      <<<static_cast<unsigned>(tiles), kSimtThreads, 0, s>>>(L, ldl, R, ldr, out, epi, rows, cols, depth);
  return cudaGetLastError();
}

// product: Out = L · R, finished by epi (none unless given), dispatched to
// the tensor-core or the portable path.
template <bool kLDepth, bool kRDepth, typename Out, class Epi = NoEpilogue>
cudaError_t product(const __half* L, int64_t ldl, const __half* R, int64_t ldr, Out* out, int64_t rows, int64_t cols,
                    int64_t depth, cudaStream_t s, Epi epi = Epi{}) {
#if defined(VKERN_PTX_MMA)
  DeviceInfo info;
  int device = 0;
  const cudaError_t err = device_info(&info, &device);
  if (err != cudaSuccess) return err;
  if (info.cc_major >= 8 && !kForcePortable) {
    return product_tensor_cores<kLDepth, kRDepth, Out, Epi>(info, device, L, ldl, R, ldr, out, epi, rows, cols, depth,
                                                            s);
  }
#endif
  return product_portable<kLDepth, kRDepth, Out, Epi>(L, ldl, R, ldr, out, epi, rows, cols, depth, s);
}

}  // namespace vkern_gemm
}  // namespace

#endif  // VKERN_CUDA_GEMM_CUH
