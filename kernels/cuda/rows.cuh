// The row machinery the softmax ops (softmax.cu) and cross_entropy
// (cross_entropy.cu) share: f16 pair arithmetic, a thread's slice of a row
// held in registers (RowSlice: 16-byte accesses wherever a row starts, or
// 2-byte ones; slots outside the row filled), the rows' exponentials
// (exp_of, row_exp), and max and sum reductions over the threads that own
// a row; and, for bias_grad's column sums,
// partial sums of many blocks finished in the same kernel by the last block
// to arrive (last_to_arrive, sum_partial_rows, Counters). Every unit that
// uses it includes it and gets its own copy (an unnamed namespace), so no
// definition here is shared between units.
#ifndef VKERN_CUDA_ROWS_CUH
#define VKERN_CUDA_ROWS_CUH

#include <cstdint>

#include "cuda/beside.h"
#include "cuda/capture.h"
#include "cuda/compat.h"

namespace {
namespace vkern_rows {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kSegment = 32768;  // elements per block on the long-row path (512 threads × 64)
constexpr int kSegmentThreads = 512;
constexpr int kSegmentElems = kSegment / kSegmentThreads;
constexpr uint32_t kNegInfPair = 0xfc00fc00u;  // two f16 −Inf


__device__ __forceinline__ float exp_of(float d) { return exp2f(d * kLog2e); }

// row_exp is e = exp(d) for d = x − m ≤ 0 as exp_of takes it (d·log₂e
// rounded once): by exp2f where kFtz is false, and by the multiprocessor's
// EX2 alone (compat.h's vk_ex2_ftz) where it is true (cross_entropy's and
// softmax's row kernels, unless their switches say otherwise). The two give
// the same bits wherever e ≥ 2⁻¹²⁶; below it exp2f gives a subnormal and
// EX2 +0, off by under 2⁻¹²⁶. oracle/softmax.go's bound takes that in: each
// term of the sum may be off by 2⁻¹²⁶ (S ≥ 1), and an output e/s (times c
// for cross_entropy's gradient) by as much, inside the absolute term it
// allows each yⱼ.
template <bool kFtz>
__device__ __forceinline__ float row_exp(float d) {
  if constexpr (kFtz) {
    return vk_ex2_ftz(d * kLog2e);
  } else {
    return exp_of(d);
  }
}

__device__ __forceinline__ float neg_inf() { return __int_as_float(static_cast<int>(0xff800000u)); }
__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7fffffff); }

__device__ __forceinline__ float half_lo(uint32_t w) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xffffu)));
}
__device__ __forceinline__ float half_hi(uint32_t w) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16)));
}
__device__ __forceinline__ float element(const uint32_t* w, int idx) {
  return idx & 1 ? half_hi(w[idx / 2]) : half_lo(w[idx / 2]);
}
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(lo))) |
         static_cast<uint32_t>(__half_as_ushort(__float2half_rn(hi))) << 16;
}

// max2 is the elementwise max of two f16 pairs, skipping NaN as fmaxf does
// (the other operand; NaN only when both are).
__device__ __forceinline__ __half2 max2(__half2 a, __half2 b) {
#if defined(__HIP_PLATFORM_AMD__)
  // HIP 5.x has no __hmax2; through f32 the max of f16 values is exact.
  return __floats2half2_rn(fmaxf(__low2float(a), __low2float(b)), fmaxf(__high2float(a), __high2float(b)));
#else
  return __hmax2(a, b);
#endif
}

// max_of returns the largest of the 2N f16 values, skipping NaNs (NaN only
// when all are). The max of f16 values is exact in f16, so no conversion to
// f32 is needed, and the 2N values are never all alive as floats.
template <int N>
__device__ __forceinline__ float max_of(const uint32_t (&w)[N]) {
  static_assert(N % 4 == 0, "four independent chains");
  __half2 m[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) m[k] = *reinterpret_cast<const __half2*>(&w[k]);
#pragma unroll
  for (int i = 4; i < N; ++i) m[i % 4] = max2(m[i % 4], *reinterpret_cast<const __half2*>(&w[i]));
  const __half2 m2 = max2(max2(m[0], m[1]), max2(m[2], m[3]));
  return fmaxf(__low2float(m2), __high2float(m2));
}

