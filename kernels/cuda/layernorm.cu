// layernorm and layernorm_grad on the GPU: f16 activations in and out, the
// statistics and the parameter gradients f32, binary32 inside. The math is
// kernels/cpu/layernorm.cc's, two-pass:
//
//   layernorm       m = (Σ x)/C,  v = (Σ (x − m)²)/C,  s = rsqrtf(v + eps)
//                   y = f16((x − m)·s·w + b),  mean = m,  rstd = s
//   layernorm_grad  x̂ = (x − mean)·rstd,  g = w·dy (exact)
//                   a = (Σ g)/C,  c = (Σ g·x̂)/C
//                   dx = f16((g − a − x̂·c)·rstd), or with residual
//                   dx = f16(r + (g − a − x̂·c)·rstd), r read first (it may be dx)
//                   dw += Σ_rows dy·x̂,  db += Σ_rows dy
//                   with dx_sum: dxs += Σ_rows dx, the f32 values before
//                   their rounding to f16
//
// Launch shapes:
// - Rows of C <= 1,024: one warp a row, 8 rows a block of 256 threads (4
//   rows, 128 threads, for layernorm_grad's rows kernel; layernorm's
//   forward holds two rows a warp at once, variant 2 below); each
//   thread holds E <= 32 elements of the row in registers as f16 pairs
//   (rows.cuh's RowSlice), read once with 16-byte loads where the row allows,
//   and the row's sums are warp shuffles. Longer rows up to 16,384
//   (layernorm) or 8,192 (layernorm_grad): one block of T = 128..1,024
//   threads a row, E = 16, the sums finished through shared memory. Thread
//   t holds vectors t, t + T, … of VW elements, so every access is
//   coalesced, and it holds the same columns in every row, so w and b are
//   read once per thread, not once per row.
// - layernorm: as many blocks as rows need (grid-stride beyond 2³⁰).
// - layernorm_grad: P blocks, as many as fit at once (the reported
//   occupancy; blocks of 8 warps would leave room for one a
//   multiprocessor, variant 3 below), walk the rows grid-stride; each
//   thread adds dy·x̂ and dy of its columns over the rows it sees in
//   registers (and dx, with dx_sum), the warps of a block
//   combine theirs in shared memory in warp order, and the block writes one
//   row of partials (P × 2C floats of scratch, 3C with dx_sum). A second
//   kernel adds each column's P partials, in a fixed order, into dw and db
//   (and dxs). No atomics: a device gives the same bits every run.
// - Longer rows: one block of 1,024 threads a row, 2-byte accesses, the
//   row streamed from memory per pass (three for layernorm, two for dx);
//   layernorm_grad's dw and db then come from a column kernel (a thread a
//   column over a strip of rows, partials per strip) and the same second
//   kernel. With dx_sum the dx kernel runs on at most kMaxStrips blocks,
//   each adding its rows' dx into a partial row of its own in scratch (its
//   rows in ascending order), which the second kernel then adds up.
//
// Vector width VW: 8 (16-byte accesses) when C is a multiple of 8 and the
// row operands and w, b are 16-byte aligned; otherwise 1 (2-byte accesses,
// still coalesced). Padding slots past the end of a row hold 0: they add 0
// to Σx, Σg and Σg·x̂, are left out of Σ(x − m)², and are never stored.
//
// Accuracy, against the oracle's bound (oracle/layernorm.go): every sum is
// a plain binary32 sum in some order (γ(C) covers any), the division by C
// is IEEE (no -prec-div=false), rsqrtf is within 2 ulps (the CUDA Math API's
// table; the bound allows 2), and nvcc may fuse a multiply and an add,
// which rounds once where the bound counts two. dw and db are sums of
// R + 1 terms in a fixed order, which the bound's any-order γ(R) covers.
//
// IEEE facts relied on (no fast-math, no flush-to-zero): a NaN in a row, or
// both infinities, makes m NaN; one infinity makes m infinite and x − m NaN
// at that element, so v, s and the whole row of y are NaN, as the
// reference. In the backward, x̂ is exactly 0 where x = mean, so an infinite
// g gives NaN there as the reference does; a non-finite g makes a or c
// non-finite and the row of dx follows the formula.
//
// Floor at 16384×768 (GPT-2 small, B·T = 16,384): layernorm moves 50.3 MB
// (x in, y out), 16.8 µs at 3.0 TB/s; layernorm_grad 75.5 MB (dy and x in,
// dx out; the partials add 1.6 MB on an H100's 132 SMs), 25.2 µs.
//
// Variants (layernorm_grad at 16384×768 on an H100, `vkern bench --suite
// ops`, the share of the copy floor measured in the same run):
//   1. warp or block per row, registers, dw/db partials per block then a
//      column reduction: 50.8 µs, 0.495 (at 51fc9cd).
//   2. one kernel: the next row prefetched while one is computed, launch
//      bounds for 128 registers and the block count from the reported
//      occupancy, the partials finished by the last blocks to arrive in two
//      levels of teams of 16: 57.4 µs, 0.439 (f047ce9, in a later run whose
//      copy rate was the same, 3.00 TB/s). Slower; reverted, in git history.
//   3. variant 1 with blocks of 4 or 2 rows ($VKERN_LAYERNORM_GRAD_RPB) and
//      as many blocks as the reported occupancy holds. At C = 768 with
//      dx_sum a thread takes 162 registers (cuobjdump; 142 without), so a
//      block of 8 warps leaves one block a multiprocessor, where blocks of
//      4 warps let 3 fit. Blocks of 4 rows: 46.0 µs, 0.55 (16384×768:
//      residual=1,dx_sum=1 as gpt2 runs it: 60.2 µs, 0.56), against
//      variant 1's 70.4 µs, 0.36 (94.5 µs, 0.36) and blocks of 2 rows'
//      47.5 µs, 0.53 (63.2 µs, 0.53), in one run on an H100 at 3.00 TB/s
//      (at f46b6e1, with the residual read beside dy and x in all three,
//      which costs variant 1 the 50.8 µs above). In use, with 4 rows.
//   4. variant 3 with each warp's column sums in shared memory, not
//      registers (branch ln-grad-smem, docs/layernorm-grad-shared-h100):
//      96 registers a thread at C = 768 with dx_sum, against 162, and no
//      faster: dx_sum=1 53.9 µs (0.47) against 50.9 (0.49),
//      residual=1,dx_sum=1 60.8 against 60.3. Not kept.
//   5. variant 3, the parameter sums' kernel a block per (32 columns,
//      output) with four loads in flight a thread (layernorm_grad_params):
//      dx_sum=1 47.5 µs (0.53), residual=1,dx_sum=1 57.1 µs (0.59),
//      plain 44.3 µs (0.57), in one call (docs/layernorm-grad-reduce-h100;
//      variant 3 before it, in the call before: 50.9, 60.3 and 45.9 µs).
//      In use.
//   6. variant 5 with each thread asking L2 for its next row's dy, x and
//      residual (prefetch.global.L2) before it loads this one's; the same
//      bits. On an H200 (docs/layernorm-grad-prefetch-h200, two rounds
//      alternating with $VKERN_LAYERNORM_PREFETCH=0, shares of a 4.25 TB/s
//      copy floor): plain 38.5–39.0 µs against 39.0–39.2 (0.46 against
//      0.45), residual=1 43.9–44.1 against 45.4 (0.54 against 0.52),
//      dx_sum=1 41.6–42.3 against 42.5–42.9 (0.42–0.43 against 0.42),
//      residual=1,dx_sum=1 46.6–47.4 against 49.0–49.4 (0.50–0.51 against
//      0.48); the gpt2 step unchanged (32.31 and 32.44 ms against 32.22 and
//      32.25). In use. Two or three of a thread's rows ahead (call 2, at
//      05423ba) were slower than one and than none: residual=1,dx_sum=1
//      51.3–51.5 and 55.4–55.5 µs against 46.6–47.0 and 49.3–49.4.
//
// Variants of layernorm's forward (at 16384×768 on an H200, `vkern bench
// --suite ops`, shares of anchors.py's 4.23 TB/s copy in the same call,
// docs/gemm-handoff-h200 call 3, two rounds alternating):
//   1. a warp a row, 8 rows a block, each warp's row and its own slices of
//      w and b loaded, then the row reduced and stored: 22.8–22.9 µs, 0.52.
//   2. variant 1 with two rows a warp (kPair), both loaded before either is
//      reduced: twice the bytes in flight, half the reads of w and b, and
//      the 16,384 rows in one wave of blocks where they were two. 21.4–21.5
//      µs, 0.55–0.56; the same bits (6 gpt2 steps: the same losses, norms
//      and checkpoint bytes); the gpt2 step did not move (25 calls × 1.4
//      µs). In use; $VKERN_LAYERNORM_PAIRS=0 turns it off.
//
// Scratch: layernorm_grad's partials, 8·C bytes per block, 12·C with
// dx_sum (P <= 2 per SM, or as many as the occupancy allows for variant 3,
// or up to 64 strips, and with dx_sum 64 blocks'
// sums, on the long-row path), grown with cudaFree + cudaMalloc
// (ScratchBuffer), cudaErrorMemoryAllocation when it cannot be had.
#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "core/backend.h"
#include "cuda/compat.h"
#include "cuda/env.h"
#include "cuda/occupancy.h"
#include "cuda/rows.cuh"

