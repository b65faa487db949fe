// bias_grad on the GPU: db f32 N += the column sums of dy f16 M×N, in one
// kernel, deterministic (no float atomics): the result depends only on the
// shape and on VW (dy's alignment), never on which block finishes a tile.
//
// The structure the oracle's bound follows (oracle.BiasGradRowBlock; the
// cpu kernel has the same): each block of kRowBlock = 64 rows from row 0 is
// summed from zero in ascending row order; the block sums and db are then
// added in an order of this file's own.
//
// Launch shape: one warp per (row block, column tile of 32·VW columns),
// kWarps = 8 warps of one tile and 8 consecutive row blocks (a group of
// 512 rows) per CUDA block, a grid-stride loop over (group, tile) jobs.
// - Lane l sums its VW columns over the warp's 64 rows in ascending order
//   in f32 registers, kBatch = 16 rows loaded before they are added (16 ×
//   16 bytes in flight per lane). VW = 8 (16-byte loads: a warp reads 512
//   contiguous bytes of a row) when N is a multiple of 8 and dy is 16-byte
//   aligned, else 2 (4-byte loads) when N is even and dy 4-byte aligned,
//   else 1. At 16384×768 that is 32 groups × 3 tiles = 96 CUDA blocks,
//   768 warps, each with 8 KB in flight: about 6 MB over the 132 SMs of an
//   H100, past the ~2.5 MB that latency times bandwidth asks. (Fewer
//   blocks than SMs, yet faster than 192 of 4 warps: variant 3 below.)
// - The block adds its warps' sums in warp order (shared memory) and writes
//   them to partial[group · N + column] (scratch), or, when there is one
//   group (M <= 512), adds them to db directly.
// - The last block of a tile to arrive (rows.cuh's last_to_arrive: an
//   integer counter per tile, which wraps back to 0 for the next call) adds
//   the tile's partial rows, in strands whose order is fixed
//   (sum_partial_rows), and sets db[j] = db[j] + total. The partials (4
//   bytes per column per 512 rows, 1/256 of dy's bytes) are still in L2.
// Spans, on CUDA where dy takes 16-byte loads and N >= 768, if the device
// launches cooperative kernels ($VKERN_BIAS_GRAD_SPANS=0 keeps the tiles
// above): a block (6 warps) sums two row blocks (a group of 128 rows) over
// a span of three adjacent tiles, 768 columns, a warp per (row block,
// tile), so that its warps read whole 1536-byte runs of a row together
// (the one-tile blocks above read 512-byte runs, 7–16% slower in
// bench/bias_grad_lab.cu). The group sum of a column is its two row
// blocks' sums in order, written to partial[group · N + column]. As many
// blocks as the SMs hold at once loop over the (group, span) jobs, wait at
// a grid-wide barrier, and then every block finishes its own slices of 96
// columns: the 128 partial rows of a column at 16384 rows in eight strands
// of 16, one load each in flight, so that eight blocks (at N = 768) finish
// at once where one block finishes each tile above. A cooperative launch
// waits until all its blocks can be resident: beside NCCL's kernels on the
// communication stream (--gpus) it waits for their SMs, and beside the
// server's main lane (device.cu, Lanes) for its kernels', so linear_grad_w's
// db, which runs beside, keeps to the tiles.
// Memory-bound: the floor is dy's bytes (plus db twice) over the copy
// bandwidth. One launch: at 16384×768 the floor is 8.4 µs on an H100 (5.9
// on an H200), and a second kernel's launch and drain cost a few µs of
// that.
//
// Facts relied on: f16 values are exact in f32; every addition is an f32
// addition rounded to nearest (no fast-math, so nvcc keeps each thread's
// order); −0 + y = y exactly, so sums that start from −0 give their first
// term exactly; NaN and ±Inf follow the sums.
//
// Variants (H100, dy 16384×N, share of the copy-bandwidth floor):
//   1. a thread per (row block, column pair), 4-byte loads, partials per row
//      block, then a second kernel (combine) for them: N = 768 0.0213 ms
//      (0.39), 2304 0.0429 ms (0.59), 3072 0.0494 ms (0.68).
//   2. a warp per (row block, 256-column tile), 16-byte loads in batches of
//      16 rows, four row blocks combined per CUDA block, the partials
//      finished by the last block of each tile in the same kernel:
//      N = 768 0.0189 ms (0.44), 2304 0.0401 ms (0.63), 3072 0.0463 ms
//      (0.72), at 9d60ee5.
//   3. variant 2's launch shape, (warps a block, rows a lane loads at
//      once), tried at five values in one call (docs/bias-grad-h100, two
//      rounds each; floor shares at N = 768 / 2304 / 3072):
//      (4, 16), variant 2:  0.0185 ms, 0.45 / 0.63 / 0.73–0.74;
//      (4, 32):             0.0189 ms, 0.45 / 0.66 / 0.72;
//      (8, 16), used:       0.0175–0.0177 ms, 0.48 / 0.66 / 0.77;
//      (2, 32):             0.0252 ms, 0.33 / 0.54 / 0.61;
//      (8, 32):             0.0192 ms, 0.44 / 0.64 / 0.72.
//      The finish weighs: 2 warps leave 128 partial rows to one strand of
//      a 64-thread block, 8 warps 32 rows to four strands of 256 threads.
//   4. 6 warps a block (129 blocks at N = 768, every SM one), and 8 or 6
//      warps with each lane's next batch loaded before it adds the one it
//      holds (branch bias-grad-variants, docs/bias-grad-variants-h100
//      call 1): 17.7–18.0 µs at N = 768, as variant 3's (8, 16); slower
//      at 3072 (0.68–0.74).
//   Alone in bench/bias_grad_lab.cu (same folder, calls 2 and 3) the kernel
//   ran 16.2 µs under Nsight Compute at 16384×768, about 2.2 µs of it the
//   finish, where a one-pass read of dy took 11.5; blocks reading three
//   adjacent tiles of 2 row blocks (all 1536 bytes of a row) summed 7–16%
//   faster than these blocks of one tile, but leave four times the partial
//   rows to the finish.
//   5. spans (branch bias-grad-spans, not merged): those blocks (6 warps)
//      in clusters of 8 that add their group sums through distributed
//      shared memory, 16 partial rows a column at 16384 rows (call 4,
//      against variant 3 in the same call): N = 768 18.5–18.7 µs against
//      18.3–18.4 (0.45), 2304 37.7–37.8 µs against 40.4 (0.67), 3072
//      48.5–48.6 µs against 45.5–45.6 (0.69); the gpt2 step 35.21 ms
//      against 35.32. The cluster's barriers and the distributed reads
//      cost what the reads saved.
//   6. those blocks without clusters, a span's 128 partial rows a column
//      finished by slices of 96 columns, each by the last block at the
//      slice's counter (branch bias-grad-slices, call 5): correct, and
//      twice as slow, N = 768 36.5–36.6 µs against 18.4–18.5: the last
//      block to arrive is the last at every slice, so one block finishes
//      all eight in turn. (column_sums<8> took 180 registers a thread
//      under Nsight Compute in call 2, one block an SM.)
//   7. variant 3 with rows.cuh's last_to_arrive counting a block in by
//      thread 0's acquire-release increment, where every thread fenced
//      (used; call 6): in bench/bias_grad_lab.cu, 20 launches in a row,
//      15.70–15.76 µs against 16.20–16.34 at N = 768, 36.84–37.14 against
//      37.38–37.51 at 2304, 42.51–42.75 against 42.89–43.08 at 3072; in
//      the server, 17.2 µs at 768 (0.487 of the floor; calls 1, 4 and 5
//      measured variant 3 at 17.7–18.5 on their machines, not in the same
//      call), 37.9 µs at 2304 (0.66), 43.5 µs at 3072 (0.77).
//   8. variant 6's blocks, their partial rows finished after a grid-wide
//      barrier (a cooperative launch of as many blocks as the SMs hold,
//      each looping over (group, span) jobs), every block then adding the
//      partial rows of its own slices of 96 columns (used). On an H200
//      (docs/bias-grad-grid-h200 call 1, 2026-11-28; no H100 was lent
//      that day), against variant 7's tiles in the same call, two rounds:
//      N = 768 16.2–16.3 µs against 16.3 (0.36 of that machine's floor,
//      4.25 TB/s), 2304 28.4 µs against 33.8 (0.63 against 0.53), 3072
//      34.4–34.5 µs against 37.4–37.6 (0.69 against 0.63); the gpt2 step
//      33.58 ms against 33.67. span_sums: 168 registers a thread and a
//      16-byte stack frame (cuobjdump).
//   9. variant 8 with dy brought into 192 KiB of shared memory by cp.async,
//      a whole job (128 rows × 768 columns) in flight a block where variant
//      8 has 16 rows a lane; the same jobs and order of additions (branch
//      bias-grad-staged; docs/bias-grad-staged-h200, H200, two rounds
//      against variant 8 in the same call): N = 768 16.5–16.6 µs against
//      16.2–16.3 (0.358 of the floor against 0.365), 2304 30.2–30.3
//      against 28.3, 3072 37.2–37.3 against 34.8. Correct (verify, 8 of 8
//      planted defects), not kept: asking for all of dy at once does not
//      make the 25 MB come sooner, so what holds N = 768 at 16 µs is not
//      the loads in flight.
//  10. variant 8 finished in slices of 32 columns, not 96
//      ($VKERN_BIAS_GRAD_NARROW_SLICES=1): at N = 768 the finish's 128
//      partial rows a column are added by 24 blocks where 8 did, each in
//      24 strands where 8 did (a different fixed order, the same bound).
//      On an H100 (docs/bias-grad-variants-h100 call 2) variant 3's kernel
//      ran 16.2 µs under Nsight Compute where a one-pass read of dy took
//      11.5, about 2.2 µs of it put down to the tiles' finish; the spans'
//      finish has not been measured. Not yet built or measured
//      (docs/bias-grad-slices-h200/call1.sh).
//
// Scratch (ops.cuh): the partials, 4 bytes per column per group of 512
// rows, and a counter per tile, cleared once when allocated; only when
// M > 512. Spans: 4 bytes per column per 128 rows (no counters: the grid-wide
// barrier orders the finish).
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

