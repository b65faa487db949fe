// cross_entropy on the GPU: logits f16 R×V and labels i32 R in; the per-row
// loss f32 R and dLogits f16 R×V, the gradient of the mean loss, out; f32
// inside. Forward and backward fused: a row's logits are read once and its
// gradient written once.
//
// Per row with label l that is not the ignore_index (the math of
// kernels/cpu/cross_entropy.cc):
//
//   m        = max_j x_j                            (NaNs skipped, as fmaxf does)
//   e_j      = 2^((x_j − m) · log2 e)               f32, never rounded to f16
//   s        = Σ_j e_j                              f32
//   loss     = (m − x_l) + logf(s)                  unscaled: the mean loss is Σ loss / n
//   dLogit_j = f16(e_j · (c / s) − [j = l] · c),    c = f32(1/n)
//
// n counts the rows whose label is not the ignore_index. Without an
// ignore_index n = R. With one, a first small kernel (count_kept_rows) counts
// those labels into a device word, reset by a cudaMemsetAsync before it, and
// every row block reads the word. A row whose label is the ignore_index is
// not read: its threads write loss 0 and a row of zeros. When every row is
// ignored, c is never used and every output is 0.
//
// Launch shapes, as softmax.cu's (the row layout and reductions are shared
// with it, in rows.cuh), by a row's extent (V, or V + 7 when rows start off
// a 16-byte boundary):
// - Rows of extent up to 65,536: one pass. A row belongs to T threads (one
//   warp, several rows per block, for extent <= 1,024; else one block of T =
//   64 .. 1,024 threads); each thread holds E <= 128 elements in registers
//   as f16 pairs, read once with 16-byte loads wherever the row starts
//   (logits and dLogits equally far past a 16-byte boundary; else 2-byte
//   loads): the row is laid from the boundary at or before its start, and
//   the at most two vectors its ends cut are read and written element by
//   element. Blocks walk the rows in a grid-stride loop.
// - Longer rows: segments of 32,768 elements laid from that boundary, one
//   block each. A first kernel
//   writes each segment's (max, Σ exp(x − max)) to scratch; a second combines
//   the row's pairs, writes the segment's gradient, and the row's first
//   segment also writes the loss. Long rows are read twice.
//
// Labels. A label that is neither in [0, V) nor the ignore_index is not used:
// thread 0 of its row takes atomicMin of the row into a device word that
// holds all ones otherwise (the call's problem word, device.cu), writes loss
// NaN, and the row's threads write zeros. The host reads the word after the
// run, or after a batch's final wait; a correct call pays one compare per
// row in the kernel.
//
// Accuracy: as softmax.cu's, with the loss's log (logf, within 1 ulp), the
// rounding of m − x_l and of the quotient c/s; the oracle's bound
// (oracle/crossentropy.go) allows each of these. As in softmax.cu, the row
// kernel takes e_j by the EX2 instruction alone (rows.cuh's row_exp,
// variant 4 below): exp2f's bits where e_j ≥ 2⁻¹²⁶ and +0 below, an error
// the bound's V·2⁻¹²⁶ in the sum and c·2⁻¹²⁶ in each gradient allow; the
// long-row path takes exp2f.
//
// IEEE facts relied on (no fast-math, no flush-to-zero but that EX2), as
// softmax.cu's: a
// NaN or +Inf in a row, or a row of only −Inf, makes s NaN, so the loss and
// the gradient row are NaN; with m finite, x_l = −Inf gives loss +Inf and
// e_l = 0, so dLogit_l = −c. Padding slots hold −Inf, which add 0.
//
// Measured on an H100 (nvcc 13.0, vkern bench, anchors in the same call;
// copy ceiling 3.0 TB/s read + write): 8192×50304 619 µs, 2.67 TB/s, 0.89
// of the copy floor and 3.45× F.cross_entropy + backward; softmax.cu's
// softmax at the same shape 574 µs. 32768×1024 2.42 TB/s.
//
// Variants (ratio to F.cross_entropy + backward at 8192×50304; at 4096×50257,
// rows off 16-byte boundaries, ratio to the copy floor):
//   1. softmax.cu's one-pass row kernel with the label read first, the loss
//      from the row's max and sum, and the gradient written in place of Y .. 3.45
//      (4096×50257, 2-byte accesses: 0.59 of the copy floor)
//   2. as 1, with 16-byte accesses from each row's 16-byte boundary and the
//      cut vectors element by element ......... 4096×50257: 0.85 of the copy
//      floor, 8192×50257 0.87, 8192×50304 0.90 (vkern bench, 471e06a)
//   3. rows of 32,768 < extent staged in shared memory, softmax_grad_staged's
//      way: 512 threads a block, each thread's vectors parked in its own
//      slots, the next row loaded into them while this row's gradient is
//      written, two blocks an SM, the same bits as 2 (commit 858a0d0, not
//      kept; docs/cross-entropy-staged-h200). On an H200, vkern bench, two
//      rounds alternating, shares of a 4.23 TB/s copy floor: 16384×50304
//      1,052 µs (0.741) against 2's 1,067 µs (0.732); 8192×50304 0.725
//      against 0.723; 8192×50257 0.695 against 0.696; 4096×50257 0.664
//      against 0.678; the gpt2 step 32.20 and 32.32 ms against 32.33 and
//      32.19. Two rows in flight an SM buy nothing: the row kernel's loads
//      are not what holds it below the copy rate here.
//   4. variant 2 with its exponentials by the EX2 instruction alone
//      (row_exp<true>), where exp2f adds a test and two multiplications
//      under a predicate to keep subnormal results; at GPT-2's V each
//      element takes two exponentials (rows of 512 threads keep no exps).
//      The 512-thread kernel's SASS: 258 FMUL and 15 FSETP against 674 and
//      228. On an H200 (docs/cross-entropy-ftz-h200, one call, two rounds
//      alternating, shares of a 4.23 TB/s copy floor): 16384×50304 1,002–
//      1,004 µs (0.78) against 1,066–1,068 (0.73), 8192×50304 0.77 against
//      0.72, 8192×50257 0.74 against 0.70, 4096×50257 0.72 against 0.67;
//      verify and every planted cross_entropy defect passed, 6 gpt2 steps
//      gave the same losses, norms and checkpoint bytes (used;
//      $VKERN_CROSS_ENTROPY_FTZ=0 keeps variant 2).
//
// Scratch (see ops.cuh): one word (the count of rows kept), and for long
// rows 8 bytes per row per segment.
#include <cstdint>