namespace {
namespace vkern_layernorm {

using namespace vkern_rows;  // rows.cuh

constexpr int kWarpRows = 8;         // rows a block on the warp-per-row path
constexpr int kLongThreads = 1024;   // threads a row on the long-row path
constexpr int kReduceColumns = 32;   // columns a block of the dw/db reduction
constexpr int kReduceSlices = 32;    // partial rows each column's sum is split into
constexpr int kStripColumns = 256;   // columns a block of the long-row dw/db kernel
constexpr int64_t kMaxStrips = 64;   // row strips of the long-row dw/db kernel
constexpr int kGradBlocksPerSM = 2;  // layernorm_grad's blocks, per SM

// column_of is the row's column of element i of thread t's slice.
template <int T, int VW>
__device__ __forceinline__ int column_of(int i, int t) {
  return (i / VW * T + t) * VW + i % VW;
}

// ---------------------------------------------------------------------------
// layernorm, rows on chip: RPB rows a block of T·RPB threads (RPB > 1 only
// for T = 32). With kPair (T = 32 only), each warp loads two rows, r and
// r + 1, before it reduces either, so that twice the bytes are in flight
// and half the warps read w and b; each row's arithmetic is unchanged.

template <int T, int RPB, int E, int VW, bool kPair = false>
__global__ void __launch_bounds__(T* RPB)
    layernorm_rows(const __half* __restrict__ X, const __half* __restrict__ W, const __half* __restrict__ B,
                   __half* __restrict__ Y, float* __restrict__ mean, float* __restrict__ rstd, int64_t R, int C,
                   float eps) {
  static_assert(T == 32 || RPB == 1, "several rows per block only with a warp per row");
  static_assert(T == 32 || !kPair, "two rows a warp only with a warp per row");
  constexpr int kRows = kPair ? 2 : 1;  // rows a warp holds at once
  using Slice = RowSlice<T, E, VW>;
  __shared__ float red[T / 32];
  const int t = threadIdx.x % T;
  const float n = static_cast<float>(C);
  Slice w, b;
  w.load(W, C, t, 0u);
  b.load(B, C, t, 0u);
  for (int64_t r0 = (static_cast<int64_t>(blockIdx.x) * RPB + threadIdx.x / T) * kRows; r0 < R;
       r0 += static_cast<int64_t>(gridDim.x) * RPB * kRows) {
    Slice x[kRows];
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      if (r0 + k < R) x[k].load(X + (r0 + k) * C, C, t, 0u);
    }
#pragma unroll
    for (int k = 0; k < kRows; ++k) {
      const int64_t r = r0 + k;
      if (r >= R) break;
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < E; ++i) sum += element(x[k].w, i);
      const float m = row_sum<T>(sum, red) / n;
      float squares = 0.0f;
#pragma unroll
      for (int i = 0; i < E; ++i) {
        const float d = element(x[k].w, i) - m;
        squares += column_of<T, VW>(i, t) < C ? d * d : 0.0f;
      }
      const float s = rsqrtf(row_sum<T>(squares, red) / n + eps);
      if (t == 0) {
        mean[r] = m;
        rstd[r] = s;
      }
      Slice::store(Y + r * C, C, t, [&](int i) {
        return pack((element(x[k].w, 2 * i) - m) * s * element(w.w, 2 * i) + element(b.w, 2 * i),
                    (element(x[k].w, 2 * i + 1) - m) * s * element(w.w, 2 * i + 1) + element(b.w, 2 * i + 1));
      });
    }
  }
}