// launder hides the words' values from the compiler, so that the f16 → f32
// conversions of one loop are not kept alive (as E floats) for the next one:
// converting again costs one instruction; keeping them costs registers.
template <int N>
__device__ __forceinline__ void launder(uint32_t (&w)[N]) {
#if !defined(__HIP_PLATFORM_AMD__)
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(w[i]));
#else
  (void)w;  // an optimisation hint only; HIP builds go without it
#endif
}

// lead_of: how many elements p lies past the 16-byte boundary at or before
// it, with 16-byte accesses (VW = 8; 0 .. 7); 0 with 2-byte ones.
template <int VW>
__device__ __forceinline__ int lead_of(const __half* p) {
  return VW == 8 ? static_cast<int>(reinterpret_cast<uintptr_t>(p) >> 1 & 7u) : 0;
}

// load_cut reads the elements [lo, hi) of the eight at v (16-byte aligned),
// one at a time: a vector that the end of a row cuts. The others are fill's
// halves (its low half at even elements), and are not read.
__device__ __forceinline__ uint4 load_cut(const __half* v, int lo, int hi, uint32_t fill) {
  const unsigned short* h = reinterpret_cast<const unsigned short*>(v);
  uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t even = 2 * k >= lo && 2 * k < hi ? VK_LDG(h + 2 * k) : (fill & 0xffffu);
    const uint32_t odd = 2 * k + 1 >= lo && 2 * k + 1 < hi ? VK_LDG(h + 2 * k + 1) : (fill >> 16);
    w[k] = even | odd << 16;
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// store_cut writes the elements [lo, hi) of the eight f16 in value to v
// (16-byte aligned), one at a time, and nothing else.
__device__ __forceinline__ void store_cut(__half* v, int lo, int hi, uint4 value) {
  unsigned short* h = reinterpret_cast<unsigned short*>(v);
  const uint32_t w[4] = {value.x, value.y, value.z, value.w};
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    if (k >= lo && k < hi) h[k] = static_cast<unsigned short>(k & 1 ? w[k / 2] >> 16 : w[k / 2] & 0xffffu);
  }
}

// RowSlice: E elements of a row held by thread t of the T threads that own
// it. Element idx of the slice is vector idx / VW, lane idx % VW; vector j is
// at column (j·T + t)·VW of the slice's base.
//
// Rows start anywhere. With 16-byte accesses a row is laid from the 16-byte
// boundary at or before its start (load_row, store_row): the base is that
// boundary and the row is the span [lead, lead + cols) of it. A vector
// wholly inside the span is one 16-byte access; the at most two the span
// cuts (the row's first and last) are read and written element by element,
// and slots outside the span hold fill. load and store are for rows that
// start 16-byte aligned (with VW = 8) and have nothing to cut.
template <int T, int E, int VW>
struct RowSlice {
  static_assert(VW == 8 || VW == 1, "vector width 8 or 1");
  static_assert(E % VW == 0 && E % 8 == 0, "E must hold whole vectors and pairs");
  static constexpr int kVectors = E / VW;

  uint32_t w[E / 2];  // element idx in w[idx / 2], low half for even idx

  // Columns inside one row or segment fit an int (at most 65,536).
  __device__ static int column(int j, int t) { return (j * T + t) * VW; }

  // inside: whether vector j of thread t lies wholly in the span [lo, hi).
  // lo < 8 <= column(1, t), so only vector 0 can start before lo.
  __device__ static bool inside(int j, int t, int lo, int hi) {
    return column(j, t) + VW <= hi && (j > 0 || column(j, t) >= lo);
  }

  // slot is the element index at which thread t holds column col of the
  // base, or −1 when another thread holds it.
  __device__ static int slot(int64_t col, int t) {
    const int64_t vector = col / VW;
    if (col < 0 || vector % T != t) return -1;
    return static_cast<int>(vector / T) * VW + static_cast<int>(col % VW);
  }

