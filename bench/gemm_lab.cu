// gemm_lab: the Hopper GEMM variants of kernels/cuda/gemm_sm90.cu timed
// against cublasGemmEx on the products a GPT-2 step runs, in one process, so
// that a variant's ratio and the dispatcher's choice can be read off one
// table. It is a lab tool, not part of the server: it compiles the matmul
// family's units (gemm.cu, linear.cu, linear_nt.cu, linear_grad.cu) with
// the tuning hook (VKERN_GEMM_TUNING, which also builds the variants the
// dispatcher never picks) and without the server's op entries
// (VKERN_GEMM_LAB).
//
//   go run ./bench/labsrc labsrc      # here: the sources with their op table
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Ilabsrc \
//        -o gemm_lab bench/gemm_lab.cu -lcublas
//   ./gemm_lab                 # every case, every variant
//   ./gemm_lab 3 6 10          # only these variant ids (and the dispatch, -1)
//   GEMM_LAB_ONLY='fwd fc,fwd fc gelu' ./gemm_lab -1   # two cases, the dispatch alone
//
// Built with -DVKERN_GEMM_LAB_FEW, it has only the variants the dispatcher
// picks (6, 8 and 9; the tuning hook's others are left out of the build),
// which builds faster: for a profile inside one device call, e.g. of the
// head's products at V = 50257, which the dispatcher sends to the class
// paths (gemm_sm90.cu's Tiles):
//   GEMM_LAB_ONLY='V dx head' ncu --set full -k regex:product_wgmma \
//       --launch-skip 2 -c 1 -o dx ./gemm_lab 6
//
// Each case is one of the server's entry points (vk_linear, vk_linear_nt,
// vk_linear_grad_x, vk_linear_grad_w), so that cuBLAS computes the same
// product; with a bias it is of zeros, and a GELU case's reference is
// cuBLAS's product with the GELU step applied after it (gelu.cuh), while
// its cuBLAS time is the product's alone. $GEMM_LAB_ONLY, a comma-separated
// list of case names, keeps only those. Timing: blocks of kIters launches between CUDA events,
// vkern and cuBLAS blocks interleaved, the median of kBlocks blocks of each.
// Every variant's output is compared with cuBLAS's (largest difference over
// the largest |reference|); a variant over 1e-2 is marked WRONG, and its
// time means nothing.
#define VKERN_GEMM_TUNING 1
#define VKERN_GEMM_LAB 1
#include "cuda/gemm.cu"
#include "cuda/linear.cu"
#include "cuda/linear_grad.cu"
#include "cuda/linear_nt.cu"

#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "lab.cuh"

namespace {

constexpr int kIters = 10, kBlocks = 7;

// kLinearBias adds a bias of zeros and kLinearGradWAdd adds into dW (zeros
// before the comparison): the same products as cuBLAS's, with the epilogue's
// loads timed too.
// kLinearGelu is linear with GELU (out = gelu of the product, pre = the
// product), in kLinear's dimensions; kGradXGelu is linear_grad_x through
// the GELU (out = the product times gelu′(pre), pre an input of random
// values), in kLinearNT's.
enum Kind { kLinear, kLinearNT, kLinearGradW, kLinearBias, kLinearGradWAdd, kLinearGelu, kGradXGelu };

struct Case {
  const char* name;
  Kind kind;
  int64_t M, N, K;  // the op's own dimensions (linear_grad_w: dW is K×N, summed over M)
};

#define CHECK_CUBLAS(x)                                                  \
  do {                                                                   \
    cublasStatus_t s_ = (x);                                             \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                   \
      fprintf(stderr, "%s:%d %s: status %d\n", __FILE__, __LINE__, #x, (int)s_); \
      exit(1);                                                           \
    }                                                                    \
  } while (0)

__global__ void fill_random(__half* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    p[i] = __float2half_rn((static_cast<float>(x & 0xFFFF) / 65536.0f - 0.5f) * 2.0f);
  }
}

struct Buffers {
  __half *a = nullptr, *b = nullptr, *bias = nullptr, *pre = nullptr;
  void *out = nullptr, *ref = nullptr;
  __half* product = nullptr;  // kLinearGelu: cuBLAS's product, what pre must hold
};

