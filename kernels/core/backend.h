// What a backend implements for the server core (server.cc).
//
// A build holds exactly one backend: its main unit (cpu/main.cc or
// cuda/main.cu) includes the core and the backend's device file, which
// defines every function below (kernels.cc or .cu, backend_op_names and the
// generated missing_kernel_reason).
// The core owns the handle table, the wire format and all validation; a
// backend sees only well-formed requests: live buffers, offset + length
// inside the buffer, shapes that match the op table (ops.h).
//
// Device pointers are opaque to the core (host memory on the cpu backend,
// device memory on a GPU). A backend returns kStatusOK, kStatusOutOfMemory
// (from alloc, or from run when the kernel's scratch memory cannot be had) or
// kStatusDeviceError; the core turns a device error into a DEVICE_ERROR
// response and exits with status 4.
#ifndef VKERN_CORE_BACKEND_H
#define VKERN_CORE_BACKEND_H

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/ops.h"
#include "core/protocol.h"

namespace vkern {

struct HelloField {
  std::string key;
  std::string value;
};

// Opens the device. On failure the server writes the message to stderr and
// exits with status 4 before HELLO.
Result backend_open();

// The device evidence for HELLO: backend, device, arch, cores, memory_bytes,
// driver, runtime, compiler, and any extra keys the backend wants reported.
// The core adds source_sha256.
std::vector<HelloField> backend_hello_fields();

Result backend_alloc(uint64_t bytes, void** ptr);
void backend_free(void* ptr, uint64_t bytes);
Result backend_write(void* buffer, uint64_t offset, const uint8_t* src, uint64_t length);
Result backend_read(const void* buffer, uint64_t offset, uint8_t* dst, uint64_t length);
Result backend_sync();

// The device's memory for MEMORY: total_bytes in all, and free_bytes that a
// new buffer could still get now, as this backend can best tell
// (PROTOCOL.md, "MEMORY", says what that is per backend).
Result backend_memory(uint64_t* free_bytes, uint64_t* total_bytes);

// Collective is a collective that passed every check (PROTOCOL.md,
// "Collectives"): comm is what backend_comm_init made, of size ranks with
// this server as rank; send and recv are live buffers large enough for
// count elements of dtype per rank (reduce-scatter's send and all-gather's
// recv hold size·count), either the same memory (in place, as NCCL
// defines it) or not overlapping; redop is kRedNone for all-gather.
// timeout_ms bounds the wait: past it, or on any error the engine reports,
// the backend aborts the communicator and answers kStatusCommFailed.
struct Collective {
  CollectiveKind kind;
  void* comm;
  uint32_t rank, size;
  const void* send;
  void* recv;
  uint64_t count;
  DType dtype;
  CommRedOp redop;
  uint32_t timeout_ms;
};

// collective_bytes is what c reads from send and writes into recv: count
// elements of its dtype, size times that on reduce-scatter's send and
// all-gather's recv. The core has checked that neither overflows.
inline void collective_bytes(const Collective& c, uint64_t* send_bytes, uint64_t* recv_bytes) {
  const uint64_t one = c.count * dtype_bytes(c.dtype);
  *send_bytes = c.kind == kReduceScatter ? one * c.size : one;
  *recv_bytes = c.kind == kAllGather ? one * c.size : one;
}

// Call is a RUN that passed every check: its op, parameters and buffers,
// and whether the caller wants the kernel timed. params has
// op->param_count entries (dimensions first), each of its kind and in its
// range; ptrs has op->buffer_count device pointers in wire order, every one
// large enough for its shape (nullptr for a buffer of 0 bytes), no output
// sharing a buffer with another but where the op allows it.
struct Call {
  const OpSpec* op;
  int64_t params[kMaxOpParams];
  void* ptrs[kMaxOpBuffers];
  // The bytes each buffer's shape covers (0 for an empty one), for a
  // backend that must tell whether a call touches a collective's buffers.
  uint64_t bytes[kMaxOpBuffers];
  bool timed;
  // A RUN_BATCH entry that is a collective instead of an op (op is then
  // nullptr and only collective means anything).
  Collective collective;

