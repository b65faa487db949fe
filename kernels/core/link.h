// The kernel server's two byte streams, requests in and responses out
// (PROTOCOL.md, "Transport").
//
// Frames are a byte stream in both directions, so the frame loop does not
// know how the bytes travel. By default they travel on the pipes: stdin, and
// the private duplicate of stdout. When the host asks for rings, they travel
// through two single-producer, single-consumer byte rings in a shared file,
// and the pipes carry only wake-up bytes and the end of input. A round trip
// through the rings costs a few cache-line transfers instead of four system
// calls, the difference between a tiny GPU RUN costing about a bare launch
// and costing half as much again.
//
// Waiting. A side that finds nothing to read (or no room to write) spins on
// the ring for spin_ns, then sleeps. To sleep it sets its asleep word, looks
// at the ring once more, and polls its wake pipe. The other side, having
// moved the ring's head (or tail), swaps that word back to 0 and, if it was
// 1, writes one wake byte. Every access to the control words is sequentially
// consistent, so of a sleeper and a mover at least one sees the other: the
// sleeper sees the new bytes, or the mover sees the sleeper.
#ifndef VKERN_CORE_LINK_H
#define VKERN_CORE_LINK_H

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/protocol.h"

namespace vkern {

// spin_ns is how long a side that finds nothing to do keeps looking before
// it sleeps: 50 µs, or $VKERN_SPIN_US microseconds (0 to 10,000; 0 sleeps at
// once), the variable the host's reader obeys too. A sleeper costs a
// scheduler wake-up per request, several microseconds on a virtual machine;
// a host that sends its next request within this window (a training step's
// stream of small calls) is answered without one. The price is at most this
// much of one core after each request.
inline int64_t spin_ns = 50'000;

inline void read_spin_setting() {
  const char* v = std::getenv("VKERN_SPIN_US");
  if (v == nullptr || *v == '\0') return;
  char* end = nullptr;
  const long us = std::strtol(v, &end, 10);
  if (*end == '\0' && us >= 0 && us <= 10'000) spin_ns = int64_t{us} * 1000;
}

inline int64_t monotonic_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// cpu_relax tells the core that this is a spin loop, which frees its
// resources for the sibling hyperthread and saves power.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __asm__ __volatile__("pause");
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

// spin calls ready until it returns true or spin_ns passes, yielding the
// core every microsecond so that a busy machine can run the other side.
template <class Ready>
bool spin(Ready ready) {
  if (ready()) return true;
  if (spin_ns <= 0) return false;
  const int64_t start = monotonic_ns();
  int64_t yielded = start;
  for (;;) {
    cpu_relax();
    if (ready()) return true;
    const int64_t now = monotonic_ns();
    if (now - start > spin_ns) return false;
    if (now - yielded > 1000) {
      ::sched_yield();
      yielded = now;
    }
  }
}

// Ring is one direction's ring: its control page and its data.
struct Ring {
  uint8_t* control = nullptr;
  uint8_t* data = nullptr;

  uint64_t load64(size_t word) const {
    return __atomic_load_n(reinterpret_cast<uint64_t*>(control + word), __ATOMIC_SEQ_CST);
  }
  void store64(size_t word, uint64_t v) const {
    __atomic_store_n(reinterpret_cast<uint64_t*>(control + word), v, __ATOMIC_SEQ_CST);
  }
  void store32(size_t word, uint32_t v) const {
    __atomic_store_n(reinterpret_cast<uint32_t*>(control + word), v, __ATOMIC_SEQ_CST);
  }
  uint32_t swap32(size_t word, uint32_t v) const {
    return __atomic_exchange_n(reinterpret_cast<uint32_t*>(control + word), v, __ATOMIC_SEQ_CST);
  }

  // copy_out copies n bytes from stream position pos; copy_in copies n
  // bytes to it. Either may wrap around the end of the data.
  void copy_out(uint64_t pos, uint8_t* dst, size_t n) const {
    const size_t at = static_cast<size_t>(pos & (kRingDataBytes - 1));
    const size_t first = std::min<size_t>(n, kRingDataBytes - at);
    std::memcpy(dst, data + at, first);
    std::memcpy(dst + first, data, n - first);
  }
  void copy_in(uint64_t pos, const uint8_t* src, size_t n) const {
    const size_t at = static_cast<size_t>(pos & (kRingDataBytes - 1));
    const size_t first = std::min<size_t>(n, kRingDataBytes - at);
    std::memcpy(data + at, src, first);
    std::memcpy(data, src + first, n - first);
  }
};

// Link is the server's end of the two streams.
class Link {
 public:
  // open sets the link up: rings when the host asked for them, else the
  // pipes. frame_out is the descriptor responses (or, with rings, wake
  // bytes) go to. A false return leaves a message.
  bool open(int frame_out, std::string* message) {
    out_fd_ = frame_out;
    const char* v = std::getenv(kRingsEnvName);
    if (v == nullptr) {
      // Non-blocking stdin lets read_some spin before it sleeps. Should
      // fcntl fail (it does not on a pipe), reads block and all still works.
      if (spin_ns > 0) set_nonblocking(0);
      return true;
    }
    if (std::strcmp(v, "4") != 0) {
      *message = cat(kRingsEnvName, " is \"", v, "\"; a host that wants rings sets it to \"4\" and passes the ring file there");
      return false;
    }
    struct stat st;
    if (::fstat(kRingFd, &st) != 0) {
      *message = cat("file descriptor ", kRingFd, " is not open (", std::strerror(errno), "); ", kRingsEnvName,
                     " says the host passes the ring file there");
      return false;
    }
    if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != kRingFileBytes) {
      *message = cat("file descriptor ", kRingFd, " is not a ring file of ", kRingFileBytes, " bytes (it has ",
                     static_cast<long long>(st.st_size), ")");
      return false;
    }
    // Every page mapped now, as the host maps them: no page faults in the
    // middle of a frame, and a resident size that stays flat.
    int flags = MAP_SHARED;
#ifdef MAP_POPULATE
    flags |= MAP_POPULATE;
#endif
    void* p = ::mmap(nullptr, kRingFileBytes, PROT_READ | PROT_WRITE, flags, kRingFd, 0);
    if (p == MAP_FAILED) {
      *message = cat("mapping the ring file failed: ", std::strerror(errno));
      return false;
    }
    ::close(kRingFd);
    uint8_t* base = static_cast<uint8_t*>(p);
    in_ = Ring{base, base + kRingControlBytes};
    out_ = Ring{base + kRingBytes, base + kRingBytes + kRingControlBytes};
    in_pos_ = in_.load64(kRingTail);
    out_pos_ = out_.load64(kRingHead);
    // Only wake bytes pass now: a drain must not block, nor a wake-up.
    if (!set_nonblocking(0) || !set_nonblocking(out_fd_)) {
      *message = cat("making the wake pipes non-blocking failed: ", std::strerror(errno));
      return false;
    }
    rings_ = true;
    return true;
  }

  const char* name() const { return rings_ ? "rings on fd 4" : "pipes"; }

  // read_some reads up to n bytes of the request stream, at least one
  // unless input ends: 0 at end of input, -1 on an error (errno says which).
  long long read_some(uint8_t* dst, size_t n) { return rings_ ? ring_read(dst, n) : pipe_read(dst, n); }

  // write_all writes n bytes of the response stream; false on an error
  // (errno says which; EPIPE when the host has gone).
  bool write_all(const uint8_t* src, size_t n) { return rings_ ? ring_write(src, n) : pipe_write(src, n); }

 private:
  static bool set_nonblocking(int fd) {
    const int flags = ::fcntl(fd, F_GETFL);
    return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
  }

  // pipe_read reads stdin. It is non-blocking when spin_ns > 0, so an
  // empty pipe is retried (yielding between tries) for spin_ns and then
  // waited on with poll; otherwise read simply blocks.
  static long long pipe_read(uint8_t* dst, size_t n) {
    int64_t spin_start = -1;
    for (;;) {
      const ssize_t r = ::read(0, dst, n);
      if (r >= 0) return r;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      // Let whatever else is ready run first: on a busy machine that may
      // be the host this server is waiting for.
      ::sched_yield();
      const int64_t now = monotonic_ns();
      if (spin_start < 0) {
        spin_start = now;
      } else if (now - spin_start > spin_ns) {
        pollfd p = {0, POLLIN, 0};
        if (::poll(&p, 1, -1) < 0 && errno != EINTR) return -1;
        spin_start = -1;
      }
    }
  }

  bool pipe_write(const uint8_t* src, size_t n) const {
    size_t put = 0;
    while (put < n) {
      const ssize_t w = ::write(out_fd_, src + put, n - put);
      if (w < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      put += static_cast<size_t>(w);
    }
    return true;
  }

  long long ring_read(uint8_t* dst, size_t n) {
    for (;;) {
      const uint64_t ready = in_.load64(kRingHead) - in_pos_;
      if (ready > kRingDataBytes) return broken("request", "head", ready);
      if (ready > 0) {
        const size_t k = static_cast<size_t>(std::min<uint64_t>(n, ready));
        in_.copy_out(in_pos_, dst, k);
        in_pos_ += k;
        in_.store64(kRingTail, in_pos_);
        return static_cast<long long>(k);
      }
      if (input_ended_) return 0;
      if (!wait(in_, kRingReaderAsleep, false, [&] { return in_.load64(kRingHead) != in_pos_; })) return -1;
    }
  }

  bool ring_write(const uint8_t* src, size_t n) {
    while (n > 0) {
      const uint64_t used = out_pos_ - out_.load64(kRingTail);
      if (used > kRingDataBytes) return broken("response", "tail", used) >= 0;
      if (used == kRingDataBytes) {
        if (!wait(out_, kRingWriterAsleep, true,
                  [&] { return out_pos_ - out_.load64(kRingTail) != kRingDataBytes; })) {
          return false;
        }
        continue;
      }
      const size_t k = static_cast<size_t>(std::min<uint64_t>(n, kRingDataBytes - used));
      out_.copy_in(out_pos_, src, k);
      out_pos_ += k;
      src += k;
      n -= k;
      out_.store64(kRingHead, out_pos_);
      if (out_.swap32(kRingReaderAsleep, 0) != 0 && !wake_host()) return false;
    }
    return true;
  }

  // broken reports a control word that no well-behaved host writes.
  long long broken(const char* ring, const char* word, uint64_t gap) {
    std::fprintf(stderr, "vkern kernel server: the %s ring's %s is %llu bytes away from the server's position, more than the ring holds\n",
                 ring, word, static_cast<unsigned long long>(gap));
    errno = EPROTO;
    return -1;
  }

  // wait spins until ready, then sleeps on the wake pipe with its asleep
  // word set until ready or the stream ends. for_room says the server
  // waits to write, when the host's going away must end the wait.
  //
  // The word is set again before every look: a wake byte can be late, sent
  // for bytes an earlier look already found, and the swap that sent it has
  // then cleared the word of this sleep, which would leave the next mover
  // thinking nobody sleeps.
  template <class Ready>
  bool wait(const Ring& ring, size_t asleep, bool for_room, Ready ready) {
    if (spin(ready)) return true;
    bool ok = true;
    for (;;) {
      ring.store32(asleep, 1);
      if (ready() || (input_ended_ && !for_room)) break;
      if (!(ok = doze(for_room))) break;
    }
    ring.store32(asleep, 0);
    return ok;
  }

  // doze sleeps until a wake byte or the end of input comes on stdin (or,
  // waiting for room, until the host's end of the response pipe closes),
  // then drains the wake bytes.
  bool doze(bool for_room) {
    pollfd p[2] = {{input_ended_ ? -1 : 0, POLLIN, 0}, {out_fd_, 0, 0}};
    // With input ended only the room can change; look every millisecond.
    const int timeout = input_ended_ ? 1 : -1;
    if (::poll(p, for_room ? 2 : 1, timeout) < 0 && errno != EINTR) return false;
    if (for_room && (p[1].revents & (POLLERR | POLLHUP)) != 0) {
      errno = EPIPE;
      return false;
    }
    uint8_t wakes[64];
    while (!input_ended_) {
      const ssize_t r = ::read(0, wakes, sizeof wakes);
      if (r == 0) input_ended_ = true;
      if (r < 0 && errno != EINTR) break;  // EAGAIN: drained
    }
    return true;
  }

  bool wake_host() const {
    const uint8_t one = 1;
    for (;;) {
      if (::write(out_fd_, &one, 1) == 1) return true;
      if (errno == EINTR) continue;
      // A full pipe already holds wake bytes the host has yet to read.
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
  }

  int out_fd_ = -1;
  bool rings_ = false;
  bool input_ended_ = false;
  Ring in_, out_;
  uint64_t in_pos_ = 0, out_pos_ = 0;
};

}  // namespace vkern

#endif  // VKERN_CORE_LINK_H