#include "core/backend.h"
#include "cuda/compat.h"
#include "cuda/env.h"
#include "cuda/ops.cuh"
#include "cuda/rows.cuh"

namespace {
namespace vkern_cross_entropy {

using namespace vkern_rows;  // rows.cuh

constexpr int kCountThreads = 256;

// What a row's label makes of it.
enum RowKind { kKept, kIgnored, kBadLabel };

__device__ __forceinline__ RowKind row_kind(int64_t label, int64_t V, int64_t ignore) {
  if (label == ignore) return kIgnored;
  return label >= 0 && label < V ? kKept : kBadLabel;
}

// mean_scale is c = f32(grad_scale/n): n from count_kept_rows's word, or R
// when no row can be ignored (kept == nullptr). Unused when n = 0.
__device__ __forceinline__ float mean_scale(const unsigned long long* kept, int64_t R, double grad_scale) {
  const double n = kept != nullptr ? static_cast<double>(*kept) : static_cast<double>(R);
  return static_cast<float>(grad_scale / n);
}

// gradient is dLogit for element idx of a slice with exp e, q = c/s, and
// mine the slice's slot of the label (−1 when another thread holds it).
__device__ __forceinline__ float gradient(float e, float q, float c, int idx, int mine) {
  return e * q - (idx == mine ? c : 0.0f);
}

// skip_row finishes a row that is not computed: ignored (loss 0) or with a
// bad label (loss NaN, and the row recorded). One thread per row writes the
// loss: the one for which writes_loss holds.
__device__ __forceinline__ void skip_row(RowKind kind, int64_t r, bool writes_loss, float* loss,
                                         unsigned long long* bad_row) {
  if (!writes_loss) return;
  loss[r] = kind == kIgnored ? 0.0f : quiet_nan();
  if (kind == kBadLabel) atomicMin(bad_row, static_cast<unsigned long long>(r));
}

// ---------------------------------------------------------------------------
// n: the labels that are not the ignore_index, summed into *kept (zeroed
// before the launch).

__global__ void __launch_bounds__(kCountThreads)
    count_kept_rows(const int32_t* __restrict__ labels, int64_t R, int64_t ignore, unsigned long long* kept) {
  __shared__ unsigned long long partial[kCountThreads];
  unsigned long long counted = 0;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kCountThreads + threadIdx.x; r < R;
       r += static_cast<int64_t>(gridDim.x) * kCountThreads) {
    counted += VK_LDG(labels + r) != ignore ? 1u : 0u;
  }
  partial[threadIdx.x] = counted;
  __syncthreads();
  for (int half = kCountThreads / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0 && partial[0] != 0) atomicAdd(kept, partial[0]);
}

// ---------------------------------------------------------------------------
// Rows on chip: RPB rows per block of T·RPB threads (RPB > 1 only for T = 32).

template <int T, int RPB, int E, int VW, bool kFtz>
__global__ void __launch_bounds__(T* RPB)
    cross_entropy_rows(const __half* __restrict__ X, const int32_t* __restrict__ labels, float* __restrict__ loss,
                       __half* __restrict__ G, int64_t R, int64_t V, int64_t ignore, double grad_scale,
                       const unsigned long long* __restrict__ kept, unsigned long long* __restrict__ bad_row) {
  static_assert(T == 32 || RPB == 1, "several rows per block only with a warp per row");
  __shared__ float red[T / 32];
  const int t = threadIdx.x % T;
  const int cols = static_cast<int>(V);  // a row's extent <= T·E here
  const float c = mean_scale(kept, R, grad_scale);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * RPB + threadIdx.x / T; r < R;
       r += static_cast<int64_t>(gridDim.x) * RPB) {
    const int64_t label = VK_LDG(labels + r);
    const RowKind kind = row_kind(label, V, ignore);
    __half* g = G + r * V;
    if (kind != kKept) {
      skip_row(kind, r, t == 0, loss, bad_row);
      RowSlice<T, E, VW>::store_row(g, cols, t, [](int) { return 0u; });
      continue;
    }
    // The label's logit, loaded with the row so that its latency is hidden.
    const float x_label = t == 0 ? __half2float(X[r * V + label]) : 0.0f;
    RowSlice<T, E, VW> x;
    x.load_row(X + r * V, cols, t, kNegInfPair);
    float m = neg_inf();
    m = fmaxf(m, max_of(x.w));
    m = row_max<T>(m, red);
    launder(x.w);
    const int mine = RowSlice<T, E, VW>::row_slot(g, label, t);
    if (KeepExps<T, E>::value) {
      float e[E];
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < E; ++i) {
        e[i] = row_exp<kFtz>(element(x.w, i) - m);
        s += e[i];
      }
      s = row_sum<T>(s, red);
      if (t == 0) loss[r] = (m - x_label) + logf(s);
      const float q = c / s;
      RowSlice<T, E, VW>::store_row(g, cols, t, [&](int i) {
        return pack(gradient(e[2 * i], q, c, 2 * i, mine), gradient(e[2 * i + 1], q, c, 2 * i + 1, mine));
      });
    } else {
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < E; ++i) s += row_exp<kFtz>(element(x.w, i) - m);
      s = row_sum<T>(s, red);
      launder(x.w);
      if (t == 0) loss[r] = (m - x_label) + logf(s);
      const float q = c / s;
      RowSlice<T, E, VW>::store_row(g, cols, t, [&](int i) {
        return pack(gradient(row_exp<kFtz>(element(x.w, 2 * i) - m), q, c, 2 * i, mine),
                    gradient(row_exp<kFtz>(element(x.w, 2 * i + 1) - m), q, c, 2 * i + 1, mine));
      });
    }
  }
}