// layernorm, long rows: a block a row, three passes over it.
__global__ void __launch_bounds__(kLongThreads)
    layernorm_long(const __half* __restrict__ X, const __half* __restrict__ W, const __half* __restrict__ B,
                   __half* __restrict__ Y, float* __restrict__ mean, float* __restrict__ rstd, int64_t R, int64_t C,
                   float eps) {
  __shared__ float red[kLongThreads / 32];
  const float n = static_cast<float>(C);
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const __half* x = X + r * C;
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < C; j += kLongThreads) sum += __half2float(x[j]);
    const float m = row_sum<kLongThreads>(sum, red) / n;
    float squares = 0.0f;
    for (int64_t j = threadIdx.x; j < C; j += kLongThreads) {
      const float d = __half2float(x[j]) - m;
      squares += d * d;
    }
    const float s = rsqrtf(row_sum<kLongThreads>(squares, red) / n + eps);
    if (threadIdx.x == 0) {
      mean[r] = m;
      rstd[r] = s;
    }
    __half* y = Y + r * C;
    for (int64_t j = threadIdx.x; j < C; j += kLongThreads) {
      y[j] = __float2half_rn((__half2float(x[j]) - m) * s * __half2float(W[j]) + __half2float(B[j]));
    }
  }
}

// ---------------------------------------------------------------------------
// layernorm_grad, rows on chip: dx (plus the residual Res when not null:
// read before dX is written, element by element, so Res may be dX), and
// the block's partial dw and db in partials[blockIdx.x · K·C ..] (dw's C,
// then db's C, then with kSum the C sums of the f32 dx values: K = 3).

