// The cuda backend's collectives: NCCL (RCCL under HIP), loaded at run time.
//
// The server is not linked against NCCL: a machine without it still runs
// every op, and the first collective request loads it with dlopen, from
// the first of
//   1. $VKERN_NCCL, a path (nothing else is tried when it is set);
//   2. VK_NCCL_SONAME (libnccl.so.2; librccl.so.1 under HIP) on the loader's
//      path (LD_LIBRARY_PATH, ldconfig's cache);
//   3. the lib folder of the Python package nvidia-nccl-cu* (what PyTorch's
//      wheels use) under the usual site-packages folders: $VIRTUAL_ENV's,
//      $CONDA_PREFIX's, /opt/*/.venv's, /usr/local/lib/python3*'s,
//      /usr/lib/python3*'s, ~/.local's and /opt/conda's.
// Where none loads, COMM_INFO (and every other collective request) answers
// NOT_SUPPORTED listing what was tried.
//
// Every NCCL call runs on a communicator made non-blocking
// (ncclCommInitRankConfig with blocking = 0), so no call can wait forever
// on a peer: the server polls ncclCommGetAsyncError and the stream until
// the work is done, the engine reports an error, or the request's
// timeout passes, or the host closes the server's input (it died); then it
// calls ncclCommAbort, which ends the communicator's kernels, and answers
// COMM_FAILED. Collectives of their own request run on the server's
// stream; a collective inside a
// RUN_BATCH runs on a second stream, after an event of the compute stream,
// so that the backward's later kernels overlap it (BatchCollectives).
#include <dlfcn.h>
#include <glob.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/backend.h"
#include "cuda/compat.h"
#include "cuda/occupancy.h"

