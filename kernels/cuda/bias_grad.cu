// bias_grad on the GPU: db f32 N += the column sums of dy f16 M×N, in two
// kernels, deterministic (no atomics): the result depends only on the shape.
//
// The structure the oracle's bound follows (oracle.BiasGradRowBlock; the
// cpu kernel has the same): each block of kRowBlock = 64 rows from row 0 is
// summed from zero in ascending row order; the block sums and db are then
// added in an order of this file's own.
//
// Launch shape:
//   1. block_sums: one thread per (row block, group of VW columns), kThreads
//      threads of one row block per CUDA block. A thread walks its 64 rows
//      in order, summing its columns in f32 registers, and writes the sums
//      to partial[block · N + column] (scratch), or, when M <= 64 and there
//      is one block, adds them to db directly. VW = 2 (4-byte loads of f16
//      pairs: a warp reads 128 contiguous bytes of a row) when N is even and
//      dy is 4-byte aligned, else 1. At 16384×768 that is 256 row blocks ×
//      384 pairs = 98,304 threads, each with up to 16 independent loads in
//      flight.
//   2. combine: 256 threads = 16 columns × 16 strands per CUDA block;
//      strand t sums partial rows t, t + 16, … of its column, the 16 strand
//      sums are added in strand order in shared memory, and
//      db[j] = db[j] + total. A warp reads 64 contiguous bytes of each of
//      two partial rows; the partials (4 bytes per column per 64 rows, 1/32
//      of dy's bytes) are still in L2. At N = 768 that is 48 CUDA blocks,
//      each thread with 16 loads.
// Memory-bound: the floor is dy's bytes (plus db twice) over the copy
// bandwidth; the partials add 1/16 of dy's bytes of traffic.
//
// Facts relied on: f16 values are exact in f32; every addition is an f32
// addition rounded to nearest (no fast-math, so nvcc keeps each thread's
// order); NaN and ±Inf follow the sums.
#include <cstdint>

#include "core/backend.h"
#include "cuda/compat.h"
#include "cuda/rows.cuh"

