// The kernel server's frame loop (PROTOCOL.md, version 2), backend-neutral.
//
// One thread reads a request frame, validates it completely, hands it to the
// backend, and writes exactly one response frame before it reads the next,
// so responses leave in request order. How the frames travel, on the pipes
// or through shared-memory rings, is link.h's affair. The core
// owns the handle table and every check against it, so a backend only ever
// sees live buffers, in-range offsets and shapes that match the op table.
//
// Bulk data never travels in frames: WRITE and READ name a range of the
// shared-memory arena (file descriptor 3, made and grown by the host), and
// the backend copies between that range and the buffer. The arena is mapped
// once and remapped only when a request names a range past the mapping,
// after fstat shows that the host has grown the file.
//
// stdout carries frames (or, with rings, wake bytes) only. At start the
// server keeps a private duplicate of stdout for them and points file
// descriptor 1 at stderr, so a stray print from a library cannot corrupt
// the stream.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/backend.h"
#include "core/link.h"
#include "core/ops.h"
#include "core/protocol.h"

// vkern_source_sha256 is the SHA-256 of the sources this server was built
// from, as hex: the builder writes the unit that defines it (package cache,
// vkern_source.cc), and HELLO reports it.
extern "C" const char vkern_source_sha256[];

namespace vkern {
namespace {

const char* opcode_name(uint16_t opcode) {
  switch (opcode) {
    case kOpHello: return "HELLO";
    case kOpPing: return "PING";
    case kOpAlloc: return "ALLOC";
    case kOpFree: return "FREE";
    case kOpWrite: return "WRITE";
    case kOpRead: return "READ";
    case kOpRun: return "RUN";
    case kOpSync: return "SYNC";
    case kOpShutdown: return "SHUTDOWN";
    case kOpRunBatch: return "RUN_BATCH";
    case kOpTextWrite: return "TEXT_WRITE";
    case kOpTextRead: return "TEXT_READ";
    case kOpMemory: return "MEMORY";
    case kOpView: return "VIEW";
    case kOpCommInfo: return "COMM_INFO";
    case kOpCommUniqueId: return "COMM_UNIQUE_ID";
    case kOpCommInit: return "COMM_INIT";
    case kOpCommAllReduce: return "COMM_ALL_REDUCE";
    case kOpCommReduceScatter: return "COMM_REDUCE_SCATTER";
    case kOpCommAllGather: return "COMM_ALL_GATHER";
    case kOpCommAbort: return "COMM_ABORT";
    default: return "unknown";
  }
}

// Input reads the request stream through a buffer, so that a burst of
// pipelined requests costs one read call rather than two per frame.
class Input {
 public:
  explicit Input(Link& link) : link_(link) {}

  // read_full reads n bytes unless input ends first; it returns the count
  // read, or -1 on a read error (errno says which).
  long long read_full(uint8_t* dst, size_t n) {
    size_t got = 0;
    while (got < n) {
      if (next_ == end_) {
        // Large reads bypass the buffer; small ones refill it.
        if (n - got >= sizeof buf_) {
          const long long r = link_.read_some(dst + got, n - got);
          if (r == 0) break;
          if (r < 0) return -1;
          got += static_cast<size_t>(r);
          continue;
        }
        const long long r = link_.read_some(buf_, sizeof buf_);
        if (r == 0) break;
        if (r < 0) return -1;
        next_ = 0;
        end_ = static_cast<size_t>(r);
      }
      const size_t take = std::min(n - got, end_ - next_);
      std::memcpy(dst + got, buf_ + next_, take);
      next_ += take;
      got += take;
    }
    return static_cast<long long>(got);
  }

 private:
  Link& link_;
  uint8_t buf_[64 << 10];
  size_t next_ = 0, end_ = 0;
};

// Arena is the host's shared-memory file on kArenaFd, mapped read-write.
class Arena {
 public:
  // open maps the arena as it is now; a false return leaves a message.
  bool open(std::string* message) {
    struct stat st;
    if (::fstat(kArenaFd, &st) != 0) {
      *message = cat("file descriptor ", kArenaFd, " is not open (", std::strerror(errno),
                     "); the host passes the shared-memory arena there");
      return false;
    }
    if (!S_ISREG(st.st_mode)) {
      *message = cat("file descriptor ", kArenaFd, " is not a memfd or regular file; the host passes the arena there");
      return false;
    }
    const Result r = map(static_cast<uint64_t>(st.st_size));
    if (!r.ok()) *message = r.message;
    return r.ok();
  }

  uint64_t mapped() const { return size_; }

  // span points *p at arena bytes [offset, offset + length), remapping
  // first if the host has grown the arena past the current mapping.
  Result span(const char* what, uint64_t offset, uint64_t length, uint8_t** p) {
    if (!inside(offset, length, size_)) {
      struct stat st;
      if (::fstat(kArenaFd, &st) != 0) {
        return fail(kStatusDeviceError, what, ": fstat of the arena failed: ", std::strerror(errno));
      }
      const uint64_t now = static_cast<uint64_t>(st.st_size);
      if (!inside(offset, length, now)) {
        return fail(kStatusOutOfRange, what, ": arena range of ", length, " bytes at arena offset ", offset,
                    " overruns the arena of ", now, " bytes");
      }
      const Result r = map(now);
      if (!r.ok()) return r;
    }
    *p = base_ + offset;
    return Result::OK();
  }

  void close() {
    if (base_ != nullptr) ::munmap(base_, size_);
    base_ = nullptr;
    size_ = 0;
  }

 private:
  static bool inside(uint64_t offset, uint64_t length, uint64_t size) {
    return offset <= size && length <= size - offset;
  }

