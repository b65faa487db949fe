// The matmul family's epilogue on the GPU: what the product kernels
// (gemm.cuh's mma.sync and portable kernels, gemm_sm90.cu's wgmma kernels)
// do to each element's finished f32 dot product before they store it.
//
// Epilogue<kAddBias, kAddOld, kGelu, kAddResidual> adds bias[col] (f16,
// one per output column) when kBias (linear), then the element's old value
// when kAccumulate (an f32 output added into: linear_grad_w) or the
// residual's element when kResidual (f16, the output's shape: linear with
// residual = 1), each in one binary32 addition rounded to nearest: v = v +
// bias[col]; v = old + v or v = v + r.
// Then the GELU (gelu.cuh's logistic form, whose bound the oracle derives
// beside the cpu backend's tanh form): kGelu ==
// kGeluForward stores v rounded to f16 as pre's element and goes on with
// gelu(v) (linear with gelu = 1); kGelu == kGeluBackward goes on with
// v·gelu′(pre's element) (linear_grad_x with gelu = 1). The kernels apply
// it to the accumulator registers after the last product and before any
// store, in a loop of its own (so that the old values' loads are issued
// together, not each behind the previous element's store), and the stores
// that follow are unchanged: each element is still read once, written once
// and, for f16 outputs, rounded once. gemm_sm90.cu makes the same
// additions in the same order without apply: the tile's bias slice from
// bias_pair, staged in shared memory, the old values loaded 32 at a time,
// the residual's in pairs (residual_pair); then gelu_pairs. The oracle's epilogue bound (oracle.MatMulWith)
// assumes exactly these steps.
//
// Epilogue<false, false> (NoEpilogue: gemm and its gradients) does nothing;
// the kernels test kAny with if constexpr, so their code is unchanged.
#ifndef VKERN_CUDA_EPILOGUE_CUH
#define VKERN_CUDA_EPILOGUE_CUH

#include <cstdint>

#include "cuda/compat.h"
#include "cuda/gelu.cuh"

namespace {
namespace vkern_epilogue {

constexpr int kNoGelu = 0, kGeluForward = 1, kGeluBackward = 2;

template <bool kAddBias, bool kAddOld, int kGeluKind = kNoGelu, bool kAddResidual = false, bool kSumColumns = false>
struct Epilogue {
  static constexpr bool kBias = kAddBias, kAccumulate = kAddOld, kResidual = kAddResidual;
  // kColumnSums (linear_grad_w with bias 1): column_sums (f32, the output's
  // cols) += the column sums of R, where a kernel forms them as it reads R
  // (gemm_sm90.cu's plain tiles, MN-major R) and then sets *summed; every
  // other kernel leaves both alone, and the caller adds the sums itself
  // (bias_grad's kernel). Not an element step: kAny leaves it out.
  static constexpr bool kColumnSums = kSumColumns;
  static constexpr int kGelu = kGeluKind;
  static constexpr bool kAny = kBias || kAccumulate || kResidual || kGelu != kNoGelu;
  static_assert(!(kResidual && (kAccumulate || kGelu != kNoGelu)),
                "the residual goes with neither accumulation nor the GELU");
  const __half* bias;                // the output's cols halves when kBias; else unused
  __half* pre = nullptr;             // rows × cols, like the output, when kGelu: written (forward) or read (backward)
  const __half* residual = nullptr;  // rows × cols, like the output, when kResidual
  float* column_sums = nullptr;      // cols f32, added into, when kColumnSums
  bool* summed = nullptr;            // host: set by a launch whose kernel added the column sums

