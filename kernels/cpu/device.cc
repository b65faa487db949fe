// The cpu backend's device: host-memory buffers, a persistent thread pool,
// the HELLO evidence, the MEMORY figures, and the dispatch from RUN to the
// kernels.
//
// Buffers are zero-filled host allocations; the sum of live buffers is held
// under the machine's physical memory, so an ALLOC that could only succeed
// by overcommit answers OUT_OF_MEMORY instead of inviting the OOM killer.
// Under glibc, allocations from kMmapThresholdBytes up are mapped on their
// own, so a FREE gives the memory back to the system at once: a long-lived
// server's footprint follows its live buffers, not their history.
// The pool's threads are created once, in backend_open; VKERN_THREADS (a
// positive integer) overrides the default of one thread per hardware thread.
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "cpu/device.h"  // ThreadPool, Scratch and the kernels' view of this file

namespace vkern {
namespace {

ThreadPool* g_pool = nullptr;
Scratch* g_scratch = nullptr;
uint64_t g_live_bytes = 0;

uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

// read_u64_file reads a file that holds one decimal number (and perhaps a
// newline), as the cgroup files do; false when it cannot be read or holds
// anything else ("max", say).
bool read_u64_file(const char* path, uint64_t* value) {
  std::ifstream in(path);
  std::string text;
  if (!std::getline(in, text) || text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0' || text[0] == '-') return false;
  *value = v;
  return true;
}

// meminfo_available_bytes reads MemAvailable from /proc/meminfo, the
// kernel's estimate of what can be had without swapping (page cache it
// would drop counts as available); false when it cannot be read.
bool meminfo_available_bytes(uint64_t* bytes) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  const std::string key = "MemAvailable:";
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) != 0) continue;
    char* end = nullptr;
    errno = 0;
    const unsigned long long kib = std::strtoull(line.c_str() + key.size(), &end, 10);
    if (errno != 0 || end == line.c_str() + key.size() || kib > UINT64_MAX / 1024) return false;
    *bytes = static_cast<uint64_t>(kib) * 1024;  // the file says "kB" and means KiB
    return true;
  }
  return false;
}

// cgroup_headroom_bytes is memory.max − memory.current of the cgroup v2
// this process sees at /sys/fs/cgroup, when memory.max is a number: a
// container's limit can be far below the machine's memory. False when
// there is no such limit.
bool cgroup_headroom_bytes(uint64_t* bytes) {
  uint64_t limit = 0, used = 0;
  if (!read_u64_file("/sys/fs/cgroup/memory.max", &limit)) return false;
  if (!read_u64_file("/sys/fs/cgroup/memory.current", &used)) return false;
  *bytes = used < limit ? limit - used : 0;
  return true;
}

unsigned hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}

// pool_threads reads VKERN_THREADS, falling back to the hardware thread count
// (with a note on stderr) when it is not a positive integer.
unsigned pool_threads() {
  const char* env = std::getenv("VKERN_THREADS");
  if (env == nullptr || *env == '\0') return hardware_threads();
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  if (*end != '\0' || n < 1 || n > 4096) {
    std::fprintf(stderr, "vkern kernel server: ignoring VKERN_THREADS=%s (want an integer in 1..4096)\n", env);
    return hardware_threads();
  }
  return static_cast<unsigned>(n);
}

// cpu_model_name is the first "model name" line of /proc/cpuinfo (x86) or
// its "Hardware"/"Model" line (some aarch64 kernels), else "unknown CPU".
std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  std::string fallback;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    size_t start = colon + 1;
    while (start < line.size() && line[start] == ' ') ++start;
    const std::string value = line.substr(start);
    if (value.empty()) continue;
    if (key == "model name") return value;
    if ((key == "Hardware" || key == "Model") && fallback.empty()) fallback = value;
  }
  return fallback.empty() ? "unknown CPU" : fallback;
}

const char* arch_name() {
#if defined(__x86_64__)
  return "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#elif defined(__riscv) && __riscv_xlen == 64
  return "riscv64";
#else
  return "unknown";
#endif
}

// vector_isa names the vector instruction sets the compiler targeted, which
// decide how the gemm micro-kernel's 8-lane vectors are lowered.
std::string vector_isa() {
  static const char* const targeted[] = {
#if defined(__AVX512F__)
    "avx512f",
#endif
#if defined(__AVX2__)
    "avx2",
#endif
#if defined(__FMA__)
    "fma",
#endif
#if defined(__ARM_NEON)
    "neon",
#endif
#if defined(__ARM_FEATURE_SVE)
    "sve",
#endif
    nullptr,
  };
  std::string s;
  for (const char* const* name = targeted; *name != nullptr; ++name) s += (s.empty() ? "" : ",") + std::string(*name);
  return s.empty() ? "generic" : s;
}

// compiler_version is __VERSION__, which names the compiler except under
// GCC ("12.2.0"), where it gets a "gcc " prefix.
const char* compiler_version() {
#if defined(__GNUC__) && !defined(__clang__) && !defined(__INTEL_COMPILER)
  return "gcc " __VERSION__;
#else
  return __VERSION__;
#endif
}

}  // namespace

// kMmapThresholdBytes fixes glibc's mmap threshold, which otherwise rises
// after each large free until large buffers come from the heap and stay.
constexpr int kMmapThresholdBytes = 256 << 10;

