// The kernel-server wire contract (PROTOCOL.md, version 2): frame limits,
// opcodes, status codes, exit statuses and little-endian field access.
//
// Every integer on the wire is little-endian. The helpers below assemble and
// split bytes explicitly, so they are correct on any host byte order and never
// read through a misaligned pointer.
#ifndef VKERN_CORE_PROTOCOL_H
#define VKERN_CORE_PROTOCOL_H

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>

namespace vkern {

constexpr uint32_t kProtocolVersion = 2;

// The environment cookie the host passes; without it the server refuses to run.
constexpr const char* kCookieName = "VKERN_KERNEL_SERVER";
constexpr const char* kCookieValue = "5f0c9e7a-vkern-kernel-server-v1";

// maxFrameBytes caps a frame body (header + payload) in both directions.
// Bulk data moves through the arena, so frames carry only control data.
constexpr uint32_t kMaxFrameBytes = 1u << 20;
// Every body opens with id u32, opcode u16, status u16.
constexpr uint32_t kHeaderBytes = 8;
// The most payload one frame can carry.
constexpr uint32_t kMaxPayloadBytes = kMaxFrameBytes - kHeaderBytes;
// The most RUNs one RUN_BATCH carries.
constexpr uint32_t kMaxBatchRuns = 65536;
// RUN_BATCH error responses open with the failing entry's index; this one
// says the error is about the batch as a whole.
constexpr uint32_t kNoBatchEntry = 0xFFFFFFFFu;
// RUN's flags: bit 0 asks the server not to time the kernel (the response's
// kernel time is then 0), which on a GPU saves two timing events per RUN.
// Every other bit must be 0.
constexpr uint32_t kRunUntimed = 1;
// Bit 1 makes a RUN_BATCH entry a collective (PROTOCOL.md, "Collectives"):
// its op id is then a CollectiveKind, not an op's.
constexpr uint32_t kRunCollective = 2;
constexpr uint32_t kRunKnownFlags = kRunUntimed | kRunCollective;
// The shared-memory arena is this file descriptor, set up by the host.
constexpr int kArenaFd = 3;

// The ring transport (PROTOCOL.md, "Rings"). A host that sets kRingsEnvName
// to "4" passes a file of kRingFileBytes on kRingFd: two single-producer,
// single-consumer byte rings, requests at offset 0 and responses at
// kRingBytes, each a control page and then kRingDataBytes of data. The
// frames then travel through the rings and the pipes carry only wake-ups and
// the end of input.
constexpr const char* kRingsEnvName = "VKERN_KERNEL_SERVER_RINGS";
constexpr int kRingFd = 4;
constexpr uint64_t kRingControlBytes = 4096;
constexpr uint64_t kRingDataBytes = uint64_t{1} << 20;  // a power of two
constexpr uint64_t kRingBytes = kRingControlBytes + kRingDataBytes;
constexpr uint64_t kRingFileBytes = 2 * kRingBytes;
// The control page's words, each on its own cache line.
constexpr size_t kRingHead = 0;             // u64: bytes ever written; the producer's
constexpr size_t kRingTail = 64;            // u64: bytes ever read; the consumer's
constexpr size_t kRingReaderAsleep = 128;   // u32: 1 while the consumer sleeps for data
constexpr size_t kRingWriterAsleep = 192;   // u32: 1 while the producer sleeps for room

enum Opcode : uint16_t {
  kOpHello = 1,
  kOpPing = 2,
  kOpAlloc = 3,
  kOpFree = 4,
  kOpWrite = 5,
  kOpRead = 6,
  kOpRun = 7,
  kOpSync = 8,
  kOpShutdown = 9,
  kOpRunBatch = 10,
  kOpTextWrite = 11,  // benchmark baseline only: decimal text in the frame
  kOpTextRead = 12,   // benchmark baseline only: decimal text in the frame
  kOpMemory = 13,     // the device's free and total memory
  kOpView = 14,       // a handle on part of a live buffer
  // Collectives (PROTOCOL.md, "Collectives"): communicators between the
  // servers of several devices, NCCL's on cuda.
  kOpCommInfo = 15,           // the collective engine: its version, or why there is none
  kOpCommUniqueId = 16,       // the id a new communicator's ranks join with (rank 0's server makes it)
  kOpCommInit = 17,           // join a communicator: unique id, rank, size
  kOpCommAllReduce = 18,      // recv = the elementwise reduction of every rank's send
  kOpCommReduceScatter = 19,  // recv = rank's slice of the reduction
  kOpCommAllGather = 20,      // recv = every rank's send, in rank order
  kOpCommAbort = 21,          // end a communicator at once, without waiting for its peers
};
constexpr uint16_t kLastOpcode = kOpCommAbort;

// A communicator's unique id: NCCL's ncclUniqueId, 128 opaque bytes.
constexpr size_t kCommUniqueIdBytes = 128;
// The element types and reductions a collective names on the wire.
enum CommDType : uint32_t { kCommF16 = 1, kCommF32 = 2, kCommI32 = 3 };
enum CommRedOp : uint32_t { kRedNone = 0, kRedSum = 1, kRedMax = 2 };
// A RUN_BATCH entry with the kRunCollective flag is a collective: its op
// id is its kind, its params count, dtype, redop and timeout_ms, its
// buffers the communicator, send and recv.
enum CollectiveKind : uint32_t { kAllReduce = 1, kReduceScatter = 2, kAllGather = 3 };

// A view starts at a multiple of kViewAlign bytes of its buffer, so that
// every kernel's widest vector loads stay aligned (cudaMalloc's alignment).
constexpr uint64_t kViewAlign = 256;

enum Status : uint16_t {
  kStatusOK = 0,
  kStatusMalformed = 1,
  kStatusUnknownOpcode = 2,
  kStatusBadHandle = 3,
  kStatusOutOfRange = 4,
  kStatusOutOfMemory = 5,
  kStatusInvalidArgument = 6,
  kStatusDeviceError = 7,
  kStatusNotSupported = 8,
  // A collective did not complete: a peer rank died or hung past the call's
  // timeout, or the engine reported an error. The communicator was aborted
  // and its handle is gone; the server serves on.
  kStatusCommFailed = 9,
};

enum ExitStatus : int {
  kExitClean = 0,           // SHUTDOWN, or end of input at a frame boundary
  kExitTruncatedFrame = 2,  // end of input inside a frame
  kExitOversizedFrame = 3,  // a length prefix over kMaxFrameBytes
  kExitDeviceError = 4,     // the device failed; a DEVICE_ERROR was sent
  kExitOutputClosed = 5,    // stdout could not be written (the host went away)
  kExitNoArena = 6,         // fd 3 is not a mappable arena, or fd 4 not the rings asked for
  kExitNoCookie = 64,       // started without the environment cookie
};

// An outcome: a status and, unless OK, a message naming the values involved.
struct Result {
  Status status = kStatusOK;
  std::string message;