template <int T, int RPB, int E, int VW, bool kSum>
__global__ void __launch_bounds__(T* RPB)
    layernorm_grad_rows(const __half* __restrict__ dY, const __half* __restrict__ X, const __half* __restrict__ W,
                        const float* __restrict__ mean, const float* __restrict__ rstd, const __half* Res, __half* dX,
                        float* __restrict__ partials, int64_t R, int C, bool prefetch) {
  static_assert(T == 32 || RPB == 1, "several rows per block only with a warp per row");
  using Slice = RowSlice<T, E, VW>;
  __shared__ float red[T / 32];
  constexpr int K = kSum ? 3 : 2;
  // The warps' partials combined, warp by warp (T = 32 only: T·E >= C).
  __shared__ float combined[RPB > 1 ? K * T * E : 1];
  const int t = threadIdx.x % T;
  const float n = static_cast<float>(C);
  Slice w;
  w.load(W, C, t, 0u);
  float sum_w[E], sum_b[E], sum_x[kSum ? E : 1];
#pragma unroll
  for (int i = 0; i < E; ++i) sum_w[i] = sum_b[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < (kSum ? E : 1); ++i) sum_x[i] = 0.0f;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * RPB + threadIdx.x / T; r < R;
       r += static_cast<int64_t>(gridDim.x) * RPB) {
    const float m = VK_LDG(mean + r), s = VK_LDG(rstd + r);
    // The thread's next row into L2 while it works on this one (variant 6).
    const int64_t next = r + static_cast<int64_t>(gridDim.x) * RPB;
    if (prefetch && next < R) {
      Slice::prefetch(dY + next * C, C, t);
      Slice::prefetch(X + next * C, C, t);
      if (Res != nullptr) Slice::prefetch(Res + next * C, C, t);
    }
    Slice dy, x, res;
    dy.load(dY + r * C, C, t, 0u);
    x.load(X + r * C, C, t, 0u);
    // The residual is read with dy and x, so that its latency overlaps
    // theirs rather than following the row's sums (each thread reads only
    // the elements it later writes, so Res may be dX).
    if (Res != nullptr) res.load(Res + r * C, C, t, 0u);
    float a = 0.0f, c = 0.0f;
#pragma unroll
    for (int i = 0; i < E; ++i) {
      const float d = element(dy.w, i);
      const float xh = (element(x.w, i) - m) * s;
      const float g = element(w.w, i) * d;
      a += g;
      c += g * xh;
      sum_w[i] += d * xh;
      sum_b[i] += d;
    }
    a = row_sum<T>(a, red) / n;
    c = row_sum<T>(c, red) / n;
    auto dx = [&](int i) {
      const float xh = (element(x.w, i) - m) * s;
      const float v = (element(w.w, i) * element(dy.w, i) - a - xh * c) * s;
      return Res != nullptr ? element(res.w, i) + v : v;
    };
    Slice::store(dX + r * C, C, t, [&](int i) {
      const float v0 = dx(2 * i), v1 = dx(2 * i + 1);
      if constexpr (kSum) {
        sum_x[2 * i] += v0;  // slots past C add too, but are never written out
        sum_x[2 * i + 1] += v1;
      }
      return pack(v0, v1);
    });
  }
  float* out = partials + static_cast<int64_t>(blockIdx.x) * K * C;
  if (RPB == 1) {
#pragma unroll
    for (int i = 0; i < E; ++i) {
      const int col = column_of<T, VW>(i, t);
      if (col < C) {
        out[col] = sum_w[i];
        out[C + col] = sum_b[i];
        if constexpr (kSum) out[2 * C + col] = sum_x[i];
      }
    }
    return;
  }
  const int group = threadIdx.x / T;
  for (int k = 0; k < RPB; ++k) {
    if (group == k) {
#pragma unroll
      for (int i = 0; i < E; ++i) {
        const int col = column_of<T, VW>(i, t);
        if (col < C) {
          combined[col] = k == 0 ? sum_w[i] : combined[col] + sum_w[i];
          combined[C + col] = k == 0 ? sum_b[i] : combined[C + col] + sum_b[i];
          if constexpr (kSum) combined[2 * C + col] = k == 0 ? sum_x[i] : combined[2 * C + col] + sum_x[i];
        }
      }
    }
    __syncthreads();
  }
  for (int col = threadIdx.x; col < K * C; col += T * RPB) out[col] = combined[col];
}

