// attention and attention_grad on the GPU: causal multi-head attention from
// the fused projection qkv f16 (B·T)×3C, f32 inside; the math of
// kernels/cpu/attention.cc, with scores in base 2 (s₂ = q·k·α·log₂e, p =
// exp2f(s₂ − m₂)) and lse = (m₂ + log2f(l))·ln 2.
//
// Two paths:
//
// - Tensor cores (CUDA, compute capability 8.0 or more, head size D ≤ 128,
//   padded to DP = 16, 32, 64 or 128 with zeros), for inputs that are all
//   finite. Blocks of 4 warps own a 64-row tile of one (b, h); each warp 16
//   rows. Tiles of 64 keys (or queries) pass through shared memory (rows
//   padded by 16 bytes: the 32-bit fragment loads and ldmatrix are free of
//   bank conflicts) and the products are mma.sync.m16n8k16 (f16 × f16 + f32).
//   * forward_mma: one block per query tile, heaviest first; S = Q·Kᵀ per key
//     tile, the causal mask on the diagonal tile, an online softmax (running
//     max, rescales by exp2(m_old − m_new)), and O += P·V with P split into
//     two f16 halves, hi = f16(p), lo = f16((p − hi)·2¹¹), whose products are
//     summed apart and joined as hi·V + lo·V·2⁻¹¹: P·V then errs by 2⁻²²·P +
//     2⁻³⁶ where one f16 P would err by 2⁻¹¹·P. The row sums l add P in f32.
//   * backward: row_dots writes D = dy·y per row (f32 scratch); then
//     backward_dkdv_mma, one block per key tile (the first, heaviest, first),
//     walks the query tiles i ≥ j and keeps dk, dv in registers: Sᵀ = K·Qᵀ,
//     dPᵀ = V·dYᵀ, P = exp2(s₂ − lse₂), dS = P(dP − D), dv += Pᵀ·dY (P split
//     as above), dk += dSᵀ·Q; and backward_dq_mma, one block per query
//     tile, walks the key tiles j ≤ i: S, dP, P, dS again, dq += dS·K. Every
//     sum has one order: results are deterministic. dS, unbounded, is split
//     after scaling each row of a warp's tile by the power of two that puts
//     the row's largest |dS| in [2¹⁴, 2¹⁵) (frexpf, ldexpf: exact); the
//     row's products are summed in f32 and scaled back.
// - Exact rows (every other case: HIP, older GPUs, D > 128, and any call
//   whose inputs hold an infinity or a NaN): one warp per row of a head,
//   lanes across the head's columns (dot products reduced by shuffles), in
//   chunks of 128 columns; forward_rows takes the row's max in a first pass
//   and sums p and p·v with that max in a second (no rescales);
//   backward_dq_rows and backward_dkdv_rows recompute P and dS for each
//   pair. They follow the formula's IEEE rules exactly: a NaN or +Inf
//   score, or a row of only −Inf scores, makes the row NaN; 0·Inf is NaN;
//   pairs with j > i are never formed. (On tensor cores a masked key's
//   infinite v would meet p = 0 inside one mma, and a split of p·Inf gives
//   0·Inf from the low half: hence the route.)
//
// Which path a call takes is settled on the device: when the tensor-core
// path applies, find_specials first scans the inputs (qkv; for the
// backward also dy, y and lse) and sets a flag word in scratch; the
// tensor-core kernels return at once when it is set, the exact ones at once
// when it is clear. The host never waits.
//
// Accuracy, against the oracle's bounds (oracle/attention.go): products of
// f16 values are exact and mma.sync sums them in f32 (any order, fused);
// α·log₂e is rounded once on the host; exp2f and log2f are within 2 and 1
// ulps (the CUDA Math API's table; no -use_fast_math); the online pass
// rescales once per 64 keys (the bound allows one per 16); P and dS enter
// their tensor-core products split as described (the bound allows 2⁻²¹ of
// each element, 2⁻³⁶ absolute for P and 2⁻⁵⁰ of the row's largest |dS| for
// dS). f16 outputs are rounded once (__float2half_rn).
//
// Scratch (rows.cuh's ScratchBuffer, kept between calls): a 16-byte flag
// word, and for attention_grad 4·B·H·T bytes of D. cudaErrorMemoryAllocation
// when it cannot be had.
//
// Variants (one so far; the speed bar is PyTorch's math
// scaled_dot_product_attention at 16x1024x768x12, not yet measured here):
//   1. mma.sync tiles of 64, P and dS split into f16 halves, loads through
//      registers (no cp.async), two backward kernels.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/backend.h"
#include "cuda/compat.h"
#include "cuda/rows.cuh"

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