  // dim is parameter i as a size (a dimension or a whole-number parameter).
  size_t dim(int i) const { return static_cast<size_t>(params[i]); }
  // real is Float parameter i.
  double real(int i) const {
    double d;
    std::memcpy(&d, &params[i], sizeof d);
    return d;
  }
  template <typename T>
  T* ptr(int i) const {
    return static_cast<T*>(ptrs[i]);
  }
};

// kNoProblem: no element of a checked input broke its domain.
constexpr uint64_t kNoProblem = ~uint64_t{0};

// Runs one op to completion. kernel_ns receives the time of the kernel
// alone, or 0 when call.timed is false. For an op with a checked input
// (op->checked_buffer >= 0), *problem receives the index of the first
// element of that input that broke its domain, or kNoProblem; the core
// then reads the element and words the error. An op the backend has no
// kernel for answers kStatusNotSupported.
Result backend_run(const Call& call, uint64_t* kernel_ns, uint64_t* problem);

// The collective engine (PROTOCOL.md, "Collectives"). comm_info says what
// it is (*version: the engine's version code, 0 when it has none; *text:
// a line for people) or answers NOT_SUPPORTED with the reason it cannot
// be had. The others may assume a working engine (the core asks
// comm_info first and refuses them with its answer otherwise).
Result backend_comm_info(uint32_t* version, std::string* text);
Result backend_comm_unique_id(uint8_t* id);  // kCommUniqueIdBytes bytes
// Joins the communicator id names as rank of size, waiting at most
// timeout_ms for the other ranks (kStatusCommFailed past it).
Result backend_comm_init(const uint8_t* id, uint32_t rank, uint32_t size, uint32_t timeout_ms, void** comm);
// Runs one collective to completion (the COMM_* requests).
Result backend_collective(const Collective& c);
// Ends comm without waiting for its peers (unless the backend has aborted
// it already) and frees it.
void backend_comm_abort(void* comm);

// Runs calls[0], …, calls[count − 1] in order and waits for them once, at
// the end (count >= 1; each entry as backend_run would get it).
// kernel_ns[i] receives entry i's time (a backend may time an untimed
// entry anyway) and problem[i] entry i's as backend_run does: the entries
// after one with a problem still run, on whatever it left. An entry whose
// op is nullptr is a collective (call.collective): it runs after every
// entry before it, and every later entry that touches its buffers runs
// after it; a backend may overlap it with later entries that do not. Its
// time is 0. A collective that fails answers kStatusCommFailed; a batch
// with collective entries that fails in any way has aborted every
// communicator its entries name (the core then releases them with
// backend_comm_abort), so that no peer waits on this rank. On failure
// *failed is the index of the entry the error belongs to (the entries
// before it ran to completion), or kNoBatchEntry when the error surfaced at
// the final wait and the backend cannot tell which entry caused it; the
// message then says so.
Result backend_run_batch(const Call* calls, uint32_t count, uint64_t* kernel_ns, uint64_t* problem, uint32_t* failed);

// The names of the ops this backend has kernels for, comma-separated, for
// HELLO's ops field.
std::string backend_op_names();

// Why this backend has no kernel for op op_id, for its NOT_SUPPORTED
// answer (generated into kernel_list.inc by kernels.Sources).
const char* missing_kernel_reason(uint32_t op_id);

// host_gone reports whether the host has closed the server's input (it
// died, or ended the server): a backend waiting on peer ranks gives up
// then, so that no communicator outlives its host. The core provides it.
bool host_gone();

// Closes the device (joins threads, releases the context) before exit.
void backend_close();

}  // namespace vkern

#endif  // VKERN_CORE_BACKEND_H
