// softmax and softmax_grad on the GPU: f16 in, f16 out, f32 inside.
//
// Per row of C elements (the same math as kernels/cpu/softmax.cc):
//
//   softmax       m   = max_j x_j                       (NaNs skipped, as fmaxf does)
//                 e_j = 2^((x_j − m) · log2 e)          f32, never rounded to f16
//                 s   = Σ_j e_j                         f32
//                 y_j = f16(e_j · (1 / s))              the only rounding to f16
//
//   softmax_grad  d    = Σ_j dy_j · y_j                 f32 (each product is exact)
//                 dx_j = f16(y_j · (dy_j − d))
//
// Launch shapes (by a row's extent: C, or C + 7 when rows start off a
// 16-byte boundary; see Vector width below):
// - Rows that fit on chip (extent <= 65,536 for softmax, <= 32,768 for
//   softmax_grad): one pass. A row belongs to T threads (one warp, with
//   several rows per block, for extent <= 1,024; otherwise one block of T =
//   64..1,024 threads); each thread holds E <= 128 elements of the row in
//   registers as packed f16 pairs (at most 64 registers of row data), read
//   once with 16-byte loads, and the row's reductions
//   are warp shuffles plus one shared-memory step. Thread t holds vectors t,
//   t + T, t + 2T, … of VW elements, so every load and store is coalesced.
//   Blocks walk the rows in a grid-stride loop. (The table is in
//   softmax_with and softmax_grad_with.)
// - softmax_grad rows of 32,768 < extent whose two inputs fit in one
//   block's shared memory (4·extent + 128 bytes; extent <= 58,080 on
//   Hopper's 227 KB, CUDA only): softmax_grad_staged, one pass. One block of 1,024 threads per SM
//   walks rows G apart (G blocks); each thread parks its vectors of dY and Y
//   in its own slots of shared memory, and loads row r + G into those slots
//   while it writes row r's dX from them, so each element is read once and
//   the loads of one row overlap the stores of the last.
// - Rows longer than that, on compute capability 9 (CUDA only): a cluster
//   of P <= 16 blocks of 512 threads holds the row in registers, 32,768
//   elements a block (16,384 with 2-byte accesses), so extent <= 524,288
//   (262,144). Each block reduces its segment, the blocks exchange their
//   partials through distributed shared memory after one cluster barrier,
//   and each writes its segment: one pass (softmax_cluster,
//   softmax_grad_cluster).
// - Longer rows still, and long rows on other GPUs and under HIP: the row
//   is cut into segments of 32,768 elements, one block each. softmax: a
//   first kernel writes each segment's (max, Σ exp(x − max)) to scratch; a
//   second combines the row's pairs (rescaling each partial sum by
//   exp(max_seg − max) once) and writes the segment. softmax_grad: a first
//   kernel writes each segment's partial dot product; a second sums them and
//   streams through the segment. So these rows are read twice and written
//   once.
//
// Vector width VW: 8 (16-byte accesses) whenever the operands lie equally
// far past a 16-byte boundary (always, for buffers from cudaMalloc), for
// any C; otherwise 1 (2-byte accesses, still coalesced). Row r starts
// (r·C) mod 8 elements past a boundary when C is not a multiple of 8, so
// each row is laid from the boundary at or before its start (rows.cuh's
// RowSlice): the vectors wholly inside the row are 16-byte accesses, and
// the at most two that the row's ends cut are read and written element by
// element, their slots outside the row holding the padding below. Pieces
// of a long row (cluster blocks, segments) are cut from that boundary too,
// so every piece after the first starts on one. A row then covers at most
// C + 7 columns of its threads' slots: its extent. With C a multiple of 8
// and aligned operands no row has a lead, nothing is cut, and the extent
// is C.
//
// Accuracy, against the oracle's bound: x − m is exact or within 2⁻²⁴
// relative (x and m are f16 values), the product with log2 e adds two more
// roundings, and the exponential is within 2 ulp, so each e_j is within
// (1.5·|x − m| + 2)·2⁻²³ relative of exp(x − m) (the bound allows
// (4·|x − m| + 16)·2⁻²³). The row kernel (rows of up to 65,536) takes it
// by the EX2 instruction alone (rows.cuh's row_exp; variant 3 below),
// exp2f's bits where e_j ≥ 2⁻¹²⁶ and +0 below, which the oracle's C·2⁻¹²⁶
// term allows. The segmented and cluster paths take exp2f; they multiply a
// partial sum by one more exp of the same accuracy, with |x − m_seg| +
// |m_seg − m| = |x − m|, and add P partials (γ(C) covers any order).
// y = e · (1/s) is two roundings, which the bound allows.
//
// IEEE facts relied on (no fast-math, no flush-to-zero but the row
// kernel's EX2 above: exp2f keeps subnormal results, f16 subnormal inputs
// convert exactly):
// - A NaN in a row is skipped by the max but makes s (or d) NaN: all NaN.
// - A +Inf in a row makes m = +Inf and that entry's x − m = NaN: all NaN.
// - With m finite, an entry of −Inf gives 2^−Inf = 0 exactly, by either.
// - A row of only −Inf has m = −Inf and x − m = NaN: all NaN.
// - Padding slots past the end of a row hold −Inf (softmax) or 0 (grad), so
//   they add 0 whenever the row's result is not NaN anyway.
// - Segments (both long-row paths): a segment of only −Inf (and NaN) has
//   m_seg = −Inf; its terms are taken as 0 for −Inf entries (exactly what
//   they are once the row's m is finite; if the row's m is −Inf every output
//   is NaN regardless) and NaN entries still give NaN. A partial whose max
//   equals the row's max is used unscaled, so −Inf − (−Inf) never arises in
//   the combination.
//
// Measured on an H100 (nvcc 12.4, sm_90a, at ef9603f; a standalone harness:
// CUDA-event medians of 30 launches, 100 for 32768×1024, after 50 ms of
// warm-up, over operand sets that span 4× the L2; ratios to a 1 GiB
// device-to-device cudaMemcpy in the same process, 3.00 TB/s read +
// write): softmax 8192×32768 0.956, 8192×50304 0.954, 32768×1024 0.876,
// 2048×131072 0.847, 512×524288 0.765; softmax_grad 8192×32768 0.976,
// 8192×50304 0.964, 32768×1024 0.919, 2048×131072 0.945, 512×524288
// 0.791. With 2-byte accesses (8192×50301): softmax 0.569, softmax_grad
// 0.782.
//
// Variants measured side by side (ratio to copy; the run above unless
// marked *, an earlier run of the same harness):
// - softmax, 4096×50257 (rows off 16-byte boundaries; † vkern bench, ratio
//   to its copy floor):
//   1. 2-byte accesses ........................................... 0.57†
//   2. 16-byte accesses from each row's boundary, the cut vectors
//      element by element ................ 0.91† (8192×50257 0.93†, 471e06a)
//   3. 2 with its exponentials by EX2 alone (row_exp<true>, rows of up to
//      65,536; $VKERN_SOFTMAX_FTZ=0 keeps 2), as cross_entropy's variant
//      4. On an H200 (docs/softmax-ftz-h200, one call, two rounds
//      alternating, shares of a 4.25 TB/s copy floor): 4096×50257 252.6–
//      252.9 µs (0.77) against 273.9–274.4 (0.71), 8192×50257 0.79 against
//      0.73, 8192×50304 0.83 against 0.77; 8192×32768, whose rows keep
//      their exps (one exponential an element), 0.75 either way (used).
// - softmax_grad, 4096×50257:
//   1. staged, 2-byte accesses ................................... 0.76†
//   2. staged, 16-byte accesses from each row's boundary (used)
//      ................................ 0.90† (8192×50257 0.91†, 471e06a)
// - softmax_grad, 8192×50304:
//   1. segmented, two kernels, rows read twice .................... 0.607
//   2. staged in shared memory, 512 threads a block ................ 0.934
//   3. staged, 1,024 threads a block (more loads in flight; used) .. 0.964
//   4. cluster of 2 blocks, rows in registers ..................... 0.953*
// - softmax_grad, 2048×131072 (512×524288):
//   1. segmented ............................................. 0.603 (0.603)
//   2. staged in shared memory, cluster of 3 (10) .......... 0.911* (0.610*)
//   3. cluster of 4 (16), 32,768 elements a block (used) ..... 0.945 (0.791)
//   4. cluster of 8, 16,384 elements a block, 2 blocks an SM ...... 0.861*
//   A cluster of 10 blocks of 1,024 threads leaves SMs idle: few such
//   clusters fit in a GPC at once.
// - softmax, 2048×131072 (512×524288):
//   1. segmented ............................................. 0.649 (0.649)
//   2. cluster of 4 (16), partials read one after another, then
//      cooperative_groups' barrier ............................... 0.622*
//   3. one parallel read of the partials, relaxed barrier (used) 0.847 (0.765)
//   4. as 3, with the next row's loads issued after the barrier (128
//      registers: one block an SM instead of two) ........ 0.749* (0.686*)
// - C <= 1,024, 32768×1024, softmax / softmax_grad (all *): a warp per row
//   with 4 rows a block (used), 2 or 1, or a block of 64 or 128 threads per
//   row: all 0.87 / 0.92 within 0.01; a persistent grid whose warps load
//   their next row before reducing this one: 0.81 / 0.89.
//
// Scratch (the segmented path only): see ops.cuh.
#include <cstdint>

