// attention_lab: kernels/cuda/attention.cu's tensor-core path timed alone,
// in one process, at GPT-2's shape or any other: the forward three ways (on
// wgmma, variant 7, where the device and head size allow it; on mma.sync
// with blocks of 4 and of 8 warps) and the backward three ways (on wgmma,
// variant 6; on mma.sync with dq from S and dP computed again, variant 3;
// with dq from the stored dS, variant 5), each as milliseconds and as the
// rate of the causal products' flops. It is a lab tool, not part of the
// server and not a check: verify and the planted defects judge
// correctness; this prints the largest differences between the forwards
// and between the backwards' parts (wgmma against mma.sync within 1% of
// the largest value, or the exit status is 1), variant 5's count of dk and
// dv elements that differ from variant 3's (which must be 0: one kernel
// computes them both ways), and the route's flag (which must stay 0 on
// these finite inputs), so that a broken build is seen at once.
//
//   go run ./bench/labsrc labsrc      # here: the sources with their op table
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Ilabsrc \
//        -o attention_lab bench/attention_lab.cu
//   ./attention_lab                # B=16 T=1024 C=768 H=12
//   ./attention_lab 8 2048 768 12
//
// Timing: blocks of kIters launches between CUDA events, the median of
// kBlocks blocks.
#define VKERN_ATTENTION_LAB 1
#include "cuda/attention.cu"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <random>
#include <vector>

#include "lab.cuh"

namespace {

constexpr int kIters = 10, kBlocks = 7;


template <class F>
double median_ms(F launch) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  launch();  // warm-up
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<double> ms;
  for (int b = 0; b < kBlocks; ++b) {
    CHECK_CUDA(cudaEventRecord(start));
    for (int i = 0; i < kIters; ++i) launch();
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t / kIters);
  }
  std::sort(ms.begin(), ms.end());
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  return ms[ms.size() / 2];
}

__half* device_halves(int64_t n, float sigma, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<__half> host(n);
  for (auto& h : host) h = __float2half_rn(dist(rng));
  __half* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, n * sizeof(__half)));
  CHECK_CUDA(cudaMemcpy(d, host.data(), n * sizeof(__half), cudaMemcpyHostToDevice));
  return d;
}