// ---------------------------------------------------------------------------
// Long rows: segments of kSegment elements (rows.cuh's RowPiece), job = row ·
// P + segment.

template <int VW>
__global__ void __launch_bounds__(kSegmentThreads)
    cross_entropy_segment_stats(const __half* __restrict__ X, const int32_t* __restrict__ labels,
                                float2* __restrict__ partials, int64_t R, int64_t V, int64_t P, int64_t ignore) {
  __shared__ float red[kSegmentThreads / 32];
  const int t = threadIdx.x;
  for (int64_t job = blockIdx.x; job < R * P; job += gridDim.x) {
    const int64_t r = job / P;
    if (row_kind(VK_LDG(labels + r), V, ignore) != kKept) continue;  // the write kernel skips it too
    const RowPiece piece = RowPiece::of(V, lead_of<VW>(X + r * V), job % P, kSegment);
    RowSlice<kSegmentThreads, kSegmentElems, VW> x;
    x.load_row(X + r * V + piece.first, piece.cols, t, kNegInfPair);
    const float2 stats = slice_stats(x, red);  // a segment of only −Inf gives (−Inf, 0)
    if (t == 0) partials[job] = stats;
  }
}

template <int VW>
__global__ void __launch_bounds__(kSegmentThreads)
    cross_entropy_segment_write(const __half* __restrict__ X, const int32_t* __restrict__ labels,
                                float* __restrict__ loss, __half* __restrict__ G, const float2* __restrict__ partials,
                                int64_t R, int64_t V, int64_t P, int64_t ignore, double grad_scale,
                                const unsigned long long* __restrict__ kept, unsigned long long* __restrict__ bad_row) {
  using Slice = RowSlice<kSegmentThreads, kSegmentElems, VW>;
  __shared__ float red[kSegmentThreads / 32];
  const int t = threadIdx.x;
  const float c = mean_scale(kept, R, grad_scale);
  for (int64_t job = blockIdx.x; job < R * P; job += gridDim.x) {
    const int64_t r = job / P;
    const RowPiece piece = RowPiece::of(V, lead_of<VW>(X + r * V), job % P, kSegment);
    const int64_t label = VK_LDG(labels + r);
    const RowKind kind = row_kind(label, V, ignore);
    __half* g = G + r * V + piece.first;
    const bool writes_loss = job % P == 0 && t == 0;
    if (kind != kKept) {
      skip_row(kind, r, writes_loss, loss, bad_row);
      Slice::store_row(g, piece.cols, t, [](int) { return 0u; });
      continue;
    }
    const float x_label = writes_loss ? __half2float(X[r * V + label]) : 0.0f;
    // Combine the row's segments; a partial whose max is the row's is used
    // unscaled, so −Inf − (−Inf) never arises here.
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
    if (writes_loss) loss[r] = (m - x_label) + logf(s);
    const float q = c / s;
    const int mine = Slice::row_slot(g, label - piece.first, t);
    Slice x;
    x.load_row(X + r * V + piece.first, piece.cols, t, kNegInfPair);
    Slice::store_row(g, piece.cols, t, [&](int i) {
      return pack(gradient(exp_of(element(x.w, 2 * i) - m), q, c, 2 * i, mine),
                  gradient(exp_of(element(x.w, 2 * i + 1) - m), q, c, 2 * i + 1, mine));
    });
  }
}