#include "core/backend.h"
#include "cuda/compat.h"
#include "cuda/env.h"
#include "cuda/ops.cuh"
#include "cuda/rows.cuh"

#if !defined(__HIP_PLATFORM_AMD__)
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#endif

#if defined(VKERN_SOFTMAX_TUNING)
// Tests only: picks the kernel for 16,384 < C <= 32,768. softmax: 0: 1,024
// threads × 32 elements, 1: 512 × 64, 2: 256 × 128; softmax_grad: 1:
// 1,024 × 32, otherwise 512 × 64. For rows longer than those: 3: the
// segmented path; 4: softmax_grad staged with 512 threads (else
// segmented). −1: the normal choice.
int vk_softmax_tuning_config = -1;
#endif

namespace {
namespace vkern_softmax {

using namespace vkern_rows;  // rows.cuh

// ---------------------------------------------------------------------------
// Rows on chip.

// softmax_rows: RPB rows per block of T·RPB threads (RPB > 1 only for T = 32),
// its exponentials by EX2 alone with kFtz (rows.cuh's row_exp).
template <int T, int RPB, int E, int VW, bool kFtz>
__global__ void __launch_bounds__(T* RPB)
    softmax_rows(const __half* __restrict__ X, __half* __restrict__ Y, int64_t R, int64_t C) {
  static_assert(T == 32 || RPB == 1, "several rows per block only with a warp per row");
  __shared__ float red[T / 32];
  const int t = threadIdx.x % T;
  const int cols = static_cast<int>(C);  // a row's extent <= T·E here
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * RPB + threadIdx.x / T; r < R;
       r += static_cast<int64_t>(gridDim.x) * RPB) {
    RowSlice<T, E, VW> x;
    x.load_row(X + r * C, cols, t, kNegInfPair);
    float m = neg_inf();
    m = fmaxf(m, max_of(x.w));
    m = row_max<T>(m, red);
    launder(x.w);
    float s = 0.0f;
    __half* y = Y + r * C;
    if (KeepExps<T, E>::value) {
      float e[E];
#pragma unroll
      for (int i = 0; i < E; ++i) {
        e[i] = row_exp<kFtz>(element(x.w, i) - m);
        s += e[i];
      }
      s = row_sum<T>(s, red);
      const float inv = 1.0f / s;
      RowSlice<T, E, VW>::store_row(y, cols, t, [&](int i) { return pack(e[2 * i] * inv, e[2 * i + 1] * inv); });
    } else {
#pragma unroll
      for (int i = 0; i < E; ++i) s += row_exp<kFtz>(element(x.w, i) - m);
      s = row_sum<T>(s, red);
      launder(x.w);
      const float inv = 1.0f / s;
      RowSlice<T, E, VW>::store_row(y, cols, t, [&](int i) {
        return pack(row_exp<kFtz>(element(x.w, 2 * i) - m) * inv, row_exp<kFtz>(element(x.w, 2 * i + 1) - m) * inv);
      });
    }
  }
}

template <int T, int RPB, int E, int VW>
__global__ void __launch_bounds__(T* RPB)
    softmax_grad_rows(const __half* __restrict__ dY, const __half* __restrict__ Y, __half* __restrict__ dX, int64_t R,
                      int64_t C) {
  static_assert(T == 32 || RPB == 1, "several rows per block only with a warp per row");
  __shared__ float red[T / 32];
  const int t = threadIdx.x % T;
  const int cols = static_cast<int>(C);  // a row's extent <= T·E here
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * RPB + threadIdx.x / T; r < R;
       r += static_cast<int64_t>(gridDim.x) * RPB) {
    RowSlice<T, E, VW> g, y;
    g.load_row(dY + r * C, cols, t, 0u);
    y.load_row(Y + r * C, cols, t, 0u);
    float d = 0.0f;
#pragma unroll
    for (int i = 0; i < E; ++i) d = fmaf(element(g.w, i), element(y.w, i), d);
    d = row_sum<T>(d, red);
    launder(g.w);
    launder(y.w);
    RowSlice<T, E, VW>::store_row(dX + r * C, cols, t, [&](int i) {
      return pack(element(y.w, 2 * i) * (element(g.w, 2 * i) - d),
                  element(y.w, 2 * i + 1) * (element(g.w, 2 * i + 1) - d));
    });
  }
}

