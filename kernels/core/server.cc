// The kernel server's frame loop (PROTOCOL.md, version 1), backend-neutral.
//
// One thread reads a request frame from stdin, validates it completely,
// hands it to the backend, and writes exactly one response frame to stdout
// before it reads the next. The core owns the handle table and every check
// against it, so a backend only ever sees live buffers, in-range offsets and
// shapes that match the op table.
//
// stdout carries frames only. At start the server keeps a private duplicate
// of stdout for frames and points file descriptor 1 at stderr, so a stray
// print from a library cannot corrupt the frame stream.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/backend.h"
#include "core/ops.h"
#include "core/protocol.h"

#ifndef VKERN_SOURCE_SHA256
#define VKERN_SOURCE_SHA256 "unknown"
#endif

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
    default: return "unknown";
  }
}

std::string str(uint64_t v) { return std::to_string(v); }
std::string str(int64_t v) { return std::to_string(v); }

// Reads exactly n bytes unless input ends first; returns the count read, or
// -1 on a read error.
long long read_full(int fd, uint8_t* dst, size_t n) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, dst + got, n - got);
    if (r == 0) break;
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    got += static_cast<size_t>(r);
  }
  return static_cast<long long>(got);
}

bool write_full(int fd, const uint8_t* src, size_t n) {
  size_t put = 0;
  while (put < n) {
    const ssize_t w = ::write(fd, src + put, n - put);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    put += static_cast<size_t>(w);
  }
  return true;
}

struct LiveBuffer {
  void* ptr;
  uint64_t bytes;
};

class Server {
 public:
  explicit Server(int frame_out) : out_fd_(frame_out) {}

  // Serves until SHUTDOWN, end of input or a fatal error; returns the exit status.
  int serve();
  bool send_hello();
  void release_all();

 private:
  // The response under construction: 4-byte length, 8-byte header, payload.
  uint8_t* payload(size_t n) {
    response_.resize(4 + kHeaderBytes + n);
    return response_.data() + 4 + kHeaderBytes;
  }
  bool send(uint32_t id, uint16_t opcode, Status status);
  bool send_error(uint32_t id, uint16_t opcode, const Result& r);

  Result handle(uint16_t opcode, const uint8_t* body, size_t n);
  Result expect_empty(uint16_t opcode, size_t n);
  Result find(uint64_t handle, LiveBuffer* out, const char* what) const;
  Result alloc(const uint8_t* p, size_t n);
  Result free_buffer(const uint8_t* p, size_t n);
  Result write(const uint8_t* p, size_t n);
  Result read(const uint8_t* p, size_t n);
  Result run(const uint8_t* p, size_t n);

  int out_fd_;
  std::vector<uint8_t> request_;
  std::vector<uint8_t> response_;
  std::unordered_map<uint64_t, LiveBuffer> buffers_;
  uint64_t next_handle_ = 1;
};

bool Server::send(uint32_t id, uint16_t opcode, Status status) {
  if (response_.size() < 4 + kHeaderBytes) payload(0);
  uint8_t* p = response_.data();
  store_u32(p, static_cast<uint32_t>(response_.size() - 4));
  store_u32(p + 4, id);
  store_u16(p + 8, opcode);
  store_u16(p + 10, status);
  const bool ok = write_full(out_fd_, response_.data(), response_.size());
  response_.clear();
  return ok;
}

bool Server::send_error(uint32_t id, uint16_t opcode, const Result& r) {
  const std::string& m = r.message;
  std::memcpy(payload(m.size()), m.data(), m.size());
  return send(id, opcode, r.status);
}

bool Server::send_hello() {
  std::vector<HelloField> fields = backend_hello_fields();
  fields.push_back({"source_sha256", VKERN_SOURCE_SHA256});
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
  for (auto& entry : buffers_) backend_free(entry.second.ptr, entry.second.bytes);
  buffers_.clear();
}