// ---------------------------------------------------------------------------
// Host side.

constexpr int64_t kMaxCountBlocks = 1024;

// state returns the state word, the count of rows kept: allocated on first
// use, as a ScratchBuffer (so one for each of the server's lanes).
cudaError_t state(unsigned long long** out) {
  static ScratchBuffer word;
  void* p = nullptr;
  const cudaError_t err = word.get(sizeof(unsigned long long), &p);
  *out = static_cast<unsigned long long*>(p);
  return err;
}

// partials_scratch returns at least bytes of device memory for the long-row
// partials, growing it when needed.
cudaError_t partials_scratch(size_t bytes, void** out) {
  static ScratchBuffer buffer;
  return buffer.get(bytes, out);
}

// The arguments every kernel of one call shares.
struct Call {
  const __half* X;
  const int32_t* labels;
  float* loss;
  __half* G;
  int64_t R, V, ignore;
  double grad_scale;
  const unsigned long long* kept;  // nullptr: n = R
  unsigned long long* bad_row;
  cudaStream_t s;
};

// ftz_exps: the row kernel's exponentials by EX2 alone (variant 4), unless
// $VKERN_CROSS_ENTROPY_FTZ=0 keeps exp2f (variant 2's).
inline bool ftz_exps() {
  static const bool chosen = vkern_env::on_off("VKERN_CROSS_ENTROPY_FTZ", true);
  return chosen;
}