  bool ok() const { return status == kStatusOK; }
  static Result OK() { return Result{}; }
};

inline void append_part(std::string& s, const std::string& part) { s += part; }
inline void append_part(std::string& s, const char* part) { s += part; }
template <class Int, std::enable_if_t<std::is_integral_v<Int>, int> = 0>
inline void append_part(std::string& s, Int part) {
  s += std::to_string(part);
}
// A real number as the shortest text that reads back the same ("1e-05",
// "0.9", "inf").
inline void append_part(std::string& s, double part) {
  char text[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, part);
    if (std::strtod(text, nullptr) == part || part != part) break;
  }
  s += text;
}

// cat joins strings and numbers into one message: cat("A has ", 12, " bytes").
template <class... Parts>
std::string cat(const Parts&... parts) {
  std::string s;
  (append_part(s, parts), ...);
  return s;
}

// fail is a Result with status s and the message cat(parts...).
template <class... Parts>
Result fail(Status s, const Parts&... parts) {
  return Result{s, cat(parts...)};
}

inline uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

inline uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

inline uint64_t load_u64(const uint8_t* p) {
  return static_cast<uint64_t>(load_u32(p)) | (static_cast<uint64_t>(load_u32(p + 4)) << 32);
}

inline void store_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}

inline void store_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

inline void store_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace vkern

#endif  // VKERN_CORE_PROTOCOL_H