namespace {
namespace vkern_bias_grad {

using namespace vkern_rows;

constexpr int kRowBlock = 64;  // oracle.BiasGradRowBlock
constexpr int kWarps = 8;      // row blocks (a warp each) per CUDA block, all of one tile
constexpr int kThreads = 32 * kWarps;
constexpr int kBatch = 16;  // rows a lane loads before adding them

// Vector<VW> is the load of a lane's VW adjacent f16 columns of a row.
template <int VW>
struct Vector;
template <>
struct Vector<8> {
  using Word = uint4;
};
template <>
struct Vector<2> {
  using Word = uint32_t;
};
template <>
struct Vector<1> {
  using Word = unsigned short;
};

__device__ __forceinline__ void add_halves(uint4 w, float (&s)[8]) {
  s[0] += half_lo(w.x);
  s[1] += half_hi(w.x);
  s[2] += half_lo(w.y);
  s[3] += half_hi(w.y);
  s[4] += half_lo(w.z);
  s[5] += half_hi(w.z);
  s[6] += half_lo(w.w);
  s[7] += half_hi(w.w);
}
__device__ __forceinline__ void add_halves(uint32_t w, float (&s)[2]) {
  s[0] += half_lo(w);
  s[1] += half_hi(w);
}
__device__ __forceinline__ void add_halves(unsigned short w, float (&s)[1]) {
  s[0] += __half2float(__ushort_as_half(w));
}

// add_into is the one place db is written: db[j] + total.
__device__ __forceinline__ void add_into(float* db, int64_t j, float total) { db[j] = db[j] + total; }

// block_sums sets s to a lane's sums of its VW columns from col over row
// block `block` (kRowBlock rows from block · kRowBlock, fewer at the end),
// each summed from −0 in ascending row order; to −0 where the block or the
// columns lie past dy. Both kernels sum their row blocks here.
template <int VW>
__device__ __forceinline__ void block_sums(const __half* __restrict__ dy, int64_t rows, int64_t cols, int64_t block,
                                           int64_t col, float (&s)[VW]) {
  using Word = typename Vector<VW>::Word;
#pragma unroll
  for (int v = 0; v < VW; ++v) s[v] = -0.0f;
  const int64_t r0 = block * kRowBlock;
  if (r0 >= rows || col >= cols) return;
  const int n = static_cast<int>(rows - r0 < kRowBlock ? rows - r0 : kRowBlock);
  const int64_t stride = cols / VW;  // vectors per row
  const Word* p = reinterpret_cast<const Word*>(dy + r0 * cols + col);
  for (int r = 0; r < n; r += kBatch) {
    Word w[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      if (r + k < n) w[k] = VK_LDG(p + (r + k) * stride);
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      if (r + k < n) add_halves(w[k], s);
    }
  }
}

// column_sums: see the file comment. partial (groups × cols floats) and
// counters (one per tile) are null when there is one group.
template <int VW>
__global__ void __launch_bounds__(kThreads)
    column_sums(const __half* __restrict__ dy, int64_t rows, int64_t cols, float* partial, unsigned* counters,
                float* db) {
  constexpr int kWidth = 32 * VW;  // columns of a tile
  __shared__ float warp_sums[kWarps][kWidth];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t tiles = ceil_div(cols, kWidth);
  const int64_t row_blocks = ceil_div(rows, kRowBlock);
  const int64_t groups = ceil_div(row_blocks, kWarps);
  for (int64_t job = blockIdx.x; job < groups * tiles; job += gridDim.x) {
    const int64_t group = job / tiles, tile = job % tiles, tile0 = tile * kWidth;
    float s[VW];
    block_sums<VW>(dy, rows, cols, group * kWarps + warp, tile0 + lane * VW, s);
#pragma unroll
    for (int v = 0; v < VW; ++v) warp_sums[warp][lane * VW + v] = s[v];
    __syncthreads();
    // The group's sum of each column: its row blocks' sums in warp order.
    const int warps = static_cast<int>(row_blocks - group * kWarps < kWarps ? row_blocks - group * kWarps : kWarps);
    const int width = static_cast<int>(cols - tile0 < kWidth ? cols - tile0 : kWidth);
    for (int c = threadIdx.x; c < width; c += kThreads) {
      float sum = warp_sums[0][c];
      for (int w = 1; w < warps; ++w) sum += warp_sums[w][c];
      if (groups == 1) {
        add_into(db, tile0 + c, sum);
      } else {
        partial[group * cols + tile0 + c] = sum;
      }
    }
    if (groups > 1 && last_to_arrive(counters + tile, static_cast<unsigned>(groups))) {
      sum_partial_rows<kThreads, VW == 8 ? 4 : 1>(partial + tile0, groups, cols, width,
                                                  [&](int c, float total) { add_into(db, tile0 + c, total); });
    }
    __syncthreads();  // warp_sums is rewritten by the next job
  }
}

// Spans (see the file comment): a block sums kSpanBlocks row blocks over
// kSpanTiles adjacent tiles of 256 columns, a warp per (row block, tile),
// so that its warps read whole 1536-byte runs of a row together.
constexpr int kSpanTiles = 3;
constexpr int kSpanBlocks = 2;
constexpr int kSpanWarps = kSpanTiles * kSpanBlocks;
constexpr int kSpanThreads = 32 * kSpanWarps;
constexpr int kSpanWidth = 256 * kSpanTiles;  // columns of a span
constexpr int kSlice = 96;        // columns of a slice, finished by one block
constexpr int kNarrowSlice = 32;  // the same with $VKERN_BIAS_GRAD_NARROW_SLICES=1 (variant 10)

// span_sums: job (group, span) sums row blocks group · kSpanBlocks + b, b <
// kSpanBlocks, over the span's columns (the last span may be narrower); the
// group sum of a column is its row blocks' sums in b order, written to
// partial[group · cols + column]. The blocks loop over the jobs, wait at a
// grid-wide barrier (the launch is cooperative: every block is resident),
// then each adds the partial rows of its slices of slice_cols columns (kSlice,
// or kNarrowSlice), slice blockIdx.x, + gridDim.x, …, in sum_partial_rows's
// strands, into db.
__global__ void __launch_bounds__(kSpanThreads)
    span_sums(const __half* __restrict__ dy, int64_t rows, int64_t cols, float* partial, float* db, int slice_cols) {
#if !defined(__HIP_PLATFORM_AMD__)
  __shared__ float warp_sums[kSpanWarps][256];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t spans = ceil_div(cols, kSpanWidth), groups = ceil_div(rows, int64_t{kRowBlock} * kSpanBlocks);
  for (int64_t job = blockIdx.x; job < groups * spans; job += gridDim.x) {
    const int64_t group = job / spans, span = job % spans, span0 = span * kSpanWidth;
    float s[8];
    block_sums<8>(dy, rows, cols, group * kSpanBlocks + warp / kSpanTiles, span0 + (warp % kSpanTiles) * 256 + lane * 8,
                  s);
#pragma unroll
    for (int v = 0; v < 8; ++v) warp_sums[warp][lane * 8 + v] = s[v];
    __syncthreads();
    const int width = static_cast<int>(cols - span0 < kSpanWidth ? cols - span0 : kSpanWidth);
    for (int c = threadIdx.x; c < width; c += kSpanThreads) {
      float sum = warp_sums[c / 256][c % 256];
      for (int b = 1; b < kSpanBlocks; ++b) sum += warp_sums[b * kSpanTiles + c / 256][c % 256];
      partial[group * cols + span0 + c] = sum;
    }
    __syncthreads();  // warp_sums is rewritten by the next job
  }
  cg::this_grid().sync();  // every partial row is written and visible
  for (int64_t slice = blockIdx.x; slice * slice_cols < cols; slice += gridDim.x) {
    const int64_t lo = slice * slice_cols;
    const int n = static_cast<int>(cols - lo < slice_cols ? cols - lo : slice_cols);
    sum_partial_rows<kSpanThreads, 4>(partial + lo, groups, cols, n,
                                      [&](int c, float total) { add_into(db, lo + c, total); });
  }
#else
  (void)dy, (void)rows, (void)cols, (void)partial, (void)db, (void)slice_cols;
#endif
}

// The partials and the tiles' counters, kept between calls (rows.cuh).
cudaError_t partials_scratch(size_t bytes, float** out) {
  static ScratchBuffer buffer;
  void* p = nullptr;
  const cudaError_t err = buffer.get(bytes, &p);
  *out = static_cast<float*>(p);
  return err;
}

cudaError_t tile_counters(size_t count, cudaStream_t s, unsigned** out) {
  static Counters counters;
  return counters.get(count, s, out);
}

// launch_spans launches span_sums where it applies: CUDA, 16-byte loads,
// at least a span of columns, a device with cooperative launches, and
// $VKERN_BIAS_GRAD_SPANS not 0; as many blocks as the SMs hold at once, at
// most one a job. *launched says whether it did.
cudaError_t launch_spans(const __half* dy, float* db, int64_t rows, int64_t cols, cudaStream_t s, bool* launched) {
  *launched = false;
#if defined(__HIP_PLATFORM_AMD__)
  (void)dy, (void)db, (void)rows, (void)cols, (void)s;
  return cudaSuccess;
#else
  static const bool on = vkern_env::on_off("VKERN_BIAS_GRAD_SPANS", true);
  if (!on || cols < kSpanWidth) return cudaSuccess;
  struct Resident {
    cudaError_t err = cudaSuccess;
    int64_t blocks = 0;  // span_sums blocks the device holds at once; 0 without cooperative launches
  };
  static const Resident resident = [] {
    const DeviceLimits& limits = device_limits();  // rows.cuh
    Resident r;
    r.err = limits.err;
    int per_sm = 0;
    if (r.err == cudaSuccess)
      r.err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, span_sums, kSpanThreads, 0);
    if (r.err == cudaSuccess && limits.cooperative != 0) r.blocks = int64_t{limits.sms} * per_sm;
    return r;
  }();
  if (resident.err != cudaSuccess) return resident.err;
  if (resident.blocks < 1) return cudaSuccess;
  const int64_t groups = ceil_div(rows, int64_t{kRowBlock} * kSpanBlocks), spans = ceil_div(cols, kSpanWidth);
  float* partial = nullptr;
  cudaError_t err = partials_scratch(static_cast<size_t>(groups * cols) * sizeof(float), &partial);
  if (err != cudaSuccess) return err;
  const int64_t jobs = groups * spans;
  const unsigned grid = static_cast<unsigned>(jobs < resident.blocks ? jobs : resident.blocks);
  static const int slice_cols = vkern_env::on_off("VKERN_BIAS_GRAD_NARROW_SLICES", false) ? kNarrowSlice : kSlice;
  int slice_arg = slice_cols;
  void* args[] = {&dy, &rows, &cols, &partial, &db, &slice_arg};
  err = cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(span_sums), dim3(grid), dim3(kSpanThreads), args, 0,
                                    s);
  *launched = true;
  return err != cudaSuccess ? err : cudaGetLastError();
#endif
}

