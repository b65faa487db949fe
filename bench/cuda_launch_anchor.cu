// The anchor of the kernel server's tiny RUN on a GPU: a bare CUDA launch of
// an empty kernel followed by a stream synchronisation, timed on the host,
// median of 2000 after 200 warm-up. Prints one JSON line in the anchors.py
// format.
//
//   nvcc -O3 -o launch_anchor bench/cuda_launch_anchor.cu && ./launch_anchor
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

__global__ void empty_kernel() {}

int main() {
  cudaStream_t s;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  const auto once = [&] {
    empty_kernel<<<1, 1, 0, s>>>();
    return cudaStreamSynchronize(s);
  };
  for (int i = 0; i < 200; ++i) once();
  std::vector<double> ms(2000);
  for (double& t : ms) {
    const auto start = std::chrono::steady_clock::now();
    if (once() != cudaSuccess) return 1;
    t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  cudaDeviceProp p;
  cudaGetDeviceProperties(&p, 0);
  std::printf("{\"op\": \"launch_sync\", \"shape\": \"1x1\", \"impl\": \"empty kernel<<<1,1>>> + cudaStreamSynchronize\", "
              "\"median_ms\": %.6f, \"device\": \"%s\"}\n",
              ms[ms.size() / 2], p.name);
  return 0;
}
