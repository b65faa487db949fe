// global_norm on the GPU: g f32 N in; sumsq f32 = Σ g² (binary64 inside,
// rounded once) and nonfinite i32 = the count of ±Inf and NaN elements, out.
//
// Launch shape: two kernels, no atomics.
// - tile_sums: one 256-thread block per tile of 8,192 elements (so N / 8,192
//   blocks, rounded up: the last wave is short and every SM stays busy).
//   Thread t of a tile takes the four elements at 1,024·u + 4·t, u = 0..7, one
//   16-byte load each where g is 16-byte aligned and the tile is whole (else
//   the same elements one by one), and sums their squares in binary64 in four
//   accumulators, one per lane of the load. The block adds its threads' sums
//   in a fixed tree (warp butterflies, then the warps' sums) and writes the
//   tile's (sum, count) to scratch.
// - finish: one block of 1,024 threads adds the tiles' partials, thread t
//   taking tiles t, t + 1,024, … in order (eight loads in flight), then the
//   same fixed tree; thread 0 rounds the sum once to f32 and writes the
//   count, saturated at 2³¹ − 1.
// Which element goes into which sum, and the order of every addition, depend
// on N alone: the result is the same on every run, whatever the scheduling,
// and whether or not g is aligned.
//
// Memory-bound: the floor is 4·N bytes over the copy bandwidth (the scratch,
// 16 bytes per tile, is 1/2,048 of that).
//
// Facts relied on: the square of a binary32 value is exact in binary64, so
// only the additions round (the oracle's bound allows any order); the
// conversion of the binary64 sum to float rounds to nearest; NaN and ±Inf
// propagate through the sums as IEEE says (no fast-math).
//
// Scratch (see ops.cuh): 16 bytes per tile, grown when N needs more.
//
// Variants (one so far):
//   1. fixed tiles of 8,192 elements, 16-byte loads, a second kernel for the
//      partials.
#include <cstdint>

#include "core/backend.h"
#include "cuda/compat.h"
#include "cuda/rows.cuh"

namespace {
namespace vkern_global_norm {

using vkern_rows::aligned16;
using vkern_rows::ceil_div;
using vkern_rows::ScratchBuffer;

constexpr int kThreads = 256;                    // per tile block
constexpr int kLoads = 8;                        // 16-byte loads per thread per tile
constexpr int64_t kTile = 4 * kLoads * kThreads;  // 8,192 elements
constexpr int kFinishThreads = 1024;
constexpr int kBatch = 8;  // partials a finishing thread loads at a time

// Part is a tile's (or the whole buffer's) sum of squares and count of
// non-finite elements.
struct Part {
  double sumsq;
  unsigned long long nonfinite;
};

__device__ __forceinline__ void take(float x, double& sum, unsigned long long& count) {
  const double d = x;
  sum += d * d;
  count += (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u ? 1ull : 0ull;
}

// block_sum adds every thread's (sum, count) in a fixed tree: butterflies
// within each group of 32 lanes, then the groups' results in order. The
// result is thread 0's.
template <int T>
__device__ __forceinline__ Part block_sum(double sum, unsigned long long count) {
  __shared__ double sums[T / 32];
  __shared__ unsigned long long counts[T / 32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    sum += VK_SHFL_XOR(sum, o);
    count += VK_SHFL_XOR(count, o);
  }
  if ((threadIdx.x & 31) == 0) {
    sums[threadIdx.x >> 5] = sum;
    counts[threadIdx.x >> 5] = count;
  }
  __syncthreads();
  Part total{0.0, 0ull};
  if (threadIdx.x == 0) {
    for (int w = 0; w < T / 32; ++w) {
      total.sumsq += sums[w];
      total.nonfinite += counts[w];
    }
  }
  return total;
}

// tile_sums writes each tile's Part (see the file comment).
__global__ void __launch_bounds__(kThreads) tile_sums(const float* g, int64_t n, bool vector_loads, Part* parts) {
  const int64_t first = blockIdx.x * kTile;
  const float* tile = g + first;
  double lane[4] = {0.0, 0.0, 0.0, 0.0};
  unsigned long long count = 0;
  if (vector_loads && first + kTile <= n) {
    const float4* tile4 = reinterpret_cast<const float4*>(tile) + threadIdx.x;
    float4 x[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) x[u] = VK_LDG(tile4 + u * kThreads);
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      take(x[u].x, lane[0], count);
      take(x[u].y, lane[1], count);
      take(x[u].z, lane[2], count);
      take(x[u].w, lane[3], count);
    }
  } else {
    const int64_t size = n - first < kTile ? n - first : kTile;
    for (int u = 0; u < kLoads; ++u) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int64_t at = int64_t{u} * 4 * kThreads + 4 * threadIdx.x + c;
        if (at < size) take(VK_LDG(tile + at), lane[c], count);
      }
    }
  }
  const Part total = block_sum<kThreads>((lane[0] + lane[1]) + (lane[2] + lane[3]), count);
  if (threadIdx.x == 0) parts[blockIdx.x] = total;
}

// finish adds the tiles' parts and writes the outputs.
__global__ void __launch_bounds__(kFinishThreads) finish(const Part* parts, int64_t tiles, float* sumsq,
                                                         int32_t* nonfinite) {
  double sum = 0.0;
  unsigned long long count = 0;
  // kBatch loads in flight at a time; the additions keep the order of i.
  for (int64_t first = threadIdx.x; first < tiles; first += kBatch * kFinishThreads) {
    Part batch[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int64_t i = first + int64_t{b} * kFinishThreads;
      batch[b] = i < tiles ? parts[i] : Part{0.0, 0ull};
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      sum += batch[b].sumsq;
      count += batch[b].nonfinite;
    }
  }
  const Part total = block_sum<kFinishThreads>(sum, count);
  if (threadIdx.x == 0) {
    *sumsq = static_cast<float>(total.sumsq);
    *nonfinite = static_cast<int32_t>(total.nonfinite < 0x7fffffffull ? total.nonfinite : 0x7fffffffull);
  }
}

// parts_scratch returns room for tiles Parts, growing it when needed.
cudaError_t parts_scratch(int64_t tiles, Part** out) {
  static ScratchBuffer buffer;
  void* p = nullptr;
  const cudaError_t err = buffer.get(static_cast<size_t>(tiles) * sizeof(Part), &p);
  *out = static_cast<Part*>(p);
  return err;
}

cudaError_t global_norm(const float* g, int64_t n, float* sumsq, int32_t* nonfinite, cudaStream_t s) {
  const int64_t tiles = ceil_div(n, kTile);
  if (tiles > 0x7fffffff) return cudaErrorInvalidValue;  // 2⁴⁴ elements: more than any device holds
  Part* parts = nullptr;
  cudaError_t err = parts_scratch(tiles, &parts);
  if (err != cudaSuccess) return err;
  tile_sums<<<static_cast<unsigned>(tiles), kThreads, 0, s>>>(g, n, aligned16(g), parts);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  finish<<<1, kFinishThreads, 0, s>>>(parts, tiles, sumsq, nonfinite);
  return cudaGetLastError();
}

}  // namespace vkern_global_norm
}  // namespace

namespace vkern {

// The op's entry (kernels.cu lists it).
cudaError_t run_global_norm(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_global_norm;
  return vkern_global_norm::global_norm(c.ptr<const float>(buf::g), c.params[param::N], c.ptr<float>(buf::sumsq),
                                        c.ptr<int32_t>(buf::nonfinite), s);
}

}  // namespace vkern
