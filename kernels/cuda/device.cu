// The cuda backend of the kernel server: buffers in device memory on the
// current device (device 0 unless VKERN_DEVICE or CUDA_VISIBLE_DEVICES says
// otherwise), one stream for the ops (and one for a batch's collectives,
// nccl.cu), kernel times from CUDA events around the op's launches.
//
// A RUN_BATCH that repeats is replayed as a CUDA graph (BatchGraphs below;
// VKERN_GRAPHS=0 turns that off).
//
// Every runtime call is checked. An error that leaves the context unusable
// (a sticky error: an illegal address, a launch failure, an ECC error) is
// reported as DEVICE_ERROR with the error's name, and the core then exits:
// the host starts a fresh server, since no later call on this context could
// be trusted. Running out of memory is not sticky and answers OUT_OF_MEMORY.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/backend.h"
#include "cuda/compat.h"
#include "cuda/ops.cuh"
#include "cuda/beside.h"
#include "cuda/capture.h"

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

// The batches replayed as graphs (BatchGraphs, defined after run_entries).
Result graphs_open();
void graphs_close();
// The batches' two lanes (Lanes, defined before run_entries).
Result lanes_open();
void lanes_close();

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
  const Result r = lanes_open();
  if (!r.ok()) return r;
  return graphs_open();
}