  // load_span loads the span [lo, hi) of base (16-byte aligned when VW = 8;
  // lo < 8, and lo <= 0 when VW = 1); other slots get fill (a pair of f16
  // bits). Cut = false promises that no vector straddles lo or hi.
  // Addresses are one per-thread base plus compile-time offsets.
  template <bool Cut = true>
  __device__ void load_span(const __half* base, int lo, int hi, int t, uint32_t fill) {
    if (VW == 8) {
      const uint4* vectors = reinterpret_cast<const uint4*>(base) + t;
#pragma unroll
      for (int j = 0; j < kVectors; ++j) {
        uint4 v = make_uint4(fill, fill, fill, fill);
        if (Cut ? inside(j, t, lo, hi) : column(j, t) < hi) v = VK_LDG(vectors + j * T);
        w[j * 4 + 0] = v.x;
        w[j * 4 + 1] = v.y;
        w[j * 4 + 2] = v.z;
        w[j * 4 + 3] = v.w;
      }
      if (!Cut) return;
      // The cut vectors, after every whole one has been asked for.
#pragma unroll
      for (int j = 0; j < kVectors; ++j) {
        if (column(j, t) >= hi || inside(j, t, lo, hi)) continue;
        const uint4 v = load_cut(base + column(j, t), lo - column(j, t), hi - column(j, t), fill);
        w[j * 4 + 0] = v.x;
        w[j * 4 + 1] = v.y;
        w[j * 4 + 2] = v.z;
        w[j * 4 + 3] = v.w;
      }
    } else {
      const unsigned short* elements = reinterpret_cast<const unsigned short*>(base) + t;
#pragma unroll
      for (int j = 0; j < kVectors; j += 2) {
        const uint32_t even = inside(j, t, lo, hi) ? VK_LDG(elements + j * T) : (fill & 0xffffu);
        const uint32_t odd = inside(j + 1, t, lo, hi) ? VK_LDG(elements + (j + 1) * T) : (fill >> 16);
        w[j / 2] = even | odd << 16;
      }
    }
  }

  // store_span stores the slots of the span [lo, hi) of base (as load_span);
  // pair(i) returns the packed f16 bits of elements 2i and 2i + 1. Each
  // vector is stored as soon as it is made, and vectors past hi are never
  // computed.
  template <bool Cut = true, class PairFn>
  __device__ static void store_span(__half* base, int lo, int hi, int t, PairFn pair) {
    if (VW == 8) {
      uint4* vectors = reinterpret_cast<uint4*>(base) + t;
#pragma unroll
      for (int j = 0; j < kVectors; ++j) {
        if (column(j, t) >= hi) continue;
        const uint4 v = make_uint4(pair(j * 4), pair(j * 4 + 1), pair(j * 4 + 2), pair(j * 4 + 3));
        if (!Cut || inside(j, t, lo, hi)) {
          vectors[j * T] = v;
        } else {
          store_cut(base + column(j, t), lo - column(j, t), hi - column(j, t), v);
        }
      }
    } else {
      unsigned short* elements = reinterpret_cast<unsigned short*>(base) + t;
#pragma unroll
      for (int j = 0; j < kVectors; j += 2) {
        if (column(j, t) >= hi) continue;
        const uint32_t bits = pair(j / 2);
        if (inside(j, t, lo, hi)) elements[j * T] = static_cast<unsigned short>(bits & 0xffffu);
        if (inside(j + 1, t, lo, hi)) elements[(j + 1) * T] = static_cast<unsigned short>(bits >> 16);
      }
    }
  }

  // load_row and store_row: the first cols elements of a row (or of a piece
  // of one) that starts anywhere. Rows read and written together must lie
  // equally far past a 16-byte boundary (the host checks it). row_slot is
  // the slot of the row's column col.
  __device__ void load_row(const __half* row, int cols, int t, uint32_t fill) {
    const int lead = lead_of<VW>(row);
    load_span(row - lead, lead, lead + cols, t, fill);
  }
  template <class PairFn>
  __device__ static void store_row(__half* row, int cols, int t, PairFn pair) {
    const int lead = lead_of<VW>(row);
    store_span(row - lead, lead, lead + cols, t, pair);
  }
  __device__ static int row_slot(const __half* row, int64_t col, int t) { return slot(col + lead_of<VW>(row), t); }

  // load and store: a row that starts 16-byte aligned when VW = 8, with
  // cols a multiple of 8 (layernorm.cu's rows and weights, whose columns
  // must meet in the same slots).
  __device__ void load(const __half* row, int cols, int t, uint32_t fill) { load_span<false>(row, 0, cols, t, fill); }
  // prefetch asks L2 for what load(row, cols, t) reads, with 16-byte
  // accesses (VW = 8); with 2-byte ones it does nothing.
  __device__ static void prefetch(const __half* row, int cols, int t) {
    if (VW != 8) return;
#pragma unroll
    for (int j = 0; j < kVectors; ++j) {
      if (column(j, t) < cols) vk_prefetch_l2(row + column(j, t));
    }
  }
  template <class PairFn>
  __device__ static void store(__half* row, int cols, int t, PairFn pair) {
    store_span<false>(row, 0, cols, t, pair);
  }
};