template <int VW>
cudaError_t launch_with(const __half* dy, float* db, int64_t rows, int64_t cols, cudaStream_t s) {
  const int64_t groups = ceil_div(ceil_div(rows, kRowBlock), kWarps);
  const int64_t tiles = ceil_div(cols, 32 * VW);
  float* partial = nullptr;
  unsigned* counters = nullptr;
  if (groups > 1) {
    cudaError_t err = partials_scratch(static_cast<size_t>(groups * cols) * sizeof(float), &partial);
    if (err == cudaSuccess) err = tile_counters(static_cast<size_t>(tiles), s, &counters);
    if (err != cudaSuccess) return err;
  }
  column_sums<VW><<<grid_for(groups * tiles), kThreads, 0, s>>>(dy, rows, cols, partial, counters, db);
  return cudaGetLastError();
}

cudaError_t launch(const __half* dy, float* db, int64_t rows, int64_t cols, cudaStream_t s, bool spans) {
  if (cols % 8 == 0 && aligned16(dy)) {
    bool launched = false;
    const cudaError_t err = spans ? launch_spans(dy, db, rows, cols, s, &launched) : cudaSuccess;
    if (err != cudaSuccess || launched) return err;
    return launch_with<8>(dy, db, rows, cols, s);
  }
  if (cols % 2 == 0 && (reinterpret_cast<uintptr_t>(dy) & 3u) == 0) return launch_with<2>(dy, db, rows, cols, s);
  return launch_with<1>(dy, db, rows, cols, s);
}

}  // namespace vkern_bias_grad
}  // namespace

cudaError_t vk_bias_grad(const __half* dy, float* db, int64_t M, int64_t N, cudaStream_t s, bool spans) {
  return vkern_bias_grad::launch(dy, db, M, N, s, spans);
}

namespace vkern {

// The op's entry (kernels.cu lists it).
cudaError_t run_bias_grad(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_bias_grad;
  return vk_bias_grad(c.ptr<const __half>(buf::dy), c.ptr<float>(buf::db), c.params[param::M], c.params[param::N], s);
}

}  // namespace vkern