// Head views. Row t of sequence b of an operand whose rows hold width values
// starts at (b·T + t)·width; head h of part p (q 0, k 1, v 2; y and dy have
// only part 0) at column p·C + h·D.
struct Heads {
  int64_t B, T, C, H, D;
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

// find_specials16 sets *flag when any of the n f16 values is an infinity or a
// NaN (exponent bits all ones).
__global__ void find_specials16(const unsigned short* __restrict__ x, int64_t n, unsigned* flag) {
  bool found = false;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    found = found || (x[i] & 0x7c00u) == 0x7c00u;
  }
  if (found) atomicOr(flag, 1u);
}

__global__ void find_specials32(const unsigned* __restrict__ x, int64_t n, unsigned* flag) {
  bool found = false;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    found = found || (x[i] & 0x7f800000u) == 0x7f800000u;
  }
  if (found) atomicOr(flag, 1u);
}

// row_dots: dsum[(b·H + h)·T + t] = Σ_c dy·y over head h of token row
// b·T + t, one thread per (row, head), in column order.
__global__ void row_dots(const __half* __restrict__ dy, const __half* __restrict__ y, float* __restrict__ dsum,
                         Heads a) {
  const int64_t n = a.B * a.T * a.H;
  for (int64_t idx = blockIdx.x * int64_t{kThreads} + threadIdx.x; idx < n; idx += int64_t{gridDim.x} * kThreads) {
    const int64_t row = idx / a.H, h = idx % a.H;
    const __half* g = dy + row * a.C + h * a.D;
    const __half* v = y + row * a.C + h * a.D;
    float sum = 0.0f;
    for (int64_t c = 0; c < a.D; ++c) sum += __half2float(g[c]) * __half2float(v[c]);
    const int64_t b = row / a.T, t = row % a.T;
    dsum[(b * a.H + h) * a.T + t] = sum;
  }
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

constexpr int kTile = 64;  // rows of a block's tile, and keys (queries) of a streamed tile

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ldmatrix_x4_trans: lanes 8m .. 8m + 7 give the rows of 8×8 matrix m; r[m]
// receives its transposed fragment (stored rows 2·(lane % 4), +1 at column
// lane / 4): the B operand of mma_16816 from a k-major tile.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const __half* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// c += a · b for one m16n8k16 step: a row-major 16×16, b column-major 16×8.
// Lane l (g = l / 4, t = l % 4) holds a as rows g and g + 8, columns 2t, 2t +
// 1 and 2t + 8, 2t + 9 (a[0]: row g, a[1]: row g + 8, a[2], a[3] the same
// rows 8 columns on), b as rows 2t, 2t + 1 (b0) and 2t + 8, 2t + 9 (b1) of
// column g, and c as rows g (c[0], c[1]) and g + 8 (c[2], c[3]), columns 2t,
// 2t + 1.
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// lds32 reads the two halves at p (4-byte aligned) as one fragment register.
__device__ __forceinline__ uint32_t lds32(const __half* p) { return *reinterpret_cast<const uint32_t*>(p); }

__device__ __forceinline__ uint32_t halves(__half lo, __half hi) {
  return static_cast<uint32_t>(__half_as_ushort(lo)) | static_cast<uint32_t>(__half_as_ushort(hi)) << 16;
}

// split packs x0, x1 as f16 halves hi = f16(x), lo = f16((x − hi)·2¹¹), so
// that x ≈ hi + lo·2⁻¹¹ within 2⁻²²|x| + 2⁻³⁶.
__device__ __forceinline__ void split(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const __half h0 = __float2half_rn(x0), h1 = __float2half_rn(x1);
  hi = halves(h0, h1);
  lo = halves(__float2half_rn((x0 - __half2float(h0)) * 2048.0f), __float2half_rn((x1 - __half2float(h1)) * 2048.0f));
}

// scaled is x·2^shift when kShift (ldexpf: exact, whatever the range), x
// otherwise.
template <bool kShift>
__device__ __forceinline__ float scaled(float x, int shift) {
  return kShift ? ldexpf(x, shift) : x;
}

// split_tile turns a warp's 16 × 64 accumulator tile x (8 n-tiles of 8
// columns), each row r of the thread (g, g + 8) scaled by 2^−shift[r] when
// kShift, into the A fragments of the four 16-column k-steps: n-tiles 2k and
// 2k + 1 make k-step k.
template <bool kShift>
__device__ __forceinline__ void split_tile(const float (&x)[8][4], const int (&shift)[2], uint32_t (&hi)[4][4],
                                           uint32_t (&lo)[4][4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float(&n)[4] = x[2 * k + half];
      split(scaled<kShift>(n[0], -shift[0]), scaled<kShift>(n[1], -shift[0]), hi[k][2 * half], lo[k][2 * half]);
      split(scaled<kShift>(n[2], -shift[1]), scaled<kShift>(n[3], -shift[1]), hi[k][2 * half + 1],
            lo[k][2 * half + 1]);
    }
  }
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
    int e = 0;
    if (largest > 0.0f) frexpf(largest, &e);  // largest in [2^(e−1), 2^e)
    shift[r] = largest > 0.0f ? e - 15 : 0;
  }
}