// ---------------------------------------------------------------------------
// Long rows: segments of kSegment elements (rows.cuh's RowPiece), job = row ·
// P + segment.

template <int VW>
__global__ void __launch_bounds__(kSegmentThreads)
    softmax_segment_stats(const __half* __restrict__ X, float2* __restrict__ partials, int64_t R, int64_t C, int64_t P) {
  __shared__ float red[kSegmentThreads / 32];
  const int t = threadIdx.x;
  for (int64_t job = blockIdx.x; job < R * P; job += gridDim.x) {
    const int64_t r = job / P;
    const RowPiece piece = RowPiece::of(C, lead_of<VW>(X + r * C), job % P, kSegment);
    RowSlice<kSegmentThreads, kSegmentElems, VW> x;
    x.load_row(X + r * C + piece.first, piece.cols, t, kNegInfPair);
    const float2 stats = slice_stats(x, red);
    if (t == 0) partials[job] = stats;
  }
}

template <int VW>
__global__ void __launch_bounds__(kSegmentThreads)
    softmax_segment_write(const __half* __restrict__ X, __half* __restrict__ Y, const float2* __restrict__ partials,
                          int64_t R, int64_t C, int64_t P) {
  __shared__ float red[kSegmentThreads / 32];
  const int t = threadIdx.x;
  for (int64_t job = blockIdx.x; job < R * P; job += gridDim.x) {
    const int64_t r = job / P;
    const RowPiece piece = RowPiece::of(C, lead_of<VW>(X + r * C), job % P, kSegment);
    const float2* part = partials + r * P;
    float m = neg_inf();
    for (int64_t i = t; i < P; i += kSegmentThreads) m = fmaxf(m, part[i].x);
    m = row_max<kSegmentThreads>(m, red);
    float s = 0.0f;
    for (int64_t i = t; i < P; i += kSegmentThreads) {
      const float2 p = part[i];
      s += p.x == m ? p.y : p.y * exp_of(p.x - m);
    }
    s = row_sum<kSegmentThreads>(s, red);
    const float inv = 1.0f / s;
    RowSlice<kSegmentThreads, kSegmentElems, VW> x;
    x.load_row(X + r * C + piece.first, piece.cols, t, kNegInfPair);
    RowSlice<kSegmentThreads, kSegmentElems, VW>::store_row(Y + r * C + piece.first, piece.cols, t, [&](int i) {
      return pack(exp_of(element(x.w, 2 * i) - m) * inv, exp_of(element(x.w, 2 * i + 1) - m) * inv);
    });
  }
}

template <int VW>
__global__ void __launch_bounds__(kSegmentThreads)
    softmax_grad_segment_dots(const __half* __restrict__ dY, const __half* __restrict__ Y, float* __restrict__ partials,
                              int64_t R, int64_t C, int64_t P) {
  __shared__ float red[kSegmentThreads / 32];
  const int t = threadIdx.x;
  for (int64_t job = blockIdx.x; job < R * P; job += gridDim.x) {
    const int64_t r = job / P;
    const RowPiece piece = RowPiece::of(C, lead_of<VW>(dY + r * C), job % P, kSegment);
    // The piece is the span [lo, hi) from its 16-byte boundary, read in
    // slices of 8 elements a thread from there.
    const int64_t start = r * C + piece.first;
    const int lo = lead_of<VW>(dY + start), hi = lo + piece.cols;
    const int64_t boundary = start - lo;
    float d = 0.0f;
#pragma unroll 4
    for (int base = 0; base < hi; base += kSegmentThreads * 8) {
      RowSlice<kSegmentThreads, 8, VW> g, y;
      g.load_span(dY + boundary + base, lo - base, hi - base, t, 0u);
      y.load_span(Y + boundary + base, lo - base, hi - base, t, 0u);
#pragma unroll
      for (int i = 0; i < 8; ++i) d = fmaf(element(g.w, i), element(y.w, i), d);
    }
    d = row_sum<kSegmentThreads>(d, red);
    if (t == 0) partials[job] = d;
  }
}