// RowPiece: the columns [first, first + cols) of a row that piece k holds
// when the row is cut into pieces of size elements (a multiple of 8) laid
// from the 16-byte boundary lead elements before the row's start: piece 0
// starts with the row, every later piece on a 16-byte boundary, and pieces
// past the row's end are empty. With lead = 0 these are the plain pieces
// [k·size, (k + 1)·size).
struct RowPiece {
  int64_t first;
  int cols;

  __device__ static RowPiece of(int64_t C, int lead, int64_t k, int64_t size) {
    const int64_t start = k * size - lead, end = start + size < C ? start + size : C;
    RowPiece p;
    p.first = start > 0 ? start : 0;
    p.cols = static_cast<int>(end > p.first ? end - p.first : 0);
    return p;
  }
};

// Reductions over the T threads that own a row. For T > 32 the block is one
// row (T = blockDim.x); red holds T/32 floats. Each ends with a barrier so
// that red can be reused at once.
template <int T>
__device__ __forceinline__ float row_max(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, VK_SHFL_XOR(v, o));
  if (T == 32) return v;
  const int lane = threadIdx.x & 31;
  if (lane == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = lane < T / 32 ? red[lane] : neg_inf();
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, VK_SHFL_XOR(v, o));
  __syncthreads();
  return v;
}

template <int T>
__device__ __forceinline__ float row_sum(float v, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += VK_SHFL_XOR(v, o);
  if (T == 32) return v;
  const int lane = threadIdx.x & 31;
  if (lane == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = lane < T / 32 ? red[lane] : 0.0f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += VK_SHFL_XOR(v, o);
  __syncthreads();
  return v;
}

// slice_stats is a slice's (max m, Σ exp(x − m)) across the block's T
// threads, in which −Inf elements add 0: a slice of only −Inf gives
// (−Inf, 0), which adds nothing when partials are combined. The segmented
// and cluster paths of softmax and cross_entropy start from it.
template <int T, int E, int VW>
__device__ __forceinline__ float2 slice_stats(RowSlice<T, E, VW>& x, float* red) {
  float m = neg_inf();
  m = fmaxf(m, max_of(x.w));
  m = row_max<T>(m, red);
  launder(x.w);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < E; ++i) {
    const float v = element(x.w, i);
    s += v == neg_inf() ? 0.0f : exp_of(v - m);
  }
  return make_float2(m, row_sum<T>(s, red));
}

// Whether a slice's exps are kept in registers between the sum and the
// output, rather than computed twice (the budget is 64 registers a thread
// at 1,024 threads, 128 at 512).
template <int T, int E>
struct KeepExps {
  static constexpr bool value = E <= 32 || (T <= 512 && E <= 64);
};

// ---------------------------------------------------------------------------
// Partial sums of many blocks, finished in the same kernel: each block
// writes its partial sums, counts itself in at a counter (an integer atomic;
// no float atomics), and the last block to arrive adds them all in a fixed
// order, so the result depends on the shape alone, not on which block was
// last. One launch instead of a second kernel for the partials.

// last_to_arrive is called by every thread of the block once the block's
// partial sums are written, and answers, to every thread, whether the block
// is the last of count to arrive at *counter. The counter wraps back to 0
// at the count-th arrival, so a launch that completes leaves it ready for
// the next (Counters clears it once, when allocated). On CUDA, thread 0
// counts the block in after the barrier with one atomic increment of
// acquire-release semantics at device scope: the release covers the
// block's writes before the barrier, and the acquire, with the barrier
// after it, orders every thread's later reads (VK_LOAD_COHERENT) after the
// writes of the blocks counted before (the pattern of CUTLASS's
// semaphores). HIP, and CUDA with VKERN_LAST_TO_ARRIVE_FENCES (bench/
// bias_grad_lab.cu's comparison), fence instead: each writer before the
// barrier, and the last block after it; so does code for devices before
// compute capability 7, which lack the semantics. (No CI step compiles the
// increment: hipcc takes the HIP branch; nvcc on the GPU machines does.) On
// the H100 it took bias_grad at 16384x768 from 16.2–16.3 to 15.7–15.8 µs
// a launch, 20 launches in a row in bench/bias_grad_lab.cu
// (docs/bias-grad-variants-h100 call 6).
__device__ __forceinline__ bool last_to_arrive(unsigned* counter, unsigned count) {
  __shared__ bool last;
#if defined(__HIP_PLATFORM_AMD__) || defined(VKERN_LAST_TO_ARRIVE_FENCES) || \
    (defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 700)
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicInc(counter, count - 1) == count - 1;
  __syncthreads();
  const bool mine = last;
  if (mine) __threadfence();
  return mine;
#else
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned before = 0;
    asm volatile("atom.acq_rel.gpu.global.inc.u32 %0, [%1], %2;" : "=r"(before) : "l"(counter), "r"(count - 1) : "memory");
    last = before == count - 1;
  }
  __syncthreads();
  return last;
