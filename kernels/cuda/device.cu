// The cuda backend of the kernel server: buffers in device memory on the
// current device (device 0 unless VKERN_DEVICE or CUDA_VISIBLE_DEVICES says
// otherwise), one stream for the ops (and one for a batch's collectives,
// nccl.cu), kernel times from CUDA events around the op's launches.
//
// Every runtime call is checked. An error that leaves the context unusable
// (a sticky error: an illegal address, a launch failure, an ECC error) is
// reported as DEVICE_ERROR with the error's name, and the core then exits:
// the host starts a fresh server, since no later call on this context could
// be trusted. Running out of memory is not sticky and answers OUT_OF_MEMORY.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/backend.h"
#include "cuda/compat.h"
#include "cuda/ops.cuh"

namespace vkern {
namespace {

cudaStream_t g_stream = nullptr;
cudaEvent_t g_start = nullptr, g_stop = nullptr;
// g_marks are RUN_BATCH's events; entry i runs between marks i and i + 1.
std::vector<cudaEvent_t> g_marks;
// g_problems are the device words in which a call's kernels record the
// first element of its checked input that broke its domain (atomicMin;
// ~0 when none): one per entry of a batch, set before it and read back
// once, after its final wait; g_problems_host is their pinned copy.
unsigned long long* g_problems = nullptr;
unsigned long long* g_problems_host = nullptr;
size_t g_problem_slots = 0;
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
  // VKERN_DEVICE picks the GPU (an index among the visible ones): vkern
  // starts one server per GPU of a data-parallel run.
  if (const char* pick = std::getenv("VKERN_DEVICE")) {
    char* end = nullptr;
    const long want = std::strtol(pick, &end, 10);
    int visible = 0;
    VK_CHECK(cudaGetDeviceCount(&visible), "cudaGetDeviceCount");
    if (end == pick || *end != '\0' || want < 0 || want >= visible) {
      return fail(kStatusDeviceError, "VKERN_DEVICE is ", pick, ", but the GPUs visible here are 0 to ", visible - 1,
                  " (", visible, " in all)");
    }
    VK_CHECK(cudaSetDevice(static_cast<int>(want)), "cudaSetDevice");
  }
  VK_CHECK(cudaGetDevice(&g_device), "cudaGetDevice");
  VK_CHECK(cudaGetDeviceProperties(&g_props, g_device), "cudaGetDeviceProperties");
  VK_CHECK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking), "cudaStreamCreate");
  VK_CHECK(cudaEventCreate(&g_start), "cudaEventCreate");
  VK_CHECK(cudaEventCreate(&g_stop), "cudaEventCreate");
  VK_CHECK(cudaMallocHost(reinterpret_cast<void**>(&g_staging), kStagingBytes), "cudaMallocHost of the staging buffer");
  return Result::OK();
}

