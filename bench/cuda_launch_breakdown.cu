// Where the backend time of a tiny GPU RUN goes: host-timed medians of 2000
// (after 300 untimed) of a bare launch, a launch + sync, vkern's softmax 1x1
// + sync, and the same bracketed by timing events as the server's timed RUN
// does. Numbers only, for BENCHMARKS.md; nothing here asserts.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -I kernels -o breakdown bench/cuda_launch_breakdown.cu && ./breakdown
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>
#include "cuda/ops.cuh"
#include "cuda/softmax.cu"

__global__ void empty_kernel() {}

template <class F> double med_us(F f) {
  for (int i = 0; i < 300; ++i) f();
  std::vector<double> t(2000);
  for (double& x : t) {
    auto a = std::chrono::steady_clock::now();
    f();
    x = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count();
  }
  std::nth_element(t.begin(), t.begin() + 1000, t.end());
  return t[1000];
}

int main() {
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t e0, e1, n0, n1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  cudaEventCreateWithFlags(&n0, cudaEventDisableTiming); cudaEventCreateWithFlags(&n1, cudaEventDisableTiming);
  __half *x, *y; cudaMalloc(&x, 64); cudaMalloc(&y, 64); cudaMemset(x, 0, 64);
  float ms;
  printf("empty+streamsync      %.2f\n", med_us([&]{ empty_kernel<<<1,1,0,s>>>(); cudaStreamSynchronize(s); }));
  printf("empty+devsync         %.2f\n", med_us([&]{ empty_kernel<<<1,1,0,s>>>(); cudaDeviceSynchronize(); }));
  printf("softmax1x1+streamsync %.2f\n", med_us([&]{ vk_softmax(x, y, 1, 1, s); cudaStreamSynchronize(s); }));
  printf("ev+empty+evsync+elap  %.2f\n", med_us([&]{ cudaEventRecord(e0, s); empty_kernel<<<1,1,0,s>>>(); cudaEventRecord(e1, s); cudaEventSynchronize(e1); cudaEventElapsedTime(&ms, e0, e1); }));
  printf("ev+softmax+evsync+el  %.2f\n", med_us([&]{ cudaEventRecord(e0, s); vk_softmax(x, y, 1, 1, s); cudaEventRecord(e1, s); cudaEventSynchronize(e1); cudaEventElapsedTime(&ms, e0, e1); }));
  printf("ev+softmax+streamsync %.2f\n", med_us([&]{ cudaEventRecord(e0, s); vk_softmax(x, y, 1, 1, s); cudaEventRecord(e1, s); cudaStreamSynchronize(s); cudaEventElapsedTime(&ms, e0, e1); }));
  printf("notiming ev+softmax   %.2f\n", med_us([&]{ cudaEventRecord(n0, s); vk_softmax(x, y, 1, 1, s); cudaEventRecord(n1, s); cudaEventSynchronize(n1); }));
  const auto query_spin = [&] { while (cudaStreamQuery(s) == cudaErrorNotReady) {} };
  printf("empty+queryspin       %.2f\n", med_us([&]{ empty_kernel<<<1,1,0,s>>>(); query_spin(); }));
  printf("softmax1x1+queryspin  %.2f\n", med_us([&]{ vk_softmax(x, y, 1, 1, s); query_spin(); }));
  printf("empty launch only     %.2f\n", med_us([&]{ empty_kernel<<<1,1,0,s>>>(); }));
  cudaDeviceSynchronize();
  return 0;
}