namespace vkern {
namespace nccl {

// The types and values of nccl.h that the server uses, declared here so
// that the build needs no NCCL headers. They match nccl.h of NCCL 2.18.3
// (and RCCL's rccl.h, which keeps NCCL's names, values and layouts); all
// but ncclConfig_t have been stable since NCCL 2.4.
using Comm = struct ncclComm*;
struct UniqueId {
  char internal[kCommUniqueIdBytes];
};
using Result = int;  // ncclResult_t
constexpr Result kSuccess = 0, kInvalidArgument = 4, kInProgress = 7;
constexpr int kInt32 = 2, kFloat16 = 6, kFloat32 = 7;  // ncclDataType_t
constexpr int kSum = 0, kMax = 2;                      // ncclRedOp_t
// ncclConfig_t as NCCL 2.17 lays it out (struct ncclConfig_v21700 up to
// netName). NCCL reads size and version first and takes from a config of
// an older layout the fields it has; the rest keep their defaults.
struct Config {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
};
constexpr unsigned int kConfigMagic = 0xcafebeef;
constexpr unsigned int kConfigVersion = 21701;  // NCCL_VERSION(2, 17, 1)
constexpr int kConfigUndefInt = INT_MIN;

// Library is the loaded engine: its entry points, by dlsym.
struct Library {
  void* handle = nullptr;
  std::string path;
  int version = 0;
  Result (*get_version)(int*) = nullptr;
  Result (*get_unique_id)(UniqueId*) = nullptr;
  Result (*comm_init_rank)(Comm*, int, UniqueId, int) = nullptr;
  Result (*comm_init_rank_config)(Comm*, int, UniqueId, int, Config*) = nullptr;  // NCCL 2.14 and later
  Result (*comm_abort)(Comm) = nullptr;
  Result (*comm_get_async_error)(Comm, Result*) = nullptr;
  const char* (*get_error_string)(Result) = nullptr;
  const char* (*get_last_error)(Comm) = nullptr;  // NCCL 2.13 and later
  Result (*all_reduce)(const void*, void*, size_t, int, int, Comm, cudaStream_t) = nullptr;
  Result (*reduce_scatter)(const void*, void*, size_t, int, int, Comm, cudaStream_t) = nullptr;
  Result (*all_gather)(const void*, void*, size_t, int, Comm, cudaStream_t) = nullptr;
};

Library g_lib;
bool g_tried = false;
vkern::Result g_loaded;  // what loading gave: OK, or NOT_SUPPORTED and why

// version_text writes NCCL_VERSION_CODE as major.minor.patch (codes from
// 2.9 on are major·10000 + minor·100 + patch, earlier ones ·1000 + ·100).
std::string version_text(int v) {
  if (v >= 20900) return cat(v / 10000, ".", (v % 10000) / 100, ".", v % 100);
  return cat(v / 1000, ".", (v % 1000) / 100, ".", v % 100);
}

// candidates lists where to look when $VKERN_NCCL is unset.
std::vector<std::string> candidates() {
  std::vector<std::string> out = {VK_NCCL_SONAME};
  std::vector<std::string> roots;
  for (const char* env : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    const char* v = std::getenv(env);
    if (v != nullptr && *v != '\0') roots.push_back(std::string(v) + "/lib/python3*/site-packages");
  }
  for (const char* r : {"/opt/*/.venv/lib/python3*/site-packages", "/usr/local/lib/python3*/dist-packages",
                        "/usr/local/lib/python3*/site-packages", "/usr/lib/python3/dist-packages",
                        "/usr/lib/python3*/site-packages", "/opt/conda/lib/python3*/site-packages"}) {
    roots.push_back(r);
  }
  if (const char* home = std::getenv("HOME")) roots.push_back(std::string(home) + "/.local/lib/python3*/site-packages");
  for (const std::string& root : roots) {
    const std::string pattern = root + "/" + VK_NCCL_PYTHON_LIB;
    glob_t g;
    if (::glob(pattern.c_str(), 0, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
    }
    ::globfree(&g);
  }
  return out;
}

// open_library dlopens path and finds the entry points; false with why.
bool open_library(const std::string& path, std::string* why) {
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = ::dlerror();
    *why = e != nullptr ? e : "dlopen failed";
    return false;
  }
  Library lib;
  lib.handle = h;
  lib.path = path;
  bool ok = true;
  std::string missing;
  const auto sym = [&](auto** fn, const char* name, bool required) {
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(::dlsym(h, name));
    if (*fn == nullptr && required) {
      ok = false;
      missing += cat(missing.empty() ? "" : ", ", name);
    }
  };
  sym(&lib.get_version, "ncclGetVersion", true);
  sym(&lib.get_unique_id, "ncclGetUniqueId", true);
  sym(&lib.comm_init_rank, "ncclCommInitRank", true);
  sym(&lib.comm_init_rank_config, "ncclCommInitRankConfig", false);
  sym(&lib.comm_abort, "ncclCommAbort", true);
  sym(&lib.comm_get_async_error, "ncclCommGetAsyncError", true);
  sym(&lib.get_error_string, "ncclGetErrorString", true);
  sym(&lib.get_last_error, "ncclGetLastError", false);
  sym(&lib.all_reduce, "ncclAllReduce", true);
  sym(&lib.reduce_scatter, "ncclReduceScatter", true);
  sym(&lib.all_gather, "ncclAllGather", true);
  if (!ok) {
    *why = cat("it lacks ", missing);
    ::dlclose(h);
    return false;
  }
  if (lib.get_version(&lib.version) != kSuccess) {
    *why = "ncclGetVersion failed";
    ::dlclose(h);
    return false;
  }
  g_lib = lib;
  return true;
}

// load finds and opens the engine once; later calls return what the first
// found.
vkern::Result load() {
  if (g_tried) return g_loaded;
  g_tried = true;
  const char* forced = std::getenv("VKERN_NCCL");
  std::string why;
  if (forced != nullptr && *forced != '\0') {
    if (!open_library(forced, &why)) {
      g_loaded = fail(kStatusNotSupported, VK_COLLECTIVES_NAME, ": $VKERN_NCCL names ", forced,
                      ", which could not be loaded: ", why, "; point it at ", VK_NCCL_SONAME,
                      " or unset it to search the usual places");
    }
    return g_loaded;
  }
  std::string tried;
  for (const std::string& path : candidates()) {
    if (open_library(path, &why)) return g_loaded;
    tried += cat(tried.empty() ? "" : "; ", path, ": ", why);
  }
  g_loaded = fail(kStatusNotSupported, VK_COLLECTIVES_NAME, " was not found (", tried,
                  "); install it (pip install ", VK_NCCL_PYTHON_PACKAGE, ", or the system package) or set VKERN_NCCL ",
                  "to the library's path");
  return g_loaded;
}

uint64_t now_ns() {
  timespec t;
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000u + static_cast<uint64_t>(t.tv_nsec);
}

uint64_t deadline_after(uint32_t timeout_ms) { return now_ns() + uint64_t{timeout_ms} * 1000000u; }

// pause yields between polls: a collective's wait is a poll loop, not a
// blocking call, so that a deadline can end it.
void pause() { ::usleep(20); }

// A communicator: NCCL's and this server's place in it. Aborted, it stays
// until the core releases it (backend_comm_abort).
struct NcclComm {
  Comm comm;
  uint32_t rank, size;
  bool aborted;
};

// error_text is NCCL's description of r on c, with its last error message
// when the library keeps one.
std::string error_text(NcclComm* c, Result r) {
  std::string s = g_lib.get_error_string(r);
  if (g_lib.get_last_error != nullptr) {
    const char* last = g_lib.get_last_error(c != nullptr ? c->comm : nullptr);
    if (last != nullptr && *last != '\0') s += cat(" (", last, ")");
  }
  return s;
}

// abort ends c at once: its kernels stop, its peers see it gone.
void abort(NcclComm* c) {
  if (c == nullptr || c->aborted) return;
  c->aborted = true;
  if (c->comm != nullptr) (void)g_lib.comm_abort(c->comm);
}

// release aborts c if need be and frees it.
void release(NcclComm* c) {
  abort(c);
  delete c;
}

// failed is the COMM_FAILED answer for what on c (of rank of size) after
// NCCL's error r, with c aborted.
vkern::Result failed(NcclComm* c, const char* what, Result r) {
  const vkern::Result out = fail(kStatusCommFailed, what, " (rank ", c->rank, " of ", c->size, "): ",
                                 VK_COLLECTIVES_NAME, " reported ", error_text(c, r),
                                 "; the communicator was aborted");
  abort(c);
  return out;
}

vkern::Result timed_out(NcclComm* c, const char* what, uint32_t timeout_ms) {
  const vkern::Result out =
      fail(kStatusCommFailed, what, " (rank ", c->rank, " of ", c->size, "): not done after ", timeout_ms,
           " ms: a peer rank died, hung or is too slow; the communicator was aborted");
  abort(c);
  return out;
}

vkern::Result host_left(NcclComm* c, const char* what) {
  const vkern::Result out = fail(kStatusCommFailed, what, " (rank ", c->rank, " of ", c->size,
                                 "): the host closed this server's input while it waited; the communicator was aborted");
  abort(c);
  return out;
}

// settle waits until an NCCL call on a non-blocking communicator has left
// ncclInProgress (its work enqueued, or the communicator made).
vkern::Result settle(NcclComm* c, Result r, uint64_t deadline, const char* what, uint32_t timeout_ms) {
  for (uint64_t polls = 0; r == kInProgress;) {
    if (g_lib.comm_get_async_error(c->comm, &r) != kSuccess) r = kInvalidArgument;
    if (r != kInProgress) break;
    if (now_ns() > deadline) return timed_out(c, what, timeout_ms);
    if (++polls % 256 == 0 && host_gone()) return host_left(c, what);
    pause();
  }
  return r == kSuccess ? vkern::Result::OK() : failed(c, what, r);
}

int data_type(DType t) { return t == DType::kF16 ? kFloat16 : t == DType::kF32 ? kFloat32 : kInt32; }
int red_op(CommRedOp r) { return r == kRedMax ? kMax : kSum; }

// enqueue puts one collective on stream s and settles the call.
vkern::Result enqueue(const Collective& col, cudaStream_t s, uint64_t deadline, const char* what) {
  NcclComm* c = static_cast<NcclComm*>(col.comm);
  Result r = kSuccess;
  switch (col.kind) {
    case kAllReduce:
      r = g_lib.all_reduce(col.send, col.recv, col.count, data_type(col.dtype), red_op(col.redop), c->comm, s);
      break;
    case kReduceScatter:
      r = g_lib.reduce_scatter(col.send, col.recv, col.count, data_type(col.dtype), red_op(col.redop), c->comm, s);
      break;
    case kAllGather: r = g_lib.all_gather(col.send, col.recv, col.count, data_type(col.dtype), c->comm, s); break;
  }
  return settle(c, r, deadline, what, col.timeout_ms);
}

// wait polls stream s until its work is done, watching the communicators
// comms: an error one reports, or the deadline, aborts them all (their
// kernels then end, and the stream drains) and answers COMM_FAILED.
vkern::Result wait(cudaStream_t s, const std::vector<NcclComm*>& comms, uint64_t deadline, uint32_t timeout_ms,
                   const char* what) {
  for (uint64_t polls = 0;;) {
    const cudaError_t q = cudaStreamQuery(s);
    if (q == cudaSuccess) return vkern::Result::OK();
    if (q != cudaErrorNotReady) {
      return fail(kStatusDeviceError, what, ": ", cudaGetErrorName(q), " (", cudaGetErrorString(q), ")");
    }
    vkern::Result out;
    for (NcclComm* c : comms) {
      Result st = kSuccess;
      if (g_lib.comm_get_async_error(c->comm, &st) != kSuccess) st = kInvalidArgument;
      if (st != kSuccess && st != kInProgress) {
        out = fail(kStatusCommFailed, what, " (rank ", c->rank, " of ", c->size, "): ", VK_COLLECTIVES_NAME,
                   " reported ", error_text(c, st), "; the communicator was aborted");
        break;
      }
    }
    if (out.ok() && now_ns() > deadline) {
      out = fail(kStatusCommFailed, what, ": not done after ", timeout_ms,
                 " ms: a peer rank died, hung or is too slow; the communicator was aborted");
    }
    if (out.ok() && ++polls % 256 == 0 && host_gone()) {
      out = fail(kStatusCommFailed, what, ": the host closed this server's input while it waited; the communicator was aborted");
    }
    if (out.ok()) {
      pause();
      continue;
    }
    for (NcclComm* c : comms) abort(c);
    // Aborted, the collectives' kernels return; the stream must drain
    // soon, else the device is not to be trusted.
    const uint64_t drain = now_ns() + 30000000000ull;
    cudaError_t d;
    while ((d = cudaStreamQuery(s)) == cudaErrorNotReady && now_ns() < drain) pause();
    if (d != cudaSuccess) {
      return fail(kStatusDeviceError, out.message, "; then the stream did not drain within 30 s of the abort (",
                  cudaGetErrorName(d), ")");
    }
    return out;
  }
}

}  // namespace nccl

Result backend_comm_info(uint32_t* version, std::string* text) {
  const Result r = nccl::load();
  if (!r.ok()) return r;
  *version = static_cast<uint32_t>(nccl::g_lib.version);
  *text = cat(VK_COLLECTIVES_NAME, " ", nccl::version_text(nccl::g_lib.version), " (", nccl::g_lib.path, ")");
  return Result::OK();
}

Result backend_comm_unique_id(uint8_t* id) {
  nccl::UniqueId uid;
  const nccl::Result r = nccl::g_lib.get_unique_id(&uid);
  if (r != nccl::kSuccess) {
    return fail(kStatusCommFailed, "COMM_UNIQUE_ID: ncclGetUniqueId: ", nccl::error_text(nullptr, r));
  }
  std::memcpy(id, uid.internal, kCommUniqueIdBytes);
  return Result::OK();
}

Result backend_comm_init(const uint8_t* id, uint32_t rank, uint32_t size, uint32_t timeout_ms, void** out) {
  nccl::UniqueId uid;
  std::memcpy(uid.internal, id, kCommUniqueIdBytes);
  nccl::NcclComm* c = new (std::nothrow) nccl::NcclComm{nullptr, rank, size, false};
  if (c == nullptr) return fail(kStatusOutOfMemory, "COMM_INIT: no memory for the communicator");
  const uint64_t deadline = nccl::deadline_after(timeout_ms);
  nccl::Result r;
  if (nccl::g_lib.comm_init_rank_config != nullptr) {
    // cgaClusterSize 0: the collectives' blocks launch one by one, not in
    // clusters (NCCL's default on sm_90 is 4). A cluster of 4 needs four
    // free multiprocessors of one GPC at once, which the backward's kernels,
    // filling every multiprocessor as it frees, seldom leave: the
    // all-reduces would then wait for gaps between kernels instead of
    // running beside them. (The 2026-11-26 two-H200 runs, BENCHMARKS.md,
    // had NCCL's default; what 0 buys is not yet measured.)
    // $NCCL_CGA_CLUSTER_SIZE still overrides it.
    nccl::Config cfg{sizeof(nccl::Config), nccl::kConfigMagic, nccl::kConfigVersion, 0,
                     0, nccl::kConfigUndefInt, nccl::kConfigUndefInt, nullptr};
    r = nccl::g_lib.comm_init_rank_config(&c->comm, static_cast<int>(size), uid, static_cast<int>(rank), &cfg);
  } else {
    // Before NCCL 2.14 a communicator blocks: a rank that never joins
    // holds this request until the host's deadline ends the server.
    r = nccl::g_lib.comm_init_rank(&c->comm, static_cast<int>(size), uid, static_cast<int>(rank));
  }
  if (r != nccl::kSuccess && r != nccl::kInProgress) {
    const Result out = fail(kStatusCommFailed, "COMM_INIT (rank ", rank, " of ", size, "): ",
                            nccl::error_text(c, r));
    nccl::release(c);
    return out;
  }
  const Result settled = nccl::settle(c, r, deadline, "COMM_INIT", timeout_ms);
  if (!settled.ok()) {
    nccl::release(c);
    return settled;
  }
  *out = c;
  return Result::OK();
}

void backend_comm_abort(void* comm) { nccl::release(static_cast<nccl::NcclComm*>(comm)); }

// nccl_collective runs one collective on stream s (the server's) and waits
// for it: backend_collective, for device.cu.
Result nccl_collective(const Collective& col, cudaStream_t s, const char* what) {
  const uint64_t deadline = nccl::deadline_after(col.timeout_ms);
  Result r = nccl::enqueue(col, s, deadline, what);
  if (!r.ok()) return r;
  return nccl::wait(s, {static_cast<nccl::NcclComm*>(col.comm)}, deadline, col.timeout_ms, what);
}

// BatchCollectives runs a RUN_BATCH's collective entries on a stream of
// their own. Each waits for an event of the compute stream recorded where
// it stands in the batch, so it sees every earlier entry's writes; a later
// entry waits for the collective stream only when it touches a buffer of
// a collective still pending (join_if_touched), so the backward's kernels
// overlap the all-reduces of the gradients it has finished. finish makes
// the compute stream wait for every collective, then waits for it under
// the collectives' deadline. A failure aborts the communicators it has
// used; the caller aborts those of entries it had not reached (the core
// then releases them all).
class BatchCollectives {
 public:
  Result issue(const Collective& col, cudaStream_t compute, uint32_t entry) {
    if (stream_ == nullptr) {
      // The collective stream has the device's highest priority: as
      // blocks of the compute stream end, the block scheduler starts a
      // waiting collective's blocks first, so an all-reduce runs beside
      // the backward instead of after the kernels queued behind it.
      // Measured on two H200s (gpt2, B = 16 a GPU): 43.52 and 43.72 ms a
      // step against 43.59 at normal priority ($VKERN_COMM_PRIORITY=normal),
      // no difference seen; kept, as the order the design wants.
      int least = 0, greatest = 0;
      if (high_priority()) (void)cudaDeviceGetStreamPriorityRange(&least, &greatest);
      const cudaError_t e = cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest);
      if (e != cudaSuccess) return device_error(e, "creating the collective stream");
    }
    if (deadline_ == 0) {
      // The batch's collectives share the deadline of its first: the host
      // gives every entry the same timeout.
      deadline_ = nccl::deadline_after(col.timeout_ms);
      timeout_ms_ = col.timeout_ms;
      vkern_occupancy::g_lent_multiprocessors = lent_multiprocessors();
      vkern_occupancy::g_units_per_cluster = units_per_cluster();
    }
    cudaEvent_t ready = nullptr, done = nullptr;
    Result r = event(&ready);
    if (r.ok()) r = event(&done);
    if (!r.ok()) return r;
    cudaError_t e = cudaEventRecord(ready, compute);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(stream_, ready, 0);
    if (e != cudaSuccess) return device_error(e, "ordering a collective after the compute stream");
    note(static_cast<nccl::NcclComm*>(col.comm));
    r = nccl::enqueue(col, stream_, deadline_, cat("RUN_BATCH entry ", entry).c_str());
    if (!r.ok()) {
      abort_all();
      return r;
    }
    e = cudaEventRecord(done, stream_);
    if (e != cudaSuccess) return device_error(e, "recording a collective's end");
    last_ = done;
    uint64_t send_bytes = 0, recv_bytes = 0;
    collective_bytes(col, &send_bytes, &recv_bytes);
    pending_.push_back({reinterpret_cast<uintptr_t>(col.send), send_bytes});
    pending_.push_back({reinterpret_cast<uintptr_t>(col.recv), recv_bytes});
    return Result::OK();
  }