void backend_close() {
  if (g_problems != nullptr) (void)cudaFree(g_problems);
  if (g_problems_host != nullptr) (void)cudaFreeHost(g_problems_host);
  g_problems = g_problems_host = nullptr;
  g_problem_slots = 0;
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
      // Communicators through NCCL (RCCL), loaded on first use (nccl.cu).
      {"collectives", VK_COLLECTIVES_NAME},
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

Result ensure_problem_slots(size_t n) {
  if (n <= g_problem_slots) return Result::OK();
  if (g_problems != nullptr) VK_CHECK(cudaFree(g_problems), "cudaFree of the problem words");
  if (g_problems_host != nullptr) VK_CHECK(cudaFreeHost(g_problems_host), "cudaFreeHost of the problem words");
  g_problems = nullptr;
  g_problems_host = nullptr;
  g_problem_slots = 0;
  const size_t slots = n < 64 ? 64 : n;
  VK_CHECK(cudaMalloc(reinterpret_cast<void**>(&g_problems), slots * sizeof(unsigned long long)),
           "cudaMalloc of the problem words");
  VK_CHECK(cudaMallocHost(reinterpret_cast<void**>(&g_problems_host), slots * sizeof(unsigned long long)),
           "cudaMallocHost of the problem words");
  g_problem_slots = slots;
  return Result::OK();
}

bool checks(const Call& call) { return call.op != nullptr && call.op->checked_buffer >= 0; }

// launch enqueues a call's kernels on the stream without waiting; problem
// is its device word (nullptr for an op without a checked input).
cudaError_t launch(const Call& call, unsigned long long* problem) {
  const CudaKernel kernel = find_kernel(call.op->id);
  if (kernel == nullptr) return cudaErrorNotSupported;
  return kernel(call, problem, g_stream);
}

// launch_error turns a launch's error into the RUN's: an op without a
// kernel here is NOT_SUPPORTED, scratch that cannot be had is
// OUT_OF_MEMORY (and not sticky), anything else a device error.
Result launch_error(const OpSpec& op, cudaError_t err) {
  if (err == cudaErrorNotSupported && find_kernel(op.id) == nullptr) {
    return fail(kStatusNotSupported, op.name, ": the ", VK_BACKEND_NAME, " backend has no kernel for it: ",
                missing_kernel_reason(op.id), " (it has ", backend_op_names(), ")");
  }
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return fail(kStatusOutOfMemory, op.name, ": cannot allocate the kernel's scratch memory");
  }
  return cuda_fail(err, op.name);
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

// problems_back copies the first n problem words to the host after the
// stream's work, and waits for them; entry i's word goes to problem[i] for
// the entries that check.
Result problems_back(const Call* calls, uint32_t count, size_t n, uint64_t* problem) {
  VK_CHECK(cudaMemcpyAsync(g_problems_host, g_problems, n * sizeof(unsigned long long), cudaMemcpyDeviceToHost, g_stream),
           "reading back the checked inputs' problems");
  VK_CHECK(cudaStreamSynchronize(g_stream), "reading back the checked inputs' problems");
  for (uint32_t i = 0, slot = 0; i < count; ++i) {
    if (checks(calls[i])) problem[i] = g_problems_host[slot++];
  }
  return Result::OK();
}

}  // namespace

// Runs the op between two events on the stream and waits for it: the time
// is the device's own measure of the launches, not of the frame handling.
// An untimed run records no events (about 3.5 µs of a tiny run's host time
// on an H100) and waits on the stream instead. An op with a checked input
// reads its problem word back after the kernels, outside the timed events.
Result backend_run(const Call& call, uint64_t* kernel_ns, uint64_t* problem) {
  const OpSpec& op = *call.op;
  *kernel_ns = 0;
  *problem = kNoProblem;
  unsigned long long* word = nullptr;
  if (checks(call)) {
    Result r = ensure_problem_slots(1);
    if (!r.ok()) return r;
    word = g_problems;
    VK_CHECK(cudaMemsetAsync(word, 0xff, sizeof *word, g_stream), "clearing the problem word");
  }
  if (call.timed) VK_CHECK(cudaEventRecord(g_start, g_stream), "cudaEventRecord");
  const cudaError_t err = launch(call, word);
  if (err != cudaSuccess) return launch_error(op, err);
  if (call.timed) {
    VK_CHECK(cudaEventRecord(g_stop, g_stream), "cudaEventRecord");
    VK_CHECK(cudaEventSynchronize(g_stop), op.name);
    float ms = 0;
    VK_CHECK(cudaEventElapsedTime(&ms, g_start, g_stop), "cudaEventElapsedTime");
    *kernel_ns = elapsed_ns(ms);
  }
  if (word != nullptr) return problems_back(&call, 1, 1, problem);
  VK_CHECK(cudaStreamSynchronize(g_stream), op.name);
  return Result::OK();
}

namespace {

// batch_wait_error is a failed final wait of a batch: no entry can be named.
Result batch_wait_error(cudaError_t err) {
  return cuda_fail(err, "the device failed while the batch ran (it waits once, at the end, so the failing entry is not known)");
}

}  // namespace