  Result map(uint64_t size) {
    close();
    if (size == 0) return Result::OK();
    if (size > SIZE_MAX) return fail(kStatusOutOfMemory, "the arena of ", size, " bytes cannot be mapped here");
    void* p = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, kArenaFd, 0);
    if (p == MAP_FAILED) {
      return fail(kStatusOutOfMemory, "mapping the arena of ", size, " bytes failed: ", std::strerror(errno));
    }
    base_ = static_cast<uint8_t*>(p);
    size_ = size;
    return Result::OK();
  }

  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
};

const char* collective_name(uint32_t kind) {
  switch (kind) {
    case kAllReduce: return "all_reduce";
    case kReduceScatter: return "reduce_scatter";
    case kAllGather: return "all_gather";
    default: return "unknown collective";
  }
}

// comm_dtype maps a wire element type to the op table's; false for none.
bool comm_dtype(uint32_t wire, DType* out) {
  switch (wire) {
    case kCommF16: *out = DType::kF16; return true;
    case kCommF32: *out = DType::kF32; return true;
    case kCommI32: *out = DType::kI32; return true;
    default: return false;
  }
}

// LiveComm is what a communicator handle names: the backend's
// communicator, and this server's place in it.
struct LiveComm {
  void* comm;
  uint32_t rank, size;
};

// LiveBuffer is what a handle names: memory ALLOC made (owner 0), or a
// view into the memory of buffer owner.
struct LiveBuffer {
  void* ptr;
  uint64_t bytes;
  uint64_t owner;
};

// param_text writes parameter i's value: a whole number, a real number,
// or "unset" for an unset index.
std::string param_text(const OpSpec& op, const int64_t* params, int i) {
  switch (op.params[i].kind) {
    case ParamKind::kIndex:
      if (params[i] == kUnsetIndex) return "unset";
      break;
    case ParamKind::kFloat: {
      double d;
      std::memcpy(&d, &params[i], sizeof d);
      return cat(d);
    }
    default: break;
  }
  return cat(params[i]);
}

// shape_values lists an op's params as "M=4, N=4, K=2"; an unset index
// reads "ignore_index=unset".
std::string shape_values(const OpSpec& op, const int64_t* params) {
  std::string s;
  for (int i = 0; i < op.param_count; ++i) s += cat(i > 0 ? ", " : "", op.params[i].name, "=", param_text(op, params, i));
  return s;
}

// check_param checks param i of op against its kind and range (ops.h,
// ParamKind).
Result check_param(const OpSpec& op, const int64_t* params, int i) {
  const ParamSpec& spec = op.params[i];
  const int64_t v = params[i];
  switch (spec.kind) {
    case ParamKind::kDim:
      if (v >= 1) return Result::OK();
      return fail(kStatusInvalidArgument, op.name, ": ", spec.name, " = ", v, ", want >= 1 (", shape_values(op, params),
                  ")");
    case ParamKind::kInt:
      if (static_cast<double>(v) >= spec.min && static_cast<double>(v) <= spec.max) return Result::OK();
      return fail(kStatusInvalidArgument, op.name, ": ", spec.name, " = ", v, ", want a whole number in [", spec.min,
                  ", ", spec.max, "] (", shape_values(op, params), ")");
    case ParamKind::kIndex:
      if (v == kUnsetIndex || (v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max())) {
        return Result::OK();
      }
      return fail(kStatusInvalidArgument, op.name, ": ", spec.name, " = ", v, ", want a 32-bit label value, or ",
                  kUnsetIndex, " for none (", shape_values(op, params), ")");
    case ParamKind::kFloat: {
      double d;
      std::memcpy(&d, &v, sizeof d);
      if (d >= spec.min && d <= spec.max) return Result::OK();  // false for NaN
      return fail(kStatusInvalidArgument, op.name, ": ", spec.name, " = ", d, ", want a number in [", spec.min, ", ",
                  spec.max, "] (", shape_values(op, params), ")");
    }
  }
  return fail(kStatusInvalidArgument, op.name, ": parameter ", spec.name, " has no kind");
}

// extent_text writes an extent as "3·C", "B·T" or "1".
std::string extent_text(const OpSpec& op, const Extent& e) {
  std::string s = e.coef != 1 || e.count == 0 ? cat(e.coef) : std::string();
  for (int t = 0; t < e.count; ++t) s += cat(s.empty() ? "" : "·", op.params[e.terms[t]].name);
  return s;
}

// buffer_dims writes a buffer's size in messages: "R·V", or "R" for a vector.
std::string buffer_dims(const OpSpec& op, const BufferSpec& spec) {
  const std::string rows = extent_text(op, spec.rows), cols = extent_text(op, spec.cols);
  if (cols == "1") return rows;
  if (rows == "1") return cols;
  return cat(rows, "·", cols);
}

// extent_value evaluates e at params; false on overflow.
bool extent_value(const Extent& e, const int64_t* params, uint64_t* out) {
  uint64_t n = static_cast<uint64_t>(e.coef);
  for (int t = 0; t < e.count; ++t) {
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(params[e.terms[t]]), &n)) return false;
  }
  *out = n;
  return true;
}

// domain_error is the INVALID_ARGUMENT of a call whose checked input
// (op.checked_buffer) broke its domain at element index, holding value.
Result domain_error(const OpSpec& op, const int64_t* params, uint64_t index, int64_t value) {
  const BufferSpec& b = op.buffers[op.checked_buffer];
  return fail(kStatusInvalidArgument, op.name, ": ", b.name, "[", index, "] = ", value, " is outside its domain: ",
              b.domain, " (", shape_values(op, params), "); fix the ", b.name, "; this call's outputs are unspecified");
}

std::string known_ops() {
  std::string s;
  for (const OpSpec& op : kOps) s += cat(s.empty() ? "" : ", ", op.id, " ", op.name);
  return s;
}

// Result of a request: its status and message, and for RUN_BATCH the entry
// an error belongs to.
struct Outcome {
  Result result;
  uint32_t batch_entry = kNoBatchEntry;
};

class Server {
 public:
  explicit Server(Link& link) : link_(link), in_(link) {}

  bool open_arena(std::string* message) { return arena_.open(message); }
  uint64_t arena_bytes() const { return arena_.mapped(); }
  bool send_hello();
  // serve answers requests until SHUTDOWN, end of input or a fatal error,
  // and returns the exit status.
  int serve();
  void release_all();

 private:
  // payload makes the response under construction (4-byte length, 8-byte
  // header, payload) n payload bytes long and returns where they go.
  uint8_t* payload(size_t n) {
    response_.resize(4 + kHeaderBytes + n);
    return response_.data() + 4 + kHeaderBytes;
  }
  bool send(uint32_t id, uint16_t opcode, Status status);
  bool send_error(uint32_t id, uint16_t opcode, const Outcome& o);

  Outcome handle(uint16_t opcode, const uint8_t* p, size_t n);
  // find looks a handle up; what names the lookup in the error message.
  Result find(uint64_t handle, LiveBuffer* out, const char* what) const;
  Result alloc(const uint8_t* p, size_t n);
  Result free_buffer(const uint8_t* p, size_t n);
  Result view(const uint8_t* p, size_t n);
  Result transfer(uint16_t opcode, const uint8_t* p, size_t n);
  Result check_run(const uint8_t* p, size_t n, Call* run) const;
  Result run(const uint8_t* p, size_t n);
  Outcome run_batch(const uint8_t* p, size_t n);
  Result text_write(const uint8_t* p, size_t n);
  Result text_read(const uint8_t* p, size_t n);
  Result memory(size_t n);
  // The collectives (PROTOCOL.md, "Collectives").
  Result engine();
  Result comm_info(size_t n);
  Result comm_unique_id(size_t n);
  Result comm_init(const uint8_t* p, size_t n);
  Result comm_request(uint16_t opcode, const uint8_t* p, size_t n);
  Result comm_abort(const uint8_t* p, size_t n);
  // check_collective checks a collective against the handle tables; what
  // names it in messages.
  Result check_collective(const char* what, uint32_t kind, uint64_t comm, uint64_t send, uint64_t recv, uint64_t count,
                          uint32_t dtype, uint32_t redop, uint32_t timeout_ms, Collective* out) const;
  // drop_comm releases a communicator that a failed collective aborted.
  void drop_comm(void* comm);

