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
// g_marks are RUN_BATCH's events; entry i runs between marks g_spans[i]
// and g_spans[i] + 1.
std::vector<cudaEvent_t> g_marks;
std::vector<size_t> g_spans;
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
  for (cudaEvent_t e : g_marks) (void)cudaEventDestroy(e);
  g_marks.clear();
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
      {"dot_accumulation", vk_gemm_dot_accumulation(g_props.major)},
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

// cudaMemGetInfo's free figure is the driver's: other processes' and other
// contexts' allocations count against it, as they do against a cudaMalloc.
Result backend_memory(uint64_t* free_bytes, uint64_t* total_bytes) {
  size_t free_now = 0, total = 0;
  VK_CHECK(cudaMemGetInfo(&free_now, &total), "MEMORY cudaMemGetInfo");
  *free_bytes = free_now;
  *total_bytes = total;
  return Result::OK();
}

namespace {

// launch enqueues op's kernels on the stream without waiting.
cudaError_t launch(const OpSpec& op, const int64_t* params, void* const* buffers) {
  const auto in = [buffers](int i) { return static_cast<const __half*>(buffers[i]); };
  const auto out = [buffers](int i) { return static_cast<__half*>(buffers[i]); };
  switch (op.id) {
    case OpId::kGemm:
      return vk_gemm(in(0), in(1), static_cast<float*>(buffers[2]), params[kM], params[kN], params[kK], g_stream);
    case OpId::kGemmGradA: return vk_gemm_grad_a(in(0), in(1), out(2), params[kM], params[kN], params[kK], g_stream);
    case OpId::kGemmGradB: return vk_gemm_grad_b(in(0), in(1), out(2), params[kM], params[kN], params[kK], g_stream);
    case OpId::kSoftmax: return vk_softmax(in(0), out(1), params[kR], params[kC], g_stream);
    case OpId::kSoftmaxGrad: return vk_softmax_grad(in(0), in(1), out(2), params[kR], params[kC], g_stream);
    case OpId::kCrossEntropy:
      return vk_cross_entropy(in(0), static_cast<const int32_t*>(buffers[1]), static_cast<float*>(buffers[2]), out(3),
                              params[kR], params[kV], params[kIgnoreIndex], g_stream);
  }
  return cudaErrorInvalidValue;
}

// launch_error turns a launch's error into the RUN's: scratch that cannot
// be had is OUT_OF_MEMORY (and not sticky), anything else a device error.
Result launch_error(const OpSpec& op, cudaError_t err) {
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return fail(kStatusOutOfMemory, op.name, ": cannot allocate the kernel's scratch memory");
  }
  return cuda_fail(err, op.name);
}

// check_labels is the one check made while an op runs: after a
// cross_entropy call has finished (it waits for the stream), the first row
// whose label was out of range, if any, becomes the call's error.
Result check_labels(const CheckedRun& run) {
  if (run.op->id != OpId::kCrossEntropy) return Result::OK();
  int64_t row = -1;
  VK_CHECK(vk_cross_entropy_bad_row(&row, g_stream), "cross_entropy: reading the label check");
  if (row < 0) return Result::OK();
  int32_t label = 0;
  const int32_t* labels = static_cast<const int32_t*>(run.ptrs[1]);
  VK_CHECK(cudaMemcpyAsync(&label, labels + row, sizeof label, cudaMemcpyDeviceToHost, g_stream),
           "cross_entropy: reading the bad label");
  VK_CHECK(cudaStreamSynchronize(g_stream), "cross_entropy: reading the bad label");
  return label_error(run.params, row, label);
}

uint64_t elapsed_ns(float ms) { return static_cast<uint64_t>(static_cast<double>(ms) * 1e6); }

Result ensure_marks(size_t n) {
  while (g_marks.size() < n) {
    cudaEvent_t e = nullptr;
    VK_CHECK(cudaEventCreate(&e), "cudaEventCreate");
    g_marks.push_back(e);
  }
  return Result::OK();
}

}  // namespace