  // join_if_touched makes the compute stream wait for the collectives
  // issued so far when call touches one of their buffers.
  Result join_if_touched(const Call& call, cudaStream_t compute) {
    if (pending_.empty()) return Result::OK();
    for (int i = 0; i < call.op->buffer_count; ++i) {
      const uintptr_t p = reinterpret_cast<uintptr_t>(call.ptrs[i]);
      for (const Region& g : pending_) {
        if (call.bytes[i] == 0 || p >= g.at + g.bytes || g.at >= p + call.bytes[i]) continue;
        const cudaError_t e = cudaStreamWaitEvent(compute, last_, 0);
        if (e != cudaSuccess) return device_error(e, "ordering an entry after a collective");
        pending_.clear();
        return Result::OK();
      }
    }
    return Result::OK();
  }

  bool any() const { return !comms_.empty(); }

  // finish joins every collective into the compute stream and waits for
  // it; the batch's final wait.
  Result finish(cudaStream_t compute) {
    if (last_ != nullptr) {
      const cudaError_t e = cudaStreamWaitEvent(compute, last_, 0);
      if (e != cudaSuccess) return device_error(e, "joining the collectives");
    }
    const Result r = nccl::wait(compute, comms_, deadline_, timeout_ms_, "RUN_BATCH collectives");
    reset();
    return r;
  }

