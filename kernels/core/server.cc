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

// read_full reads n bytes unless input ends first; it returns the count read,
// or -1 on a read error.
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

// shape_values lists an op's params as "M=4, N=4, K=2".
std::string shape_values(const OpSpec& op, const int64_t* params) {
  std::string s;
  for (int i = 0; i < op.param_count; ++i) s += cat(i > 0 ? ", " : "", op.params[i], "=", params[i]);
  return s;
}

std::string known_ops() {
  std::string s;
  for (const OpSpec& op : kOps) s += cat(s.empty() ? "" : ", ", static_cast<uint32_t>(op.id), " ", op.name);
  return s;
}

class Server {
 public:
  explicit Server(int frame_out) : out_fd_(frame_out) {}

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
  bool send_error(uint32_t id, uint16_t opcode, const Result& r);

  Result handle(uint16_t opcode, const uint8_t* p, size_t n);
  Result find(uint64_t handle, LiveBuffer* out, const std::string& what) const;
  Result alloc(const uint8_t* p, size_t n);
  Result free_buffer(const uint8_t* p, size_t n);
  Result write(const uint8_t* p, size_t n);
  Result read(const uint8_t* p, size_t n);
  Result run(const uint8_t* p, size_t n);

  const int out_fd_;
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
  std::memcpy(payload(r.message.size()), r.message.data(), r.message.size());
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
    const long long got = read_full(0, prefix, sizeof prefix);
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
      const Result r = fail(kStatusMalformed, "frame length prefix ", length, " bytes exceeds maxFrameBytes ",
                            kMaxFrameBytes, "; the stream cannot be resynchronised, the server exits with status 3");
      std::fprintf(stderr, "vkern kernel server: %s\n", r.message.c_str());
      send_error(0, 0, r);
      return kExitOversizedFrame;
    }
    request_.resize(length);
    const long long body = read_full(0, request_.data(), length);
    if (body != static_cast<long long>(length)) {
      std::fprintf(stderr, "vkern kernel server: input ended inside a frame body (%lld of %u bytes)\n", body, length);
      return kExitTruncatedFrame;
    }
    if (length < kHeaderBytes) {
      if (!send_error(0, 0,
                      fail(kStatusMalformed, "frame body has ", length, " bytes, shorter than the 8-byte header"))) {
        return kExitOutputClosed;
      }
      continue;
    }
    const uint32_t id = load_u32(request_.data());
    const uint16_t opcode = load_u16(request_.data() + 4);
    const uint16_t status = load_u16(request_.data() + 6);
    const Result r = status != 0 ? fail(kStatusMalformed, opcode_name(opcode), " request has status ", status,
                                        ", want 0 in a request")
                                 : handle(opcode, request_.data() + kHeaderBytes, length - kHeaderBytes);
    if (!(r.ok() ? send(id, opcode, kStatusOK) : send_error(id, opcode, r))) {
      std::fprintf(stderr, "vkern kernel server: writing a response to stdout: %s\n", std::strerror(errno));
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
    case kOpPing:
    case kOpSync:
    case kOpShutdown:
      if (n != 0) return fail(kStatusMalformed, opcode_name(opcode), " payload has ", n, " bytes, want 0");
      return opcode == kOpSync ? backend_sync() : Result::OK();
    case kOpAlloc: return alloc(p, n);
    case kOpFree: return free_buffer(p, n);
    case kOpWrite: return write(p, n);
    case kOpRead: return read(p, n);
    case kOpRun: return run(p, n);
    case kOpHello: return fail(kStatusUnknownOpcode, "opcode 1 (HELLO) is sent by the server, never a request");
    default: return fail(kStatusUnknownOpcode, "unknown opcode ", opcode, "; requests are 2 (PING) to 9 (SHUTDOWN)");
  }
}

Result Server::find(uint64_t handle, LiveBuffer* out, const std::string& what) const {
  const auto it = buffers_.find(handle);
  if (it == buffers_.end()) return fail(kStatusBadHandle, what, ": no live buffer has handle ", handle);
  *out = it->second;
  return Result::OK();
}