Result backend_open() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes);
#endif
  const unsigned threads = pool_threads();
  try {
    g_pool = new ThreadPool(threads);
    g_scratch = new Scratch();
  } catch (const std::exception& e) {
    return fail(kStatusDeviceError, "starting a pool of ", threads, " threads: ", e.what());
  }
  return Result::OK();
}

void backend_close() {
  delete g_scratch;
  g_scratch = nullptr;
  delete g_pool;
  g_pool = nullptr;
}

std::vector<HelloField> backend_hello_fields() {
  return {
      {"backend", "cpu"},
      {"device", cpu_model_name()},
      {"arch", arch_name()},
      {"cores", std::to_string(hardware_threads())},
      {"threads", std::to_string(g_pool->size())},
      {"memory_bytes", std::to_string(physical_memory_bytes())},
      {"driver", "none"},
      {"runtime", "none"},
      {"compiler", compiler_version()},
      {"vector_isa", vector_isa()},
      {"dot_accumulation", gemm_dot_accumulation()},
      // Communicators of one rank (cpu/collective.cc).
      {"collectives", "single-rank"},
  };
}

Result backend_alloc(uint64_t bytes, void** ptr) {
  const uint64_t limit = physical_memory_bytes();
  if (limit != 0 && (bytes > limit || g_live_bytes > limit - bytes)) {
    return fail(kStatusOutOfMemory, "ALLOC of ", bytes, " bytes with ", g_live_bytes,
                " bytes live would pass the machine's ", limit, " bytes of memory");
  }
  void* p = bytes > SIZE_MAX ? nullptr : std::calloc(static_cast<size_t>(bytes), 1);
  if (p == nullptr) {
    return fail(kStatusOutOfMemory, "ALLOC of ", bytes, " bytes failed (", g_live_bytes, " bytes live)");
  }
  g_live_bytes += bytes;
  *ptr = p;
  return Result::OK();
}

void backend_free(void* ptr, uint64_t bytes) {
  std::free(ptr);
  g_live_bytes -= bytes;
}

Result backend_write(void* buffer, uint64_t offset, const uint8_t* src, uint64_t length) {
  if (length > 0) std::memcpy(static_cast<uint8_t*>(buffer) + offset, src, length);
  return Result::OK();
}

Result backend_read(const void* buffer, uint64_t offset, uint8_t* dst, uint64_t length) {
  if (length > 0) std::memcpy(dst, static_cast<const uint8_t*>(buffer) + offset, length);
  return Result::OK();
}

// Every RUN finishes before its response is sent, so there is never
// outstanding work to wait for.
Result backend_sync() { return Result::OK(); }

// The total is the figure ALLOC holds live buffers under, and free starts
// from what that accounting leaves; the kernel's MemAvailable and a cgroup
// limit then lower it, since buffers are not the only memory in use (the
// arena, kernel scratch, other processes). Reading them never fails the
// call: without /proc the accounting figure stands.
Result backend_memory(uint64_t* free_bytes, uint64_t* total_bytes) {
  const uint64_t total = physical_memory_bytes();
  uint64_t free_now = total > g_live_bytes ? total - g_live_bytes : 0;
  uint64_t other = 0;
  if (meminfo_available_bytes(&other) && other < free_now) free_now = other;
  if (cgroup_headroom_bytes(&other) && other < free_now) free_now = other;
  *free_bytes = free_now;
  *total_bytes = total;
  return Result::OK();
}

ThreadPool& cpu_pool() { return *g_pool; }
Scratch& cpu_scratch() { return *g_scratch; }

// The steady clock costs nothing next to a kernel, so every run is timed
// and an untimed one simply reports 0.
Result backend_run(const Call& call, uint64_t* kernel_ns, uint64_t* problem) {
  *kernel_ns = 0;
  *problem = kNoProblem;
  const Kernel kernel = find_kernel(call.op->id);
  if (kernel == nullptr) {
    return fail(kStatusNotSupported, call.op->name, ": the cpu backend has no kernel for it: ",
                missing_kernel_reason(call.op->id), " (it has ", backend_op_names(), ")");
  }
  // Kernels allocate their scratch on this thread before they fan out, so
  // running out of memory surfaces here, never inside a worker.
  try {
    const auto start = std::chrono::steady_clock::now();
    const Result r = kernel(call, problem);
    const auto stop = std::chrono::steady_clock::now();
    if (call.timed) {
      *kernel_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(stop - start).count());
    }
    return r;
  } catch (const std::bad_alloc&) {
    return fail(kStatusOutOfMemory, call.op->name, ": cannot allocate the kernel's scratch memory");
  }
}

// Each entry runs to completion before the next starts, so the entry an
// error belongs to is always known.
Result backend_run_batch(const Call* calls, uint32_t count, uint64_t* kernel_ns, uint64_t* problem, uint32_t* failed) {
  for (uint32_t i = 0; i < count; ++i) {
    kernel_ns[i] = 0;
    // A collective runs to completion in its place (cpu/collective.cc).
    const Result r = calls[i].op == nullptr ? backend_collective(calls[i].collective)
                                            : backend_run(calls[i], &kernel_ns[i], &problem[i]);
    if (!r.ok()) {
      *failed = i;
      return r;
    }
  }
  return Result::OK();
}

}  // namespace vkern