template <int VW>
__global__ void __launch_bounds__(kSegmentThreads)
    softmax_grad_segment_write(const __half* __restrict__ dY, const __half* __restrict__ Y, __half* __restrict__ dX,
                               const float* __restrict__ partials, int64_t R, int64_t C, int64_t P) {
  __shared__ float red[kSegmentThreads / 32];
  const int t = threadIdx.x;
  for (int64_t job = blockIdx.x; job < R * P; job += gridDim.x) {
    const int64_t r = job / P;
    const RowPiece piece = RowPiece::of(C, lead_of<VW>(dY + r * C), job % P, kSegment);
    float d = 0.0f;
    for (int64_t i = t; i < P; i += kSegmentThreads) d += partials[r * P + i];
    d = row_sum<kSegmentThreads>(d, red);
    // d is known, so the segment streams through in slices of 8 elements a
    // thread, holding nothing between slices (laid as in the dots kernel).
    const int64_t start = r * C + piece.first;
    const int lo = lead_of<VW>(dY + start), hi = lo + piece.cols;
    const int64_t boundary = start - lo;
#pragma unroll 4
    for (int base = 0; base < hi; base += kSegmentThreads * 8) {
      RowSlice<kSegmentThreads, 8, VW> g, y;
      g.load_span(dY + boundary + base, lo - base, hi - base, t, 0u);
      y.load_span(Y + boundary + base, lo - base, hi - base, t, 0u);
      RowSlice<kSegmentThreads, 8, VW>::store_span(dX + boundary + base, lo - base, hi - base, t, [&](int i) {
        return pack(element(y.w, 2 * i) * (element(g.w, 2 * i) - d),
                    element(y.w, 2 * i + 1) * (element(g.w, 2 * i + 1) - d));
      });
    }
  }
}

#if !defined(__HIP_PLATFORM_AMD__)
// ---------------------------------------------------------------------------
// Long rows of softmax_grad that fit in shared memory (CUDA only: 4·extent
// bytes, up to 227 KB a block on Hopper; HIP's 64 KB LDS holds no row the
// register path does not).
//
// One block of T threads per SM walks rows r, r + G, r + 2G, … (G blocks).
// Thread t owns vectors t, t + T, … of a row and the same slots of the
// stage, so no thread reads a slot another wrote and the stage needs no
// barrier: it is spill space that keeps the registers free for loads in
// flight. While a thread stores dX for row r from its slots, it loads row
// r + G into the same slots and sums that row's partial dot product, so
// the loads of one row overlap the stores of the last and each input
// element is read from device memory once. The only barrier per row is the
// dot product's reduction. A row is laid from the 16-byte boundary at or
// before its start (rows.cuh's RowSlice), so rows that start anywhere keep
// 16-byte accesses; a row's vectors, and so the slots it uses, depend on
// its lead, and the stage holds the most any row needs.

