// bias_grad_lab: bias_grad's kernel (kernels/cuda/bias_grad.cu) timed alone,
// in one process, beside kernels that move the same bytes, to split its time
// at a shape into what any one-pass read of dy costs there and what the
// column sums add. It is a lab tool, not part of the server and not a
// check (verify and the planted defects judge bias_grad); it prints, for
// M×N:
//   bias_grad     vk_bias_grad, as the server launches it;
//   sums only     its kernel with no block finishing a tile (the tiles'
//                 counters set so that none is last before each launch):
//                 the reads and the group sums, without the finish;
//   spans         span_sums below, at 2, 4 and 8 row blocks a block (N a
//                 multiple of 768): against "sums only", whether reading
//                 whole 1536-byte runs of a row together is faster;
//   read          a grid-stride read of dy's bytes, 16 bytes a load, four
//                 loads in flight a thread, one f32 a thread written: the
//                 one-pass read at this size, at 1, 2 and 4 blocks of 256
//                 threads per SM;
//   copy          dy to another buffer, 16 bytes a thread a step;
//   empty         an empty kernel of one block;
// each as the median over runs of one launch between two events, waited for
// before the next ("per launch": the host's launch latency counts, as the
// empty kernel shows), and of 20 launches between two events ("in a row",
// the closer match to `vkern bench`, which times launches already queued);
// operands rotate over two sets (vkern bench rotates at least 256 MiB); and
// the rate of dy's bytes.
//
//   go run ./bench/labsrc labsrc      # here: the sources with their op table
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Ilabsrc \
//        -o bias_grad_lab bench/bias_grad_lab.cu
//   ./bias_grad_lab 16384 768
#include "cuda/bias_grad.cu"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "lab.cuh"

namespace {

constexpr int kRuns = 41, kRow = 20;

__global__ void empty_kernel() {}

// span_sums is an experiment on the reads' pattern, the group sums alone
// (no finish): a block takes kR row blocks of 64 rows and three adjacent
// tiles of 256 columns (a span, 1536 bytes of each row), a warp per (row
// block, tile), so that the block's warps read whole 1536-byte runs of a
// row at about the same time, where column_sums's blocks each read one
// 512-byte run of a row. The lanes' loop is column_sums's. N must be a
// multiple of 768.
template <int kR>
__global__ void __launch_bounds__(96 * kR) span_sums(const __half* __restrict__ dy, int64_t rows, int64_t cols,
                                                      float* partial) {
  using namespace vkern_bias_grad;
  constexpr int kWarps = 3 * kR;
  __shared__ float warp_sums[kWarps][256];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t spans = cols / 768, row_blocks = ceil_div(rows, kRowBlock), groups = ceil_div(row_blocks, kR);
  for (int64_t job = blockIdx.x; job < groups * spans; job += gridDim.x) {
    const int64_t group = job / spans, span = job % spans;
    const int64_t block = group * kR + warp / 3, col = span * 768 + (warp % 3) * 256 + lane * 8;
    float s[8];
#pragma unroll
    for (int v = 0; v < 8; ++v) s[v] = -0.0f;
    if (block < row_blocks) {
      const int64_t r0 = block * kRowBlock;
      const int n = static_cast<int>(rows - r0 < kRowBlock ? rows - r0 : kRowBlock);
      const uint4* p = reinterpret_cast<const uint4*>(dy + r0 * cols + col);
      const int64_t stride = cols / 8;
      for (int r = 0; r < n; r += kBatch) {
        uint4 w[kBatch];
#pragma unroll
        for (int k = 0; k < kBatch; ++k)
          if (r + k < n) w[k] = __ldg(p + (r + k) * stride);
#pragma unroll
        for (int k = 0; k < kBatch; ++k)
          if (r + k < n) add_halves(w[k], s);
      }
    }
#pragma unroll
    for (int v = 0; v < 8; ++v) warp_sums[warp][lane * 8 + v] = s[v];
    __syncthreads();
    for (int c = threadIdx.x; c < 768; c += 96 * kR) {
      const int t = c / 256;
      float sum = warp_sums[t][c % 256];
      for (int b = 1; b < kR; ++b) sum += warp_sums[3 * b + t][c % 256];
      partial[group * cols + span * 768 + c] = sum;
    }
    __syncthreads();
  }
}

__global__ void __launch_bounds__(256) read_bytes(const uint4* __restrict__ p, int64_t n, float* out) {
  float s = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) w[k] = __ldg(p + i + k * stride);
#pragma unroll
    for (int k = 0; k < 4; ++k) s += __uint_as_float(w[k].x ^ w[k].y ^ w[k].z ^ w[k].w);
  }
  for (; i < n; i += stride) {
    const uint4 w = __ldg(p + i);
    s += __uint_as_float(w.x ^ w.y ^ w.z ^ w.w);
  }
  out[static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x] = s;
}

__global__ void __launch_bounds__(256) copy_bytes(const uint4* __restrict__ p, int64_t n, uint4* q) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) q[i] = p[i];
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// per_launch is the median µs of one launch between two events; before,
// if set, runs ahead of the first event (outside the time).
double per_launch(const std::function<void(int)>& launch, const std::function<void(int)>& before = nullptr) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  std::vector<double> us;
  for (int r = -3; r < kRuns; ++r) {
    if (before) before(r & 1);
    CHECK_CUDA(cudaEventRecord(a));
    launch(r & 1);
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    if (r >= 0) us.push_back(1e3 * ms);
  }
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  return median(us);
}

