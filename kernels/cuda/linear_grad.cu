// linear_grad_w and linear_grad_x on the GPU: gemm.cuh's product in
// gemm_grad_b's layouts with an f32 output that may be added into
// (linear_grad_w), and in gemm_grad_a's with the GELU's backward step
// (linear_grad_x).
#include "cuda/env.h"
#include "cuda/gemm.cuh"

// dx = dy · Wᵀ, W stored K×N: gemm_grad_a's product; with pre (M×K) not
// null, times gelu′(pre) in the epilogue.
cudaError_t vk_linear_grad_x(const __half* dy, const __half* W, const __half* pre, __half* dx, int64_t M, int64_t N,
                             int64_t K, cudaStream_t s) {
  // L = dy (M×N, depth N contiguous), R = Wᵀ: R(n, k) = W[k·N + n], depth-contiguous.
  if (pre != nullptr) {
    return vkern_gemm::product<true, true>(
        dy, N, W, N, dx, M, K, N, s,
        vkern_epilogue::Epilogue<false, false, vkern_epilogue::kGeluBackward>{nullptr, const_cast<__half*>(pre)});
  }
  return vkern_gemm::product<true, true>(dy, N, W, N, dx, M, K, N, s);
}

// dW = xᵀ · dy, or dW += xᵀ · dy when accumulate: as vk_gemm_grad_b, with
// an f32 output that the epilogue adds into.
cudaError_t vk_linear_grad_w(const __half* x, const __half* dy, float* dW, int64_t M, int64_t N, int64_t K,
                             bool accumulate, cudaStream_t s) {
  // L = xᵀ: L(k, m) = x[m·K + k], row-contiguous; R = dy (M×N, column-contiguous).
  if (accumulate) {
    return vkern_gemm::product<false, false>(x, K, dy, N, dW, K, N, M, s,
                                             vkern_epilogue::Epilogue<false, true>{nullptr});
  }
  return vkern_gemm::product<false, false>(x, K, dy, N, dW, K, N, M, s);
}

// vk_linear_grad_w's product with db += dy's column sums asked of the
// kernel (Epilogue::kColumnSums); *summed says whether it formed them.
// Instantiated here, outside the lab's guard below, so that the lab's
// builds and .ci/sm90-syntax-check compile the summing kernels too.
template <bool kAccumulate>
cudaError_t linear_grad_w_summing(const __half* x, const __half* dy, float* dW, float* db, int64_t M, int64_t N,
                                  int64_t K, cudaStream_t s, bool* summed) {
  vkern_epilogue::Epilogue<false, kAccumulate, vkern_epilogue::kNoGelu, false, true> epi{nullptr};
  epi.column_sums = db;
  epi.summed = summed;
  return vkern_gemm::product<false, false>(x, K, dy, N, dW, K, N, M, s, epi);
}
template cudaError_t linear_grad_w_summing<true>(const __half*, const __half*, float*, float*, int64_t, int64_t,
                                                 int64_t, cudaStream_t, bool*);
template cudaError_t linear_grad_w_summing<false>(const __half*, const __half*, float*, float*, int64_t, int64_t,
                                                  int64_t, cudaStream_t, bool*);

// The ops' entries (kernels.cu lists them), and linear_grad_w's db, which
// calls bias_grad.cu's kernel; bench/gemm_lab.cu builds this file without
// them.
#if !defined(VKERN_GEMM_LAB)
// As vk_linear_grad_w, and db (f32, N) += dy's column sums, both ways
// summed as bias_grad sums: by default by bias_grad's kernel after the
// product, which then finds much of dy in L2; where the server's
// environment sets VKERN_GEMM_FUSED_DB=1, by the Hopper kernel of plain
// tiles as its producer warpgroup passes dy's stages (gemm_sm90.cu, kSums),
// else (other kernels) as by default. Measured on the H100 at
// 16384×768×3072, c_proj's shape (docs/dw-bias-h100, call 1, which calls
// it c_fc's): the product alone 0.1265 ms, with bias_grad's kernel after
// it 0.1451, with kSums 0.4656: the row tile that sums waited on each of
// its 64 loads a stage, and the grid waited on it. With every row tile
// summing a share, on an H200 (docs/dw-bias-shares-h200) at c_fc's
// 16384×3072×768: 0.1258 ms alone, 0.1633 with bias_grad's kernel after
// it, 0.2278 with kSums. Hence opt-in.
bool fused_db_chosen() {
  static const bool chosen = vkern_env::on_off("VKERN_GEMM_FUSED_DB", false);
  return chosen;
}

cudaError_t vk_linear_grad_w_bias(const __half* x, const __half* dy, float* dW, float* db, int64_t M, int64_t N,
                                  int64_t K, bool accumulate, cudaStream_t s) {
  bool summed = false;
  cudaError_t err;
  if (!fused_db_chosen()) {
    err = vk_linear_grad_w(x, dy, dW, M, N, K, accumulate, s);
  } else if (accumulate) {
    err = linear_grad_w_summing<true>(x, dy, dW, db, M, N, K, s, &summed);
  } else {
    err = linear_grad_w_summing<false>(x, dy, dW, db, M, N, K, s, &summed);
  }
  if (err != cudaSuccess || summed) return err;
  // bias_grad's tiles, not its cooperative spans: linear_grad_w runs beside
  // the server's main lane (device.cu, Lanes), where a cooperative launch
  // waits until a whole GPU's blocks are free. gpt2 steps on an H200
  // (docs/beside-h200, call 4, two rounds): 31.65 and 31.34 ms with the
  // tiles, 31.87 and 31.96 with the spans.
  return vk_bias_grad(dy, db, M, N, s, /*spans=*/false);
}

namespace vkern {

cudaError_t run_linear_grad_x(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_linear_grad_x;
  const __half* pre = c.params[param::gelu] == 1 ? c.ptr<const __half>(buf::pre) : nullptr;
  return vk_linear_grad_x(c.ptr<const __half>(buf::dy), c.ptr<const __half>(buf::W), pre, c.ptr<__half>(buf::dx),
                          c.params[param::M], c.params[param::N], c.params[param::K], s);
}

cudaError_t run_linear_grad_w(const Call& c, unsigned long long*, cudaStream_t s) {
  using namespace op_linear_grad_w;
  const __half *x = c.ptr<const __half>(buf::x), *dy = c.ptr<const __half>(buf::dy);
  const int64_t M = c.params[param::M], N = c.params[param::N], K = c.params[param::K];
  const bool accumulate = c.params[param::accumulate] == 1;
  if (c.params[param::bias] == 1) {
    return vk_linear_grad_w_bias(x, dy, c.ptr<float>(buf::dW), c.ptr<float>(buf::db), M, N, K, accumulate, s);
  }
  return vk_linear_grad_w(x, dy, c.ptr<float>(buf::dW), M, N, K, accumulate, s);
}

}  // namespace vkern
#endif  // VKERN_GEMM_LAB