int Server::serve() {
  uint8_t prefix[4];
  for (;;) {
    const long long got = read_full(0, prefix, 4);
    if (got == 0) return kExitClean;
    if (got != 4) {
      std::fprintf(stderr, "vkern kernel server: input ended inside a frame's length prefix (%lld of 4 bytes)\n", got);
      return kExitTruncatedFrame;
    }
    const uint32_t length = load_u32(prefix);
    if (length > kMaxFrameBytes) {
      const std::string msg = "frame length prefix " + str(uint64_t{length}) +
                              " bytes exceeds maxFrameBytes " + str(uint64_t{kMaxFrameBytes}) +
                              "; the stream cannot be resynchronised, the server exits with status 3";
      std::fprintf(stderr, "vkern kernel server: %s\n", msg.c_str());
      send_error(0, 0, Result::Error(kStatusMalformed, msg));
      return kExitOversizedFrame;
    }
    request_.resize(length);
    const long long body = read_full(0, request_.data(), length);
    if (body != static_cast<long long>(length)) {
      std::fprintf(stderr, "vkern kernel server: input ended inside a frame body (%lld of %u bytes)\n", body, length);
      return kExitTruncatedFrame;
    }
    if (length < kHeaderBytes) {
      const Result r = Result::Error(kStatusMalformed, "frame body has " + str(uint64_t{length}) +
                                                           " bytes, shorter than the 8-byte header");
      if (!send_error(0, 0, r)) return kExitOutputClosed;
      continue;
    }
    const uint32_t id = load_u32(request_.data());
    const uint16_t opcode = load_u16(request_.data() + 4);
    const uint16_t status = load_u16(request_.data() + 6);
    Result r;
    if (status != 0) {
      r = Result::Error(kStatusMalformed, std::string(opcode_name(opcode)) + " request has status " +
                                              str(uint64_t{status}) + ", want 0 in a request");
    } else {
      r = handle(opcode, request_.data() + kHeaderBytes, length - kHeaderBytes);
    }
    const bool sent = r.ok() ? send(id, opcode, kStatusOK) : send_error(id, opcode, r);
    if (!sent) {
      std::fprintf(stderr, "vkern kernel server: cannot write a response to stdout: %s\n", std::strerror(errno));
      return kExitOutputClosed;
    }
    if (r.status == kStatusDeviceError) {
      std::fprintf(stderr, "vkern kernel server: device error: %s\n", r.message.c_str());
      return kExitDeviceError;
    }
    if (r.ok() && opcode == kOpShutdown) return kExitClean;
  }
}

Result Server::handle(uint16_t opcode, const uint8_t* p, size_t n) {
  switch (opcode) {
    case kOpPing: return expect_empty(opcode, n);
    case kOpAlloc: return alloc(p, n);
    case kOpFree: return free_buffer(p, n);
    case kOpWrite: return write(p, n);
    case kOpRead: return read(p, n);
    case kOpRun: return run(p, n);
    case kOpSync: {
      Result r = expect_empty(opcode, n);
      return r.ok() ? backend_sync() : r;
    }
    case kOpShutdown: return expect_empty(opcode, n);
    case kOpHello:
      return Result::Error(kStatusUnknownOpcode, "opcode 1 (HELLO) is sent by the server, never a request");
    default:
      return Result::Error(kStatusUnknownOpcode, "unknown opcode " + str(uint64_t{opcode}) +
                                                     "; requests are 2 (PING) to 9 (SHUTDOWN)");
  }
}

Result Server::expect_empty(uint16_t opcode, size_t n) {
  if (n == 0) return Result::OK();
  return Result::Error(kStatusMalformed, std::string(opcode_name(opcode)) + " payload has " +
                                             str(uint64_t{n}) + " bytes, want 0");
}

Result Server::find(uint64_t handle, LiveBuffer* out, const char* what) const {
  const auto it = buffers_.find(handle);
  if (it == buffers_.end()) {
    return Result::Error(kStatusBadHandle, std::string(what) + ": no live buffer has handle " + str(handle));
  }
  *out = it->second;
  return Result::OK();
}

Result Server::alloc(const uint8_t* p, size_t n) {
  if (n != 8) return Result::Error(kStatusMalformed, "ALLOC payload has " + str(uint64_t{n}) + " bytes, want 8");
  const uint64_t bytes = load_u64(p);
  if (bytes == 0) return Result::Error(kStatusInvalidArgument, "ALLOC of 0 bytes; want >= 1");
  void* ptr = nullptr;
  Result r = backend_alloc(bytes, &ptr);
  if (!r.ok()) return r;
  const uint64_t handle = next_handle_++;
  buffers_[handle] = LiveBuffer{ptr, bytes};
  store_u64(payload(8), handle);
  return Result::OK();
}

Result Server::free_buffer(const uint8_t* p, size_t n) {
  if (n != 8) return Result::Error(kStatusMalformed, "FREE payload has " + str(uint64_t{n}) + " bytes, want 8");
  const uint64_t handle = load_u64(p);
  LiveBuffer b;
  Result r = find(handle, &b, "FREE");
  if (!r.ok()) return r;
  backend_free(b.ptr, b.bytes);
  buffers_.erase(handle);
  return Result::OK();
}