// in_a_row is the median µs a launch of kRow launches between two events.
double in_a_row(const std::function<void(int)>& launch) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  std::vector<double> us;
  for (int r = -1; r < 9; ++r) {
    CHECK_CUDA(cudaEventRecord(a));
    for (int i = 0; i < kRow; ++i) launch(i & 1);
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    if (r >= 0) us.push_back(1e3 * ms / kRow);
  }
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  return median(us);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t M = argc > 1 ? atoll(argv[1]) : 16384, N = argc > 2 ? atoll(argv[2]) : 768;
  if (M <= 512 || N % 8 != 0) {
    fprintf(stderr, "want M > 512 (more than one group) and N a multiple of 8, not %lldx%lld\n",
            static_cast<long long>(M), static_cast<long long>(N));
    return 2;
  }
  int sms = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int64_t bytes = M * N * 2, vectors = bytes / 16;
  __half* dy[2];
  uint4* sink[2];
  float* db = nullptr;
  float* out = nullptr;
  for (int i = 0; i < 2; ++i) {
    CHECK_CUDA(cudaMalloc(&dy[i], bytes));
    CHECK_CUDA(cudaMemset(dy[i], 0x3c, bytes));  // f16 0x3c3c = 1.05859375 everywhere
    CHECK_CUDA(cudaMalloc(&sink[i], bytes));
  }
  CHECK_CUDA(cudaMalloc(&db, N * sizeof(float)));
  CHECK_CUDA(cudaMemset(db, 0, N * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&out, static_cast<size_t>(sms) * 4 * 256 * sizeof(float)));

  // The server's kernel, and its reads and group sums alone.
  using namespace vkern_bias_grad;
  const int64_t groups = ceil_div(ceil_div(M, kRowBlock), kWarps), tiles = ceil_div(N, 256);
  float* partial = nullptr;
  unsigned* counters = nullptr;
  CHECK_CUDA(cudaMalloc(&partial, groups * N * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&counters, tiles * sizeof(unsigned)));
  auto bias_grad = [&](int i) { CHECK_CUDA(vk_bias_grad(dy[i], db, M, N, 0)); };
  // atomicInc from 0xffffffff answers 0xffffffff, then 0, 1, …: the
  // groups-th arrival reads groups − 2, so no block is the last.
  auto no_last = [&](int) { CHECK_CUDA(cudaMemsetAsync(counters, 0xff, tiles * sizeof(unsigned))); };
  auto sums_only = [&](int i) {
    column_sums<8><<<grid_for(groups * tiles), kThreads>>>(dy[i], M, N, partial, counters, db);
    CHECK_CUDA(cudaGetLastError());
  };
  struct Row {
    std::string name;
    double launch, row;
  };
  std::vector<Row> rows;
  rows.push_back({"bias_grad", per_launch(bias_grad), in_a_row(bias_grad)});
  rows.push_back({"sums only", per_launch(sums_only, no_last), 0});
  float* span_partial = nullptr;
  CHECK_CUDA(cudaMalloc(&span_partial, ceil_div(M, 128) * N * sizeof(float)));
  // span_row times span_sums<kR> (R: std::integral_constant<int, kR>).
  auto span_row = [&](auto R) {
    constexpr int kR = decltype(R)::value;
    auto span = [&](int i) {
      const unsigned blocks = grid_for(ceil_div(ceil_div(M, kRowBlock), kR) * (N / 768));
      span_sums<kR><<<blocks, 96 * kR>>>(dy[i], M, N, span_partial);
      CHECK_CUDA(cudaGetLastError());
    };
    rows.push_back({"spans, " + std::to_string(kR) + " row blocks", per_launch(span), in_a_row(span)});
  };
  if (N % 768 == 0) {
    span_row(std::integral_constant<int, 2>{});
    span_row(std::integral_constant<int, 4>{});
    span_row(std::integral_constant<int, 8>{});
  }
  for (int per_sm : {1, 2, 4}) {
    auto read = [&, per_sm](int i) {
      read_bytes<<<sms * per_sm, 256>>>(reinterpret_cast<const uint4*>(dy[i]), vectors, out);
      CHECK_CUDA(cudaGetLastError());
    };
    const std::string name = "read, " + std::to_string(per_sm) + (per_sm == 1 ? " block an SM" : " blocks an SM");
    rows.push_back({name, per_launch(read), in_a_row(read)});
  }
  auto copy = [&](int i) {
    copy_bytes<<<sms * 4, 256>>>(reinterpret_cast<const uint4*>(dy[i]), vectors, sink[i]);
    CHECK_CUDA(cudaGetLastError());
  };
  rows.push_back({"copy", per_launch(copy), in_a_row(copy)});
  auto empty = [&](int) {
    empty_kernel<<<1, 32>>>();
    CHECK_CUDA(cudaGetLastError());
  };
  rows.push_back({"empty", per_launch(empty), in_a_row(empty)});
  CHECK_CUDA(cudaDeviceSynchronize());

  printf("%lldx%lld: dy %.1f MB on %d SMs; µs, and dy's bytes over the time (a copy moves them twice)\n",
         static_cast<long long>(M), static_cast<long long>(N), bytes / 1e6, sms);
  printf("%-22s %12s %10s %12s %10s\n", "kernel", "per launch", "GB/s", "in a row", "GB/s");
  for (const Row& r : rows) {
    printf("%-22s %12.2f %10.0f", r.name.c_str(), r.launch, bytes / r.launch / 1e3);
    if (r.row > 0) printf(" %12.2f %10.0f", r.row, bytes / r.row / 1e3);
    printf("\n");
  }
  return 0;
}