  Link& link_;
  Input in_;
  Arena arena_;
  std::vector<uint8_t> request_;
  std::vector<uint8_t> response_;
  std::unordered_map<uint64_t, LiveBuffer> buffers_;
  std::unordered_map<uint64_t, LiveComm> comms_;
  bool engine_asked_ = false;
  Result engine_;
  uint32_t engine_version_ = 0;
  std::string engine_text_;
  std::vector<Call> batch_;
  std::vector<uint64_t> problems_;
  std::vector<uint64_t> times_;
  uint64_t next_handle_ = 1;
};

bool Server::send(uint32_t id, uint16_t opcode, Status status) {
  if (response_.size() < 4 + kHeaderBytes) payload(0);
  uint8_t* p = response_.data();
  store_u32(p, static_cast<uint32_t>(response_.size() - 4));
  store_u32(p + 4, id);
  store_u16(p + 8, opcode);
  store_u16(p + 10, status);
  const bool ok = link_.write_all(response_.data(), response_.size());
  response_.clear();
  return ok;
}

// send_error sends a non-OK response: the message, preceded for RUN_BATCH
// by the failing entry's index. Messages are cut to fit a frame.
bool Server::send_error(uint32_t id, uint16_t opcode, const Outcome& o) {
  const size_t prefix = opcode == kOpRunBatch ? 4 : 0;
  const size_t n = std::min<size_t>(o.result.message.size(), kMaxPayloadBytes - prefix);
  uint8_t* p = payload(prefix + n);
  if (prefix != 0) store_u32(p, o.batch_entry);
  std::memcpy(p + prefix, o.result.message.data(), n);
  return send(id, opcode, o.result.status);
}

bool Server::send_hello() {
  std::vector<HelloField> fields = backend_hello_fields();
  fields.push_back({"source_sha256", vkern_source_sha256});
  fields.push_back({"ops", backend_op_names()});
  fields.push_back({"pid", std::to_string(static_cast<long>(::getpid()))});
  size_t n = 8;
  for (const HelloField& f : fields) n += 2 + f.key.size() + 4 + f.value.size();
  uint8_t* p = payload(n);
  store_u32(p, kProtocolVersion);
  store_u32(p + 4, static_cast<uint32_t>(fields.size()));
  p += 8;
  for (const HelloField& f : fields) {
    store_u16(p, static_cast<uint16_t>(f.key.size()));
    std::memcpy(p + 2, f.key.data(), f.key.size());
    p += 2 + f.key.size();
    store_u32(p, static_cast<uint32_t>(f.value.size()));
    std::memcpy(p + 4, f.value.data(), f.value.size());
    p += 4 + f.value.size();
  }
  return send(0, kOpHello, kStatusOK);
}

void Server::release_all() {
  for (auto& entry : comms_) backend_comm_abort(entry.second.comm);
  comms_.clear();
  for (auto& entry : buffers_) {
    if (entry.second.owner == 0) backend_free(entry.second.ptr, entry.second.bytes);
  }
  buffers_.clear();
  arena_.close();
}

int Server::serve() {
  uint8_t prefix[4];
  for (;;) {
    const long long got = in_.read_full(prefix, sizeof prefix);
    if (got == 0) return kExitClean;
    if (got < 0) {
      std::fprintf(stderr, "vkern kernel server: reading stdin: %s\n", std::strerror(errno));
      return kExitTruncatedFrame;
    }
    if (got != sizeof prefix) {
      std::fprintf(stderr, "vkern kernel server: input ended inside a length prefix (%lld of 4 bytes)\n", got);
      return kExitTruncatedFrame;
    }
    const uint32_t length = load_u32(prefix);
    if (length > kMaxFrameBytes) {
      Outcome o;
      o.result = fail(kStatusMalformed, "frame length prefix ", length, " bytes exceeds maxFrameBytes ",
                      kMaxFrameBytes, "; the stream cannot be resynchronised, the server exits with status 3");
      std::fprintf(stderr, "vkern kernel server: %s\n", o.result.message.c_str());
      send_error(0, 0, o);
      return kExitOversizedFrame;
    }
    request_.resize(length);
    const long long body = in_.read_full(request_.data(), length);
    if (body != static_cast<long long>(length)) {
      std::fprintf(stderr, "vkern kernel server: input ended inside a frame body (%lld of %u bytes)\n", body, length);
      return kExitTruncatedFrame;
    }
    if (length < kHeaderBytes) {
      Outcome o;
      o.result = fail(kStatusMalformed, "frame body has ", length, " bytes, shorter than the 8-byte header");
      if (!send_error(0, 0, o)) return kExitOutputClosed;
      continue;
    }
    const uint32_t id = load_u32(request_.data());
    const uint16_t opcode = load_u16(request_.data() + 4);
    const uint16_t status = load_u16(request_.data() + 6);
    Outcome o;
    if (status != 0) {
      o.result = fail(kStatusMalformed, opcode_name(opcode), " request has status ", status, ", want 0 in a request");
    } else {
      o = handle(opcode, request_.data() + kHeaderBytes, length - kHeaderBytes);
    }
    if (!(o.result.ok() ? send(id, opcode, kStatusOK) : send_error(id, opcode, o))) {
      std::fprintf(stderr, "vkern kernel server: writing a response to stdout: %s\n", std::strerror(errno));
      return kExitOutputClosed;
    }
    if (o.result.status == kStatusDeviceError) {
      std::fprintf(stderr, "vkern kernel server: device error: %s\n", o.result.message.c_str());
      return kExitDeviceError;
    }
    if (o.result.ok() && opcode == kOpShutdown) return kExitClean;
  }
}

Outcome Server::handle(uint16_t opcode, const uint8_t* p, size_t n) {
  Outcome o;
  switch (opcode) {
    case kOpPing:
    case kOpSync:
    case kOpShutdown:
      if (n != 0) {
        o.result = fail(kStatusMalformed, opcode_name(opcode), " payload has ", n, " bytes, want 0");
      } else if (opcode == kOpSync) {
        o.result = backend_sync();
      }
      return o;
    case kOpAlloc: o.result = alloc(p, n); return o;
    case kOpFree: o.result = free_buffer(p, n); return o;
    case kOpWrite:
    case kOpRead: o.result = transfer(opcode, p, n); return o;
    case kOpRun: o.result = run(p, n); return o;
    case kOpRunBatch: return run_batch(p, n);
    case kOpTextWrite: o.result = text_write(p, n); return o;
    case kOpTextRead: o.result = text_read(p, n); return o;
    case kOpMemory: o.result = memory(n); return o;
    case kOpView: o.result = view(p, n); return o;
    case kOpCommInfo: o.result = comm_info(n); return o;
    case kOpCommUniqueId: o.result = comm_unique_id(n); return o;
    case kOpCommInit: o.result = comm_init(p, n); return o;
    case kOpCommAllReduce:
    case kOpCommReduceScatter:
    case kOpCommAllGather: o.result = comm_request(opcode, p, n); return o;
    case kOpCommAbort: o.result = comm_abort(p, n); return o;
    case kOpHello: o.result = fail(kStatusUnknownOpcode, "opcode 1 (HELLO) is sent by the server, never a request"); return o;
    default:
      o.result = fail(kStatusUnknownOpcode, "unknown opcode ", opcode, "; requests are 2 (PING) to ", kLastOpcode, " (",
                      opcode_name(kLastOpcode), ")");
      return o;
  }
}

