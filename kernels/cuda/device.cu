// The cuda backend of the kernel server: buffers in device memory on the
// current device (device 0 unless CUDA_VISIBLE_DEVICES says otherwise), one
// stream, kernel times from CUDA events around the op's launches.
//
// Every runtime call is checked. An error that leaves the context unusable
// (a sticky error: an illegal address, a launch failure, an ECC error) is
// reported as DEVICE_ERROR with the error's name, and the core then exits:
// the host starts a fresh server, since no later call on this context could
// be trusted. Running out of memory is not sticky and answers OUT_OF_MEMORY.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/compat.h"
#include "cuda/ops.cuh"

namespace vkern {
namespace {

cudaStream_t g_stream = nullptr;
cudaEvent_t g_start = nullptr, g_stop = nullptr;
cudaDeviceProp g_props;
int g_device = 0;

// Copies between host memory and device buffers go through a pinned staging
// buffer, so they run at the link's full speed whatever the host memory is.
constexpr uint64_t kStagingBytes = 8 << 20;
uint8_t* g_staging = nullptr;

Result cuda_fail(cudaError_t err, const char* what) {
  // An out-of-memory error leaves the context usable; anything else from a
  // copy, a launch or a synchronisation is treated as fatal.
  const Status status = err == cudaErrorMemoryAllocation ? kStatusOutOfMemory : kStatusDeviceError;
  return fail(status, what, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
}

#define VK_CHECK(call, what)                                     \
  do {                                                           \
    const cudaError_t vk_err_ = (call);                          \
    if (vk_err_ != cudaSuccess) return cuda_fail(vk_err_, what); \
  } while (0)

std::string version_string(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

}  // namespace

Result backend_open() {
  VK_CHECK(cudaGetDevice(&g_device), "cudaGetDevice");
  VK_CHECK(cudaGetDeviceProperties(&g_props, g_device), "cudaGetDeviceProperties");
  VK_CHECK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking), "cudaStreamCreate");
  VK_CHECK(cudaEventCreate(&g_start), "cudaEventCreate");
  VK_CHECK(cudaEventCreate(&g_stop), "cudaEventCreate");
  VK_CHECK(cudaMallocHost(reinterpret_cast<void**>(&g_staging), kStagingBytes), "cudaMallocHost of the staging buffer");
  return Result::OK();
}

void backend_close() {
  if (g_staging != nullptr) (void)cudaFreeHost(g_staging);
  if (g_start != nullptr) (void)cudaEventDestroy(g_start);
  if (g_stop != nullptr) (void)cudaEventDestroy(g_stop);
  if (g_stream != nullptr) (void)cudaStreamDestroy(g_stream);
  g_staging = nullptr;
  g_start = g_stop = nullptr;
  g_stream = nullptr;
}

std::vector<HelloField> backend_hello_fields() {
  int driver = 0, runtime = 0;
  // Evidence only: a failure leaves the zero it started with.
  (void)cudaDriverGetVersion(&driver);
  (void)cudaRuntimeGetVersion(&runtime);
  size_t free_bytes = 0, total_bytes = 0;
  (void)cudaMemGetInfo(&free_bytes, &total_bytes);
  char pci[32] = {};
  std::snprintf(pci, sizeof pci, "%04x:%02x:%02x", g_props.pciDomainID, g_props.pciBusID, g_props.pciDeviceID);
  return {
      {"backend", VK_BACKEND_NAME},
      {"device", g_props.name},
      {"arch", VK_DEVICE_ARCH(g_props)},
      {"compute_capability", std::to_string(g_props.major) + "." + std::to_string(g_props.minor)},
      {"cores", std::to_string(g_props.multiProcessorCount)},
      {"memory_bytes", std::to_string(total_bytes)},
      {"l2_bytes", std::to_string(g_props.l2CacheSize)},
      {"pci", pci},
      {"driver", version_string(driver)},
      {"runtime", version_string(runtime)},
      {"compiler", VK_COMPILER_VERSION},
  };
}

Result backend_alloc(uint64_t bytes, void** ptr) {
  const cudaError_t err = cudaMalloc(ptr, bytes);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // clear the (non-sticky) error
    size_t free_bytes = 0, total_bytes = 0;
    (void)cudaMemGetInfo(&free_bytes, &total_bytes);
    return fail(kStatusOutOfMemory, "ALLOC of ", bytes, " bytes: the device has ", free_bytes, " of ", total_bytes,
                " bytes free");
  }
  VK_CHECK(err, "cudaMalloc");
  return Result::OK();
}

void backend_free(void* ptr, uint64_t) { (void)cudaFree(ptr); }

