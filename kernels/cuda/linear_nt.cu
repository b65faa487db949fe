// linear_nt on the GPU: gemm.cuh's product in gemm_grad_a's layouts with
// linear's bias epilogue.
#include "cuda/gemm.cuh"

// y = x · Wᵀ (+ b), W stored N×K: gemm_grad_a's layouts (both operands
// depth-contiguous) with linear's epilogue, the bias (N halves) added when b
// is not null.
cudaError_t vk_linear_nt(const __half* x, const __half* W, const __half* b, __half* y, int64_t M, int64_t N,
                         int64_t K, cudaStream_t s) {
  // L = x (M×K, depth K contiguous), R = Wᵀ: R(k, n) = W[n·K + k], depth-contiguous.
  if (b != nullptr) {
    return vkern_gemm::product<true, true>(x, K, W, K, y, M, N, K, s, vkern_epilogue::Epilogue<true, false>{b});
  }
  return vkern_gemm::product<true, true>(x, K, W, K, y, M, N, K, s);
}

// The ops' entries (kernels.cu lists them); bench/gemm_lab.cu builds this
// file without them.
#if !defined(VKERN_GEMM_LAB)
namespace vkern {

cudaError_t run_linear_nt(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_linear_nt;
  const __half* b = c.params[param::bias] == 1 ? c.ptr<const __half>(buf::b) : nullptr;
  return vk_linear_nt(c.ptr<const __half>(buf::x), c.ptr<const __half>(buf::W), b, c.ptr<__half>(buf::y),
                      c.params[param::M], c.params[param::N], c.params[param::K], s);
}

}  // namespace vkern
#endif  // VKERN_GEMM_LAB