Result Server::find(uint64_t handle, LiveBuffer* out, const char* what) const {
  const auto it = buffers_.find(handle);
  if (it == buffers_.end()) return fail(kStatusBadHandle, what, ": no live buffer has handle ", handle);
  *out = it->second;
  return Result::OK();
}

// check_range reports an access [offset, offset + length) that leaves the buffer.
Result check_range(const char* what, uint64_t handle, uint64_t offset, uint64_t length, uint64_t size) {
  if (offset <= size && length <= size - offset) return Result::OK();
  return fail(kStatusOutOfRange, what, " of ", length, " bytes at offset ", offset, " overruns buffer ", handle, " of ",
              size, " bytes");
}

Result Server::alloc(const uint8_t* p, size_t n) {
  if (n != 8) return fail(kStatusMalformed, "ALLOC payload has ", n, " bytes, want 8");
  const uint64_t bytes = load_u64(p);
  if (bytes == 0) return fail(kStatusInvalidArgument, "ALLOC of 0 bytes; want >= 1");
  void* ptr = nullptr;
  const Result r = backend_alloc(bytes, &ptr);
  if (!r.ok()) return r;
  const uint64_t handle = next_handle_++;
  buffers_[handle] = LiveBuffer{ptr, bytes, 0};
  store_u64(payload(8), handle);
  return Result::OK();
}

// view makes a handle on bytes [offset, offset + bytes) of a live buffer. A
// view of a view is a view of the same allocation.
Result Server::view(const uint8_t* p, size_t n) {
  if (n != 24) return fail(kStatusMalformed, "VIEW payload has ", n, " bytes, want 24");
  const uint64_t handle = load_u64(p), offset = load_u64(p + 8), bytes = load_u64(p + 16);
  LiveBuffer b;
  Result r = find(handle, &b, "VIEW");
  if (!r.ok()) return r;
  if (bytes == 0) return fail(kStatusInvalidArgument, "VIEW of 0 bytes; want >= 1");
  r = check_range("VIEW", handle, offset, bytes, b.bytes);
  if (!r.ok()) return r;
  const uint64_t owner = b.owner != 0 ? b.owner : handle;
  const uint64_t base = reinterpret_cast<uintptr_t>(static_cast<uint8_t*>(b.ptr) + offset) -
                        reinterpret_cast<uintptr_t>(buffers_.at(owner).ptr);
  if (base % kViewAlign != 0) {
    return fail(kStatusInvalidArgument, "VIEW at offset ", offset, " of buffer ", handle, " starts ", base,
                " bytes into its allocation, not a multiple of ", kViewAlign, "; views start on ", kViewAlign,
                "-byte boundaries");
  }
  const uint64_t id = next_handle_++;
  buffers_[id] = LiveBuffer{static_cast<uint8_t*>(b.ptr) + offset, bytes, owner};
  store_u64(payload(8), id);
  return Result::OK();
}

Result Server::free_buffer(const uint8_t* p, size_t n) {
  if (n != 8) return fail(kStatusMalformed, "FREE payload has ", n, " bytes, want 8");
  const uint64_t handle = load_u64(p);
  LiveBuffer b;
  const Result r = find(handle, &b, "FREE");
  if (!r.ok()) return r;
  buffers_.erase(handle);
  if (b.owner != 0) return Result::OK();  // a view: the memory stays
  backend_free(b.ptr, b.bytes);
  for (auto it = buffers_.begin(); it != buffers_.end();) {
    it = it->second.owner == handle ? buffers_.erase(it) : std::next(it);
  }
  return Result::OK();
}

// transfer serves WRITE (arena -> buffer) and READ (buffer -> arena).
Result Server::transfer(uint16_t opcode, const uint8_t* p, size_t n) {
  const char* what = opcode_name(opcode);
  if (n != 32) return fail(kStatusMalformed, what, " payload has ", n, " bytes, want 32");
  const uint64_t handle = load_u64(p);
  const uint64_t offset = load_u64(p + 8);
  const uint64_t arena_offset = load_u64(p + 16);
  const uint64_t length = load_u64(p + 24);
  LiveBuffer b;
  Result r = find(handle, &b, what);
  if (r.ok()) r = check_range(what, handle, offset, length, b.bytes);
  uint8_t* bytes = nullptr;
  if (r.ok()) r = arena_.span(what, arena_offset, length, &bytes);
  if (!r.ok()) return r;
  if (opcode == kOpWrite) return backend_write(b.ptr, offset, bytes, length);
  return backend_read(b.ptr, offset, bytes, length);
}

