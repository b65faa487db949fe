// What a backend implements for the server core (server.cc).
//
// A build holds exactly one backend: the backend's unity file (cpu/main.cc,
// later cuda/main.cu) includes the core and defines every function below.
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
  bool timed;

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

// Runs calls[0], …, calls[count − 1] in order and waits for them once, at
// the end (count >= 1; each entry as backend_run would get it).
// kernel_ns[i] receives entry i's time (a backend may time an untimed
// entry anyway) and problem[i] entry i's as backend_run does: the entries
// after one with a problem still run, on whatever it left. On failure
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

// Closes the device (joins threads, releases the context) before exit.
void backend_close();

}  // namespace vkern

#endif  // VKERN_CORE_BACKEND_H