// Access<VW>: one load or store of VW f16 elements, vector j of a row laid
// as the span [lo, hi) of base.
template <int VW>
struct Access;
template <>
struct Access<8> {
  using type = uint4;
  __device__ static bool inside(int j, int lo, int hi) { return 8 * j >= lo && 8 * j + 8 <= hi; }
  // A cut vector's elements outside the span are read as 0 (adding 0 to
  // the dot product) and not written.
  __device__ static uint4 load(const uint4* base, int j, int lo, int hi) {
    if (inside(j, lo, hi)) return VK_LDG(base + j);
    return load_cut(reinterpret_cast<const __half*>(base + j), lo - 8 * j, hi - 8 * j, 0u);
  }
  __device__ static void store(uint4* base, int j, int lo, int hi, uint4 v) {
    if (inside(j, lo, hi)) {
      base[j] = v;
    } else {
      store_cut(reinterpret_cast<__half*>(base + j), lo - 8 * j, hi - 8 * j, v);
    }
  }
  __device__ static float dot(uint4 g, uint4 y, float d) {
    const uint32_t gw[4] = {g.x, g.y, g.z, g.w}, yw[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      d = fmaf(half_lo(gw[i]), half_lo(yw[i]), d);
      d = fmaf(half_hi(gw[i]), half_hi(yw[i]), d);
    }
    return d;
  }
  __device__ static uint4 grad(uint4 g, uint4 y, float d) {
    const uint32_t gw[4] = {g.x, g.y, g.z, g.w}, yw[4] = {y.x, y.y, y.z, y.w};
    uint32_t o[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      o[i] = pack(half_lo(yw[i]) * (half_lo(gw[i]) - d), half_hi(yw[i]) * (half_hi(gw[i]) - d));
    return make_uint4(o[0], o[1], o[2], o[3]);
  }
};
template <>
struct Access<1> {
  using type = unsigned short;
  // lo = 0 and j < hi: nothing is cut.
  __device__ static unsigned short load(const unsigned short* base, int j, int, int) { return VK_LDG(base + j); }
  __device__ static void store(unsigned short* base, int j, int, int, unsigned short v) { base[j] = v; }
  __device__ static float to_float(unsigned short h) { return __half2float(__ushort_as_half(h)); }
  __device__ static float dot(unsigned short g, unsigned short y, float d) { return fmaf(to_float(g), to_float(y), d); }
  __device__ static unsigned short grad(unsigned short g, unsigned short y, float d) {
    return __half_as_ushort(__float2half_rn(to_float(y) * (to_float(g) - d)));
  }
};

// kStagedUnroll vectors of each input are loaded before the first is used.
constexpr int kStagedUnroll = 4;

// StagedRow: row r laid from the 16-byte boundary at or before its start,
// as the span [lo, hi) of n vectors (lo = 0 and n = C with VW = 1).
template <int VW>
struct StagedRow {
  int64_t boundary;  // element offset of the boundary in dY, Y and dX
  int lo, hi, n;
  __device__ static StagedRow of(const __half* dY, int64_t r, int64_t C) {
    StagedRow row;
    row.lo = lead_of<VW>(dY + r * C);
    row.boundary = r * C - row.lo;
    row.hi = row.lo + static_cast<int>(C);
    row.n = static_cast<int>(ceil_div(row.hi, VW));
    return row;
  }
};

// slots: the stage's vectors per input, ⌈extent / VW⌉ (rows.cuh's
// row_extent), at least any row's n.
template <int T, int VW>
__global__ void __launch_bounds__(T, 1)
    softmax_grad_staged(const __half* __restrict__ dY, const __half* __restrict__ Y, __half* __restrict__ dX,
                        int64_t R, int64_t C, int slots) {
  using A = Access<VW>;
  using V = typename A::type;
  extern __shared__ uint4 stage_words[];  // uint4 for its 16-byte alignment
  V* stage_g = reinterpret_cast<V*>(stage_words);
  V* stage_y = stage_g + slots;
  float* red = reinterpret_cast<float*>(stage_y + slots);
  const int t = threadIdx.x;
  int64_t r = blockIdx.x;  // the grid has at most R blocks

  // The first row: into the stage, and its dot product.
  StagedRow<VW> row = StagedRow<VW>::of(dY, r, C);
  float d = 0.0f;
  {
    const V* g = reinterpret_cast<const V*>(dY + row.boundary);
    const V* y = reinterpret_cast<const V*>(Y + row.boundary);
    for (int base = t; base < row.n; base += kStagedUnroll * T) {
      V gv[kStagedUnroll], yv[kStagedUnroll];
#pragma unroll
      for (int u = 0; u < kStagedUnroll; ++u) {
        const int j = base + u * T;
        if (j < row.n) gv[u] = A::load(g, j, row.lo, row.hi), yv[u] = A::load(y, j, row.lo, row.hi);
      }
#pragma unroll
      for (int u = 0; u < kStagedUnroll; ++u) {
        const int j = base + u * T;
        if (j < row.n) stage_g[j] = gv[u], stage_y[j] = yv[u], d = A::dot(gv[u], yv[u], d);
      }
    }
  }
  d = row_sum<T>(d, red);

  for (;;) {
    const int64_t next = r + gridDim.x;
    V* dx = reinterpret_cast<V*>(dX + row.boundary);
    if (next >= R) {  // the last row: only the stores
      for (int j = t; j < row.n; j += T) A::store(dx, j, row.lo, row.hi, A::grad(stage_g[j], stage_y[j], d));
      return;
    }
    const StagedRow<VW> after = StagedRow<VW>::of(dY, next, C);
    const V* g = reinterpret_cast<const V*>(dY + after.boundary);
    const V* y = reinterpret_cast<const V*>(Y + after.boundary);
    const int n = row.n > after.n ? row.n : after.n;
    float dn = 0.0f;
    for (int base = t; base < n; base += kStagedUnroll * T) {
      V gv[kStagedUnroll], yv[kStagedUnroll];
#pragma unroll
      for (int u = 0; u < kStagedUnroll; ++u) {
        const int j = base + u * T;
        if (j < after.n) gv[u] = A::load(g, j, after.lo, after.hi), yv[u] = A::load(y, j, after.lo, after.hi);
      }
      // This row's stores go out before the first of the next row's loads
      // is waited on.
#pragma unroll
      for (int u = 0; u < kStagedUnroll; ++u) {
        const int j = base + u * T;
        if (j < row.n) A::store(dx, j, row.lo, row.hi, A::grad(stage_g[j], stage_y[j], d));
      }
#pragma unroll
      for (int u = 0; u < kStagedUnroll; ++u) {
        const int j = base + u * T;
        if (j < after.n) stage_g[j] = gv[u], stage_y[j] = yv[u], dn = A::dot(gv[u], yv[u], dn);
      }
    }
    d = row_sum<T>(dn, red);
    r = next;
    row = after;
  }
}

// ---------------------------------------------------------------------------
// Rows too long for one SM, on Hopper: a cluster of P <= 16 blocks (more
// than 8 is a non-portable size) holds the row, block k the k-th of P equal
// segments (a multiple of VW elements, cut from the 16-byte boundary at or
// before the row's start) in registers as on the one-pass path. Each block publishes its segment's partial (softmax: (max,
// Σ exp(x − max)); softmax_grad: the dot product) in its shared memory;
// after one cluster barrier lane k of every warp reads block k's partial
// through distributed shared memory, the warp combines them as the
// segmented path's second kernel does, and each block writes its segment
// from registers: each element is read once. Clusters walk the rows in a
// grid-stride loop. The partials are double-buffered by row parity: a
// thread uses what it read from its peers before it next arrives at the
// barrier, so a slot rewritten two rows later is no longer read. A last
// barrier keeps each block's shared memory alive until its peers are done
// with it.
//
// Segment capacity: E = 64 elements a thread, 512 threads. softmax then
// needs 64 registers in all, so two blocks share an SM and one loads while
// the other computes; softmax_grad holds two inputs (128 registers, one
// block an SM). 2-byte accesses (VW = 1) need an address and a predicate
// per element, so they hold E = 32.

// publish_partial stores v in *slot (thread 0) and waits at the cluster
// barrier, after which every block's slot may be read. Only the publishing
// thread fences (release at cluster scope, which waits for all its earlier
// memory operations); the others arrive relaxed, so that their stores still
// in flight do not hold the barrier.
template <class V>
__device__ __forceinline__ void publish_partial(V* slot, V v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (threadIdx.x == 0) {
    *slot = v;
    asm volatile("fence.acq_rel.cluster;" ::: "memory");
  }
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
#else
  (void)slot;
  (void)v;
#endif
}

// cluster_partial: lane k of the warp reads block k's *slot (k < P) in one
// round trip; other lanes get fill.
template <class V>
__device__ __forceinline__ V cluster_partial(const V* slot, int P, V fill) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int lane = threadIdx.x & 31;
  return lane < P ? *cg::this_cluster().map_shared_rank(slot, lane) : fill;
#else
  (void)slot;
  (void)P;
  return fill;  // clusters are launched on compute capability 9 and up only
#endif
}