// Shared-memory tiles: kTile rows of DP halves, padded by 8 halves (16
// bytes), so that a warp's 32-bit fragment loads (rows g, columns 2t) and
// ldmatrix's eight 16-byte rows fall in distinct banks.
template <int DP>
struct TileShape {
  static constexpr int kLd = DP + 8;
  static constexpr int kHalves = kTile * kLd;
  static constexpr int kSteps = DP / 16;  // k-steps of a product over the head's columns
  static constexpr int kNTiles = DP / 8;  // n-tiles of an output row of DP columns
};

// load_tile copies rows [row0, row0 + kTile) of a head (element (t, c) at
// src[t·width + c]) into dst, zero past T and past D: 16-byte copies when
// vec8 (D, C multiples of 8, 16-byte aligned base), else 2-byte ones.
template <int DP>
__device__ __forceinline__ void load_tile(__half* dst, const __half* src, int64_t width, int64_t row0, int64_t T,
                                          int64_t D, bool vec8) {
  constexpr int kLd = TileShape<DP>::kLd;
  if (vec8) {
    constexpr int kChunks = kTile * DP / 8;
    for (int idx = threadIdx.x; idx < kChunks; idx += kThreads) {
      const int r = idx / (DP / 8), c = idx % (DP / 8) * 8;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (row0 + r < T && c < D) v = *reinterpret_cast<const uint4*>(src + (row0 + r) * width + c);
      *reinterpret_cast<uint4*>(dst + r * kLd + c) = v;
    }
    return;
  }
  const unsigned short* s = reinterpret_cast<const unsigned short*>(src);
  unsigned short* d = reinterpret_cast<unsigned short*>(dst);
  for (int idx = threadIdx.x; idx < kTile * DP; idx += kThreads) {
    const int r = idx / DP, c = idx % DP;
    d[r * kLd + c] = row0 + r < T && c < D ? s[(row0 + r) * width + c] : 0;
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

// scores: x[n] += A·Bᵀ for the warp's 16 rows against the tile's 64 rows
// (n-tile n: tile rows 8n .. 8n + 7), over the head's columns: B's fragment
// is two 32-bit loads from tile row 8n + g.
template <int DP>
__device__ __forceinline__ void scores(const uint32_t (&a)[DP / 16][4], const __half* tile, int g, int t,
                                       float (&x)[8][4]) {
  constexpr int kLd = TileShape<DP>::kLd;
#pragma unroll
  for (int n = 0; n < 8; ++n) {
    const __half* p = tile + (n * 8 + g) * kLd + 2 * t;
#pragma unroll
    for (int k = 0; k < DP / 16; ++k) mma_16816(x[n], a[k], lds32(p + k * 16), lds32(p + k * 16 + 8));
  }
}

// product_split: for each n-tile of DP columns, out[n] += (hi·B + lo·B·2⁻¹¹)
// · 2^shift[row] (unscaled unless kShift), where B is the tile (64 rows of
// the k dimension × DP), read transposed by ldmatrix.
template <int DP, bool kShift>
__device__ __forceinline__ void product_split(const uint32_t (&hi)[4][4], const uint32_t (&lo)[4][4],
                                              const __half* tile, int lane, const int (&shift)[2],
                                              float (&out)[DP / 8][4]) {
  constexpr int kLd = TileShape<DP>::kLd;
  const __half* rows = tile + ((lane / 8) * 8 + lane % 8) * kLd;
#pragma unroll
  for (int n = 0; n < DP / 8; ++n) {
    float sum_hi[4] = {}, sum_lo[4] = {};
#pragma unroll
    for (int kp = 0; kp < 2; ++kp) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, rows + kp * 32 * kLd + n * 8);
      mma_16816(sum_hi, hi[2 * kp], b[0], b[1]);
      mma_16816(sum_lo, lo[2 * kp], b[0], b[1]);
      mma_16816(sum_hi, hi[2 * kp + 1], b[2], b[3]);
      mma_16816(sum_lo, lo[2 * kp + 1], b[2], b[3]);
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) out[n][e] += scaled<kShift>(sum_hi[e] + sum_lo[e] * (1.0f / 2048.0f), shift[e / 2]);
  }
}