// check_run decodes one RUN payload and checks it against the op table and
// the handle table.
Result Server::check_run(const uint8_t* p, size_t n, Call* run) const {
  if (n < 16) return fail(kStatusMalformed, "RUN payload has ", n, " bytes, want >= 16");
  const uint32_t op_id = load_u32(p);
  const uint32_t param_count = load_u32(p + 4);
  const uint32_t buffer_count = load_u32(p + 8);
  const uint32_t flags = load_u32(p + 12);
  if ((flags & ~kRunKnownFlags) != 0) {
    return fail(kStatusMalformed, "RUN flags are ", flags,
                "; only bits 0 (1, untimed) and 1 (2, collective) are defined, the rest must be 0");
  }
  const uint64_t want = 16 + 8 * (uint64_t{param_count} + uint64_t{buffer_count});
  if (n != want) {
    return fail(kStatusMalformed, "RUN payload has ", n, " bytes, want 16 + 8·(", param_count, " params + ",
                buffer_count, " buffers) = ", want);
  }

  if ((flags & kRunCollective) != 0) {
    // A collective entry: params count, dtype, redop, timeout_ms; buffers
    // the communicator, send and recv.
    const uint32_t kind = op_id;
    if (param_count != 4 || buffer_count != 3) {
      return fail(kStatusInvalidArgument, "RUN: collective entry ", collective_name(kind),
                  " takes 4 params (count, dtype, redop, timeout_ms) and 3 buffers (comm, send, recv), got ",
                  param_count, " params and ", buffer_count, " buffers");
    }
    uint64_t v[7];
    for (int i = 0; i < 7; ++i) v[i] = load_u64(p + 16 + 8 * i);
    for (int i = 1; i < 4; ++i) {
      if (v[i] > 0xFFFFFFFFu) {
        return fail(kStatusInvalidArgument, "RUN: collective entry ", collective_name(kind), ": param ", i, " is ", v[i],
                    ", want a u32 (dtype, redop, timeout_ms)");
      }
    }
    *run = Call{};
    run->op = nullptr;
    run->timed = (flags & kRunUntimed) == 0;
    return check_collective("RUN_BATCH collective", kind, v[4], v[5], v[6], v[0], static_cast<uint32_t>(v[1]),
                            static_cast<uint32_t>(v[2]), static_cast<uint32_t>(v[3]), &run->collective);
  }
  const OpSpec* op = find_op(op_id);
  if (op == nullptr) {
    return fail(kStatusInvalidArgument, "RUN: unknown op id ", op_id, " (known: ", known_ops(), ")");
  }
  const char* name = op->name;
  if (param_count != static_cast<uint32_t>(op->param_count) ||
      buffer_count != static_cast<uint32_t>(op->buffer_count)) {
    std::string params, buffers;
    for (int i = 0; i < op->param_count; ++i) params += cat(i ? ", " : "", op->params[i].name);
    for (int i = 0; i < op->buffer_count; ++i) buffers += cat(i ? ", " : "", op->buffers[i].name);
    return fail(kStatusInvalidArgument, name, " takes ", op->param_count, " params (", params, ") and ",
                op->buffer_count, " buffers (", buffers, "), got ", param_count, " params and ", buffer_count,
                " buffers");
  }

  run->op = op;
  run->timed = (flags & kRunUntimed) == 0;
  int64_t* params = run->params;
  for (int i = 0; i < op->param_count; ++i) params[i] = static_cast<int64_t>(load_u64(p + 16 + 8 * i));
  for (int i = 0; i < op->param_count; ++i) {
    const Result r = check_param(*op, params, i);
    if (!r.ok()) return r;
  }

  const uint8_t* handles = p + 16 + 8 * op->param_count;
  LiveBuffer bufs[kMaxOpBuffers] = {};
  uint64_t ids[kMaxOpBuffers] = {};
  uint64_t need[kMaxOpBuffers] = {};  // the bytes the call touches
  for (int i = 0; i < op->buffer_count; ++i) {
    ids[i] = load_u64(handles + 8 * i);
    if (ids[i] == 0) continue;  // no buffer: allowed only where the size is 0, checked below
    // The message is built only on failure: a batch of tiny runs spends
    // most of its time in these checks.
    const auto it = buffers_.find(ids[i]);
    if (it == buffers_.end()) {
      return fail(kStatusBadHandle, name, " buffer ", i, " (", op->buffers[i].name, "): no live buffer has handle ",
                  ids[i]);
    }
    bufs[i] = it->second;
  }

  for (int d = 0; d < op->divides_count; ++d) {
    const int64_t a = params[op->divides[d].a], b = params[op->divides[d].b];
    if (b % a != 0) {
      return fail(kStatusInvalidArgument, name, ": ", op->params[op->divides[d].a].name, " = ", a, " does not divide ",
                  op->params[op->divides[d].b].name, " = ", b, " (", shape_values(*op, params), ")");
    }
  }

  for (int i = 0; i < op->buffer_count; ++i) {
    const BufferSpec& spec = op->buffers[i];
    uint64_t rows = 0, cols = 0, elements = 0, bytes = 0;
    const uint64_t elem = dtype_bytes(spec.dtype);
    if (!extent_value(spec.rows, params, &rows) || !extent_value(spec.cols, params, &cols) ||
        __builtin_mul_overflow(rows, cols, &elements) || __builtin_mul_overflow(elements, elem, &bytes)) {
      return fail(kStatusInvalidArgument, name, ": ", spec.name, " (", dtype_name(spec.dtype), ") needs ",
                  buffer_dims(*op, spec), "·", elem, " bytes, which overflows 64 bits (", shape_values(*op, params),
                  ")");
    }
    need[i] = ids[i] == 0 ? 0 : bytes;
    run->bytes[i] = need[i];
    if (bytes == 0 && ids[i] == 0) {
      run->ptrs[i] = nullptr;  // an empty buffer (a bias switched off) needs none
      continue;
    }
    if (bufs[i].bytes < bytes) {
      return fail(kStatusInvalidArgument, name, ": ", spec.name, " (handle ", ids[i], ") has ", bufs[i].bytes,
                  " bytes, want ", buffer_dims(*op, spec), "·", elem, " = ", bytes, " (", shape_values(*op, params),
                  ")");
    }
    run->ptrs[i] = bufs[i].ptr;
  }

  // An output may share memory with no other operand (views make partial
  // overlaps possible), except the one input the contract names, and then
  // exactly: the same first byte.
  for (int o = 0; o < op->buffer_count; ++o) {
    if (!writes(op->buffers[o]) || need[o] == 0) continue;
    const uintptr_t o0 = reinterpret_cast<uintptr_t>(run->ptrs[o]);
    for (int i = 0; i < op->buffer_count; ++i) {
      if (i == o || need[i] == 0) continue;
      const uintptr_t i0 = reinterpret_cast<uintptr_t>(run->ptrs[i]);
      if (o0 >= i0 + need[i] || i0 >= o0 + need[o]) continue;
      if (op->buffers[o].may_alias == i && o0 == i0) continue;
      if (ids[i] == ids[o]) {
        return fail(kStatusInvalidArgument, name, ": output ", op->buffers[o].name, " is the same buffer (handle ",
                    ids[o], ") as ", op->buffers[i].name, "; outputs must not alias other buffers");
      }
      return fail(kStatusInvalidArgument, name, ": output ", op->buffers[o].name, " (handle ", ids[o],
                  ") overlaps ", op->buffers[i].name, " (handle ", ids[i],
                  ") in memory; outputs must not alias other buffers",
                  op->buffers[o].may_alias == i ? " except in place, starting at the same byte" : "");
    }
  }
  return Result::OK();
}

// problem_error words entry call's problem (backend_run) as its error:
// the checked input's element at index, read from the device.
Result problem_error(const Call& call, uint64_t index) {
  const OpSpec& op = *call.op;
  int32_t value = 0;
  const Result r = backend_read(call.ptrs[op.checked_buffer], index * sizeof value, reinterpret_cast<uint8_t*>(&value),
                                sizeof value);
  if (!r.ok()) return r;
  return domain_error(op, call.params, index, value);
}