// range_error reports an access [offset, offset + length) that leaves the buffer.
Result range_error(const char* what, uint64_t handle, uint64_t offset, uint64_t length, uint64_t size) {
  return Result::Error(kStatusOutOfRange, std::string(what) + " of " + str(length) + " bytes at offset " +
                                              str(offset) + " overruns buffer " + str(handle) + " of " +
                                              str(size) + " bytes");
}

Result Server::write(const uint8_t* p, size_t n) {
  if (n < 16) return Result::Error(kStatusMalformed, "WRITE payload has " + str(uint64_t{n}) + " bytes, want >= 16");
  const uint64_t handle = load_u64(p);
  const uint64_t offset = load_u64(p + 8);
  const uint64_t length = n - 16;
  LiveBuffer b;
  Result r = find(handle, &b, "WRITE");
  if (!r.ok()) return r;
  if (offset > b.bytes || length > b.bytes - offset) return range_error("WRITE", handle, offset, length, b.bytes);
  return backend_write(b.ptr, offset, p + 16, length);
}

Result Server::read(const uint8_t* p, size_t n) {
  if (n != 24) return Result::Error(kStatusMalformed, "READ payload has " + str(uint64_t{n}) + " bytes, want 24");
  const uint64_t handle = load_u64(p);
  const uint64_t offset = load_u64(p + 8);
  const uint64_t length = load_u64(p + 16);
  LiveBuffer b;
  Result r = find(handle, &b, "READ");
  if (!r.ok()) return r;
  if (offset > b.bytes || length > b.bytes - offset) return range_error("READ", handle, offset, length, b.bytes);
  if (length > kMaxPayloadBytes) {
    return Result::Error(kStatusOutOfRange, "READ of " + str(length) + " bytes exceeds the " +
                                                str(uint64_t{kMaxPayloadBytes}) +
                                                " bytes one response frame can carry; split the read");
  }
  r = backend_read(b.ptr, offset, payload(length), length);
  if (!r.ok()) response_.clear();
  return r;
}

// shape_values lists an op's params as "M=4, N=4, K=2".
std::string shape_values(const OpSpec& op, const int64_t* params) {
  std::string s;
  for (int i = 0; i < op.param_count; ++i) {
    if (i > 0) s += ", ";
    s += std::string(op.params[i]) + "=" + str(params[i]);
  }
  return s;
}

std::string known_ops() {
  std::string s;
  for (const OpSpec& op : kOps) {
    if (!s.empty()) s += ", ";
    s += str(uint64_t{static_cast<uint32_t>(op.id)}) + " " + op.name;
  }
  return s;
}