Result backend_write(void* buffer, uint64_t offset, const uint8_t* src, uint64_t length) {
  uint8_t* dst = static_cast<uint8_t*>(buffer) + offset;
  for (uint64_t done = 0; done < length;) {
    const uint64_t n = length - done < kStagingBytes ? length - done : kStagingBytes;
    std::memcpy(g_staging, src + done, n);
    VK_CHECK(cudaMemcpyAsync(dst + done, g_staging, n, cudaMemcpyHostToDevice, g_stream), "WRITE cudaMemcpyAsync");
    VK_CHECK(cudaStreamSynchronize(g_stream), "WRITE cudaStreamSynchronize");
    done += n;
  }
  return Result::OK();
}

Result backend_read(const void* buffer, uint64_t offset, uint8_t* dst, uint64_t length) {
  const uint8_t* src = static_cast<const uint8_t*>(buffer) + offset;
  for (uint64_t done = 0; done < length;) {
    const uint64_t n = length - done < kStagingBytes ? length - done : kStagingBytes;
    VK_CHECK(cudaMemcpyAsync(g_staging, src + done, n, cudaMemcpyDeviceToHost, g_stream), "READ cudaMemcpyAsync");
    VK_CHECK(cudaStreamSynchronize(g_stream), "READ cudaStreamSynchronize");
    std::memcpy(dst + done, g_staging, n);
    done += n;
  }
  return Result::OK();
}

Result backend_sync() {
  VK_CHECK(cudaStreamSynchronize(g_stream), "SYNC");
  return Result::OK();
}

// Runs the op between two events on the stream and waits for it: the time
// is the device's own measure of the launches, not of the frame handling.
Result backend_run(const OpSpec& op, const int64_t* params, void* const* buffers, uint64_t* kernel_ns) {
  const auto in = [buffers](int i) { return static_cast<const __half*>(buffers[i]); };
  const auto out = [buffers](int i) { return static_cast<__half*>(buffers[i]); };
  const int32_t* labels = static_cast<const int32_t*>(buffers[1]);  // cross_entropy only
  VK_CHECK(cudaEventRecord(g_start, g_stream), "cudaEventRecord");
  cudaError_t err = cudaSuccess;
  switch (op.id) {
    case OpId::kGemm:
      err = vk_gemm(in(0), in(1), static_cast<float*>(buffers[2]), params[kM], params[kN], params[kK], g_stream);
      break;
    case OpId::kGemmGradA:
      err = vk_gemm_grad_a(in(0), in(1), out(2), params[kM], params[kN], params[kK], g_stream);
      break;
    case OpId::kGemmGradB:
      err = vk_gemm_grad_b(in(0), in(1), out(2), params[kM], params[kN], params[kK], g_stream);
      break;
    case OpId::kSoftmax:
      err = vk_softmax(in(0), out(1), params[kR], params[kC], g_stream);
      break;
    case OpId::kSoftmaxGrad:
      err = vk_softmax_grad(in(0), in(1), out(2), params[kR], params[kC], g_stream);
      break;
    case OpId::kCrossEntropy:
      err = vk_cross_entropy(in(0), labels, static_cast<float*>(buffers[2]), out(3), params[kR], params[kV],
                             params[kIgnoreIndex], g_stream);
      break;
  }
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return fail(kStatusOutOfMemory, op.name, ": cannot allocate the kernel's scratch memory");
  }
  VK_CHECK(err, op.name);
  VK_CHECK(cudaEventRecord(g_stop, g_stream), "cudaEventRecord");
  VK_CHECK(cudaEventSynchronize(g_stop), op.name);
  float ms = 0;
  VK_CHECK(cudaEventElapsedTime(&ms, g_start, g_stop), "cudaEventElapsedTime");
  *kernel_ns = static_cast<uint64_t>(static_cast<double>(ms) * 1e6);
  if (op.id == OpId::kCrossEntropy) {
    // Outside the timed events: the kernel recorded the first row whose
    // label is out of range, if any.
    int64_t row = -1;
    VK_CHECK(vk_cross_entropy_bad_row(&row, g_stream), "cross_entropy: reading the label check");
    if (row >= 0) {
      int32_t label = 0;
      VK_CHECK(cudaMemcpyAsync(&label, labels + row, sizeof label, cudaMemcpyDeviceToHost, g_stream),
               "cross_entropy: reading the bad label");
      VK_CHECK(cudaStreamSynchronize(g_stream), "cross_entropy: reading the bad label");
      return label_error(params, row, label);
    }
  }
  return Result::OK();
}

}  // namespace vkern