Result Server::alloc(const uint8_t* p, size_t n) {
  if (n != 8) return fail(kStatusMalformed, "ALLOC payload has ", n, " bytes, want 8");
  const uint64_t bytes = load_u64(p);
  if (bytes == 0) return fail(kStatusInvalidArgument, "ALLOC of 0 bytes; want >= 1");
  void* ptr = nullptr;
  const Result r = backend_alloc(bytes, &ptr);
  if (!r.ok()) return r;
  const uint64_t handle = next_handle_++;
  buffers_[handle] = LiveBuffer{ptr, bytes};
  store_u64(payload(8), handle);
  return Result::OK();
}

Result Server::free_buffer(const uint8_t* p, size_t n) {
  if (n != 8) return fail(kStatusMalformed, "FREE payload has ", n, " bytes, want 8");
  const uint64_t handle = load_u64(p);
  LiveBuffer b;
  const Result r = find(handle, &b, "FREE");
  if (!r.ok()) return r;
  backend_free(b.ptr, b.bytes);
  buffers_.erase(handle);
  return Result::OK();
}

// check_range reports an access [offset, offset + length) that leaves the buffer.
Result check_range(const char* what, uint64_t handle, uint64_t offset, uint64_t length, uint64_t size) {
  if (offset <= size && length <= size - offset) return Result::OK();
  return fail(kStatusOutOfRange, what, " of ", length, " bytes at offset ", offset, " overruns buffer ", handle, " of ",
              size, " bytes");
}

Result Server::write(const uint8_t* p, size_t n) {
  if (n < 16) return fail(kStatusMalformed, "WRITE payload has ", n, " bytes, want >= 16");
  const uint64_t handle = load_u64(p);
  const uint64_t offset = load_u64(p + 8);
  const uint64_t length = n - 16;
  LiveBuffer b;
  Result r = find(handle, &b, "WRITE");
  if (r.ok()) r = check_range("WRITE", handle, offset, length, b.bytes);
  if (!r.ok()) return r;
  return backend_write(b.ptr, offset, p + 16, length);
}

Result Server::read(const uint8_t* p, size_t n) {
  if (n != 24) return fail(kStatusMalformed, "READ payload has ", n, " bytes, want 24");
  const uint64_t handle = load_u64(p);
  const uint64_t offset = load_u64(p + 8);
  const uint64_t length = load_u64(p + 16);
  LiveBuffer b;
  Result r = find(handle, &b, "READ");
  if (r.ok()) r = check_range("READ", handle, offset, length, b.bytes);
  if (!r.ok()) return r;
  if (length > kMaxPayloadBytes) {
    return fail(kStatusOutOfRange, "READ of ", length, " bytes exceeds the ", kMaxPayloadBytes,
                " bytes one response frame can carry; split the read");
  }
  r = backend_read(b.ptr, offset, payload(length), length);
  if (!r.ok()) response_.clear();
  return r;
}

