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

// A RUN that passed every check: its op, params and device pointers, and
// whether the caller wants the kernel timed.
struct CheckedRun {
  const OpSpec* op;
  int64_t params[kMaxOpParams];
  void* ptrs[kMaxOpBuffers];
  bool timed;
};

// Runs one op to completion. run.params has op.param_count entries, each
// dimension >= 1 and each index a 32-bit value or kUnsetIndex; run.ptrs has op.buffer_count device pointers, inputs first, every
// one large enough for its shape, no output equal to an input. kernel_ns
// receives the time of the kernel alone, or 0 when run.timed is false.
Result backend_run(const CheckedRun& run, uint64_t* kernel_ns);

// Runs runs[0], …, runs[count − 1] in order and waits for them once, at the
// end (count >= 1; each entry as backend_run would get it). kernel_ns[i]
// receives entry i's time (a backend may time an untimed entry anyway). On failure *failed is the index of the entry the
// error belongs to (the entries before it ran to completion), or
// kNoBatchEntry when the error surfaced at the final wait and the backend
// cannot tell which entry caused it; the message then says so.
Result backend_run_batch(const CheckedRun* runs, uint32_t count, uint64_t* kernel_ns, uint32_t* failed);

// Closes the device (joins threads, releases the context) before exit.
void backend_close();

}  // namespace vkern

#endif  // VKERN_CORE_BACKEND_H