// ClusterPart: the cluster's P blocks, of which this block is the rank-th.
// piece is the columns of a row it holds: the row, laid from the 16-byte
// boundary at or before its start (lead elements before it), cut into P
// equal pieces of a multiple of VW elements (rows.cuh's RowPiece).
struct ClusterPart {
  int P, rank;
  __device__ static ClusterPart of() {
    ClusterPart part{1, 0};
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    part.P = static_cast<int>(cg::this_cluster().num_blocks());
    part.rank = static_cast<int>(cg::this_cluster().block_rank());
#endif
    return part;
  }
  template <int VW>
  __device__ RowPiece piece(int64_t C, int lead) const {
    return RowPiece::of(C, lead, rank, ceil_div(ceil_div(C + lead, P), VW) * VW);
  }
};

template <int VW>
struct SoftmaxClusterElems {
  static constexpr int value = VW == 8 ? 64 : 32;
};

template <int VW>
__global__ void __launch_bounds__(kSegmentThreads)
    softmax_cluster(const __half* __restrict__ X, __half* __restrict__ Y, int64_t R, int64_t C) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int E = SoftmaxClusterElems<VW>::value;
  using Slice = RowSlice<kSegmentThreads, E, VW>;
  __shared__ float red[kSegmentThreads / 32];
  __shared__ float2 partial[2];
  const ClusterPart part = ClusterPart::of();
  const int t = threadIdx.x;
  int parity = 0;
  for (int64_t r = blockIdx.x / part.P; r < R; r += gridDim.x / part.P, parity ^= 1) {
    const RowPiece piece = part.piece<VW>(C, lead_of<VW>(X + r * C));
    Slice x;
    x.load_row(X + r * C + piece.first, piece.cols, t, kNegInfPair);
    publish_partial(&partial[parity], slice_stats(x, red));
    // Lanes past P hold (−Inf, 0), which adds 0 whatever m is.
    const float2 p = cluster_partial(&partial[parity], part.P, make_float2(neg_inf(), 0.0f));
    const float m = row_max<32>(p.x, nullptr);
    const float s = row_sum<32>(p.x == m ? p.y : p.y * exp_of(p.x - m), nullptr);
    const float inv = 1.0f / s;
    launder(x.w);
    Slice::store_row(Y + r * C + piece.first, piece.cols, t, [&](int i) {
      return pack(exp_of(element(x.w, 2 * i) - m) * inv, exp_of(element(x.w, 2 * i + 1) - m) * inv);
    });
  }
  cg::this_cluster().sync();
#endif
}

template <int VW>
__global__ void __launch_bounds__(kSegmentThreads)
    softmax_grad_cluster(const __half* __restrict__ dY, const __half* __restrict__ Y, __half* __restrict__ dX,
                         int64_t R, int64_t C) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int E = SoftmaxClusterElems<VW>::value;
  using Slice = RowSlice<kSegmentThreads, E, VW>;
  __shared__ float red[kSegmentThreads / 32];
  __shared__ float partial[2];
  const ClusterPart part = ClusterPart::of();
  const int t = threadIdx.x;
  int parity = 0;
  for (int64_t r = blockIdx.x / part.P; r < R; r += gridDim.x / part.P, parity ^= 1) {
    const RowPiece piece = part.piece<VW>(C, lead_of<VW>(dY + r * C));
    Slice g, y;
    g.load_row(dY + r * C + piece.first, piece.cols, t, 0u);
    y.load_row(Y + r * C + piece.first, piece.cols, t, 0u);
    float d = 0.0f;
#pragma unroll
    for (int i = 0; i < E; ++i) d = fmaf(element(g.w, i), element(y.w, i), d);
    d = row_sum<kSegmentThreads>(d, red);
    publish_partial(&partial[parity], d);
    d = row_sum<32>(cluster_partial(&partial[parity], part.P, 0.0f), nullptr);
    launder(g.w);
    launder(y.w);
    Slice::store_row(dX + r * C + piece.first, piece.cols, t, [&](int i) {
      return pack(element(y.w, 2 * i) * (element(g.w, 2 * i) - d),
                  element(y.w, 2 * i + 1) * (element(g.w, 2 * i + 1) - d));
    });
  }
  cg::this_cluster().sync();
#endif
}

#endif  // !__HIP_PLATFORM_AMD__

// ---------------------------------------------------------------------------
// Host side.

// scratch returns at least bytes of device memory shared by all calls (see
// ops.cuh), growing it when needed.
cudaError_t scratch(size_t bytes, void** out) {
  static ScratchBuffer buffer;
  return buffer.get(bytes, out);
}

// ftz_exps: softmax_rows's exponentials by EX2 alone (variant 3 of the
// rows kernel), unless $VKERN_SOFTMAX_FTZ=0 keeps exp2f.
inline bool ftz_exps() {
  static const bool chosen = vkern_env::on_off("VKERN_SOFTMAX_FTZ", true);
  return chosen;
}

template <int T, int RPB, int E, int VW>
cudaError_t launch_softmax_rows(const __half* X, __half* Y, int64_t R, int64_t C, cudaStream_t s) {
  const auto kernel = ftz_exps() ? softmax_rows<T, RPB, E, VW, true> : softmax_rows<T, RPB, E, VW, false>;
  kernel<<<grid_for(ceil_div(R, RPB)), T * RPB, 0, s>>>(X, Y, R, C);
  return cudaGetLastError();
}