template <int DP>
__global__ void __launch_bounds__(kThreads)
    forward_mma(const __half* __restrict__ qkv, __half* __restrict__ y, float* __restrict__ lse, Heads a,
                float scale2, bool vec8, const unsigned* __restrict__ special) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // the host never launches this below compute capability 8.0
#else
  if (*special != 0) return;
  using S = TileShape<DP>;
  extern __shared__ uint4 attention_shared[];
  __half* qs = reinterpret_cast<__half*>(attention_shared);
  __half* ks = qs + S::kHalves;
  __half* vs = ks + S::kHalves;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t width = 3 * a.C, tiles = ceil_div(a.T, kTile), heads = a.head_count();
  const int no_shift[2] = {0, 0};
  for (int64_t item = blockIdx.x; item < heads * tiles; item += gridDim.x) {
    const int64_t qt = tiles - 1 - item / heads, bh = item % heads, b = bh / a.H, h = bh % a.H;
    const __half* base = qkv + b * a.T * width + h * a.D;  // q of token 0; k at + C, v at + 2C
    __syncthreads();  // the last item's reads of qs are done
    load_tile<DP>(qs, base, width, qt * kTile, a.T, a.D, vec8);
    __syncthreads();
    uint32_t qa[S::kSteps][4];
    a_fragments<DP>(qs, warp * 16 + g, t, qa);
    const int64_t row[2] = {qt * kTile + warp * 16 + g, qt * kTile + warp * 16 + g + 8};
    float o[S::kNTiles][4] = {};
    float m[2] = {vkern_rows::neg_inf(), vkern_rows::neg_inf()}, l[2] = {0.0f, 0.0f};
    for (int64_t kt = 0; kt <= qt; ++kt) {
      __syncthreads();  // the last tile's reads of ks and vs are done
      load_tile<DP>(ks, base + a.C, width, kt * kTile, a.T, a.D, vec8);
      load_tile<DP>(vs, base + 2 * a.C, width, kt * kTile, a.T, a.D, vec8);
      __syncthreads();
      float s[8][4] = {};
      scores<DP>(qa, ks, g, t, s);
      const bool diagonal = kt == qt;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t key = kt * kTile + n * 8 + 2 * t + (e & 1);
          s[n][e] = diagonal && key > row[e / 2] ? vkern_rows::neg_inf() : s[n][e] * scale2;
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float largest = vkern_rows::neg_inf();
#pragma unroll
        for (int n = 0; n < 8; ++n) largest = fmaxf(largest, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
        largest = fmaxf(largest, VK_SHFL_XOR(largest, 1));
        largest = fmaxf(largest, VK_SHFL_XOR(largest, 2));
        const float m_new = fmaxf(m[r], largest);
        const float m_use = m_new == vkern_rows::neg_inf() ? 0.0f : m_new;  // a row with no key yet
        const float rescale = exp2f(m[r] - m_use);
        m[r] = m_new;
        l[r] *= rescale;
#pragma unroll
        for (int n = 0; n < S::kNTiles; ++n) {
          o[n][2 * r] *= rescale;
          o[n][2 * r + 1] *= rescale;
        }
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          s[n][2 * r] = exp2f(s[n][2 * r] - m_use);
          s[n][2 * r + 1] = exp2f(s[n][2 * r + 1] - m_use);
          l[r] += s[n][2 * r] + s[n][2 * r + 1];
        }
      }
      uint32_t phi[4][4], plo[4][4];
      split_tile<false>(s, no_shift, phi, plo);
      product_split<DP, false>(phi, plo, vs, lane, no_shift, o);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] += VK_SHFL_XOR(l[r], 1);
      l[r] += VK_SHFL_XOR(l[r], 2);
      if (row[r] >= a.T) continue;
      __half* out = y + (b * a.T + row[r]) * a.C + h * a.D;