// layernorm_grad, long rows: dx only (plus Res, as layernorm_grad_rows), a
// block a row, two passes over it; with sums (not null) each block adds
// its rows' f32 dx into its own row sums[blockIdx.x · C ..], its first row
// writing it.
__global__ void __launch_bounds__(kLongThreads)
    layernorm_grad_long(const __half* __restrict__ dY, const __half* __restrict__ X, const __half* __restrict__ W,
                        const float* __restrict__ mean, const float* __restrict__ rstd, const __half* Res, __half* dX,
                        float* __restrict__ sums, int64_t R, int64_t C) {
  __shared__ float red[kLongThreads / 32];
  const float n = static_cast<float>(C);
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const float m = mean[r], s = rstd[r];
    const __half* dy = dY + r * C;
    const __half* x = X + r * C;
    float a = 0.0f, c = 0.0f;
    for (int64_t j = threadIdx.x; j < C; j += kLongThreads) {
      const float g = __half2float(W[j]) * __half2float(dy[j]);
      a += g;
      c += g * ((__half2float(x[j]) - m) * s);
    }
    a = row_sum<kLongThreads>(a, red) / n;
    c = row_sum<kLongThreads>(c, red) / n;
    float* sum = sums != nullptr ? sums + static_cast<int64_t>(blockIdx.x) * C : nullptr;
    const bool first = r == blockIdx.x;
    for (int64_t j = threadIdx.x; j < C; j += kLongThreads) {
      const float xh = (__half2float(x[j]) - m) * s;
      const float g = (__half2float(W[j]) * __half2float(dy[j]) - a - xh * c) * s;
      const float v = Res != nullptr ? __half2float(Res[r * C + j]) + g : g;
      if (sum != nullptr) sum[j] = first ? v : sum[j] + v;
      dX[r * C + j] = __float2half_rn(v);
    }
  }
}

// layernorm_grad, long rows: strip blockIdx.y's partial dw and db, a
// thread a column, its rows in ascending order.
__global__ void __launch_bounds__(kStripColumns)
    layernorm_grad_columns(const __half* __restrict__ dY, const __half* __restrict__ X, const float* __restrict__ mean,
                           const float* __restrict__ rstd, float* __restrict__ partials, int64_t R, int64_t C,
                           int64_t strip_rows) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kStripColumns + threadIdx.x;
  if (j >= C) return;
  const int64_t first = blockIdx.y * strip_rows, end = first + strip_rows < R ? first + strip_rows : R;
  float sum_w = 0.0f, sum_b = 0.0f;
  for (int64_t r = first; r < end; ++r) {
    const float d = __half2float(dY[r * C + j]);
    sum_w += d * ((__half2float(X[r * C + j]) - mean[r]) * rstd[r]);
    sum_b += d;
  }
  float* out = partials + static_cast<int64_t>(blockIdx.y) * 2 * C;
  out[j] = sum_w;
  out[C + j] = sum_b;
}