  // The residual's elements (row, col) and (row, col + 1) as f32, 0 for
  // one past the last row or column; with paired, one aligned 4-byte load
  // (cols even, residual 4-byte aligned, col even).
  __device__ __forceinline__ float2 residual_pair(int64_t row, int64_t col, int64_t rows, int64_t cols,
                                                  bool paired) const {
    if (row >= rows) return make_float2(0.0f, 0.0f);
    const __half* p = residual + row * cols + col;
    if (paired && col + 1 < cols) return __half22float2(*reinterpret_cast<const __half2*>(p));
    return make_float2(col < cols ? __half2float(p[0]) : 0.0f, col + 1 < cols ? __half2float(p[1]) : 0.0f);
  }

  // The bias of columns col and col + 1 as two f16 in one word (low half
  // first), 0 for a column before the first or past the last (the class
  // tiles of gemm_sm90.cu start up to 7 columns before column 0): for
  // kernels that stage a tile's bias slice (gemm_sm90.cu) and then do
  // apply's additions themselves.
  __device__ __forceinline__ uint32_t bias_pair(int64_t col, int64_t cols) const {
    const unsigned short* b = reinterpret_cast<const unsigned short*>(bias);
    const uint32_t lo = col >= 0 && col < cols ? VK_LDG(b + col) : 0u;
    const uint32_t hi = col + 1 >= 0 && col + 1 < cols ? VK_LDG(b + col + 1) : 0u;
    return lo | hi << 16;
  }

  // v after the epilogue's steps for element (row, col) of out, a row-major
  // matrix of cols columns; (row, col) must lie inside it.
  template <typename Out>
  __device__ __forceinline__ float apply(float v, const Out* out, int64_t row, int64_t col, int64_t cols) const {
    if constexpr (kBias) {
      v = v + __half2float(__ushort_as_half(VK_LDG(reinterpret_cast<const unsigned short*>(bias) + col)));
    }
    if constexpr (kAccumulate) {
      static_assert(sizeof(Out) == sizeof(float), "only f32 outputs are added into");
      v = out[row * cols + col] + v;
    }
    if constexpr (kResidual) v = v + __half2float(residual[row * cols + col]);
    return gelu(v, row * cols + col);
  }

  // v after the GELU step alone, for element index at (row · cols + col).
  __device__ __forceinline__ float gelu(float v, int64_t at) const {
    if constexpr (kGelu == kGeluForward) {
      pre[at] = __float2half_rn(v);
      return vkern_gelu::gelu(v);
    } else if constexpr (kGelu == kGeluBackward) {
      return vkern_gelu::gelu_grad(__half2float(pre[at]), v);
    } else {
      return v;
    }
  }

  // Whether the step reads an operand of the output's shape (the residual,
  // or pre in the backward GELU): quad's side.
  static constexpr bool kSideIn = kResidual || kGelu == kGeluBackward;

  // The four f16 at element index at of the operand quad reads (kSideIn),
  // in one 8-byte load: loaded ahead of quad, so that the loads of a few
  // quads are in flight together, and before the output's stores (which
  // the compiler may not move them past).
  __device__ __forceinline__ uint2 side(int64_t at) const {
    if constexpr (kResidual) {
      return *reinterpret_cast<const uint2*>(residual + at);
    } else if constexpr (kGelu == kGeluBackward) {
      return *reinterpret_cast<const uint2*>(pre + at);
    } else {
      return make_uint2(0u, 0u);
    }
  }

  // prefetch_pre asks L2, in the GELU's backward, for the lines of pre
  // under the rows [m0, m0 + kRows) and columns [n0, n0 + kCols) of the
  // output's shape, thread t of n taking every n-th line (at most kCols /
  // 64 + 1 a row: its kCols halves need not start on a 128-byte line).
  // Issued as a tile's product starts, the reads overlap its k-steps, where
  // the epilogue's own loads of pre (side, gelu_pair) waited on memory after
  // them with the tensor cores idle: c_proj's dx through the GELU ran at 0.60
  // of the plain product's speed, for 100 MB of pre read (0.193 → 0.180 ms
  // with it on the H100). Not the residual: prefetched the same way, the
  // residual products were 5% slower. (A hint, compat.h's vk_prefetch_l2:
  // on HIP, which the mma.sync path also builds for and which never calls
  // it, it does nothing.)
  template <int kRows, int kCols>
  __device__ __forceinline__ void prefetch_pre(int64_t m0, int64_t n0, int64_t rows, int64_t cols, int t,
                                               int n) const {
    if constexpr (kGelu == kGeluBackward) {
      constexpr int kPerRow = kCols / 64 + 1;
      for (int i = t; i < kRows * kPerRow; i += n) {
        const int64_t r = m0 + i / kPerRow;
        const int64_t c = min(n0 + 64 * (i % kPerRow), n0 + kCols - 1);
        if (r < rows && c < cols) vk_prefetch_l2(pre + r * cols + c);
      }
    } else {
      (void)m0, (void)n0, (void)rows, (void)cols, (void)t, (void)n;
    }
  }