#pragma unroll
      for (int n = 0; n < S::kNTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = n * 8 + 2 * t + e;
          if (c < a.D) out[c] = __float2half_rn(o[n][2 * r + e] / l[r]);
        }
      }
      if (t == 0) lse[bh * a.T + row[r]] = (m[r] + log2f(l[r])) * kLn2;
    }
  }
#endif
}

template <int DP>
__global__ void __launch_bounds__(kThreads)
    backward_dkdv_mma(const __half* __restrict__ dy, const __half* __restrict__ qkv, const float* __restrict__ lse,
                      const float* __restrict__ dsum, __half* __restrict__ dqkv, Heads a, float scale, float scale2,
                      bool vec8, const unsigned* __restrict__ special) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  if (*special != 0) return;
  using S = TileShape<DP>;
  extern __shared__ uint4 attention_shared[];
  __half* ks = reinterpret_cast<__half*>(attention_shared);
  __half* vs = ks + S::kHalves;
  __half* qs = vs + S::kHalves;
  __half* gs = qs + S::kHalves;
  float* lse2s = reinterpret_cast<float*>(gs + S::kHalves);
  float* ds = lse2s + kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t width = 3 * a.C, tiles = ceil_div(a.T, kTile), heads = a.head_count();
  const int no_shift[2] = {0, 0};
  for (int64_t item = blockIdx.x; item < heads * tiles; item += gridDim.x) {
    const int64_t kt = item / heads, bh = item % heads, b = bh / a.H, h = bh % a.H;
    const __half* base = qkv + b * a.T * width + h * a.D;
    const __half* dy_base = dy + b * a.T * a.C + h * a.D;
    __syncthreads();  // the last item's reads of ks and vs are done
    load_tile<DP>(ks, base + a.C, width, kt * kTile, a.T, a.D, vec8);
    load_tile<DP>(vs, base + 2 * a.C, width, kt * kTile, a.T, a.D, vec8);
    const int64_t key[2] = {kt * kTile + warp * 16 + g, kt * kTile + warp * 16 + g + 8};
    float dk[S::kNTiles][4] = {}, dv[S::kNTiles][4] = {};
    for (int64_t qt = kt; qt < tiles; ++qt) {
      __syncthreads();  // the last tile's reads of qs, gs, lse2s and ds are done
      load_tile<DP>(qs, base, width, qt * kTile, a.T, a.D, vec8);
      load_tile<DP>(gs, dy_base, a.C, qt * kTile, a.T, a.D, vec8);
      for (int r = threadIdx.x; r < kTile; r += kThreads) {
        const int64_t i = qt * kTile + r;
        lse2s[r] = i < a.T ? lse[bh * a.T + i] * kLog2e : 0.0f;
        ds[r] = i < a.T ? dsum[bh * a.T + i] : 0.0f;
      }
      __syncthreads();
      uint32_t ka[S::kSteps][4], va[S::kSteps][4];
      a_fragments<DP>(ks, warp * 16 + g, t, ka);
      a_fragments<DP>(vs, warp * 16 + g, t, va);
      float p[8][4] = {}, dp[8][4] = {};  // Pᵀ and dPᵀ, then dSᵀ: rows keys, columns queries
      scores<DP>(ka, qs, g, t, p);
      scores<DP>(va, gs, g, t, dp);
      const bool diagonal = qt == kt, last = qt == tiles - 1;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = n * 8 + 2 * t + (e & 1);
          const int64_t i = qt * kTile + col;
          const bool pair = (!diagonal || i >= key[e / 2]) && (!last || i < a.T);
          p[n][e] = pair ? exp2f(p[n][e] * scale2 - lse2s[col]) : 0.0f;
          dp[n][e] = p[n][e] * (dp[n][e] - ds[col]);
        }
      }
      uint32_t hi[4][4], lo[4][4];
      split_tile<false>(p, no_shift, hi, lo);
      product_split<DP, false>(hi, lo, gs, lane, no_shift, dv);
      int shift[2];
      row_shift(dp, shift);
      split_tile<true>(dp, shift, hi, lo);
      product_split<DP, true>(hi, lo, qs, lane, shift, dk);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (key[r] >= a.T) continue;
      __half* out = dqkv + (b * a.T + key[r]) * width + h * a.D;