// The vkern entry point for c.
cudaError_t run_vkern(const Case& c, const Buffers& x) {
  switch (c.kind) {
    case kLinear:
      return vk_linear(x.a, x.b, nullptr, nullptr, static_cast<__half*>(x.out), nullptr, c.M, c.N, c.K, 0);
    case kLinearNT:
      return vk_linear_nt(x.a, x.b, nullptr, static_cast<__half*>(x.out), c.M, c.N, c.K, 0);
    case kLinearGradW:
      return vk_linear_grad_w(x.a, x.b, static_cast<float*>(x.out), c.M, c.N, c.K, false, 0);
    case kLinearBias:
      return vk_linear(x.a, x.b, x.bias, nullptr, static_cast<__half*>(x.out), nullptr, c.M, c.N, c.K, 0);
    case kLinearGradWAdd:
      return vk_linear_grad_w(x.a, x.b, static_cast<float*>(x.out), c.M, c.N, c.K, true, 0);
    case kLinearGelu:
      return vk_linear(x.a, x.b, nullptr, nullptr, static_cast<__half*>(x.out), x.pre, c.M, c.N, c.K, 0);
    case kGradXGelu:  // dy M×K, W N×K: dx M×N (linear_grad_x's M, N = depth, K = columns)
      return vk_linear_grad_x(x.a, x.b, x.pre, static_cast<__half*>(x.out), c.M, c.K, c.N, 0);
  }
  return cudaErrorInvalidValue;
}

// The same product through cuBLAS (column-major: each row-major matrix is
// its transpose).
void run_cublas(cublasHandle_t h, const Case& c, const Buffers& x, void* out) {
  const float one = 1.0f, zero = 0.0f;
  switch (c.kind) {
    case kLinear:  // yᵀ (N×M) = Wᵀ (N×K) · xᵀ (K×M)
    case kLinearBias:
    case kLinearGelu:
      CHECK_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, c.N, c.M, c.K, &one, x.b, CUDA_R_16F, c.N, x.a,
                                CUDA_R_16F, c.K, &zero, out, CUDA_R_16F, c.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      return;
    case kLinearNT:  // W stored N×K: yᵀ = W · xᵀ
    case kGradXGelu:
      CHECK_CUBLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, c.N, c.M, c.K, &one, x.b, CUDA_R_16F, c.K, x.a,
                                CUDA_R_16F, c.K, &zero, out, CUDA_R_16F, c.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      return;
    case kLinearGradW:  // dWᵀ (N×K) = dyᵀ (N×M) · x (M×K)
    case kLinearGradWAdd:
      CHECK_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, c.N, c.K, c.M, &one, x.b, CUDA_R_16F, c.N, x.a,
                                CUDA_R_16F, c.K, &zero, out, CUDA_R_32F, c.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      return;
  }
}

// gelu_reference applies the GELU step to cuBLAS's product in ref: its
// gelu (kLinearGelu), or its product with gelu′(pre) (kGradXGelu).
__global__ void gelu_reference(Kind kind, __half* ref, const __half* pre, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float v = __half2float(ref[i]);
    ref[i] = __float2half_rn(kind == kLinearGelu ? vkern_gelu::gelu(v) : vkern_gelu::gelu_grad(__half2float(pre[i]), v));
  }
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The largest |got − want| over the largest |want|.
double difference(const Case& c, const void* got, const void* want) {
  const bool f32 = c.kind == kLinearGradW || c.kind == kLinearGradWAdd;
  const int64_t n = f32 ? c.K * c.N : c.M * c.N;
  const size_t bytes = n * (f32 ? 4 : 2);
  std::vector<unsigned char> g(bytes), w(bytes);
  CHECK_CUDA(cudaMemcpy(g.data(), got, bytes, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(w.data(), want, bytes, cudaMemcpyDeviceToHost));
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    double a, b;
    if (f32) {
      a = reinterpret_cast<const float*>(g.data())[i];
      b = reinterpret_cast<const float*>(w.data())[i];
    } else {
      a = __half2float(reinterpret_cast<const __half*>(g.data())[i]);
      b = __half2float(reinterpret_cast<const __half*>(w.data())[i]);
    }
    if (!std::isfinite(a)) return INFINITY;
    worst = std::max(worst, std::fabs(a - b));
    scale = std::max(scale, std::fabs(b));
  }
  return scale > 0 ? worst / scale : worst;
}

}  // namespace