Result Server::run(const uint8_t* p, size_t n) {
  Call checked;
  Result r = check_run(p, n, &checked);
  if (!r.ok()) return r;
  if (checked.op == nullptr) {
    return fail(kStatusInvalidArgument, "RUN: a collective entry runs inside a RUN_BATCH; alone it is a ",
                "COMM_ALL_REDUCE, COMM_REDUCE_SCATTER or COMM_ALL_GATHER request");
  }
  uint64_t kernel_ns = 0, problem = kNoProblem;
  r = backend_run(checked, &kernel_ns, &problem);
  if (!r.ok()) return r;
  if (problem != kNoProblem) return problem_error(checked, problem);
  store_u64(payload(8), kernel_ns);
  return Result::OK();
}

// entry_name names a batch entry in messages: its op, or its collective.
const char* entry_name(const Call& c) {
  return c.op != nullptr ? c.op->name : collective_name(c.collective.kind);
}

// run_batch checks every entry before it runs any, then runs them in order;
// an entry that fails while running stops the batch.
Outcome Server::run_batch(const uint8_t* p, size_t n) {
  Outcome o;
  if (n < 8) {
    o.result = fail(kStatusMalformed, "RUN_BATCH payload has ", n, " bytes, want >= 8 (count, reserved)");
    return o;
  }
  const uint32_t count = load_u32(p);
  const uint32_t reserved = load_u32(p + 4);
  if (reserved != 0) {
    o.result = fail(kStatusMalformed, "RUN_BATCH reserved field is ", reserved, ", want 0");
    return o;
  }
  if (count > kMaxBatchRuns) {
    o.result = fail(kStatusInvalidArgument, "RUN_BATCH of ", count, " runs; at most ", kMaxBatchRuns);
    return o;
  }
  batch_.resize(count);
  Call* runs = batch_.data();
  size_t at = 8;
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t length =
        n - at < 16 ? 16 : 16 + 8 * (uint64_t{load_u32(p + at + 4)} + uint64_t{load_u32(p + at + 8)});
    if (length > n - at) {
      o.result = fail(kStatusMalformed, "its RUN needs ", length, " bytes, only ", n - at, " are left");
    } else {
      o.result = check_run(p + at, static_cast<size_t>(length), &runs[i]);
    }
    if (!o.result.ok()) {
      o.batch_entry = i;
      o.result.message = cat("RUN_BATCH entry ", i, " of ", count, ": ", o.result.message);
      return o;
    }
    at += static_cast<size_t>(length);
  }
  if (at != n) {
    o.result = fail(kStatusMalformed, "RUN_BATCH has ", n - at, " bytes after its ", count, " entries");
    return o;
  }
  uint8_t* times = payload(8 * size_t{count});
  if (count == 0) return o;
  times_.resize(count);
  problems_.assign(count, kNoProblem);
  uint32_t failed = kNoBatchEntry;
  const Result r = backend_run_batch(runs, count, times_.data(), problems_.data(), &failed);
  if (!r.ok()) {
    // A failed batch ends the communicators its collectives name: the
    // backend has aborted them, so that no peer waits on this rank.
    for (uint32_t i = 0; i < count; ++i) {
      if (runs[i].op == nullptr) drop_comm(runs[i].collective.comm);
    }
  }
  if (!r.ok()) {
    response_.clear();
    o.batch_entry = failed;
    if (failed == kNoBatchEntry) {
      o.result = fail(r.status, "RUN_BATCH of ", count, " entries: ", r.message);
    } else {
      o.result = fail(r.status, "RUN_BATCH entry ", failed, " of ", count, " (", entry_name(runs[failed]), "): ", r.message,
                      failed == 0 ? std::string(" (no entry ran)") : cat(" (entries 0 to ", failed - 1, " ran)"));
    }
    return o;
  }
  for (uint32_t i = 0; i < count; ++i) {
    if (runs[i].op == nullptr || problems_[i] == kNoProblem) continue;
    // The first entry whose checked input broke its domain is the batch's
    // error; every entry ran, those after it on whatever it left.
    const Result pr = problem_error(runs[i], problems_[i]);
    response_.clear();
    o.batch_entry = i;
    o.result = fail(pr.ok() ? kStatusInvalidArgument : pr.status, "RUN_BATCH entry ", i, " of ", count, " (",
                    runs[i].op->name, "): ", pr.message, " (every entry ran)");
    return o;
  }
  for (uint32_t i = 0; i < count; ++i) store_u64(times + 8 * i, times_[i]);
  return o;
}

// text_write is the seed's text path, kept only as a benchmark baseline:
// decimal u16 values parsed with an istringstream, as the seed parsed them.
Result Server::text_write(const uint8_t* p, size_t n) {
  if (n < 16) return fail(kStatusMalformed, "TEXT_WRITE payload has ", n, " bytes, want >= 16");
  const uint64_t handle = load_u64(p);
  const uint64_t offset = load_u64(p + 8);
  LiveBuffer b;
  Result r = find(handle, &b, "TEXT_WRITE");
  if (!r.ok()) return r;
  std::istringstream text(std::string(reinterpret_cast<const char*>(p + 16), n - 16));
  std::vector<uint16_t> values;
  unsigned long v = 0;
  while (text >> v) {
    if (v > 0xFFFF) return fail(kStatusInvalidArgument, "TEXT_WRITE value ", values.size(), " is ", v, ", over 65535");
    values.push_back(static_cast<uint16_t>(v));
  }
  if (!text.eof()) {
    return fail(kStatusInvalidArgument, "TEXT_WRITE value ", values.size(), " is not a decimal integer");
  }
  const uint64_t length = 2 * uint64_t{values.size()};
  r = check_range("TEXT_WRITE", handle, offset, length, b.bytes);
  if (!r.ok()) return r;
  std::vector<uint8_t> bytes(length);
  for (size_t i = 0; i < values.size(); ++i) store_u16(bytes.data() + 2 * i, values[i]);
  return backend_write(b.ptr, offset, bytes.data(), length);
}

// text_read formats count u16 values as decimal text, the benchmark baseline
// for READ.
Result Server::text_read(const uint8_t* p, size_t n) {
  if (n != 24) return fail(kStatusMalformed, "TEXT_READ payload has ", n, " bytes, want 24");
  const uint64_t handle = load_u64(p);
  const uint64_t offset = load_u64(p + 8);
  const uint64_t count = load_u64(p + 16);
  LiveBuffer b;
  Result r = find(handle, &b, "TEXT_READ");
  if (r.ok() && count > b.bytes / 2) r = fail(kStatusOutOfRange, "TEXT_READ of ", count, " values overruns buffer ", handle, " of ", b.bytes, " bytes");
  if (r.ok()) r = check_range("TEXT_READ", handle, offset, 2 * count, b.bytes);
  // Six characters per value at most ("65535 "), so the text fits a frame.
  if (r.ok() && count > kMaxPayloadBytes / 6) {
    r = fail(kStatusOutOfRange, "TEXT_READ of ", count, " values; at most ", kMaxPayloadBytes / 6, " fit a frame");
  }
  if (!r.ok()) return r;
  std::vector<uint8_t> bytes(2 * count);
  r = backend_read(b.ptr, offset, bytes.data(), 2 * count);
  if (!r.ok()) return r;
  std::ostringstream text;
  for (uint64_t i = 0; i < count; ++i) text << (i ? " " : "") << load_u16(bytes.data() + 2 * i);
  const std::string s = text.str();
  std::memcpy(payload(s.size()), s.data(), s.size());
  return Result::OK();
}