#pragma unroll
      for (int n = 0; n < S::kNTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = n * 8 + 2 * t + e;
          if (c < a.D) {
            out[a.C + c] = __float2half_rn(dk[n][2 * r + e] * scale);
            out[2 * a.C + c] = __float2half_rn(dv[n][2 * r + e]);
          }
        }
      }
    }
  }
#endif
}

template <int DP>
__global__ void __launch_bounds__(kThreads)
    backward_dq_mma(const __half* __restrict__ dy, const __half* __restrict__ qkv, const float* __restrict__ lse,
                    const float* __restrict__ dsum, __half* __restrict__ dqkv, Heads a, float scale, float scale2,
                    bool vec8, const unsigned* __restrict__ special) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  if (*special != 0) return;
  using S = TileShape<DP>;
  extern __shared__ uint4 attention_shared[];
  __half* qs = reinterpret_cast<__half*>(attention_shared);
  __half* gs = qs + S::kHalves;
  __half* ks = gs + S::kHalves;
  __half* vs = ks + S::kHalves;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t width = 3 * a.C, tiles = ceil_div(a.T, kTile), heads = a.head_count();
  for (int64_t item = blockIdx.x; item < heads * tiles; item += gridDim.x) {
    const int64_t qt = tiles - 1 - item / heads, bh = item % heads, b = bh / a.H, h = bh % a.H;
    const __half* base = qkv + b * a.T * width + h * a.D;
    __syncthreads();  // the last item's reads of qs and gs are done
    load_tile<DP>(qs, base, width, qt * kTile, a.T, a.D, vec8);
    load_tile<DP>(gs, dy + b * a.T * a.C + h * a.D, a.C, qt * kTile, a.T, a.D, vec8);
    __syncthreads();
    uint32_t qa[S::kSteps][4], ga[S::kSteps][4];
    a_fragments<DP>(qs, warp * 16 + g, t, qa);
    a_fragments<DP>(gs, warp * 16 + g, t, ga);
    const int64_t row[2] = {qt * kTile + warp * 16 + g, qt * kTile + warp * 16 + g + 8};
    float lse2[2], d[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      lse2[r] = row[r] < a.T ? lse[bh * a.T + row[r]] * kLog2e : 0.0f;
      d[r] = row[r] < a.T ? dsum[bh * a.T + row[r]] : 0.0f;
    }
    float dq[S::kNTiles][4] = {};
    for (int64_t kt = 0; kt <= qt; ++kt) {
      __syncthreads();  // the last tile's reads of ks and vs are done
      load_tile<DP>(ks, base + a.C, width, kt * kTile, a.T, a.D, vec8);
      load_tile<DP>(vs, base + 2 * a.C, width, kt * kTile, a.T, a.D, vec8);
      __syncthreads();
      float p[8][4] = {}, dp[8][4] = {};  // P and dP, then dS
      scores<DP>(qa, ks, g, t, p);
      scores<DP>(ga, vs, g, t, dp);
      const bool diagonal = kt == qt;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t j = kt * kTile + n * 8 + 2 * t + (e & 1);
          p[n][e] = diagonal && j > row[e / 2] ? 0.0f : exp2f(p[n][e] * scale2 - lse2[e / 2]);
          dp[n][e] = p[n][e] * (dp[n][e] - d[e / 2]);
        }
      }
      int shift[2];
      row_shift(dp, shift);
      uint32_t hi[4][4], lo[4][4];
      split_tile<true>(dp, shift, hi, lo);
      product_split<DP, true>(hi, lo, ks, lane, shift, dq);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (row[r] >= a.T) continue;
      __half* out = dqkv + (b * a.T + row[r]) * width + h * a.D;