// out[o][j] += Σ_p partials[p·stride + o·C + j] for the outputs o < n
// (dw, db and dxs; a null output is skipped) over the P partial rows:
// thread (j, k) sums rows p ≡ k (mod kReduceSlices) in ascending order, and
// the slices are then added to the initial value in slice order. A block
// takes kReduceColumns columns of one output (blockIdx.y), and a thread
// loads four of its rows before adding them, in the same order: at C = 768
// with dx_sum, 72 blocks with four loads in flight a thread, where 24
// blocks each summed the three outputs in turn, one load at a time.
struct ParamOutputs {
  float* out[3];
  int n;
};
__global__ void __launch_bounds__(kReduceColumns* kReduceSlices)
    layernorm_grad_params(const float* __restrict__ partials, int64_t P, int64_t stride, int64_t C,
                          ParamOutputs outs) {
  __shared__ float slices[kReduceSlices][kReduceColumns + 1];
  const int o = blockIdx.y;
  float* const out = outs.out[o];
  if (out == nullptr) return;
  const int tx = threadIdx.x % kReduceColumns, ty = threadIdx.x / kReduceColumns;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kReduceColumns + tx;
  float sum = 0.0f;
  if (j < C) {
    const float* column = partials + o * C + j;
    int64_t p = ty;
    for (; p + 3 * kReduceSlices < P; p += 4 * kReduceSlices) {
      const float a = column[p * stride], b = column[(p + kReduceSlices) * stride],
                  c = column[(p + 2 * kReduceSlices) * stride], d = column[(p + 3 * kReduceSlices) * stride];
      sum += a;
      sum += b;
      sum += c;
      sum += d;
    }
    for (; p < P; p += kReduceSlices) sum += column[p * stride];
  }
  slices[ty][tx] = sum;
  __syncthreads();
  if (ty != 0 || j >= C) return;
  float v = out[j];
  for (int k = 0; k < kReduceSlices; ++k) v += slices[k][tx];
  out[j] = v;
}

// ---------------------------------------------------------------------------
// Host side.

// multiprocessors is the current device's SM count, asked once (the server
// uses one device).
cudaError_t multiprocessors(int* count) {
  static int cached = 0;
  if (cached == 0) {
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&cached, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) {
      cached = 0;
      return err;
    }
  }
  *count = cached;
  return cudaSuccess;
}

// partials_scratch returns at least bytes of device memory for
// layernorm_grad's partials, growing it when needed.
cudaError_t partials_scratch(size_t bytes, float** out) {
  static ScratchBuffer buffer;
  void* p = nullptr;
  const cudaError_t err = buffer.get(bytes, &p);
  *out = static_cast<float*>(p);
  return err;
}

struct Forward {
  const __half *X, *W, *B;
  __half* Y;
  float *mean, *rstd;
  int64_t R, C;
  float eps;
  cudaStream_t s;
};

// pairs_chosen says whether layernorm_rows holds two rows a warp (kPair,
// variant 2 of the forward): unless $VKERN_LAYERNORM_PAIRS=0.
bool pairs_chosen() {
  static const bool chosen = vkern_env::on_off("VKERN_LAYERNORM_PAIRS", true);
  return chosen;
}

template <int T, int RPB, int E, int VW>
cudaError_t launch_forward(const Forward& a) {
  if constexpr (T == 32) {
    if (pairs_chosen()) {
      layernorm_rows<T, RPB, E, VW, true><<<grid_for(ceil_div(a.R, 2 * RPB)), T * RPB, 0, a.s>>>(
          a.X, a.W, a.B, a.Y, a.mean, a.rstd, a.R, static_cast<int>(a.C), a.eps);
      return cudaGetLastError();
    }
  }
  layernorm_rows<T, RPB, E, VW><<<grid_for(ceil_div(a.R, RPB)), T * RPB, 0, a.s>>>(
      a.X, a.W, a.B, a.Y, a.mean, a.rstd, a.R, static_cast<int>(a.C), a.eps);
  return cudaGetLastError();
}

template <int VW>
cudaError_t forward_with(const Forward& a) {
  if (a.C <= 256) return launch_forward<32, kWarpRows, 8, VW>(a);
  if (a.C <= 512) return launch_forward<32, kWarpRows, 16, VW>(a);
  if (a.C <= 768) return launch_forward<32, kWarpRows, 24, VW>(a);
  if (a.C <= 1024) return launch_forward<32, kWarpRows, 32, VW>(a);
  if (a.C <= 2048) return launch_forward<128, 1, 16, VW>(a);
  if (a.C <= 4096) return launch_forward<256, 1, 16, VW>(a);
  if (a.C <= 8192) return launch_forward<512, 1, 16, VW>(a);
  if (a.C <= 16384) return launch_forward<1024, 1, 16, VW>(a);
  layernorm_long<<<grid_for(a.R), kLongThreads, 0, a.s>>>(a.X, a.W, a.B, a.Y, a.mean, a.rstd, a.R, a.C, a.eps);
  return cudaGetLastError();
}

struct Backward {
  const __half *dY, *X, *W;
  const float *mean, *rstd;
  const __half* Res;  // the residual, or null
  __half* dX;
  float *dw, *db;
  float* dxs;  // null unless dx_sum
  int64_t R, C;
  cudaStream_t s;
};