  // abort_all aborts every communicator the batch has used (after a
  // failure anywhere in it), so that no peer is left waiting on it.
  void abort_all() {
    for (nccl::NcclComm* c : comms_) nccl::abort(c);
    comms_.clear();
    reset();
  }

 private:
  struct Region {
    uintptr_t at;
    uint64_t bytes;
  };

  static Result device_error(cudaError_t e, const char* what) {
    return fail(kStatusDeviceError, what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
  }

  Result event(cudaEvent_t* out) {
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      const cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
      if (err != cudaSuccess) return device_error(err, "cudaEventCreateWithFlags");
      events_.push_back(e);
    }
    *out = events_[used_++];
    return Result::OK();
  }

  void note(nccl::NcclComm* c) {
    for (nccl::NcclComm* k : comms_) {
      if (k == c) return;
    }
    comms_.push_back(c);
  }

  // lent_multiprocessors is what the collectives may hold while the
  // compute stream runs (occupancy.h): $VKERN_COMM_SMS, a tuning knob, or 0.
  static int lent_multiprocessors() {
    static const int n = env_int("VKERN_COMM_SMS");
    return n;
  }

  // env_int is $name as a whole number, 0 when unset.
  static int env_int(const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr ? std::atoi(v) : 0;
  }

  // high_priority is whether the collective stream gets the device's
  // highest priority: unless $VKERN_COMM_PRIORITY is "normal".
  static bool high_priority() {
    static const bool high = [] {
      const char* v = std::getenv("VKERN_COMM_PRIORITY");
      return v == nullptr || std::strcmp(v, "normal") != 0;
    }();
    return high;
  }

  // units_per_cluster is the GEMMs' tiles per cluster while collectives
  // run (occupancy.h): $VKERN_COMM_GEMM_UNITS, or 0 (persistent).
  static int units_per_cluster() {
    static const int n = env_int("VKERN_COMM_GEMM_UNITS");
    return n;
  }

  void reset() {
    vkern_occupancy::g_lent_multiprocessors = 0;
    vkern_occupancy::g_units_per_cluster = 0;
    pending_.clear();
    used_ = 0;
    last_ = nullptr;
    deadline_ = 0;
    comms_.clear();
  }

  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> events_;
  size_t used_ = 0;
  cudaEvent_t last_ = nullptr;
  std::vector<Region> pending_;
  std::vector<nccl::NcclComm*> comms_;
  uint64_t deadline_ = 0;
  uint32_t timeout_ms_ = 0;
};

}  // namespace vkern