#pragma unroll
      for (int n = 0; n < S::kNTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = n * 8 + 2 * t + e;
          if (c < a.D) out[c] = __float2half_rn(dq[n][2 * r + e] * scale);
        }
      }
    }
  }
#endif
}

// Dynamic shared memory of each kernel, in bytes.
template <int DP>
constexpr int forward_smem() {
  return 3 * TileShape<DP>::kHalves * 2;
}
template <int DP>
constexpr int dkdv_smem() {
  return 4 * TileShape<DP>::kHalves * 2 + 2 * kTile * 4;
}
template <int DP>
constexpr int dq_smem() {
  return 4 * TileShape<DP>::kHalves * 2;
}

// allow_smem raises a kernel's dynamic shared-memory limit to bytes, once
// per device (devices < 64).
template <class Kernel>
cudaError_t allow_smem(Kernel kernel, int bytes, int device, uint64_t* raised) {
  if (bytes <= 48 * 1024 || (*raised >> device & 1u)) return cudaSuccess;
  const cudaError_t err =
      cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess) *raised |= uint64_t{1} << device;
  return err;
}

template <int DP>
cudaError_t launch_forward_mma(const __half* qkv, __half* y, float* lse, Heads a, float scale2, bool vec8,
                               const unsigned* special, int device, cudaStream_t s) {
  static uint64_t raised;
  const cudaError_t err = allow_smem(forward_mma<DP>, forward_smem<DP>(), device, &raised);
  if (err != cudaSuccess) return err;
  const unsigned grid = grid_for(a.head_count() * ceil_div(a.T, kTile));
  forward_mma<DP><<<grid, kThreads, forward_smem<DP>(), s>>>(qkv, y, lse, a, scale2, vec8, special);
  return cudaGetLastError();
}

template <int DP>
cudaError_t launch_backward_mma(const __half* dy, const __half* qkv, const float* lse, const float* dsum,
                                __half* dqkv, Heads a, float scale, float scale2, bool vec8, const unsigned* special,
                                int device, cudaStream_t s) {
  static uint64_t raised_dkdv, raised_dq;
  cudaError_t err = allow_smem(backward_dkdv_mma<DP>, dkdv_smem<DP>(), device, &raised_dkdv);
  if (err == cudaSuccess) err = allow_smem(backward_dq_mma<DP>, dq_smem<DP>(), device, &raised_dq);
  if (err != cudaSuccess) return err;
  const unsigned grid = grid_for(a.head_count() * ceil_div(a.T, kTile));
  backward_dkdv_mma<DP><<<grid, kThreads, dkdv_smem<DP>(), s>>>(dy, qkv, lse, dsum, dqkv, a, scale, scale2, vec8, special);
  backward_dq_mma<DP><<<grid, kThreads, dq_smem<DP>(), s>>>(dy, qkv, lse, dsum, dqkv, a, scale, scale2, vec8, special);
  return cudaGetLastError();
}

#endif  // VKERN_PTX_MMA

// ---------------------------------------------------------------------------
// Host side.

ScratchBuffer g_scratch;  // the route flag, then D (attention_grad)