  // The residual and GELU steps for four consecutive elements of a row, v
  // at element index at (row · cols + col), at a multiple of 4 and the
  // residual and pre 8-byte aligned; raw is side(at) when kSideIn, and pre
  // is written in one 8-byte store (gemm_sm90.cu's staged epilogue, which
  // reads its rows back from shared memory four f32 at a time).
  __device__ __forceinline__ void quad(float (&v)[4], uint2 raw, int64_t at) const {
    if constexpr (kResidual) {
      const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
      const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
      v[0] = v[0] + lo.x;
      v[1] = v[1] + lo.y;
      v[2] = v[2] + hi.x;
      v[3] = v[3] + hi.y;
    }
    if constexpr (kGelu == kGeluForward) {
      const __half2 lo = __floats2half2_rn(v[0], v[1]), hi = __floats2half2_rn(v[2], v[3]);
      *reinterpret_cast<uint2*>(pre + at) =
          make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] = vkern_gelu::gelu(v[e]);
    } else if constexpr (kGelu == kGeluBackward) {
      const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
      const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
      v[0] = vkern_gelu::gelu_grad(lo.x, v[0]);
      v[1] = vkern_gelu::gelu_grad(lo.y, v[1]);
      v[2] = vkern_gelu::gelu_grad(hi.x, v[2]);
      v[3] = vkern_gelu::gelu_grad(hi.y, v[3]);
    }
  }

  // Whether quad's side operands (the residual, pre) allow its 8-byte
  // accesses: pointers 8-byte aligned (the caller checks the columns).
  __device__ __forceinline__ bool quads_aligned() const {
    const uintptr_t side = reinterpret_cast<uintptr_t>(kResidual ? residual : pre);
    return (side & 7u) == 0;
  }

  // The GELU step for the elements (row, col) and (row, col + 1), v0 and v1,
  // either of which may lie past the last column (then left alone); with
  // paired, the pair is one aligned 4-byte access of pre (cols is even and
  // pre 4-byte aligned).
  __device__ __forceinline__ void gelu_pair(float& v0, float& v1, int64_t row, int64_t col, int64_t cols,
                                            bool paired) const {
    if constexpr (kGelu != kNoGelu) {
      const int64_t at = row * cols + col;
      if (paired && col + 1 < cols) {
        __half2* p = reinterpret_cast<__half2*>(pre + at);
        if constexpr (kGelu == kGeluForward) {
          *p = __floats2half2_rn(v0, v1);
          v0 = vkern_gelu::gelu(v0);
          v1 = vkern_gelu::gelu(v1);
        } else {
          const float2 x = __half22float2(*p);
          v0 = vkern_gelu::gelu_grad(x.x, v0);
          v1 = vkern_gelu::gelu_grad(x.y, v1);
        }
        return;
      }
      if (col < cols) v0 = gelu(v0, at);
      if (col + 1 < cols) v1 = gelu(v1, at + 1);
    }
  }
};

using NoEpilogue = Epilogue<false, false>;

}  // namespace vkern_epilogue
}  // namespace

#endif  // VKERN_CUDA_EPILOGUE_CUH