// memory answers MEMORY: u64 free bytes, u64 total bytes, from the backend.
Result Server::memory(size_t n) {
  if (n != 0) return fail(kStatusMalformed, "MEMORY payload has ", n, " bytes, want 0");
  uint64_t free_bytes = 0, total_bytes = 0;
  const Result r = backend_memory(&free_bytes, &total_bytes);
  if (!r.ok()) return r;
  uint8_t* out = payload(16);
  store_u64(out, free_bytes);
  store_u64(out + 8, total_bytes);
  return Result::OK();
}

// engine asks the backend once what its collective engine is: a backend
// that loads a library (NCCL) does so on the first collective request, not
// at start, so that a server that never joins a communicator never pays
// for it.
Result Server::engine() {
  if (!engine_asked_) {
    engine_asked_ = true;
    engine_ = backend_comm_info(&engine_version_, &engine_text_);
  }
  return engine_;
}

// comm_info answers COMM_INFO: u32 version code, then a line of text.
Result Server::comm_info(size_t n) {
  if (n != 0) return fail(kStatusMalformed, "COMM_INFO payload has ", n, " bytes, want 0");
  const Result r = engine();
  if (!r.ok()) return r;
  uint8_t* out = payload(4 + engine_text_.size());
  store_u32(out, engine_version_);
  std::memcpy(out + 4, engine_text_.data(), engine_text_.size());
  return Result::OK();
}

Result Server::comm_unique_id(size_t n) {
  if (n != 0) return fail(kStatusMalformed, "COMM_UNIQUE_ID payload has ", n, " bytes, want 0");
  Result r = engine();
  if (!r.ok()) return r;
  uint8_t id[kCommUniqueIdBytes];
  r = backend_comm_unique_id(id);
  if (!r.ok()) return r;
  std::memcpy(payload(kCommUniqueIdBytes), id, kCommUniqueIdBytes);
  return Result::OK();
}

// comm_init answers COMM_INIT: 128-byte unique id, u32 rank, u32 size,
// u32 timeout_ms, u32 reserved; the answer is the communicator's handle.
Result Server::comm_init(const uint8_t* p, size_t n) {
  constexpr size_t want = kCommUniqueIdBytes + 16;
  if (n != want) return fail(kStatusMalformed, "COMM_INIT payload has ", n, " bytes, want ", want);
  const uint8_t* q = p + kCommUniqueIdBytes;
  const uint32_t rank = load_u32(q), size = load_u32(q + 4), timeout_ms = load_u32(q + 8), reserved = load_u32(q + 12);
  if (reserved != 0) return fail(kStatusMalformed, "COMM_INIT reserved field is ", reserved, ", want 0");
  if (size < 1 || rank >= size) {
    return fail(kStatusInvalidArgument, "COMM_INIT: rank ", rank, " of size ", size, "; want size >= 1 and rank in [0, size)");
  }
  if (timeout_ms < 1) return fail(kStatusInvalidArgument, "COMM_INIT: timeout_ms 0; want >= 1");
  Result r = engine();
  if (!r.ok()) return r;
  void* comm = nullptr;
  r = backend_comm_init(p, rank, size, timeout_ms, &comm);
  if (!r.ok()) return r;
  const uint64_t handle = next_handle_++;
  comms_[handle] = LiveComm{comm, rank, size};
  store_u64(payload(8), handle);
  return Result::OK();
}

// check_collective checks one collective: the communicator, the element
// type and reduction, the count, both buffers live and large enough, and
// either in place as NCCL defines it or apart.
Result Server::check_collective(const char* what, uint32_t kind, uint64_t comm, uint64_t send, uint64_t recv,
                                uint64_t count, uint32_t dtype, uint32_t redop, uint32_t timeout_ms,
                                Collective* out) const {
  if (kind != kAllReduce && kind != kReduceScatter && kind != kAllGather) {
    return fail(kStatusInvalidArgument, what, ": unknown collective ", kind,
                " (1 all_reduce, 2 reduce_scatter, 3 all_gather)");
  }
  const char* name = collective_name(kind);
  const auto c = comms_.find(comm);
  if (c == comms_.end()) {
    return fail(kStatusBadHandle, what, " ", name, ": no live communicator has handle ", comm,
                " (a failed collective aborts its communicator)");
  }
  DType type;
  if (!comm_dtype(dtype, &type)) {
    return fail(kStatusInvalidArgument, what, " ", name, ": dtype ", dtype, "; want 1 (f16), 2 (f32) or 3 (i32)");
  }
  if (kind == kAllGather ? redop != kRedNone : (redop != kRedSum && redop != kRedMax)) {
    return fail(kStatusInvalidArgument, what, " ", name, ": redop ", redop,
                kind == kAllGather ? "; all_gather reduces nothing: want 0" : "; want 1 (sum) or 2 (max)");
  }
  if (count < 1) return fail(kStatusInvalidArgument, what, " ", name, ": count 0; want >= 1");
  if (timeout_ms < 1) return fail(kStatusInvalidArgument, what, " ", name, ": timeout_ms 0; want >= 1");
  const uint32_t size = c->second.size;
  uint64_t one = 0, all = 0;
  if (__builtin_mul_overflow(count, dtype_bytes(type), &one) || __builtin_mul_overflow(one, uint64_t{size}, &all)) {
    return fail(kStatusInvalidArgument, what, " ", name, ": count ", count, " of ", dtype_name(type), " on ", size,
                " ranks overflows 64 bits");
  }
  Collective col{static_cast<CollectiveKind>(kind), c->second.comm, c->second.rank, size, nullptr, nullptr, count,
                 type, static_cast<CommRedOp>(redop), timeout_ms};
  uint64_t send_need = 0, recv_need = 0;
  collective_bytes(col, &send_need, &recv_need);
  LiveBuffer sb, rb;
  Result r = find(send, &sb, what);
  if (r.ok()) r = find(recv, &rb, what);
  if (!r.ok()) return r;
  const auto too_small = [&](const char* role, uint64_t handle, uint64_t have, uint64_t want) {
    return fail(kStatusInvalidArgument, what, " ", name, ": ", role, " (handle ", handle, ") has ", have,
                " bytes, want ", want, " (count=", count, ", ", dtype_name(type), ", ", size, " ranks)");
  };
  if (sb.bytes < send_need) return too_small("send", send, sb.bytes, send_need);
  if (rb.bytes < recv_need) return too_small("recv", recv, rb.bytes, recv_need);
  const uintptr_t s0 = reinterpret_cast<uintptr_t>(sb.ptr), r0 = reinterpret_cast<uintptr_t>(rb.ptr);
  const bool apart = s0 >= r0 + recv_need || r0 >= s0 + send_need;
  // In place, as NCCL defines it: all-reduce on one buffer; reduce-scatter
  // into its own slice of send; all-gather from its own slice of recv.
  const uint64_t slice = uint64_t{c->second.rank} * one;
  const bool in_place = (kind == kAllReduce && s0 == r0) || (kind == kReduceScatter && r0 == s0 + slice) ||
                        (kind == kAllGather && s0 == r0 + slice);
  if (!apart && !in_place) {
    return fail(kStatusInvalidArgument, what, " ", name, ": send (handle ", send, ") and recv (handle ", recv,
                ") overlap; want them apart or in place (all_reduce: the same bytes; reduce_scatter: recv at send + "
                "rank·count; all_gather: send at recv + rank·count)");
  }
  col.send = sb.ptr;
  col.recv = rb.ptr;
  *out = col;
  return Result::OK();
}