// reduce_params adds the P partial rows (stride floats apart) into outs.
cudaError_t reduce_params(const Backward& a, const float* partials, int64_t P, int64_t stride, ParamOutputs outs) {
  const dim3 grid(grid_for(ceil_div(a.C, kReduceColumns)), static_cast<unsigned>(outs.n));
  layernorm_grad_params<<<grid, kReduceColumns * kReduceSlices, 0, a.s>>>(partials, P, stride, a.C, outs);
  return cudaGetLastError();
}

// prefetch_chosen says whether layernorm_grad_rows asks L2 for each
// thread's next row (variant 6): unless $VKERN_LAYERNORM_PREFETCH=0.
bool prefetch_chosen() {
  static const bool chosen = vkern_env::on_off("VKERN_LAYERNORM_PREFETCH", true);
  return chosen;
}

template <int T, int RPB, int E, int VW, bool kSum>
cudaError_t launch_rows(const Backward& a, int64_t P, float* partials) {
  layernorm_grad_rows<T, RPB, E, VW, kSum><<<static_cast<unsigned>(P), T * RPB, 0, a.s>>>(
      a.dY, a.X, a.W, a.mean, a.rstd, a.Res, a.dX, partials, a.R, static_cast<int>(a.C), prefetch_chosen());
  return cudaGetLastError();
}

// blocks_per_sm is how many blocks of the rows kernel a multiprocessor
// holds at once: kGradBlocksPerSM for variant 1 (8 rows a block), the
// reported occupancy for the smaller blocks of variant 3, asked once per
// kernel (the server uses one device), not on every call. The partials'
// count P, and so the bits of dw, db and dxs, follow from it and from the
// rows a block takes, as from $VKERN_COMM_SMS (occupancy.h): fixed for a
// device and a setting, so a run resumed on the same kind of GPU with the
// same settings continues bit for bit.
template <int T, int RPB, int E, int VW, bool kSum>
cudaError_t blocks_per_sm(int* count) {
  if (RPB == kWarpRows || T != 32) {
    *count = kGradBlocksPerSM;
    return cudaSuccess;
  }
  static int cached = 0;
  if (cached == 0) {
    int n = 0;
    const cudaError_t err =
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, layernorm_grad_rows<T, RPB, E, VW, kSum>, T * RPB, 0);
    if (err != cudaSuccess) return err;
    cached = std::max(1, n);
  }
  *count = cached;
  return cudaSuccess;
}

template <int T, int RPB, int E, int VW>
cudaError_t launch_backward(const Backward& a) {
  int sms = 0, per_sm = 0;
  cudaError_t err = multiprocessors(&sms);
  if (err == cudaSuccess) {
    err = a.dxs != nullptr ? blocks_per_sm<T, RPB, E, VW, true>(&per_sm) : blocks_per_sm<T, RPB, E, VW, false>(&per_sm);
  }
  if (err != cudaSuccess) return err;
  // Each block has a fixed share of the rows: leave the multiprocessors of
  // running collectives free (occupancy.h).
  sms = std::max(1, sms - vkern_occupancy::g_lent_multiprocessors);
  const int64_t P = std::min(ceil_div(a.R, RPB), static_cast<int64_t>(per_sm) * sms);
  const int64_t K = a.dxs != nullptr ? 3 : 2;
  float* partials = nullptr;
  err = partials_scratch(static_cast<size_t>(P * K * a.C) * sizeof(float), &partials);
  if (err != cudaSuccess) return err;
  err = a.dxs != nullptr ? launch_rows<T, RPB, E, VW, true>(a, P, partials)
                         : launch_rows<T, RPB, E, VW, false>(a, P, partials);
  if (err != cudaSuccess) return err;
  return reduce_params(a, partials, P, K * a.C, ParamOutputs{{a.dw, a.db, a.dxs}, static_cast<int>(K)});
}

