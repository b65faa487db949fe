// The matmul family's epilogue on the GPU: what the product kernels
// (gemm.cu's mma.sync and portable kernels, gemm_sm90.cu's wgmma kernels)
// add to each element's finished f32 dot product before they store it.
//
// Epilogue<kAddBias, kAddOld> (kBias, kAccumulate) adds bias[col] (f16, one per output column)
// when kBias (linear), then the element's old value when kAccumulate (an
// f32 output added into: linear_grad_w), each in one binary32 addition
// rounded to nearest: v = v + bias[col]; v = old + v. The kernels apply it
// to the accumulator registers after the last product and before any
// store, in a loop of its own (so that the old values' loads are issued
// together, not each behind the previous element's store), and the stores
// that follow are unchanged: each element is still read once, written once
// and, for f16 outputs, rounded once. gemm_sm90.cu makes the same two
// additions in the same order without apply: the tile's bias slice from
// bias_pair, staged in shared memory, and the old values loaded 32 at a
// time. The oracle's epilogue bound (oracle.MatMulWith) assumes exactly
// these additions.
//
// Epilogue<false, false> (NoEpilogue: gemm and its gradients) adds nothing;
// the kernels test kAny with if constexpr, so their code is unchanged.
#ifndef VKERN_CUDA_EPILOGUE_CUH
#define VKERN_CUDA_EPILOGUE_CUH

#include <cstdint>

#include "cuda/compat.h"

namespace {
namespace vkern_epilogue {

template <bool kAddBias, bool kAddOld>
struct Epilogue {
  static constexpr bool kBias = kAddBias, kAccumulate = kAddOld;
  static constexpr bool kAny = kBias || kAccumulate;
  const __half* bias;  // the output's cols halves when kBias; else unused

  // The bias of columns col and col + 1 as two f16 in one word (low half
  // first), 0 for a column past the last: for kernels that stage a tile's
  // bias slice (gemm_sm90.cu) and then do apply's additions themselves.
  __device__ __forceinline__ uint32_t bias_pair(int64_t col, int64_t cols) const {
    const unsigned short* b = reinterpret_cast<const unsigned short*>(bias);
    const uint32_t lo = col < cols ? VK_LDG(b + col) : 0u;
    const uint32_t hi = col + 1 < cols ? VK_LDG(b + col + 1) : 0u;
    return lo | hi << 16;
  }

  // v plus the epilogue's terms for element (row, col) of out, a row-major
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
    return v;
  }
};

using NoEpilogue = Epilogue<false, false>;

}  // namespace vkern_epilogue
}  // namespace

#endif  // VKERN_CUDA_EPILOGUE_CUH