void backend_close() {
  graphs_close();
  lanes_close();
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
  // A captured batch holds the words' address, so growing them counts as
  // a reallocation (capture.h). BatchGraphs::run sizes them before it
  // captures, never during a capture.
  if (!vkern_capture::may_grow()) return fail(kStatusDeviceError, "the problem words cannot grow during a capture");
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

// clear_problems enqueues the clearing of the first n problem words
// (ensure_problem_slots has made them) to ~0: no problem yet.
cudaError_t clear_problems(size_t n) {
  return cudaMemsetAsync(g_problems, 0xff, n * sizeof(unsigned long long), g_stream);
}

// launch_on enqueues a call's kernels on stream s without waiting; problem
// is its device word (nullptr for an op without a checked input).
cudaError_t launch_on(const Call& call, unsigned long long* problem, cudaStream_t s) {
  const CudaKernel kernel = find_kernel(call.op->id);
  if (kernel == nullptr) return cudaErrorNotSupported;
  return kernel(call, problem, s);
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
    VK_CHECK(clear_problems(1), "clearing the problem word");
  }
  if (call.timed) VK_CHECK(cudaEventRecord(g_start, g_stream), "cudaEventRecord");
  const cudaError_t err = launch_on(call, word, g_stream);
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

// Lanes runs a batch's entries on the server's stream (the main lane) and,
// for the ops that may run beside the others (beside.h), on a second
// stream (the side lane), ordered by beside.h's Plan with events: a side
// entry forks from the latest main entry it conflicts with, a main entry
// waits for the latest side entry still pending it conflicts with, and the
// batch's end joins the lanes. A batch runs on one lane when it
// has a timed entry (its times are events between entries on one stream)
// or a collective (BatchCollectives orders them against one compute
// stream).
//
// VKERN_BESIDE says which ops run beside: unset or 1 the default
// (kBesideOps), 0 none, or op names separated by commas.
//
// Measured on an H200 (gpt2, B = 16, T = 1024, 30 steps, two rounds
// alternating, docs/beside-h200): 31.92 and 32.06 ms a step beside against
// 32.47 and 32.47 on one stream, 49 entries beside and 25 waits a step,
// and the same losses, norms and checkpoint bytes. Neither a high
// priority for the side stream (31.89, 32.03 at normal priority) nor the
// main lane's GEMMs taking one tile a block while a side entry ran, so
// that the hardware would hand their tiles to the multiprocessors a side
// entry leaves (31.98, 32.15 with their persistent grid), changed the
// step's time, so the side stream has the default priority and the GEMMs
// keep their grid. Calls 1–3 forked a side entry from the main lane's work
// so far; forking from the latest main entry it conflicts with (call 4,
// two rounds against that) gave gpt2 31.87 and 31.96 ms against 31.68 and
// 31.85, char 4.67 and 4.60 against 4.73 and 4.71, and with linear_grad_w's
// db by bias_grad's tiles (linear_grad.cu) gpt2 31.65 and 31.34: kept.
class Lanes {
 public:
  Result open() {
    const char* on = std::getenv("VKERN_BESIDE");
    return parse_ops(on != nullptr ? on : "1");
  }

  void close() {
    for (cudaEvent_t e : done_) (void)cudaEventDestroy(e);
    done_.clear();
    if (start_ != nullptr) (void)cudaEventDestroy(start_);
    if (tail_ != nullptr) (void)cudaEventDestroy(tail_);
    if (side_ != nullptr) (void)cudaStreamDestroy(side_);
    start_ = tail_ = nullptr;
    side_ = nullptr;
  }

  // begin plans a batch of count entries, before any is launched and
  // outside a capture, and makes the stream and events it may need. A
  // batch with a timed entry or a collective runs on the main lane, as
  // does one with nothing to run beside.
  Result begin(const Call* calls, uint32_t count) {
    plan_.reset();
    ran_beside_ = false;
    batch_on_ = false;
    if (ops_.empty()) return Result::OK();
    bool any = false;
    for (uint32_t i = 0; i < count; ++i) {
      if (calls[i].op == nullptr || calls[i].timed) return Result::OK();
      any = any || runs_beside(*calls[i].op);
    }
    if (!any) return Result::OK();
    if (side_ == nullptr) {
      VK_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking), "creating the side lane's stream");
      VK_CHECK(cudaEventCreateWithFlags(&start_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
      VK_CHECK(cudaEventCreateWithFlags(&tail_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    }
    while (done_.size() < count) {
      cudaEvent_t e = nullptr;
      VK_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
      done_.push_back(e);
    }
    steps_.resize(count);
    forked_from_.assign(count, false);
    for (uint32_t i = 0; i < count; ++i) {
      const Call& c = calls[i];
      vkern_beside::Span spans[kMaxOpBuffers];
      int n = c.op->buffer_count;
      for (int b = 0; b < n; ++b) {
        spans[b] = {reinterpret_cast<uintptr_t>(c.ptrs[b]), c.bytes[b], writes(c.op->buffers[b])};
      }
      if (c.op->id >= kFirstUserOpId) {
        // A declared op's kernels may touch what its operands do not say
        // (userop): it writes all memory, as far as the plan knows, so it
        // runs after every side entry before it and before every one after.
        spans[0] = {0, UINTPTR_MAX, true};
        n = 1;
      }
      steps_[i] = plan_.add(static_cast<int32_t>(i), spans, n, runs_beside(*c.op));
      if (steps_[i].fork >= 0) forked_from_[static_cast<size_t>(steps_[i].fork)] = true;
    }
    batch_on_ = true;
    return Result::OK();
  }

  // launch enqueues entry index of the batch (begin's calls[index]) on its
  // lane, after the waits its Step asks for. The side lane's first entry
  // waits at least for the batch's start on the main lane (its problem
  // words cleared), which also brings the side stream into a capture.
  cudaError_t launch(const Call& call, uint32_t index, unsigned long long* problem) {
    if (!batch_on_) return launch_on(call, problem, g_stream);
    cudaError_t err = cudaSuccess;
    if (index == 0) err = cudaEventRecord(start_, g_stream);
    if (err != cudaSuccess) return err;
    const vkern_beside::Step& step = steps_[index];
    if (step.side) {
      cudaEvent_t after = step.fork >= 0 ? done_[static_cast<size_t>(step.fork)] : ran_beside_ ? nullptr : start_;
      if (after != nullptr) err = cudaStreamWaitEvent(side_, after, 0);
      if (err != cudaSuccess) return err;
      ran_beside_ = true;
      ++beside_;
      vkern_beside::lane = 1;
      err = launch_on(call, problem, side_);
      vkern_beside::lane = 0;
      if (err != cudaSuccess) return err;
      return cudaEventRecord(done_[index], side_);
    }
    if (step.wait >= 0) {
      err = cudaStreamWaitEvent(g_stream, done_[static_cast<size_t>(step.wait)], 0);
      if (err != cudaSuccess) return err;
      ++waits_;
    }
    err = launch_on(call, problem, g_stream);
    if (err == cudaSuccess && forked_from_[index]) err = cudaEventRecord(done_[index], g_stream);
    return err;
  }

  // join makes the main lane wait for all the side lane has been given.
  cudaError_t join() {
    if (!ran_beside_) return cudaSuccess;
    ran_beside_ = false;
    cudaError_t err = cudaEventRecord(tail_, side_);
    if (err == cudaSuccess) err = cudaStreamWaitEvent(g_stream, tail_, 0);
    return err;
  }

  // beside_count and wait_count are the entries launched beside and the
  // main lane's waits for them since the server started (a replayed
  // graph's are not counted).
  unsigned long long beside_count() const { return beside_; }
  unsigned long long wait_count() const { return waits_; }

  // settle waits for the side lane, after a failure, so that no kernel of
  // the batch still runs when the failure is answered.
  void settle() {
    if (side_ != nullptr) (void)cudaStreamSynchronize(side_);
    ran_beside_ = false;
  }

 private:
  // kBesideOps are the ops that run beside by default: the weight
  // gradients, whose grids leave multiprocessors idle at GPT-2's shapes
  // and whose results nothing reads until the batch's end.
  static constexpr const char* kBesideOps[] = {"linear_grad_w"};

  Result parse_ops(const char* text) {
    ops_.clear();
    if (std::strcmp(text, "0") == 0) return Result::OK();
    if (std::strcmp(text, "1") == 0) {
      for (const char* name : kBesideOps) ops_.push_back(find_op_named(name));
      return Result::OK();
    }
    std::string names(text);
    for (size_t at = 0; at <= names.size();) {
      size_t end = names.find(',', at);
      if (end == std::string::npos) end = names.size();
      const std::string name = names.substr(at, end - at);
      const OpSpec* op = find_op_named(name.c_str());
      if (op == nullptr) {
        ops_.clear();
        return fail(kStatusDeviceError, "VKERN_BESIDE is \"", text, "\", and ",
                    name.empty() ? std::string("an empty name") : "\"" + name + "\"",
                    " is not a built-in op; want 1 (", kBesideOps[0],
                    ", the default), 0 (nothing beside) or built-in op names separated by commas");
      }
      ops_.push_back(op);
      at = end + 1;
    }
    return Result::OK();
  }

  bool runs_beside(const OpSpec& op) const {
    for (const OpSpec* o : ops_) {
      if (o == &op) return true;
    }
    return false;
  }

  std::vector<const OpSpec*> ops_;  // the ops that run beside
  cudaStream_t side_ = nullptr;
  cudaEvent_t start_ = nullptr, tail_ = nullptr;
  std::vector<cudaEvent_t> done_;  // entry i's end: a side entry's, or a main entry a side entry forks from
  vkern_beside::Plan plan_;
  std::vector<vkern_beside::Step> steps_;  // the batch's, from begin
  std::vector<bool> forked_from_;          // [i]: a side entry forks from main entry i
  bool batch_on_ = false, ran_beside_ = false;
  unsigned long long beside_ = 0, waits_ = 0;
};

Lanes g_lanes;

Result lanes_open() { return g_lanes.open(); }
void lanes_close() { g_lanes.close(); }

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
    VK_CHECK(clear_problems(checking), "clearing the problem words");
  }
  {
    Result r = g_lanes.begin(calls, count);
    if (!r.ok()) return r;
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
    cudaError_t err = g_lanes.launch(calls[i], i, word);
    if (err == cudaSuccess && timed) err = cudaEventRecord(g_marks[i + 1], g_stream);
    if (err != cudaSuccess) {
      *failed = i;
      const Result r = launch_error(*calls[i].op, err);
      // Collectives may be pending: abort them before waiting for the
      // stream, which may be ordered after them.
      if (g_collectives.any()) g_collectives.abort_all();
      if (r.status != kStatusDeviceError) {
        g_lanes.settle();
        VK_CHECK(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize");
      }
      return r;
    }
  }
  VK_CHECK(g_lanes.join(), "joining the side lane");
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

namespace {

// BatchGraphs replays a RUN_BATCH that repeats as a CUDA graph. A training
// step sends the same batch every step: the same ops with the same
// parameters on the same buffers, new data in them (the gpt package's
// gradient program). Launched entry by entry, it costs the host a launch
// of each kernel (a few microseconds) every time; replayed, one launch of
// the graph for all of them.
//
// It remembers the last kSeen batches it met by their entries (each one's
// op, parameters and buffer addresses). The first time a batch comes it
// runs as usual. The second time, its launches (and the clearing of its
// problem words) are captured into a graph, which then runs, as it does
// whenever the same batch comes again. A replay enqueues the kernels that
// the launches it stands for enqueued, with the same arguments, so it
// computes the same bits. These run as usual, never captured:
// - a batch of one entry, or with a timed entry (its times come from
//   events between the entries), a collective (NCCL's streams) or an op a
//   program declared (its kernels may keep scratch outside capture.h's
//   rules);
// - a batch whose capture failed (a launch that wanted scratch it had not
//   got or a device fact it had not read, or work the driver cannot
//   capture): the capture is not tried again while the batch is among the
//   kSeen remembered.
// A graph captured before scratch was reallocated (capture.h) is dropped,
// and the batch captured again, before it would run on freed memory. A
// replay is one launch, so a launch error cannot name an entry: it is the
// batch's, as an error at the final wait always was.
//
// VKERN_GRAPHS=0 runs every batch as usual. VKERN_GRAPHS_LOG names a file
// to which the server appends a line for each capture, refusal and drop,
// and its counts (and Lanes') when it exits.
class BatchGraphs {
 public:
  Result open() {
    const char* on = std::getenv("VKERN_GRAPHS");
    if (on != nullptr && std::strcmp(on, "0") != 0 && std::strcmp(on, "1") != 0) {
      return fail(kStatusDeviceError, "VKERN_GRAPHS is \"", on,
                  "\"; want 1 (a repeated RUN_BATCH replayed as a CUDA graph, the default) or 0 (every batch launched "
                  "entry by entry)");
    }
    on_ = on == nullptr || std::strcmp(on, "1") == 0;
    if (const char* path = std::getenv("VKERN_GRAPHS_LOG")) {
      log_ = std::fopen(path, "a");
      if (log_ == nullptr) {
        return fail(kStatusDeviceError, "VKERN_GRAPHS_LOG is \"", path, "\", which cannot be opened for appending: ",
                    std::strerror(errno), "; name a file in a folder that exists and can be written, or unset it");
      }
    }
    return Result::OK();
  }

  void close() {
    for (Seen& s : seen_) drop(&s);
    seen_.clear();
    if (log_ != nullptr) {
      std::fprintf(log_, "graphs: %llu captured, %llu replays, %llu refused, %llu dropped\n", captured_, replayed_,
                   refused_, dropped_);
      std::fprintf(log_, "lanes: %llu entries beside, %llu waits\n", g_lanes.beside_count(), g_lanes.wait_count());
      std::fclose(log_);
      log_ = nullptr;
    }
  }

  // run runs the batch from its graph where it has one or can capture one,
  // and sets *ran; where *ran is false nothing ran, and the caller runs
  // the batch entry by entry.
  Result run(const Call* calls, uint32_t count, uint64_t* kernel_ns, uint64_t* problem, uint32_t* failed, bool* ran) {
    *ran = false;
    if (!on_ || count < 2) return Result::OK();
    size_t checking = 0;
    for (uint32_t i = 0; i < count; ++i) {
      const Call& c = calls[i];
      if (c.op == nullptr || c.timed || c.op->id >= kFirstUserOpId) return Result::OK();
      checking += checks(c) ? 1 : 0;
    }
    make_key(calls, count);
    Seen* s = find();
    if (s == nullptr) {
      remember();
      return Result::OK();
    }
    s->used = ++clock_;
    if (s->refused) return Result::OK();
    // The problem words first: growing them counts as a reallocation.
    if (checking > 0) {
      const Result r = ensure_problem_slots(checking);
      if (!r.ok()) return r;
    }
    if (s->exec != nullptr && s->generation != vkern_capture::generation) {
      drop(s);
      ++dropped_;
      note(*s, "dropped (scratch was reallocated since its capture)");
    }
    if (s->exec == nullptr) {
      std::string why;
      if (!capture(calls, count, checking, s, &why)) {
        s->refused = true;
        ++refused_;
        note(*s, ("refused: " + why + "; it runs entry by entry").c_str());
        return Result::OK();
      }
      ++captured_;
      note(*s, "captured");
    }
    *ran = true;
    *failed = kNoBatchEntry;
    const cudaError_t launched = cudaGraphLaunch(s->exec, g_stream);
    if (launched != cudaSuccess) return cuda_fail(launched, "cudaGraphLaunch of a repeated batch's graph");
    const cudaError_t waited = cudaStreamSynchronize(g_stream);
    if (waited != cudaSuccess) return batch_wait_error(waited);
    ++replayed_;
    for (uint32_t i = 0; i < count; ++i) kernel_ns[i] = 0;
    return checking > 0 ? problems_back(calls, count, checking, problem) : Result::OK();
  }

 private:
  static constexpr size_t kSeen = 8;

  struct Seen {
    std::vector<uint64_t> key;  // make_key's words
    uint64_t hash = 0;
    cudaGraphExec_t exec = nullptr;        // nullptr: not captured (yet)
    unsigned long long generation = 0;     // scratch's when captured
    uint64_t used = 0;                     // clock_ when last met
    bool refused = false;                  // its capture failed
  };

  // make_key lays the batch's entries into key_ (its count, then each
  // entry's op id, parameters and buffer addresses) and hashes them into
  // hash_, a word at a time (FNV-1a's step on words, then a shift to mix
  // the high bits down): find compares whole keys, so the hash only has to
  // tell most batches apart cheaply.
  void make_key(const Call* calls, uint32_t count) {
    key_.clear();
    key_.push_back(count);
    for (uint32_t i = 0; i < count; ++i) {
      const Call& c = calls[i];
      key_.push_back(c.op->id);
      for (int p = 0; p < c.op->param_count; ++p) key_.push_back(static_cast<uint64_t>(c.params[p]));
      for (int b = 0; b < c.op->buffer_count; ++b) key_.push_back(reinterpret_cast<uintptr_t>(c.ptrs[b]));
    }
    hash_ = 14695981039346656037ull;
    for (uint64_t w : key_) {
      hash_ = (hash_ ^ w) * 1099511628211ull;
      hash_ ^= hash_ >> 29;
    }
  }

  Seen* find() {
    for (Seen& s : seen_) {
      if (s.hash == hash_ && s.key == key_) return &s;
    }
    return nullptr;
  }

  // remember records the batch as met once, in place of the least recently
  // met when kSeen are kept.
  void remember() {
    Seen* slot = nullptr;
    if (seen_.size() < kSeen) {
      seen_.emplace_back();
      slot = &seen_.back();
    } else {
      slot = &seen_[0];
      for (Seen& s : seen_) {
        if (s.used < slot->used) slot = &s;
      }
      drop(slot);
      *slot = Seen{};
    }
    slot->key = key_;
    slot->hash = hash_;
    slot->used = ++clock_;
  }

  static void drop(Seen* s) {
    if (s->exec != nullptr) (void)cudaGraphExecDestroy(s->exec);
    s->exec = nullptr;
  }

  // capture records the batch's work into a graph and instantiates it in
  // s, or answers false and why. Nothing it enqueues runs: the stream is
  // capturing.
  bool capture(const Call* calls, uint32_t count, size_t checking, Seen* s, std::string* why) {
    const Result lanes = g_lanes.begin(calls, count);
    if (!lanes.ok()) {
      *why = lanes.message;
      return false;
    }
    cudaError_t err = cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      *why = std::string("cudaStreamBeginCapture: ") + cudaGetErrorName(err);
      return false;
    }
    vkern_capture::capturing = true;
    vkern_capture::spoiled = false;
    if (checking > 0) err = clear_problems(checking);
    uint32_t at = count;  // the entry whose launch failed, if one did
    for (uint32_t i = 0, slot = 0; err == cudaSuccess && i < count; ++i) {
      err = g_lanes.launch(calls[i], i, checks(calls[i]) ? g_problems + slot++ : nullptr);
      if (err != cudaSuccess) at = i;
    }
    // The side lane joins the main one even after a failed launch: a
    // capture cannot end with work of another stream left out of it.
    const cudaError_t joined = g_lanes.join();
    if (err == cudaSuccess && joined != cudaSuccess) {
      err = joined;
      at = count;
    }
    vkern_capture::capturing = false;
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(g_stream, &graph);
    if (err != cudaSuccess || ended != cudaSuccess || vkern_capture::spoiled || graph == nullptr) {
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
      (void)cudaGetLastError();  // a failed capture's error is not the context's
      if (vkern_capture::spoiled) {
        *why = "a launch wanted scratch memory or a device read that a capture cannot hold";
      } else if (err != cudaSuccess) {
        *why = (at < count ? std::string("entry ") + std::to_string(at) + " (" + calls[at].op->name + "): "
                           : std::string("clearing the problem words: ")) +
               cudaGetErrorName(err);
      } else {
        *why = std::string("cudaStreamEndCapture: ") + cudaGetErrorName(ended);
      }
      return false;
    }
    err = cudaGraphInstantiateWithFlags(&s->exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    if (err != cudaSuccess) {
      s->exec = nullptr;
      (void)cudaGetLastError();
      *why = std::string("cudaGraphInstantiateWithFlags: ") + cudaGetErrorName(err);
      return false;
    }
    s->generation = vkern_capture::generation;
    return true;
  }

  void note(const Seen& s, const char* what) {
    if (log_ == nullptr) return;
    std::fprintf(log_, "batch %016llx of %llu entries: %s\n", static_cast<unsigned long long>(s.hash),
                 static_cast<unsigned long long>(s.key[0]), what);
    std::fflush(log_);
  }

  bool on_ = true;
  std::FILE* log_ = nullptr;
  std::vector<Seen> seen_;
  std::vector<uint64_t> key_;
  uint64_t hash_ = 0;
  uint64_t clock_ = 0;
  unsigned long long captured_ = 0, replayed_ = 0, refused_ = 0, dropped_ = 0;
};

BatchGraphs g_graphs;

Result graphs_open() { return g_graphs.open(); }
void graphs_close() { g_graphs.close(); }

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
  bool replayed = false;
  Result r = g_graphs.run(calls, count, kernel_ns, problem, failed, &replayed);
  if (!replayed && r.ok()) r = run_entries(calls, count, kernel_ns, problem, failed);
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
