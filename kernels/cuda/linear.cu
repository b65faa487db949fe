// linear on the GPU: gemm.cuh's product in gemm's layouts with linear's
// epilogue (the bias, then the residual, or the GELU with pre).
#include "cuda/gemm.cuh"

// y = x · W (+ b): as vk_gemm, with an f16 output and the bias (N halves)
// added in the epilogue when b is not null; with r (M×N) not null, y = x ·
// W (+ b) + r; with pre (M×N) not null (and r null), pre = x · W (+ b) and
// y = gelu of it.
cudaError_t vk_linear(const __half* x, const __half* W, const __half* b, const __half* r, __half* y, __half* pre,
                      int64_t M, int64_t N, int64_t K, cudaStream_t s) {
  using vkern_epilogue::Epilogue;
  using vkern_epilogue::kGeluForward;
  using vkern_epilogue::kNoGelu;
  // L = x (M×K, depth-contiguous), R = W (K×N, column-contiguous).
  if (r != nullptr) {
    if (pre != nullptr) return cudaErrorInvalidValue;  // refused by the contract (op.Validate) before it gets here
    if (b != nullptr) {
      return vkern_gemm::product<true, false>(x, K, W, N, y, M, N, K, s,
                                              Epilogue<true, false, kNoGelu, true>{b, nullptr, r});
    }
    return vkern_gemm::product<true, false>(x, K, W, N, y, M, N, K, s,
                                            Epilogue<false, false, kNoGelu, true>{nullptr, nullptr, r});
  }
  if (pre != nullptr) {
    if (b != nullptr) {
      return vkern_gemm::product<true, false>(x, K, W, N, y, M, N, K, s, Epilogue<true, false, kGeluForward>{b, pre});
    }
    return vkern_gemm::product<true, false>(x, K, W, N, y, M, N, K, s,
                                            Epilogue<false, false, kGeluForward>{nullptr, pre});
  }
  if (b != nullptr) {
    return vkern_gemm::product<true, false>(x, K, W, N, y, M, N, K, s, Epilogue<true, false>{b});
  }
  return vkern_gemm::product<true, false>(x, K, W, N, y, M, N, K, s);
}

// The ops' entries (kernels.cu lists them); bench/gemm_lab.cu builds this
// file without them.
#if !defined(VKERN_GEMM_LAB)
namespace vkern {

cudaError_t run_linear(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_linear;
  const __half* b = c.params[param::bias] == 1 ? c.ptr<const __half>(buf::b) : nullptr;
  const __half* r = c.params[param::residual] == 1 ? c.ptr<const __half>(buf::r) : nullptr;
  __half* pre = c.params[param::gelu] == 1 ? c.ptr<__half>(buf::pre) : nullptr;
  return vk_linear(c.ptr<const __half>(buf::x), c.ptr<const __half>(buf::W), b, r, c.ptr<__half>(buf::y), pre,
                   c.params[param::M], c.params[param::N], c.params[param::K], s);
}

}  // namespace vkern
#endif  // VKERN_GEMM_LAB