template <int T, int RPB, int E, int VW>
cudaError_t launch_softmax_grad_rows(const __half* dY, const __half* Y, __half* dX, int64_t R, int64_t C,
                                     cudaStream_t s) {
  softmax_grad_rows<T, RPB, E, VW><<<grid_for(ceil_div(R, RPB)), T * RPB, 0, s>>>(dY, Y, dX, R, C);
  return cudaGetLastError();
}

#if !defined(__HIP_PLATFORM_AMD__)
// launch_rows launches kernel over R rows with T threads a block and
// shared_bytes of dynamic shared memory: in clusters of P blocks, one row a
// cluster at a time, as many clusters as the device holds at once (at most
// R); P = 1 is a plain launch of as many blocks as fit. A cluster shape the
// device refuses or cannot hold launches nothing. *launched says whether it
// launched.
template <class... Params, class... Args>
cudaError_t launch_rows(void (*kernel)(Params...), int P, int T, size_t shared_bytes, int64_t R, cudaStream_t s,
                        bool* launched, Args... args) {
  *launched = false;
  const DeviceLimits& limits = device_limits();
  if (limits.err != cudaSuccess) return limits.err;
  if (P > 1 && (limits.major < 9 || P > 16)) return cudaSuccess;
  cudaError_t err = cudaSuccess;
  if (shared_bytes > 0)
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared_bytes));
  if (err == cudaSuccess && P > 8) err = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  if (err != cudaSuccess) return err;
  if (P == 1) {
    int per_sm = 0;
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, T, shared_bytes);
    if (err != cudaSuccess || per_sm < 1) return err;
    const int64_t blocks = static_cast<int64_t>(limits.sms) * per_sm;
    kernel<<<grid_for(R < blocks ? R : blocks), T, shared_bytes, s>>>(args...);
    *launched = true;
    return cudaGetLastError();
  }
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(P);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(P));
  config.blockDim = dim3(static_cast<unsigned>(T));
  config.dynamicSmemBytes = shared_bytes;
  config.stream = s;
  config.attrs = &attribute;
  config.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
    (void)cudaGetLastError();  // a cluster shape this device refuses: the caller's fallback instead
    return cudaSuccess;
  }
  if (clusters < 1) return cudaSuccess;
  config.gridDim = dim3(static_cast<unsigned>(P * (R < clusters ? R : clusters)));
  err = cudaLaunchKernelEx(&config, kernel, args...);
  *launched = true;
  return err != cudaSuccess ? err : cudaGetLastError();
}

// launch_softmax_grad_staged launches softmax_grad_staged when both inputs'
// rows fit in one block's shared memory (⌈extent / VW⌉ vectors of each).
template <int T, int VW>
cudaError_t launch_softmax_grad_staged(const __half* dY, const __half* Y, __half* dX, int64_t R, int64_t C,
                                       int64_t extent, cudaStream_t s, bool* launched) {
  *launched = false;
  const DeviceLimits& limits = device_limits();
  if (limits.err != cudaSuccess) return limits.err;
  const int64_t slots = ceil_div(extent, VW);
  const int64_t bytes = 2 * slots * static_cast<int64_t>(sizeof(typename Access<VW>::type)) +
                        T / 32 * static_cast<int64_t>(sizeof(float));
  if (bytes > limits.shared_bytes) return cudaSuccess;
  return launch_rows(softmax_grad_staged<T, VW>, 1, T, static_cast<size_t>(bytes), R, s, launched, dY, Y, dX, R, C,
                     static_cast<int>(slots));
}

// launch_softmax_cluster and launch_softmax_grad_cluster launch the cluster
// kernels with P = ⌈extent / (512·E)⌉ when P <= 16.
template <int VW>
cudaError_t launch_softmax_cluster(const __half* X, __half* Y, int64_t R, int64_t C, int64_t extent, cudaStream_t s,
                                   bool* launched) {
  *launched = false;
  const int64_t P = ceil_div(extent, int64_t{kSegmentThreads} * SoftmaxClusterElems<VW>::value);
  if (P > 16) return cudaSuccess;
  return launch_rows(softmax_cluster<VW>, static_cast<int>(P), kSegmentThreads, 0, R, s, launched, X, Y, R, C);
}

template <int VW>
cudaError_t launch_softmax_grad_cluster(const __half* dY, const __half* Y, __half* dX, int64_t R, int64_t C,
                                        int64_t extent, cudaStream_t s, bool* launched) {
  *launched = false;
  const int64_t P = ceil_div(extent, int64_t{kSegmentThreads} * SoftmaxClusterElems<VW>::value);
  if (P > 16) return cudaSuccess;
  return launch_rows(softmax_grad_cluster<VW>, static_cast<int>(P), kSegmentThreads, 0, R, s, launched, dY, Y, dX,
                     R, C);
}
#endif