std::vector<float> to_host(const __half* d, int64_t n) {
  std::vector<__half> h(n);
  CHECK_CUDA(cudaMemcpy(h.data(), d, n * sizeof(__half), cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (int64_t i = 0; i < n; ++i) f[i] = __half2float(h[i]);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t B = 16, T = 1024, C = 768, H = 12;
  if (argc == 5) {
    B = atoll(argv[1]), T = atoll(argv[2]), C = atoll(argv[3]), H = atoll(argv[4]);
  } else if (argc != 1) {
    fprintf(stderr, "usage: attention_lab [B T C H]\n");
    return 2;
  }
  if (B < 1 || T < 1 || H < 1 || C % H != 0) {
    fprintf(stderr, "attention_lab: B=%lld T=%lld C=%lld H=%lld: want positive sizes and H dividing C\n",
            (long long)B, (long long)T, (long long)C, (long long)H);
    return 2;
  }
  const vkern_attention::Heads a{B, T, C, H, C / H};
  std::mt19937_64 rng(7);
  __half* qkv = device_halves(B * T * 3 * C, 1.0f, rng);
  __half* dy = device_halves(B * T * C, 1e-3f, rng);
  __half *y = nullptr, *y8 = nullptr, *dqkv = nullptr;
  float* lse = nullptr;
  CHECK_CUDA(cudaMalloc(&y, B * T * C * sizeof(__half)));
  CHECK_CUDA(cudaMalloc(&y8, B * T * C * sizeof(__half)));
  CHECK_CUDA(cudaMalloc(&dqkv, B * T * 3 * C * sizeof(__half)));
  CHECK_CUDA(cudaMalloc(&lse, B * H * T * sizeof(float)));

  // The causal products' flops: QKᵀ and PV over the T(T+1)/2 pairs, 2.5× that
  // for the backward (its five products, two of them recomputed).
  const double pairs = static_cast<double>(B) * H * T * (T + 1) / 2;
  const double fwd_flops = 4.0 * pairs * a.D, bwd_flops = 2.5 * fwd_flops;
  printf("attention_lab B=%lld T=%lld C=%lld H=%lld D=%lld\n", (long long)B, (long long)T, (long long)C,
         (long long)H, (long long)a.D);
  printf("%-22s %10s %10s\n", "kernel", "ms", "TFLOP/s");

  // The forward three ways: on wgmma (variant 7, where the device and head
  // size allow it) into y8, then on mma.sync with blocks of 4 warps into y
  // (kept for the backward) and of 8 into y8.
  const char* forward_names[3] = {"forward, wgmma", "forward, 4 warps", "forward, 8 warps"};
  std::vector<float> ys[3];
  for (int v = 0; v < 3; ++v) {
    vkern_attention::vk_attention_hopper = v == 0;
    vk_attention_forward_warps = v == 2 ? 8 : 4;
    __half* out = v == 1 ? y : y8;
    const double ms = median_ms([&] { CHECK_CUDA(vkern_attention::forward(qkv, out, lse, a, 0)); });
    printf("%-22s %10.4f %10.1f\n", forward_names[v], ms, fwd_flops / ms / 1e9);
    CHECK_CUDA(cudaDeviceSynchronize());
    ys[v] = to_host(out, B * T * C);
  }
  vkern_attention::vk_attention_hopper = false;
  vk_attention_forward_warps = 4;
  CHECK_CUDA(vkern_attention::forward(qkv, y, lse, a, 0));
  CHECK_CUDA(cudaDeviceSynchronize());
  // The backward three ways (attention.cu's variants 6, 3 and 5): on
  // wgmma (the Hopper kernels, where the device and head size allow), on
  // mma.sync with dq from S and dP computed again, and with dq from the dS
  // tiles the dk/dv kernel stores.
  const char* names[3] = {"backward, wgmma", "backward, mma.sync", "backward, stored dS"};
  std::vector<float> grads[3];
  for (int v = 0; v < 3; ++v) {
    vkern_attention::vk_attention_hopper = v == 0;
    vkern_attention::vk_attention_dq_stored = v == 2;
    const double ms = median_ms([&] { CHECK_CUDA(vkern_attention::backward(dy, qkv, y, lse, dqkv, a, 0)); });
    printf("%-22s %10.4f %10.1f\n", names[v], ms, bwd_flops / ms / 1e9);
    CHECK_CUDA(cudaDeviceSynchronize());
    grads[v] = to_host(dqkv, B * T * 3 * C);
  }
  vkern_attention::vk_attention_hopper = true;
  vkern_attention::vk_attention_dq_stored = false;
  // Stored against recomputed: dk and dv come from the same kernel, the
  // same bits; dq sums the same roundings of dS, recomputed by other
  // products: close. wgmma against mma.sync: the same roundings, sums in
  // other orders: close in each part.
  double diff[3] = {0, 0, 0}, largest[3] = {0, 0, 0}, dq_diff = 0;
  int64_t kv_differ = 0;
  for (int64_t i = 0; i < B * T * 3 * C; ++i) {
    const int part = static_cast<int>(i % (3 * C) / C);  // 0 dq, 1 dk, 2 dv
    diff[part] = std::max(diff[part], std::fabs(static_cast<double>(grads[0][i]) - grads[1][i]));
    largest[part] = std::max(largest[part], static_cast<double>(std::fabs(grads[1][i])));
    if (part == 0) {
      dq_diff = std::max(dq_diff, std::fabs(static_cast<double>(grads[1][i]) - grads[2][i]));
    } else if (!(grads[1][i] == grads[2][i]) && !(std::isnan(grads[1][i]) && std::isnan(grads[2][i]))) {
      ++kv_differ;
    }
  }
  printf("stored dS against recomputed: dq largest |difference| %.3g (largest |dq| %.3g); dk, dv elements that differ: %lld\n",
         dq_diff, largest[0], (long long)kv_differ);
  printf("wgmma against mma.sync, largest |difference| (largest |value|): dq %.3g (%.3g), dk %.3g (%.3g), dv %.3g (%.3g)\n",
         diff[0], largest[0], diff[1], largest[1], diff[2], largest[2]);
  bool close = true;
  for (int part = 0; part < 3; ++part) close = close && diff[part] <= 1e-2 * largest[part];
  // The wgmma outputs' bits as one FNV-1a hash each, so that two builds
  // (bench/cuda-pending.sh labab) can be held to the same bits.
  const auto fnv = [](const std::vector<float>& v) {
    uint64_t h = 14695981039346656037ull;
    for (const float f : v) {
      uint32_t u;
      std::memcpy(&u, &f, sizeof(u));
      h = (h ^ u) * 1099511628211ull;
    }
    return static_cast<unsigned long long>(h);
  };
  printf("bits of the wgmma outputs (FNV-1a): y %016llx, dqkv %016llx\n", fnv(ys[0]), fnv(grads[0]));

  // wgmma against 4 warps, and 8 warps against 4: the same roundings, the
  // same order of the online passes.
  double y_diff[2] = {0, 0}, y_largest = 0;
  for (size_t i = 0; i < ys[1].size(); ++i) {
    y_diff[0] = std::max(y_diff[0], static_cast<double>(std::fabs(ys[0][i] - ys[1][i])));
    y_diff[1] = std::max(y_diff[1], static_cast<double>(std::fabs(ys[2][i] - ys[1][i])));
    y_largest = std::max(y_largest, static_cast<double>(std::fabs(ys[1][i])));
  }
  close = close && y_diff[0] <= 1e-2 * y_largest;
  unsigned flag = 0;
  void* scratch = nullptr;
  CHECK_CUDA(vkern_attention::g_scratch.get(4, &scratch));
  CHECK_CUDA(cudaMemcpy(&flag, scratch, sizeof(flag), cudaMemcpyDeviceToHost));
  printf("forward, largest |difference| from 4 warps: wgmma %.3g, 8 warps %.3g (largest |y| %.3g); route flag %u\n",
         y_diff[0], y_diff[1], y_largest, flag);

  // The Hopper kernels' order of items (tile_item) at several head groups,
  // 0 being all heads at once (the order before variant 8): the time of each, and
  // the same bits as the default group's outputs above.
  float* lse8 = nullptr;
  CHECK_CUDA(cudaMalloc(&lse8, B * H * T * sizeof(float)));
  vkern_attention::vk_attention_hopper = true;
  bool same = true;
  for (const int64_t group : {int64_t{0}, int64_t{16}, int64_t{8}, int64_t{4}, int64_t{2}}) {
    vkern_attention::vk_attention_head_group = group;
    const double fms = median_ms([&] { CHECK_CUDA(vkern_attention::forward(qkv, y8, lse8, a, 0)); });
    const double bms = median_ms([&] { CHECK_CUDA(vkern_attention::backward(dy, qkv, y, lse, dqkv, a, 0)); });
    CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<float> yg = to_host(y8, B * T * C), gg = to_host(dqkv, B * T * 3 * C);
    const bool y_same = std::memcmp(yg.data(), ys[0].data(), yg.size() * sizeof(float)) == 0;
    const bool g_same = std::memcmp(gg.data(), grads[0].data(), gg.size() * sizeof(float)) == 0;
    same = same && y_same && g_same;
    printf("wgmma, heads a group %-4lld forward %8.4f ms %7.1f TFLOP/s, backward %8.4f ms %7.1f TFLOP/s; %s\n",
           (long long)group, fms, fwd_flops / fms / 1e9, bms, bwd_flops / bms / 1e9,
           y_same && g_same ? "the same bits" : "DIFFERENT bits");
  }
  return flag == 0 && kv_differ == 0 && close && same ? 0 : 1;
}