namespace {
namespace vkern_bias_grad {

using namespace vkern_rows;

constexpr int kRowBlock = 64;        // oracle.BiasGradRowBlock
constexpr int kThreads = 128;        // block_sums: threads per CUDA block, all of one row block
constexpr int kCombineColumns = 16;  // combine: columns per CUDA block (64 contiguous bytes of a partial row)
constexpr int kStrands = 16;         // combine: threads per column

// block_sums: see the file comment. VW columns per thread (2 or 1); partial
// gets the block sums (row_blocks × cols), or, when partial is null (a
// single row block), db gets db + sum.
template <int VW>
__global__ void __launch_bounds__(kThreads)
    block_sums(const __half* __restrict__ dy, int64_t rows, int64_t cols, float* __restrict__ partial,
               float* __restrict__ db) {
  const int64_t groups = (cols + VW - 1) / VW;
  const int64_t tiles = (groups + kThreads - 1) / kThreads;
  const int64_t row_blocks = (rows + kRowBlock - 1) / kRowBlock;
  for (int64_t b = blockIdx.x; b < row_blocks * tiles; b += gridDim.x) {
    const int64_t block = b / tiles;
    const int64_t g = b % tiles * kThreads + threadIdx.x;
    if (g >= groups) continue;
    const int64_t r0 = block * kRowBlock;
    const int n = static_cast<int>(rows - r0 < kRowBlock ? rows - r0 : kRowBlock);
    const int64_t col = g * VW;
    float s0, s1 = 0.0f;
    if constexpr (VW == 2) {
      const uint32_t* p = reinterpret_cast<const uint32_t*>(dy + r0 * cols + col);
      const int64_t stride = cols / 2;  // pairs per row
      uint32_t w = VK_LDG(p);
      s0 = half_lo(w);
      s1 = half_hi(w);
#pragma unroll 16
      for (int r = 1; r < n; ++r) {
        w = VK_LDG(p + r * stride);
        s0 += half_lo(w);
        s1 += half_hi(w);
      }
    } else {
      const unsigned short* p = reinterpret_cast<const unsigned short*>(dy) + r0 * cols + col;
      s0 = __half2float(__ushort_as_half(VK_LDG(p)));
#pragma unroll 16
      for (int r = 1; r < n; ++r) s0 += __half2float(__ushort_as_half(VK_LDG(p + r * cols)));
    }
    if (partial != nullptr) {
      float* out = partial + block * cols + col;
      out[0] = s0;
      if (VW == 2) out[1] = s1;
    } else {
      db[col] = db[col] + s0;
      if (VW == 2) db[col + 1] = db[col + 1] + s1;
    }
  }
}

// combine: see the file comment.
__global__ void __launch_bounds__(kCombineColumns * kStrands)
    combine(const float* __restrict__ partial, int64_t row_blocks, int64_t cols, float* __restrict__ db) {
  __shared__ float strand_sums[kStrands][kCombineColumns + 1];
  const int tx = threadIdx.x % kCombineColumns, t = threadIdx.x / kCombineColumns;
  for (int64_t j0 = static_cast<int64_t>(blockIdx.x) * kCombineColumns; j0 < cols;
       j0 += static_cast<int64_t>(gridDim.x) * kCombineColumns) {
    const int64_t j = j0 + tx;
    float sum = 0.0f;
    if (j < cols) {
#pragma unroll 8
      for (int64_t c = t; c < row_blocks; c += kStrands) sum += VK_LDG(partial + c * cols + j);
    }
    strand_sums[t][tx] = sum;
    __syncthreads();
    if (t == 0 && j < cols) {
      float total = strand_sums[0][tx];
#pragma unroll
      for (int k = 1; k < kStrands; ++k) total += strand_sums[k][tx];
      db[j] = db[j] + total;
    }
    __syncthreads();
  }
}

// partials_scratch returns at least bytes of device memory for the block
// sums, kept between calls (ops.cuh).
cudaError_t partials_scratch(size_t bytes, void** out) {
  static ScratchBuffer buffer;
  return buffer.get(bytes, out);
}

cudaError_t launch(const __half* dy, float* db, int64_t rows, int64_t cols, cudaStream_t s) {
  const int64_t row_blocks = ceil_div(rows, kRowBlock);
  float* partial = nullptr;
  if (row_blocks > 1) {
    void* buffer = nullptr;
    const cudaError_t err = partials_scratch(static_cast<size_t>(row_blocks * cols) * sizeof(float), &buffer);
    if (err != cudaSuccess) return err;
    partial = static_cast<float*>(buffer);
  }
  const bool pairs = cols % 2 == 0 && (reinterpret_cast<uintptr_t>(dy) & 3u) == 0;
  const int64_t groups = pairs ? cols / 2 : cols;
  const unsigned grid = grid_for(row_blocks * ceil_div(groups, kThreads));
  if (pairs) {
    block_sums<2><<<grid, kThreads, 0, s>>>(dy, rows, cols, partial, db);
  } else {
    block_sums<1><<<grid, kThreads, 0, s>>>(dy, rows, cols, partial, db);
  }
  if (partial != nullptr) {
    combine<<<grid_for(ceil_div(cols, kCombineColumns)), kCombineColumns * kStrands, 0, s>>>(partial, row_blocks, cols,
                                                                                             db);
  }
  return cudaGetLastError();
}

}  // namespace vkern_bias_grad
}  // namespace

namespace vkern {

// The op's entry (kernels.cu lists it).
cudaError_t run_bias_grad(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_bias_grad;
  return vkern_bias_grad::launch(c.ptr<const __half>(buf::dy), c.ptr<float>(buf::db), c.params[param::M],
                                 c.params[param::N], s);
}

}  // namespace vkern