// drop_comm releases comm (aborted by the backend, or now) and forgets
// its handle; a communicator already dropped is left alone.
void Server::drop_comm(void* comm) {
  for (auto it = comms_.begin(); it != comms_.end(); ++it) {
    if (it->second.comm != comm) continue;
    comms_.erase(it);
    backend_comm_abort(comm);
    return;
  }
}

// comm_request answers COMM_ALL_REDUCE, COMM_REDUCE_SCATTER and
// COMM_ALL_GATHER: u64 comm, u64 send, u64 recv, u64 count, u32 dtype,
// u32 redop, u32 timeout_ms, u32 reserved.
Result Server::comm_request(uint16_t opcode, const uint8_t* p, size_t n) {
  const char* what = opcode_name(opcode);
  if (n != 48) return fail(kStatusMalformed, what, " payload has ", n, " bytes, want 48");
  if (load_u32(p + 44) != 0) return fail(kStatusMalformed, what, " reserved field is ", load_u32(p + 44), ", want 0");
  const uint32_t kind = opcode == kOpCommAllReduce ? kAllReduce : opcode == kOpCommReduceScatter ? kReduceScatter : kAllGather;
  Collective c;
  Result r = check_collective(what, kind, load_u64(p), load_u64(p + 8), load_u64(p + 16), load_u64(p + 24),
                              load_u32(p + 32), load_u32(p + 36), load_u32(p + 40), &c);
  if (!r.ok()) return r;
  r = backend_collective(c);
  if (r.status == kStatusCommFailed) drop_comm(c.comm);
  return r;
}

// comm_abort answers COMM_ABORT: u64 comm.
Result Server::comm_abort(const uint8_t* p, size_t n) {
  if (n != 8) return fail(kStatusMalformed, "COMM_ABORT payload has ", n, " bytes, want 8");
  const uint64_t handle = load_u64(p);
  const auto c = comms_.find(handle);
  if (c == comms_.end()) return fail(kStatusBadHandle, "COMM_ABORT: no live communicator has handle ", handle);
  backend_comm_abort(c->second.comm);
  comms_.erase(c);
  return Result::OK();
}

}  // namespace

bool host_gone() {
  pollfd in{0, 0, 0};
  return ::poll(&in, 1, 0) == 1 && (in.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0;
}

// watch_host_when_wrapped: under a wrapper (a profiler that is the
// server's parent; kserver then sets VKERN_WRAPPED=1), the host's
// parent-death signal reaches the wrapper, not the server, so a server busy
// in a long or hung kernel would outlive a host that was killed. A thread
// then waits for stdin to hang up (every write end closed: only the host
// holds one), gives the serving loop 2 s to see the end of its input and
// exit as it does (30 s more once it is releasing the device, whose last
// writes, a graphs log, say, should not be cut), and ends the process.
std::atomic<bool> g_tearing_down{false};

void watch_host_when_wrapped() {
  const char* wrapped = std::getenv("VKERN_WRAPPED");
  if (wrapped == nullptr || std::strcmp(wrapped, "1") != 0) return;
  std::thread([] {
    pollfd in{0, 0, 0};  // no events asked: poll returns on a hang-up or an error alone
    int ready;
    do {
      ready = ::poll(&in, 1, -1);
    } while (ready < 0 && errno == EINTR);
    if (ready < 0) return;
    ::sleep(2);
    if (g_tearing_down.load()) ::sleep(30);
    std::fprintf(stderr, "vkern kernel server: the host is gone (stdin hung up) and the server had not ended; ending it\n");
    ::_exit(kExitOutputClosed);
  }).detach();
}

// run_server is the whole process: cookie check, arena, device open, HELLO,
// then requests until SHUTDOWN or end of input. It returns the exit status.
int run_server() {
  const char* cookie = std::getenv(kCookieName);
  if (cookie == nullptr || std::strcmp(cookie, kCookieValue) != 0) {
    std::fprintf(stderr, "this is the vkern kernel server; vkern starts it, it is not run by hand (%s is %s)\n",
                 kCookieName, cookie == nullptr ? "unset" : "set to the wrong value");
    return kExitNoCookie;
  }
  ::signal(SIGPIPE, SIG_IGN);
  watch_host_when_wrapped();
  read_spin_setting();
  // Above the arena's and the rings' descriptors, which the host may have
  // left empty.
  const int frame_out = ::fcntl(1, F_DUPFD, kRingFd + 1);
  if (frame_out < 0 || ::dup2(2, 1) < 0) {
    std::fprintf(stderr, "vkern kernel server: setting up stdout: %s\n", std::strerror(errno));
    return kExitOutputClosed;
  }
  Link link;
  std::string link_error;
  if (!link.open(frame_out, &link_error)) {
    std::fprintf(stderr, "vkern kernel server: no rings: %s\n", link_error.c_str());
    return kExitNoArena;
  }
  Server server(link);
  std::string arena_error;
  if (!server.open_arena(&arena_error)) {
    std::fprintf(stderr, "vkern kernel server: no arena: %s\n", arena_error.c_str());
    return kExitNoArena;
  }
  const Result opened = backend_open();
  if (!opened.ok()) {
    std::fprintf(stderr, "vkern kernel server: cannot open the device: %s\n", opened.message.c_str());
    server.release_all();
    return kExitDeviceError;
  }
  std::fprintf(stderr, "vkern kernel server: pid %ld, protocol %u, arena of %llu bytes on fd %d, frames on %s\n",
               static_cast<long>(::getpid()), kProtocolVersion,
               static_cast<unsigned long long>(server.arena_bytes()), kArenaFd, link.name());
  int status = kExitOutputClosed;
  if (server.send_hello()) {
    status = server.serve();
  } else {
    std::fprintf(stderr, "vkern kernel server: writing HELLO to stdout: %s\n", std::strerror(errno));
  }
  g_tearing_down.store(true);
  server.release_all();
  backend_close();
  return status;
}

}  // namespace vkern