cudaError_t backward_long(const Backward& a) {
  const int64_t strips = std::min(a.R, kMaxStrips);
  const int64_t strip_rows = ceil_div(a.R, strips);
  // dw's and db's strips, then (dx_sum) the dx kernel's blocks' sums.
  const int64_t sum_blocks = a.dxs != nullptr ? strips : 0;
  float* partials = nullptr;
  cudaError_t err =
      partials_scratch(static_cast<size_t>((strips * 2 + sum_blocks) * a.C) * sizeof(float), &partials);
  if (err != cudaSuccess) return err;
  float* sums = a.dxs != nullptr ? partials + strips * 2 * a.C : nullptr;
  const unsigned blocks = a.dxs != nullptr ? static_cast<unsigned>(sum_blocks) : grid_for(a.R);
  layernorm_grad_long<<<blocks, kLongThreads, 0, a.s>>>(a.dY, a.X, a.W, a.mean, a.rstd, a.Res, a.dX, sums, a.R, a.C);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(ceil_div(a.C, kStripColumns)), static_cast<unsigned>(strips));
  layernorm_grad_columns<<<grid, kStripColumns, 0, a.s>>>(a.dY, a.X, a.mean, a.rstd, partials, a.R, a.C, strip_rows);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  err = reduce_params(a, partials, strips, 2 * a.C, ParamOutputs{{a.dw, a.db, nullptr}, 2});
  if (err != cudaSuccess || sums == nullptr) return err;
  return reduce_params(a, sums, sum_blocks, a.C, ParamOutputs{{a.dxs, nullptr, nullptr}, 1});
}

// grad_rows_per_block is the rows a block of layernorm_grad's warp-per-row
// path takes: $VKERN_LAYERNORM_GRAD_RPB = 4 (variant 3, the default), 2
// (variant 3) or 8 (variant 1), read once.
int grad_rows_per_block() {
  static const int rows = [] {
    const char* v = std::getenv("VKERN_LAYERNORM_GRAD_RPB");
    const int n = v != nullptr ? std::atoi(v) : 4;
    return n == 2 || n == kWarpRows ? n : 4;
  }();
  return rows;
}

template <int E, int VW>
cudaError_t warp_rows_backward(const Backward& a) {
  switch (grad_rows_per_block()) {
    case 2:
      return launch_backward<32, 2, E, VW>(a);
    case kWarpRows:
      return launch_backward<32, kWarpRows, E, VW>(a);
    default:
      return launch_backward<32, 4, E, VW>(a);
  }
}

template <int VW>
cudaError_t backward_with(const Backward& a) {
  if (a.C <= 256) return warp_rows_backward<8, VW>(a);
  if (a.C <= 512) return warp_rows_backward<16, VW>(a);
  if (a.C <= 768) return warp_rows_backward<24, VW>(a);
  if (a.C <= 1024) return warp_rows_backward<32, VW>(a);
  if (a.C <= 2048) return launch_backward<128, 1, 16, VW>(a);
  if (a.C <= 4096) return launch_backward<256, 1, 16, VW>(a);
  if (a.C <= 8192) return launch_backward<512, 1, 16, VW>(a);
  return backward_long(a);
}

}  // namespace vkern_layernorm
}  // namespace

namespace vkern {

// The ops' entries (kernels.cu lists them).
cudaError_t run_layernorm(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_layernorm;
  using namespace vkern_layernorm;
  const Forward a{c.ptr<const __half>(buf::x), c.ptr<const __half>(buf::w), c.ptr<const __half>(buf::b),
                  c.ptr<__half>(buf::y),       c.ptr<float>(buf::mean),     c.ptr<float>(buf::rstd),
                  c.params[param::R],          c.params[param::C],          static_cast<float>(c.real(param::eps)),
                  s};
  if (a.C % 8 == 0 && aligned16(a.X) && aligned16(a.W) && aligned16(a.B) && aligned16(a.Y)) return forward_with<8>(a);
  return forward_with<1>(a);
}

cudaError_t run_layernorm_grad(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_layernorm_grad;
  using namespace vkern_layernorm;
  const __half* res = c.params[param::residual] == 1 ? c.ptr<const __half>(buf::r) : nullptr;
  float* dxs = c.params[param::dx_sum] == 1 ? c.ptr<float>(buf::dxs) : nullptr;
  const Backward a{c.ptr<const __half>(buf::dy), c.ptr<const __half>(buf::x),  c.ptr<const __half>(buf::w),
                   c.ptr<const float>(buf::mean), c.ptr<const float>(buf::rstd), res,
                   c.ptr<__half>(buf::dx),        c.ptr<float>(buf::dw),         c.ptr<float>(buf::db),
                   dxs,                           c.params[param::R],            c.params[param::C],
                   s};
  if (a.C % 8 == 0 && aligned16(a.dY) && aligned16(a.X) && aligned16(a.W) && aligned16(a.dX) &&
      (res == nullptr || aligned16(res))) {
    return backward_with<8>(a);
  }
  return backward_with<1>(a);
}

}  // namespace vkern