// Runs the op between two events on the stream and waits for it: the time
// is the device's own measure of the launches, not of the frame handling.
// An untimed run records no events (about 3.5 µs of a tiny run's host time
// on an H100) and waits on the stream instead.
Result backend_run(const CheckedRun& run, uint64_t* kernel_ns) {
  const OpSpec& op = *run.op;
  *kernel_ns = 0;
  if (run.timed) VK_CHECK(cudaEventRecord(g_start, g_stream), "cudaEventRecord");
  const cudaError_t err = launch(op, run.params, run.ptrs);
  if (err != cudaSuccess) return launch_error(op, err);
  if (!run.timed) {
    VK_CHECK(cudaStreamSynchronize(g_stream), op.name);
    return check_labels(run);
  }
  VK_CHECK(cudaEventRecord(g_stop, g_stream), "cudaEventRecord");
  VK_CHECK(cudaEventSynchronize(g_stop), op.name);
  float ms = 0;
  VK_CHECK(cudaEventElapsedTime(&ms, g_start, g_stop), "cudaEventElapsedTime");
  *kernel_ns = elapsed_ns(ms);
  return check_labels(run);  // outside the timed events
}

namespace {

// enqueue launches entry i of a batch and records mark after it (unless
// mark is null); a cross_entropy entry is then also waited for and its
// labels checked, so that a bad label stops the batch at that entry. On
// failure it sets *failed, waits for the entries before it if the device is
// still usable, and returns the error.
Result enqueue(const CheckedRun* runs, uint32_t i, cudaEvent_t mark, uint32_t* failed) {
  cudaError_t err = launch(*runs[i].op, runs[i].params, runs[i].ptrs);
  if (err == cudaSuccess && mark != nullptr) err = cudaEventRecord(mark, g_stream);
  Result r = err == cudaSuccess ? check_labels(runs[i]) : launch_error(*runs[i].op, err);
  if (r.ok()) return r;
  *failed = i;
  if (r.status == kStatusOutOfMemory) VK_CHECK(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize");
  return r;
}

// batch_wait_error is a failed final wait of a batch: no entry can be named.
Result batch_wait_error(cudaError_t err) {
  return cuda_fail(err, "the device failed while the batch ran (it waits once, at the end, so the failing entry is not known)");
}

}  // namespace

// Enqueues every entry (with an event after each, unless no entry wants
// its time) and waits once, at the end: a batch of tiny runs costs a launch
// per entry and one device round trip. The exception is cross_entropy,
// whose labels are checked as soon as its entry has run. A launch that
// fails is that entry's error, after the entries before it have finished;
// an error at the final wait cannot be pinned on one entry (a sticky error
// reports itself everywhere), so it names none.
Result backend_run_batch(const CheckedRun* runs, uint32_t count, uint64_t* kernel_ns, uint32_t* failed) {
  bool timed = false;
  for (uint32_t i = 0; i < count; ++i) timed = timed || runs[i].timed;
  if (!timed) {
    for (uint32_t i = 0; i < count; ++i) {
      const Result r = enqueue(runs, i, nullptr, failed);
      if (!r.ok()) return r;
      kernel_ns[i] = 0;
    }
    const cudaError_t err = cudaStreamSynchronize(g_stream);
    return err == cudaSuccess ? Result::OK() : batch_wait_error(err);
  }
  // Entry i runs from mark g_spans[i] to the mark after it: an entry's end
  // mark is the next one's start, except after a cross_entropy
  // entry, whose label check keeps the device idle while the host waits, so
  // the next entry gets a fresh start mark.
  Result r = ensure_marks(2 * size_t{count} + 1);
  if (!r.ok()) return r;
  g_spans.resize(count);
  size_t last = 0;
  VK_CHECK(cudaEventRecord(g_marks[0], g_stream), "cudaEventRecord");
  for (uint32_t i = 0; i < count; ++i) {
    if (i > 0 && runs[i - 1].op->id == OpId::kCrossEntropy) {
      VK_CHECK(cudaEventRecord(g_marks[++last], g_stream), "cudaEventRecord");
    }
    g_spans[i] = last;
    r = enqueue(runs, i, g_marks[++last], failed);
    if (!r.ok()) return r;
  }
  const cudaError_t err = cudaEventSynchronize(g_marks[last]);
  if (err != cudaSuccess) return batch_wait_error(err);
  for (uint32_t i = 0; i < count; ++i) {
    float ms = 0;
    VK_CHECK(cudaEventElapsedTime(&ms, g_marks[g_spans[i]], g_marks[g_spans[i] + 1]), "cudaEventElapsedTime");
    kernel_ns[i] = elapsed_ns(ms);
  }
  return Result::OK();
}

}  // namespace vkern