int main(int argc, char** argv) {
#if defined(VKERN_GEMM_LAB_FEW)
  std::vector<int> variants = {-1, 6, 8, 9};
#else
  std::vector<int> variants = {-1, 1, 2, 3, 4, 5, 6, 7, 8, 9};
#endif
  if (argc > 1) {
    variants = {-1};
    for (int i = 1; i < argc; ++i) {
      if (atoi(argv[i]) != -1) variants.push_back(atoi(argv[i]));
    }
  }
  // GPT-2 124M at B=16, T=1024 (M = 16384 rows), the vocabulary padded to
  // 50304: the forward's four projections and head, the input gradients
  // (linear_nt's layouts: dx = dy · Wᵀ), and the weight gradients.
  const Case cases[] = {
      {"fwd qkv", kLinear, 16384, 2304, 768},
      {"fwd qkv +b", kLinearBias, 16384, 2304, 768},
      {"fwd proj +b", kLinearBias, 16384, 768, 768},
      {"fwd fc.proj +b", kLinearBias, 16384, 768, 3072},
      {"dx head", kLinear, 16384, 768, 50304},
      {"fwd attn.proj", kLinear, 16384, 768, 768},
      {"fwd fc", kLinear, 16384, 3072, 768},
      {"fwd fc.proj", kLinear, 16384, 768, 3072},
      {"fwd head", kLinearNT, 16384, 50304, 768},
      {"dx qkv", kLinearNT, 16384, 768, 2304},
      {"dx attn.proj", kLinearNT, 16384, 768, 768},
      {"dx fc", kLinearNT, 16384, 768, 3072},
      {"dx fc.proj", kLinearNT, 16384, 3072, 768},
      {"dW qkv", kLinearGradW, 16384, 2304, 768},
      {"dW attn.proj", kLinearGradW, 16384, 768, 768},
      {"dW proj +=", kLinearGradWAdd, 16384, 768, 768},
      {"dW fc +=", kLinearGradWAdd, 16384, 3072, 768},
      {"dW fc", kLinearGradW, 16384, 3072, 768},
      {"dW fc.proj", kLinearGradW, 16384, 768, 3072},
      {"dW head", kLinearGradW, 16384, 768, 50304},
      {"square 4096", kLinear, 4096, 4096, 4096},
      // The MLP's GELU products: c_fc's forward, and the gradient through
      // c_proj and the GELU (out 3072 wide), beside "fwd fc" and "dx fc.proj".
      {"fwd fc gelu", kLinearGelu, 16384, 3072, 768},
      {"dx fc.proj gelu", kGradXGelu, 16384, 3072, 768},
      // The vocabulary as it is, 50257: rows of the logits (and of W in
      // linear's layout) that do not start 16-byte aligned, padded into
      // scratch where an operand (gemm.cuh's product_tensor_cores).
      {"V fwd head", kLinearNT, 16384, 50257, 768},
      {"V linear", kLinear, 16384, 50257, 768},
      {"V dx head", kLinear, 16384, 768, 50257},
      {"V dW head", kLinearGradW, 16384, 768, 50257},
  };
  const char* only = std::getenv("GEMM_LAB_ONLY");
  // $GEMM_LAB_GROUP: tile rows per L2 group of the Hopper tile order (0,
  // unset: the kernels' own).
  if (const char* g = std::getenv("GEMM_LAB_GROUP")) vkern_gemm_sm90::vk_gemm_tuning_sm90_group = atoi(g);
  // wanted: whether $GEMM_LAB_ONLY is unset or names the case.
  auto wanted = [only](const char* name) {
    if (only == nullptr) return true;
    const size_t n = std::strlen(name);
    for (const char* p = only; *p != 0;) {
      const char* end = std::strchr(p, ',');
      const size_t len = end != nullptr ? static_cast<size_t>(end - p) : std::strlen(p);
      if (len == n && std::strncmp(p, name, n) == 0) return true;
      p += len + (end != nullptr ? 1 : 0);
    }
    return false;
  };
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  printf("# %s, %d multiprocessors; ratio = cuBLAS time / vkern time (above 1: vkern faster)\n", prop.name,
         prop.multiProcessorCount);
  cublasHandle_t h;
  CHECK_CUBLAS(cublasCreate(&h));
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  printf("%-14s %-22s %8s %9s", "case", "M x N x K", "cuBLAS", "TFLOP/s");
  for (int v : variants) printf(" %7s%d", v < 0 ? "disp" : "v", v < 0 ? 0 : v);
  printf("\n");
  for (const Case& c : cases) {
    if (!wanted(c.name)) continue;
    Buffers x;
    const bool gradw = c.kind == kLinearGradW || c.kind == kLinearGradWAdd;
    const int64_t a_elems = c.M * c.K, b_elems = gradw ? c.M * c.N : c.K * c.N;
    const size_t out_bytes = gradw ? c.K * c.N * 4 : c.M * c.N * 2;
    CHECK_CUDA(cudaMalloc(&x.a, a_elems * 2));
    CHECK_CUDA(cudaMalloc(&x.b, b_elems * 2));
    CHECK_CUDA(cudaMalloc(&x.out, out_bytes));
    CHECK_CUDA(cudaMalloc(&x.ref, out_bytes));
    CHECK_CUDA(cudaMalloc(&x.bias, c.N * 2));
    CHECK_CUDA(cudaMemset(x.bias, 0, c.N * 2));
    const bool gelu = c.kind == kLinearGelu || c.kind == kGradXGelu;
    if (gelu) {
      CHECK_CUDA(cudaMalloc(&x.pre, c.M * c.N * 2));
      fill_random<<<1024, 256>>>(x.pre, c.M * c.N, 3);
    }
    fill_random<<<1024, 256>>>(x.a, a_elems, 1);
    fill_random<<<1024, 256>>>(x.b, b_elems, 2);
    run_cublas(h, c, x, x.ref);
    if (c.kind == kLinearGelu) {
      CHECK_CUDA(cudaMalloc(&x.product, c.M * c.N * 2));
      CHECK_CUDA(cudaMemcpy(x.product, x.ref, c.M * c.N * 2, cudaMemcpyDeviceToDevice));
    }
    if (gelu) gelu_reference<<<1024, 256>>>(c.kind, static_cast<__half*>(x.ref), x.pre, c.M * c.N);
    CHECK_CUDA(cudaDeviceSynchronize());
    const double flops = 2.0 * c.M * c.N * c.K;
    std::vector<float> times_cublas;
    std::vector<std::vector<float>> times(variants.size());
    std::vector<double> diffs(variants.size());
    for (size_t i = 0; i < variants.size(); ++i) {
      vk_gemm_tuning_sm90 = variants[i];
      CHECK_CUDA(cudaMemset(x.out, c.kind == kLinearGradWAdd ? 0 : 0xFF, out_bytes));
      CHECK_CUDA(run_vkern(c, x));
      CHECK_CUDA(cudaDeviceSynchronize());
      diffs[i] = difference(c, x.out, x.ref);
      // linear's second output with GELU, pre, is the product itself.
      if (c.kind == kLinearGelu) diffs[i] = std::max(diffs[i], difference(c, x.pre, x.product));
    }
    for (int block = 0; block < kBlocks; ++block) {
      float ms;
      CHECK_CUDA(cudaEventRecord(e0));
      for (int it = 0; it < kIters; ++it) run_cublas(h, c, x, x.out);
      CHECK_CUDA(cudaEventRecord(e1));
      CHECK_CUDA(cudaEventSynchronize(e1));
      CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      times_cublas.push_back(ms / kIters);
      for (size_t i = 0; i < variants.size(); ++i) {
        vk_gemm_tuning_sm90 = variants[i];
        CHECK_CUDA(cudaEventRecord(e0));
        for (int it = 0; it < kIters; ++it) CHECK_CUDA(run_vkern(c, x));
        CHECK_CUDA(cudaEventRecord(e1));
        CHECK_CUDA(cudaEventSynchronize(e1));
        CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
        times[i].push_back(ms / kIters);
      }
    }
    const float tc = median(times_cublas);
    char shape[64];
    snprintf(shape, sizeof shape, "%ldx%ldx%ld", (long)c.M, (long)c.N, (long)c.K);
    printf("%-14s %-22s %6.1fus %9.0f", c.name, shape, tc * 1000, flops / (tc * 1e-3) / 1e12);
    for (size_t i = 0; i < variants.size(); ++i) {
      const float t = median(times[i]);
      if (diffs[i] > 1e-2) {
        printf("   WRONG");
      } else {
        printf(" %8.3f", tc / t);
      }
    }
    printf("\n");
    fflush(stdout);
    CHECK_CUDA(cudaFree(x.a));
    CHECK_CUDA(cudaFree(x.b));
    CHECK_CUDA(cudaFree(x.out));
    CHECK_CUDA(cudaFree(x.ref));
    CHECK_CUDA(cudaFree(x.bias));
    CHECK_CUDA(cudaFree(x.pre));
    CHECK_CUDA(cudaFree(x.product));
  }
  cublasDestroy(h);
  return 0;
}
