// The row machinery the softmax ops (softmax.cu) and cross_entropy
// (cross_entropy.cu) share: f16 pair arithmetic, a thread's slice of a row
// held in registers (RowSlice: 16-byte or 2-byte accesses, columns past the
// end filled), and max and sum reductions over the threads that own a row.
// Every unit that uses it includes it and gets its own copy (an unnamed
// namespace), so no definition here is shared between units.
#ifndef VKERN_CUDA_ROWS_CUH
#define VKERN_CUDA_ROWS_CUH

#include <cstdint>

#include "cuda/compat.h"

namespace {
namespace vkern_rows {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kSegment = 32768;  // elements per block on the long-row path (512 threads × 64)
constexpr int kSegmentThreads = 512;
constexpr int kSegmentElems = kSegment / kSegmentThreads;
constexpr uint32_t kNegInfPair = 0xfc00fc00u;  // two f16 −Inf


__device__ __forceinline__ float exp_of(float d) { return exp2f(d * kLog2e); }

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

// RowSlice: E elements of a row held by thread t of the T threads that own
// it. Element idx of the slice is vector idx / VW, lane idx % VW; vector j is
// at column (j·T + t)·VW of the row (or the segment).
template <int T, int E, int VW>
struct RowSlice {
  static_assert(VW == 8 || VW == 1, "vector width 8 or 1");
  static_assert(E % VW == 0 && E % 8 == 0, "E must hold whole vectors and pairs");
  static constexpr int kVectors = E / VW;

  uint32_t w[E / 2];  // element idx in w[idx / 2], low half for even idx

  // Columns inside one row or segment fit an int (at most 65,536).
  __device__ static int column(int j, int t) { return (j * T + t) * VW; }

  // Loads columns < cols of row; other slots get fill (a pair of f16 bits).
  // slot is the element index at which thread t holds column col of the
  // row, or −1 when another thread holds it.
  __device__ static int slot(int64_t col, int t) {
    const int64_t vector = col / VW;
    if (col < 0 || vector % T != t) return -1;
    return static_cast<int>(vector / T) * VW + static_cast<int>(col % VW);
  }

  // Addresses are one per-thread base plus compile-time offsets.
  __device__ void load(const __half* row, int cols, int t, uint32_t fill) {
    if (VW == 8) {
      const uint4* base = reinterpret_cast<const uint4*>(row) + t;
#pragma unroll
      for (int j = 0; j < kVectors; ++j) {
        uint4 v = make_uint4(fill, fill, fill, fill);
        if (column(j, t) < cols) v = VK_LDG(base + j * T);
        w[j * 4 + 0] = v.x;
        w[j * 4 + 1] = v.y;
        w[j * 4 + 2] = v.z;
        w[j * 4 + 3] = v.w;
      }
    } else {
      const unsigned short* base = reinterpret_cast<const unsigned short*>(row) + t;
#pragma unroll
      for (int j = 0; j < kVectors; j += 2) {
        const uint32_t lo = column(j, t) < cols ? VK_LDG(base + j * T) : (fill & 0xffffu);
        const uint32_t hi = column(j + 1, t) < cols ? VK_LDG(base + (j + 1) * T) : (fill >> 16);
        w[j / 2] = lo | hi << 16;
      }
    }
  }

  // Stores the slots of columns < cols; pair(i) returns the packed f16 bits
  // of elements 2i and 2i + 1. Each vector is stored as soon as it is made,
  // and slots past the end are never computed.
  template <class PairFn>
  __device__ static void store(__half* row, int cols, int t, PairFn pair) {
    if (VW == 8) {
      uint4* base = reinterpret_cast<uint4*>(row) + t;
#pragma unroll
      for (int j = 0; j < kVectors; ++j) {
        if (column(j, t) < cols) base[j * T] = make_uint4(pair(j * 4), pair(j * 4 + 1), pair(j * 4 + 2), pair(j * 4 + 3));
      }
    } else {
      unsigned short* base = reinterpret_cast<unsigned short*>(row) + t;
#pragma unroll
      for (int j = 0; j < kVectors; j += 2) {
        if (column(j, t) >= cols) continue;
        const uint32_t bits = pair(j / 2);
        base[j * T] = static_cast<unsigned short>(bits & 0xffffu);
        if (column(j + 1, t) < cols) base[(j + 1) * T] = static_cast<unsigned short>(bits >> 16);
      }
    }
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
// Host side.

constexpr int64_t kMaxBlocks = int64_t{1} << 30;  // grid-stride loops cover the rest

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline unsigned grid_for(int64_t jobs) { return static_cast<unsigned>(jobs < kMaxBlocks ? jobs : kMaxBlocks); }

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// ScratchBuffer is device memory kept between calls and grown when a call
// needs more (with cudaFree + cudaMalloc, which synchronise the device; see
// ops.cuh). A failed allocation answers cudaErrorMemoryAllocation, cleared
// from the runtime's last error so that it is reported here instead.
struct ScratchBuffer {
  void* buffer = nullptr;
  size_t capacity = 0;

  cudaError_t get(size_t bytes, void** out) {
    if (bytes > capacity) {
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
};

}  // namespace vkern_rows
}  // namespace

#endif  // VKERN_CUDA_ROWS_CUH