Result Server::run(const uint8_t* p, size_t n) {
  if (n < 16) return fail(kStatusMalformed, "RUN payload has ", n, " bytes, want >= 16");
  const uint32_t op_id = load_u32(p);
  const uint32_t param_count = load_u32(p + 4);
  const uint32_t buffer_count = load_u32(p + 8);
  const uint32_t reserved = load_u32(p + 12);
  if (reserved != 0) return fail(kStatusMalformed, "RUN reserved field is ", reserved, ", want 0");
  const uint64_t want = 16 + 8 * (uint64_t{param_count} + uint64_t{buffer_count});
  if (n != want) {
    return fail(kStatusMalformed, "RUN payload has ", n, " bytes, want 16 + 8·(", param_count, " params + ",
                buffer_count, " buffers) = ", want);
  }

  const OpSpec* op = find_op(op_id);
  if (op == nullptr) return fail(kStatusInvalidArgument, "RUN: unknown op id ", op_id, " (known: ", known_ops(), ")");
  const std::string name = op->name;
  if (param_count != static_cast<uint32_t>(op->param_count) ||
      buffer_count != static_cast<uint32_t>(op->buffer_count)) {
    std::string params, buffers;
    for (int i = 0; i < op->param_count; ++i) params += cat(i ? ", " : "", op->params[i]);
    for (int i = 0; i < op->buffer_count; ++i) buffers += cat(i ? ", " : "", op->buffers[i].name);
    return fail(kStatusInvalidArgument, name, " takes ", op->param_count, " params (", params, ") and ",
                op->buffer_count, " buffers (", buffers, "), got ", param_count, " params and ", buffer_count,
                " buffers");
  }

  int64_t params[kMaxOpParams] = {};
  for (int i = 0; i < op->param_count; ++i) params[i] = static_cast<int64_t>(load_u64(p + 16 + 8 * i));
  for (int i = 0; i < op->param_count; ++i) {
    if (params[i] < 1) {
      return fail(kStatusInvalidArgument, name, ": ", op->params[i], " = ", params[i], ", want >= 1 (",
                  shape_values(*op, params), ")");
    }
  }

  const uint8_t* handles = p + 16 + 8 * op->param_count;
  LiveBuffer bufs[kMaxOpBuffers] = {};
  uint64_t ids[kMaxOpBuffers] = {};
  for (int i = 0; i < op->buffer_count; ++i) {
    ids[i] = load_u64(handles + 8 * i);
    const Result r = find(ids[i], &bufs[i], cat(name, " buffer ", i, " (", op->buffers[i].name, ")"));
    if (!r.ok()) return r;
  }

  void* ptrs[kMaxOpBuffers] = {};
  for (int i = 0; i < op->buffer_count; ++i) {
    const BufferSpec& spec = op->buffers[i];
    const uint64_t rows = static_cast<uint64_t>(params[spec.rows]);
    const uint64_t cols = static_cast<uint64_t>(params[spec.cols]);
    const uint64_t elem = dtype_bytes(spec.dtype);
    const std::string formula = cat(op->params[spec.rows], "·", op->params[spec.cols], "·", elem);
    uint64_t elements = 0, bytes = 0;
    if (__builtin_mul_overflow(rows, cols, &elements) || __builtin_mul_overflow(elements, elem, &bytes)) {
      return fail(kStatusInvalidArgument, name, ": ", spec.name, " (", dtype_name(spec.dtype), ") needs ", formula,
                  " bytes, which overflows 64 bits (", shape_values(*op, params), ")");
    }
    if (bufs[i].bytes < bytes) {
      return fail(kStatusInvalidArgument, name, ": ", spec.name, " (handle ", ids[i], ") has ", bufs[i].bytes,
                  " bytes, want ", formula, " = ", bytes, " (", shape_values(*op, params), ")");
    }
    ptrs[i] = bufs[i].ptr;
  }

  for (int o = 0; o < op->buffer_count; ++o) {
    if (!op->buffers[o].output) continue;
    for (int i = 0; i < op->buffer_count; ++i) {
      if (i != o && ids[i] == ids[o]) {
        return fail(kStatusInvalidArgument, name, ": output ", op->buffers[o].name, " is the same buffer (handle ",
                    ids[o], ") as ", op->buffers[i].name, "; outputs must not alias other buffers");
      }
    }
  }

  uint64_t kernel_ns = 0;
  const Result r = backend_run(*op, params, ptrs, &kernel_ns);
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
    std::fprintf(stderr, "this is the vkern kernel server; vkern starts it, it is not run by hand (%s is %s)\n",
                 kCookieName, cookie == nullptr ? "unset" : "set to the wrong value");
    return kExitNoCookie;
  }
  ::signal(SIGPIPE, SIG_IGN);
  const int frame_out = ::dup(1);
  if (frame_out < 0 || ::dup2(2, 1) < 0) {
    std::fprintf(stderr, "vkern kernel server: setting up stdout: %s\n", std::strerror(errno));
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
    std::fprintf(stderr, "vkern kernel server: writing HELLO to stdout: %s\n", std::strerror(errno));
  }
  server.release_all();
  backend_close();
  return status;
}

}  // namespace vkern
