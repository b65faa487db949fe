// gemm, gemm_grad_a and gemm_grad_b on the GPU: the seed's three products,
// each gemm.cuh's product in its operands' layouts (the table there), with
// no epilogue. The family's other ops are units of their own (linear.cu,
// linear_nt.cu, linear_grad.cu) so that the build compiles their kernels
// at once: each layout and epilogue instantiates its own kernels.
#include "cuda/gemm.cuh"

#if defined(VKERN_GEMM_TUNING)
int vk_gemm_tuning_config = -1;
int vk_gemm_tuning_sm90 = -1;
#endif

// On compute capability 9 with the tensor-core path built, product sends
// every shape to product_tensor_cores, whose kernels (mma.sync m16n8k16, or
// wgmma k16 in gemm_sm90.cu) add 16 products at a time to the f32
// accumulator in one fused step. Elsewhere (HIP, older GPUs, the portable
// path) no structure is claimed; that includes compute capability 8, which
// runs the same mma.sync kernels but whose tensor cores' alignment and
// rounding the claim was not made for.
const char* vk_gemm_dot_accumulation(int cc_major) {
#if defined(VKERN_PTX_MMA) && !defined(VKERN_GEMM_PORTABLE)
  if (cc_major == 9) return "tc-fused:16:2";
#else
  (void)cc_major;
#endif
  return "any";
}

cudaError_t vk_gemm(const __half* A, const __half* B, float* C, int64_t M, int64_t N, int64_t K, cudaStream_t s) {
  // L = A (M×K, depth-contiguous), R = B (K×N, column-contiguous).
  return vkern_gemm::product<true, false>(A, K, B, N, C, M, N, K, s);
}

cudaError_t vk_gemm_grad_a(const __half* dC, const __half* B, __half* dA, int64_t M, int64_t N, int64_t K,
                           cudaStream_t s) {
  // L = dC (M×N, depth N contiguous), R = Bᵀ: R(n, k) = B[k·N + n], depth-contiguous.
  return vkern_gemm::product<true, true>(dC, N, B, N, dA, M, K, N, s);
}

cudaError_t vk_gemm_grad_b(const __half* A, const __half* dC, __half* dB, int64_t M, int64_t N, int64_t K,
                           cudaStream_t s) {
  // L = Aᵀ: L(k, m) = A[m·K + k], row-contiguous; R = dC (M×N, column-contiguous).
  return vkern_gemm::product<false, false>(A, K, dC, N, dB, K, N, M, s);
}

// The ops' entries (kernels.cu lists them); bench/gemm_lab.cu builds this
// file without them.
#if !defined(VKERN_GEMM_LAB)
namespace vkern {

cudaError_t run_gemm(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_gemm;
  return vk_gemm(c.ptr<const __half>(buf::A), c.ptr<const __half>(buf::B), c.ptr<float>(buf::C), c.params[param::M],
                 c.params[param::N], c.params[param::K], s);
}

cudaError_t run_gemm_grad_a(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_gemm_grad_a;
  return vk_gemm_grad_a(c.ptr<const __half>(buf::dC), c.ptr<const __half>(buf::B), c.ptr<__half>(buf::dA),
                        c.params[param::M], c.params[param::N], c.params[param::K], s);
}

cudaError_t run_gemm_grad_b(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_gemm_grad_b;
  return vk_gemm_grad_b(c.ptr<const __half>(buf::A), c.ptr<const __half>(buf::dC), c.ptr<__half>(buf::dB),
                        c.params[param::M], c.params[param::N], c.params[param::K], s);
}

}  // namespace vkern
#endif  // VKERN_GEMM_LAB