#endif
}

// load_floats reads F consecutive floats (one 16-byte load for F = 4) that
// other blocks of this kernel wrote.
template <int F>
__device__ __forceinline__ void load_floats(const float* p, float (&v)[F]) {
  static_assert(F == 4 || F == 1, "4 or 1 floats a load");
  if constexpr (F == 4) {
    const float4 t = VK_LOAD_COHERENT(reinterpret_cast<const float4*>(p));
    v[0] = t.x;
    v[1] = t.y;
    v[2] = t.z;
    v[3] = t.w;
  } else {
    v[0] = VK_LOAD_COHERENT(p);
  }
}

// sum_partial_rows adds, for each column j < width, the n partial sums
// src[p·stride + j], p = 0 … n − 1, and hands the total to out(j, total).
// Every thread of the block (kThreads, one-dimensional) must call it. Where
// the row's F-float loads are fewer than the threads, the threads split
// into strands: strand s adds rows p ≡ s (mod strands) in ascending order,
// and the strands' sums are then added in strand order; otherwise one
// strand adds all n rows in order. Sums start from −0, which an addition
// turns into its other operand exactly, so an empty strand adds nothing.
// Which partial goes into which sum, and the order of every addition,
// depend on n, width and kThreads alone. F = 4 needs src, stride and width
// multiples of 4 floats (16-byte loads); F = 1 has no such need.
template <int kThreads, int F, class Out>
__device__ void sum_partial_rows(const float* src, int64_t n, int64_t stride, int width, Out out) {
  constexpr int kBatch = 16;  // loads in flight per thread
  __shared__ float strand_sums[kThreads * F];
  const int loads = (width + F - 1) / F;  // F-float loads across a row
  const int strands = loads < kThreads ? kThreads / loads : 1;
  const int lanes = kThreads / strands;  // threads of a strand, one load column each
  const int strand = threadIdx.x / lanes;
  for (int q0 = 0; q0 < loads; q0 += lanes) {
    const int q = q0 + threadIdx.x % lanes;
    const bool active = strand < strands && q < loads;
    float total[F];
#pragma unroll
    for (int f = 0; f < F; ++f) total[f] = -0.0f;
    if (active) {
      const float* p = src + static_cast<int64_t>(q) * F;
      for (int64_t r0 = strand; r0 < n; r0 += static_cast<int64_t>(kBatch) * strands) {
        float v[kBatch][F];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
          if (r0 + k * strands < n) load_floats<F>(p + (r0 + k * strands) * stride, v[k]);
        }
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
          if (r0 + k * strands < n) {
#pragma unroll
            for (int f = 0; f < F; ++f) total[f] += v[k][f];
          }
        }
      }
    }
    if (strands > 1) {
      if (active) {
#pragma unroll
        for (int f = 0; f < F; ++f) strand_sums[threadIdx.x * F + f] = total[f];
      }
      __syncthreads();
      if (active && strand == 0) {
        for (int k = 1; k < strands; ++k) {
#pragma unroll
          for (int f = 0; f < F; ++f) total[f] += strand_sums[(k * lanes + threadIdx.x) * F + f];
        }
      }
      __syncthreads();
    }
    if (active && strand == 0) {
#pragma unroll
      for (int f = 0; f < F; ++f) {
        if (q * F + f < width) out(q * F + f, total[f]);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Host side.

constexpr int64_t kMaxBlocks = int64_t{1} << 30;  // grid-stride loops cover the rest

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline unsigned grid_for(int64_t jobs) { return static_cast<unsigned>(jobs < kMaxBlocks ? jobs : kMaxBlocks); }

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

#if !defined(__HIP_PLATFORM_AMD__)
// DeviceLimits: what the launchers need to know of the device, read once
// per process (the server uses one device): the opt-in shared memory a
// block may have, the SM count, the compute capability's major number, and
// whether the device takes cooperative launches (softmax.cu's row
// clusters, bias_grad.cu's spans).
struct DeviceLimits {
  cudaError_t err = cudaSuccess;
  int shared_bytes = 0, sms = 0, major = 0, cooperative = 0;
};
inline const DeviceLimits& device_limits() {
  static const DeviceLimits limits = [] {
    DeviceLimits l;
    int device = 0;
    l.err = cudaGetDevice(&device);
    if (l.err == cudaSuccess)
      l.err = cudaDeviceGetAttribute(&l.shared_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (l.err == cudaSuccess) l.err = cudaDeviceGetAttribute(&l.sms, cudaDevAttrMultiProcessorCount, device);
    if (l.err == cudaSuccess) l.err = cudaDeviceGetAttribute(&l.major, cudaDevAttrComputeCapabilityMajor, device);
    if (l.err == cudaSuccess) l.err = cudaDeviceGetAttribute(&l.cooperative, cudaDevAttrCooperativeLaunch, device);
    return l;
  }();
  return limits;
}
#endif

// congruent16: whether a and b lie equally far past a 16-byte boundary, so
// that rows at the same offset of each share their lead (RowSlice).
inline bool congruent16(const void* a, const void* b) {
  return ((reinterpret_cast<uintptr_t>(a) ^ reinterpret_cast<uintptr_t>(b)) & 15u) == 0;
}

// row_extent is the most columns that a row of C elements (row r at p +
// r·C) covers with 16-byte accesses, laid from the 16-byte boundary at or
// before its start: C when every row starts on a boundary, else C + 7. The
// launchers size a row's threads, pieces or stage by it.
inline int64_t row_extent(int64_t C, const void* p) { return C % 8 == 0 && aligned16(p) ? C : C + 7; }

// ScratchBuffer is device memory kept between calls and grown when a call
// needs more (with cudaFree + cudaMalloc, which synchronise the device; see
// ops.cuh). A failed allocation answers cudaErrorMemoryAllocation, cleared
// from the runtime's last error so that it is reported here instead; a
// growth during a batch's capture answers cudaErrorStreamCaptureUnsupported
// (capture.h). Each of the server's lanes (beside.h) has its own memory:
// get answers the lane's under way.
struct ScratchBuffer {
  void* buffers[vkern_beside::kLanes] = {};
  size_t capacities[vkern_beside::kLanes] = {};

  cudaError_t get(size_t bytes, void** out) {
    void*& buffer = buffers[vkern_beside::lane];
    size_t& capacity = capacities[vkern_beside::lane];
    if (bytes > capacity) {
      if (!vkern_capture::may_grow()) return cudaErrorStreamCaptureUnsupported;
      if (buffer != nullptr) {
        const cudaError_t err = cudaFree(buffer);
        buffer = nullptr;
        capacity = 0;
        if (err != cudaSuccess) return err;
      }
      if (cudaMalloc(&buffer, bytes) != cudaSuccess) {
        buffer = nullptr;
        (void)cudaGetLastError();
        return cudaErrorMemoryAllocation;
      }
      capacity = bytes;
    }
    *out = buffer;
    return cudaSuccess;
  }

  // capacity is the lane's bytes; forget makes its next get allocate
  // afresh.
  size_t capacity() const { return capacities[vkern_beside::lane]; }
  void forget() { capacities[vkern_beside::lane] = 0; }
};

// Counters is device memory for last_to_arrive's counters, kept between
// calls (a ScratchBuffer): cleared on the call's stream when it is
// (re)allocated, before the kernel that counts, and left at 0 by every
// launch that completes, so no call clears it again.
struct Counters {
  ScratchBuffer memory;

  cudaError_t get(size_t count, cudaStream_t s, unsigned** out) {
    const size_t before = memory.capacity();
    void* p = nullptr;
    cudaError_t err = memory.get(count * sizeof(unsigned), &p);
    if (err != cudaSuccess) return err;
    if (memory.capacity() != before) {
      err = cudaMemsetAsync(p, 0, memory.capacity(), s);
      if (err != cudaSuccess) {
        memory.forget();  // not cleared: the next call allocates afresh
        return err;
      }
    }
    *out = static_cast<unsigned*>(p);
    return cudaSuccess;
  }
};

}  // namespace vkern_rows
}  // namespace

#endif  // VKERN_CUDA_ROWS_CUH