Result Server::run(const uint8_t* p, size_t n) {
  if (n < 16) return Result::Error(kStatusMalformed, "RUN payload has " + str(uint64_t{n}) + " bytes, want >= 16");
  const uint32_t op_id = load_u32(p);
  const uint32_t param_count = load_u32(p + 4);
  const uint32_t buffer_count = load_u32(p + 8);
  const uint32_t reserved = load_u32(p + 12);
  if (reserved != 0) {
    return Result::Error(kStatusMalformed, "RUN reserved field is " + str(uint64_t{reserved}) + ", want 0");
  }
  const uint64_t want = 16 + 8 * (uint64_t{param_count} + uint64_t{buffer_count});
  if (n != want) {
    return Result::Error(kStatusMalformed, "RUN payload has " + str(uint64_t{n}) + " bytes, want 16 + 8·(" +
                                               str(uint64_t{param_count}) + " params + " +
                                               str(uint64_t{buffer_count}) + " buffers) = " + str(want));
  }
  const OpSpec* op = find_op(op_id);
  if (op == nullptr) {
    return Result::Error(kStatusInvalidArgument, "RUN: unknown op id " + str(uint64_t{op_id}) + " (known: " +
                                                     known_ops() + ")");
  }
  const std::string name = op->name;
  if (param_count != static_cast<uint32_t>(op->param_count) ||
      buffer_count != static_cast<uint32_t>(op->buffer_count)) {
    std::string params, bufs;
    for (int i = 0; i < op->param_count; ++i) params += std::string(i ? ", " : "") + op->params[i];
    for (int i = 0; i < op->buffer_count; ++i) bufs += std::string(i ? ", " : "") + op->buffers[i].name;
    return Result::Error(kStatusInvalidArgument,
                         name + " takes " + str(uint64_t(op->param_count)) + " params (" + params + ") and " +
                             str(uint64_t(op->buffer_count)) + " buffers (" + bufs + "), got " +
                             str(uint64_t{param_count}) + " params and " + str(uint64_t{buffer_count}) + " buffers");
  }
  int64_t params[kMaxOpParams] = {};
  for (int i = 0; i < op->param_count; ++i) params[i] = static_cast<int64_t>(load_u64(p + 16 + 8 * i));
  for (int i = 0; i < op->param_count; ++i) {
    if (params[i] < 1) {
      return Result::Error(kStatusInvalidArgument, name + ": " + op->params[i] + " = " + str(params[i]) +
                                                       ", want >= 1 (" + shape_values(*op, params) + ")");
    }
  }
  const uint8_t* handles = p + 16 + 8 * op->param_count;
  LiveBuffer bufs[kMaxOpBuffers] = {};
  uint64_t ids[kMaxOpBuffers] = {};
  for (int i = 0; i < op->buffer_count; ++i) {
    ids[i] = load_u64(handles + 8 * i);
    const std::string what = name + " buffer " + str(uint64_t(i)) + " (" + op->buffers[i].name + ")";
    Result r = find(ids[i], &bufs[i], what.c_str());
    if (!r.ok()) return r;
  }
  void* ptrs[kMaxOpBuffers] = {};
  for (int i = 0; i < op->buffer_count; ++i) {
    const BufferSpec& spec = op->buffers[i];
    const uint64_t rows = static_cast<uint64_t>(params[spec.rows]);
    const uint64_t cols = static_cast<uint64_t>(params[spec.cols]);
    const uint64_t elem = dtype_bytes(spec.dtype);
    const std::string formula = std::string(op->params[spec.rows]) + "·" + op->params[spec.cols] + "·" + str(elem);
    uint64_t elements = 0, bytes = 0;
    if (__builtin_mul_overflow(rows, cols, &elements) || __builtin_mul_overflow(elements, elem, &bytes)) {
      return Result::Error(kStatusInvalidArgument, name + ": " + spec.name + " (" + dtype_name(spec.dtype) +
                                                       ") needs " + formula + " bytes, which overflows 64 bits (" +
                                                       shape_values(*op, params) + ")");
    }
    if (bufs[i].bytes < bytes) {
      return Result::Error(kStatusInvalidArgument, name + ": " + spec.name + " (handle " + str(ids[i]) + ") has " +
                                                       str(bufs[i].bytes) + " bytes, want " + formula + " = " +
                                                       str(bytes) + " (" + shape_values(*op, params) + ")");
    }
    ptrs[i] = bufs[i].ptr;
  }
  for (int o = 0; o < op->buffer_count; ++o) {
    if (!op->buffers[o].output) continue;
    for (int i = 0; i < op->buffer_count; ++i) {
      if (i != o && ids[i] == ids[o]) {
        return Result::Error(kStatusInvalidArgument, name + ": output " + op->buffers[o].name +
                                                         " is the same buffer (handle " + str(ids[o]) + ") as " +
                                                         op->buffers[i].name + "; outputs must not alias other buffers");
      }
    }
  }
  uint64_t kernel_ns = 0;
  Result r = backend_run(*op, params, ptrs, &kernel_ns);
  if (!r.ok()) return r;
  store_u64(payload(8), kernel_ns);
  return Result::OK();
}

}  // namespace

// run_server is the whole process: cookie check, device open, HELLO, then
// requests until SHUTDOWN or end of input. It returns the exit status.
int run_server() {
  const char* cookie = std::getenv(kCookieName);
  if (cookie == nullptr || std::strcmp(cookie, kCookieValue) != 0) {
    std::fprintf(stderr,
                 "this is the vkern kernel server; vkern starts it, it is not run by hand "
                 "(%s is %s)\n",
                 kCookieName, cookie == nullptr ? "unset" : "set to the wrong value");
    return kExitNoCookie;
  }
  ::signal(SIGPIPE, SIG_IGN);
  const int frame_out = ::dup(1);
  if (frame_out < 0 || ::dup2(2, 1) < 0) {
    std::fprintf(stderr, "vkern kernel server: cannot set up stdout: %s\n", std::strerror(errno));
    return kExitOutputClosed;
  }
  const Result opened = backend_open();
  if (!opened.ok()) {
    std::fprintf(stderr, "vkern kernel server: cannot open the device: %s\n", opened.message.c_str());
    return kExitDeviceError;
  }
  Server server(frame_out);
  int status = kExitOutputClosed;
  if (server.send_hello()) {
    status = server.serve();
  } else {
    std::fprintf(stderr, "vkern kernel server: cannot write HELLO to stdout: %s\n", std::strerror(errno));
  }
  server.release_all();
  backend_close();
  return status;
}

}  // namespace vkern