// softmax_with and softmax_grad_with pick the kernels by a row's extent
// (rows.cuh's row_extent; C with 2-byte accesses).
template <int VW>
cudaError_t softmax_with(const __half* X, __half* Y, int64_t R, int64_t C, int64_t extent, cudaStream_t s) {
  if (extent <= 256) return launch_softmax_rows<32, 8, 8, VW>(X, Y, R, C, s);
  if (extent <= 512) return launch_softmax_rows<32, 8, 16, VW>(X, Y, R, C, s);
  if (extent <= 1024) return launch_softmax_rows<32, 4, 32, VW>(X, Y, R, C, s);
  if (extent <= 2048) return launch_softmax_rows<64, 1, 32, VW>(X, Y, R, C, s);
  if (extent <= 4096) return launch_softmax_rows<128, 1, 32, VW>(X, Y, R, C, s);
  if (extent <= 8192) return launch_softmax_rows<256, 1, 32, VW>(X, Y, R, C, s);
  if (extent <= 16384) return launch_softmax_rows<512, 1, 32, VW>(X, Y, R, C, s);
  if (extent <= 32768) {
#if defined(VKERN_SOFTMAX_TUNING)
    if (vk_softmax_tuning_config == 1) return launch_softmax_rows<512, 1, 64, VW>(X, Y, R, C, s);
    if (vk_softmax_tuning_config == 2) return launch_softmax_rows<256, 1, 128, VW>(X, Y, R, C, s);
#endif
    return launch_softmax_rows<1024, 1, 32, VW>(X, Y, R, C, s);
  }
  if (extent <= 65536) return launch_softmax_rows<512, 1, 128, VW>(X, Y, R, C, s);
#if !defined(__HIP_PLATFORM_AMD__)
#if defined(VKERN_SOFTMAX_TUNING)
  if (vk_softmax_tuning_config != 3)
#endif
  {
    bool launched = false;
    const cudaError_t err = launch_softmax_cluster<VW>(X, Y, R, C, extent, s, &launched);
    if (err != cudaSuccess || launched) return err;
  }
#endif

  const int64_t P = ceil_div(extent, kSegment);
  void* buffer = nullptr;
  const cudaError_t err = scratch(static_cast<size_t>(R * P) * sizeof(float2), &buffer);
  if (err != cudaSuccess) return err;
  float2* partials = static_cast<float2*>(buffer);
  softmax_segment_stats<VW><<<grid_for(R * P), kSegmentThreads, 0, s>>>(X, partials, R, C, P);
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) return launched;
  softmax_segment_write<VW><<<grid_for(R * P), kSegmentThreads, 0, s>>>(X, Y, partials, R, C, P);
  return cudaGetLastError();
}

template <int VW>
cudaError_t softmax_grad_with(const __half* dY, const __half* Y, __half* dX, int64_t R, int64_t C, int64_t extent,
                              cudaStream_t s) {
  if (extent <= 256) return launch_softmax_grad_rows<32, 8, 8, VW>(dY, Y, dX, R, C, s);
  if (extent <= 512) return launch_softmax_grad_rows<32, 8, 16, VW>(dY, Y, dX, R, C, s);
  if (extent <= 1024) return launch_softmax_grad_rows<32, 4, 32, VW>(dY, Y, dX, R, C, s);
  if (extent <= 2048) return launch_softmax_grad_rows<64, 1, 32, VW>(dY, Y, dX, R, C, s);
  if (extent <= 4096) return launch_softmax_grad_rows<128, 1, 32, VW>(dY, Y, dX, R, C, s);
  if (extent <= 8192) return launch_softmax_grad_rows<256, 1, 32, VW>(dY, Y, dX, R, C, s);
  if (extent <= 16384) return launch_softmax_grad_rows<512, 1, 32, VW>(dY, Y, dX, R, C, s);
  if (extent <= 32768) {
#if defined(VKERN_SOFTMAX_TUNING)
    if (vk_softmax_tuning_config == 1) return launch_softmax_grad_rows<1024, 1, 32, VW>(dY, Y, dX, R, C, s);
#endif
    return launch_softmax_grad_rows<512, 1, 64, VW>(dY, Y, dX, R, C, s);
  }
#if !defined(__HIP_PLATFORM_AMD__)
  {
    bool launched = false;
    cudaError_t err = cudaSuccess;
#if defined(VKERN_SOFTMAX_TUNING)
    if (vk_softmax_tuning_config == 3) {
      // the segmented path below
    } else if (vk_softmax_tuning_config == 4) {
      err = launch_softmax_grad_staged<512, VW>(dY, Y, dX, R, C, extent, s, &launched);
    } else
#endif
    {
      err = launch_softmax_grad_staged<1024, VW>(dY, Y, dX, R, C, extent, s, &launched);
      if (err == cudaSuccess && !launched)
        err = launch_softmax_grad_cluster<VW>(dY, Y, dX, R, C, extent, s, &launched);
    }
    if (err != cudaSuccess || launched) return err;
  }
#endif

  const int64_t P = ceil_div(extent, kSegment);
  void* buffer = nullptr;
  const cudaError_t err = scratch(static_cast<size_t>(R * P) * sizeof(float), &buffer);
  if (err != cudaSuccess) return err;
  float* partials = static_cast<float*>(buffer);
  softmax_grad_segment_dots<VW><<<grid_for(R * P), kSegmentThreads, 0, s>>>(dY, Y, partials, R, C, P);
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) return launched;
  softmax_grad_segment_write<VW><<<grid_for(R * P), kSegmentThreads, 0, s>>>(dY, Y, dX, partials, R, C, P);
  return cudaGetLastError();
}

}  // namespace vkern_softmax
}  // namespace

cudaError_t vk_softmax(const __half* X, __half* Y, int64_t R, int64_t C, cudaStream_t s) {
  using namespace vkern_softmax;
  // 16-byte accesses wherever the rows start, when X's and Y's rows start
  // equally far past a 16-byte boundary.
  if (congruent16(X, Y)) return softmax_with<8>(X, Y, R, C, row_extent(C, X), s);
  return softmax_with<1>(X, Y, R, C, C, s);
}

cudaError_t vk_softmax_grad(const __half* dY, const __half* Y, __half* dX, int64_t R, int64_t C, cudaStream_t s) {
  using namespace vkern_softmax;
  if (congruent16(dY, Y) && congruent16(dY, dX)) return softmax_grad_with<8>(dY, Y, dX, R, C, row_extent(C, dY), s);
  return softmax_grad_with<1>(dY, Y, dX, R, C, C, s);
}

namespace vkern {

// The ops' entries (kernels.cu lists them).
cudaError_t run_softmax(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_softmax;
  return vk_softmax(c.ptr<const __half>(buf::X), c.ptr<__half>(buf::Y), c.params[param::R], c.params[param::C], s);
}

cudaError_t run_softmax_grad(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_softmax_grad;
  return vk_softmax_grad(c.ptr<const __half>(buf::dY), c.ptr<const __half>(buf::Y), c.ptr<__half>(buf::dX),
                         c.params[param::R], c.params[param::C], s);
}

}  // namespace vkern