#if defined(VKERN_PTX_MMA)
// padded_head is the tensor-core head width for D, or 0 where the exact
// kernels serve.
int padded_head(int64_t D) {
  for (int dp = 16; dp <= 128; dp *= 2) {
    if (D <= dp) return dp;
  }
  return 0;
}

// clear_flag, scan16 and scan32 enqueue the route: the flag word cleared,
// then set when an f16 (f32) input holds an infinity or a NaN.
cudaError_t clear_flag(unsigned* flag, cudaStream_t s) { return cudaMemsetAsync(flag, 0, sizeof(unsigned), s); }

void scan16(const __half* x, int64_t n, unsigned* flag, cudaStream_t s) {
  find_specials16<<<grid_for(std::min<int64_t>(ceil_div(n, kThreads), 4096)), kThreads, 0, s>>>(
      reinterpret_cast<const unsigned short*>(x), n, flag);
}

void scan32(const float* x, int64_t n, unsigned* flag, cudaStream_t s) {
  find_specials32<<<grid_for(std::min<int64_t>(ceil_div(n, kThreads), 4096)), kThreads, 0, s>>>(
      reinterpret_cast<const unsigned*>(x), n, flag);
}

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
    scan16(qkv, a.B * a.T * 3 * a.C, flag, s);
    const bool vec8 = a.D % 8 == 0 && aligned16(qkv);
    switch (dp) {
      case 16: err = launch_forward_mma<16>(qkv, y, lse, a, scale2, vec8, flag, device, s); break;
      case 32: err = launch_forward_mma<32>(qkv, y, lse, a, scale2, vec8, flag, device, s); break;
      case 64: err = launch_forward_mma<64>(qkv, y, lse, a, scale2, vec8, flag, device, s); break;
      default: err = launch_forward_mma<128>(qkv, y, lse, a, scale2, vec8, flag, device, s); break;
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
  void* scratch = nullptr;
  cudaError_t err = g_scratch.get(kFlagBytes + rows * sizeof(float), &scratch);
  if (err != cudaSuccess) return err;
  unsigned* flag = static_cast<unsigned*>(scratch);
  float* dsum = reinterpret_cast<float*>(static_cast<char*>(scratch) + kFlagBytes);
  row_dots<<<blocks_for(rows), kThreads, 0, s>>>(dy, y, dsum, a);
  const unsigned* special = nullptr;
#if defined(VKERN_PTX_MMA)
  int device = 0;
  const int dp = padded_head(a.D);
  if (dp != 0 && tensor_cores(&device)) {
    err = clear_flag(flag, s);
    if (err != cudaSuccess) return err;
    scan16(dy, a.B * a.T * a.C, flag, s);
    scan16(qkv, a.B * a.T * 3 * a.C, flag, s);
    scan16(y, a.B * a.T * a.C, flag, s);
    scan32(lse, rows, flag, s);
    const bool vec8 = a.D % 8 == 0 && aligned16(qkv) && aligned16(dy);
    switch (dp) {
      case 16: err = launch_backward_mma<16>(dy, qkv, lse, dsum, dqkv, a, scale, scale2, vec8, flag, device, s); break;
      case 32: err = launch_backward_mma<32>(dy, qkv, lse, dsum, dqkv, a, scale, scale2, vec8, flag, device, s); break;
      case 64: err = launch_backward_mma<64>(dy, qkv, lse, dsum, dqkv, a, scale, scale2, vec8, flag, device, s); break;
      default: err = launch_backward_mma<128>(dy, qkv, lse, dsum, dqkv, a, scale, scale2, vec8, flag, device, s); break;
    }
    if (err != cudaSuccess) return err;
    special = flag;
  }
#endif
  const unsigned grid = blocks_for(rows * 32);
  backward_dq_rows<<<grid, kThreads, 0, s>>>(dy, qkv, lse, dsum, dqkv, a, scale, scale2, special);
  backward_dkdv_rows<<<grid, kThreads, 0, s>>>(dy, qkv, lse, dsum, dqkv, a, scale, scale2, special);
  return cudaGetLastError();
}

}  // namespace vkern_attention
}  // namespace

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