namespace {

// g_collectives runs the collective entries of the batch in flight.
BatchCollectives g_collectives;

// run_entries is backend_run_batch without the clean-up after a failure.
Result run_entries(const Call* calls, uint32_t count, uint64_t* kernel_ns, uint64_t* problem, uint32_t* failed) {
  bool timed = false;
  size_t checking = 0;
  for (uint32_t i = 0; i < count; ++i) {
    timed = timed || calls[i].timed;
    checking += checks(calls[i]) ? 1 : 0;
  }
  if (checking > 0) {
    Result r = ensure_problem_slots(checking);
    if (!r.ok()) return r;
    VK_CHECK(cudaMemsetAsync(g_problems, 0xff, checking * sizeof(unsigned long long), g_stream),
             "clearing the problem words");
  }
  if (timed) {
    Result r = ensure_marks(size_t{count} + 1);
    if (!r.ok()) return r;
    VK_CHECK(cudaEventRecord(g_marks[0], g_stream), "cudaEventRecord");
  }
  for (uint32_t i = 0, slot = 0; i < count; ++i) {
    if (calls[i].op == nullptr) {
      Result r = g_collectives.issue(calls[i].collective, g_stream, i);
      if (r.ok() && timed) {
        const cudaError_t e = cudaEventRecord(g_marks[i + 1], g_stream);
        if (e != cudaSuccess) r = cuda_fail(e, "cudaEventRecord");
      }
      if (!r.ok()) {
        *failed = i;
        return r;
      }
      continue;
    }
    Result joined = g_collectives.join_if_touched(calls[i], g_stream);
    if (!joined.ok()) {
      *failed = i;
      return joined;
    }
    unsigned long long* word = checks(calls[i]) ? g_problems + slot++ : nullptr;
    cudaError_t err = launch(calls[i], word);
    if (err == cudaSuccess && timed) err = cudaEventRecord(g_marks[i + 1], g_stream);
    if (err != cudaSuccess) {
      *failed = i;
      const Result r = launch_error(*calls[i].op, err);
      // Collectives may be pending: abort them before waiting for the
      // stream, which may be ordered after them.
      if (g_collectives.any()) g_collectives.abort_all();
      if (r.status != kStatusDeviceError) VK_CHECK(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize");
      return r;
    }
  }
  if (g_collectives.any()) {
    // The final wait polls, under the collectives' deadline.
    const Result r = g_collectives.finish(g_stream);
    if (!r.ok()) return r;
  }
  const cudaError_t err = timed ? cudaEventSynchronize(g_marks[count]) : cudaStreamSynchronize(g_stream);
  if (err != cudaSuccess) return batch_wait_error(err);
  for (uint32_t i = 0; i < count; ++i) {
    kernel_ns[i] = 0;
    if (!timed || calls[i].op == nullptr) continue;
    float ms = 0;
    VK_CHECK(cudaEventElapsedTime(&ms, g_marks[i], g_marks[i + 1]), "cudaEventElapsedTime");
    kernel_ns[i] = elapsed_ns(ms);
  }
  if (checking > 0) return problems_back(calls, count, checking, problem);
  return Result::OK();
}

}  // namespace

// Enqueues every entry (with an event after each, unless no entry wants
// its time) and waits once, at the end: a batch of tiny runs costs a launch
// per entry and one device round trip. Entries with a checked input record
// their problems in words cleared before the batch and read back after it,
// so they cost no wait of their own. A launch that fails is that entry's
// error, after the entries before it have finished; an error at the final
// wait cannot be pinned on one entry (a sticky error reports itself
// everywhere), so it names none. Collective entries go to the collective
// stream (nccl.cu, BatchCollectives); a batch that fails aborts every
// communicator its entries name.
Result backend_run_batch(const Call* calls, uint32_t count, uint64_t* kernel_ns, uint64_t* problem, uint32_t* failed) {
  const Result r = run_entries(calls, count, kernel_ns, problem, failed);
  if (!r.ok()) {
    g_collectives.abort_all();
    for (uint32_t i = 0; i < count; ++i) {
      if (calls[i].op == nullptr) nccl::abort(static_cast<nccl::NcclComm*>(calls[i].collective.comm));
    }
  }
  return r;
}

// A collective of its own request runs on the server's stream.
Result backend_collective(const Collective& c) { return nccl_collective(c, g_stream, "collective"); }

}  // namespace vkern