template <int T, int RPB, int E, int VW>
cudaError_t launch_rows(const Call& a) {
  const auto kernel =
      ftz_exps() ? cross_entropy_rows<T, RPB, E, VW, true> : cross_entropy_rows<T, RPB, E, VW, false>;
  kernel<<<grid_for(ceil_div(a.R, RPB)), T * RPB, 0, a.s>>>(a.X, a.labels, a.loss, a.G, a.R, a.V, a.ignore,
                                                           a.grad_scale, a.kept, a.bad_row);
  return cudaGetLastError();
}

// cross_entropy_with picks the kernels by a row's extent (rows.cuh's
// row_extent; V with 2-byte accesses).
template <int VW>
cudaError_t cross_entropy_with(const Call& a, int64_t extent) {
  const int64_t V = a.V;
  if (extent <= 256) return launch_rows<32, 8, 8, VW>(a);
  if (extent <= 512) return launch_rows<32, 8, 16, VW>(a);
  if (extent <= 1024) return launch_rows<32, 4, 32, VW>(a);
  if (extent <= 2048) return launch_rows<64, 1, 32, VW>(a);
  if (extent <= 4096) return launch_rows<128, 1, 32, VW>(a);
  if (extent <= 8192) return launch_rows<256, 1, 32, VW>(a);
  if (extent <= 16384) return launch_rows<512, 1, 32, VW>(a);
  if (extent <= 32768) return launch_rows<1024, 1, 32, VW>(a);
  if (extent <= 65536) return launch_rows<512, 1, 128, VW>(a);

  const int64_t P = ceil_div(extent, kSegment);
  void* buffer = nullptr;
  const cudaError_t err = partials_scratch(static_cast<size_t>(a.R * P) * sizeof(float2), &buffer);
  if (err != cudaSuccess) return err;
  float2* partials = static_cast<float2*>(buffer);
  cross_entropy_segment_stats<VW><<<grid_for(a.R * P), kSegmentThreads, 0, a.s>>>(a.X, a.labels, partials, a.R, V, P,
                                                                                   a.ignore);
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) return launched;
  cross_entropy_segment_write<VW><<<grid_for(a.R * P), kSegmentThreads, 0, a.s>>>(
      a.X, a.labels, a.loss, a.G, partials, a.R, V, P, a.ignore, a.grad_scale, a.kept, a.bad_row);
  return cudaGetLastError();
}

}  // namespace vkern_cross_entropy
}  // namespace

cudaError_t vk_cross_entropy(const __half* logits, const int32_t* labels, float* loss, __half* dLogits, int64_t R,
                             int64_t V, int64_t ignore_index, double grad_scale, unsigned long long* bad_row,
                             cudaStream_t s) {
  using namespace vkern_cross_entropy;
  unsigned long long* words = nullptr;
  cudaError_t err = state(&words);
  if (err != cudaSuccess) return err;
  Call a{logits, labels, loss, dLogits, R, V, ignore_index, grad_scale, nullptr, bad_row, s};
  // A label is a 32-bit value: an ignore_index outside that range (the
  // unset marker) can match no row, and n = R.
  if (ignore_index >= INT32_MIN && ignore_index <= INT32_MAX) {
    err = cudaMemsetAsync(words, 0, sizeof(unsigned long long), s);
    if (err != cudaSuccess) return err;
    const int64_t blocks = ceil_div(R, kCountThreads);
    count_kept_rows<<<static_cast<unsigned>(blocks < kMaxCountBlocks ? blocks : kMaxCountBlocks), kCountThreads, 0, s>>>(
        labels, R, ignore_index, words);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    a.kept = words;
  }
  // 16-byte accesses wherever the rows start, when logits' and dLogits'
  // rows start equally far past a 16-byte boundary.
  if (congruent16(logits, dLogits)) return cross_entropy_with<8>(a, row_extent(V, logits));
  return cross_entropy_with<1>(a, V);
}

namespace vkern {

// The op's entry (kernels.cu lists it).
cudaError_t run_cross_entropy(const Call& c, unsigned long long* problem, cudaStream_t s) {
  using namespace op_cross_entropy;
  return vk_cross_entropy(c.ptr<const __half>(buf::logits), c.ptr<const int32_t>(buf::labels), c.ptr<float>(buf::loss),
                          c.ptr<__half>(buf::dLogits), c.params[param::R], c.params[param::V],
                          c.params[param::ignore_index], c.real(param::grad_scale), problem, s);
}

}  // namespace vkern
