package kserver

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The ring transport (PROTOCOL.md, "Rings"). Each server gets a fresh
// shared-memory file holding two single-producer, single-consumer byte
// rings, requests and responses, passed as its file descriptor 4. Frames
// travel through them as the same byte stream they would be on the pipes, so
// the framing and everything above it is unchanged; the pipes carry only
// wake-up bytes and, by closing, the end of either side. A round trip then
// costs a few cache-line transfers rather than four system calls, which is
// most of what a tiny GPU RUN costs on top of its launch.
//
// A side that finds its ring empty (or full) spins for the spin window,
// then sets its asleep word, looks once more, and sleeps on its wake pipe;
// the other side, after moving the ring, swaps the word back to 0 and writes
// a wake byte if it was 1. sync/atomic is sequentially consistent, as are
// the server's __atomic accesses, so either the sleeper sees the bytes or
// the mover sees the sleeper. One exception: the host's writer shares its
// wake pipe (the server's stdout) with the host's reader, so instead of
// sleeping on it, a writer that finds the request ring full naps in growing
// steps until there is room or the server has exited. The ring holds a
// MiB, so that happens only when many requests queue behind a slow one.
//
// The layout constants match kernels/core/protocol.h.
const (
	ringsEnv         = "VKERN_KERNEL_SERVER_RINGS"
	ringsFd          = 4 // the child's descriptor: after stdin, stdout, stderr and the arena
	ringControlBytes = 4096
	ringDataBytes    = 1 << 20 // a power of two
	ringBytes        = ringControlBytes + ringDataBytes
	ringFileBytes    = 2 * ringBytes

	ringHead         = 0   // u64: bytes ever written, the producer's
	ringTail         = 64  // u64: bytes ever read, the consumer's
	ringReaderAsleep = 128 // u32: 1 while the consumer sleeps for data
	ringWriterAsleep = 192 // u32: 1 while the producer sleeps for room
)

// rings is one server's ring file, mapped.
type rings struct {
	file      *os.File // the host's descriptor, closed once the child has its own
	mem       []byte
	req, resp ring
}

// ring is one direction: its control words and its data.
type ring struct {
	head, tail                 *uint64
	readerAsleep, writerAsleep *uint32
	data                       []byte
}

func newRings() (*rings, error) {
	fd, err := unix.MemfdCreate("vkern-rings", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("kserver: creating the shared-memory rings (memfd_create): %w", err)
	}
	file := os.NewFile(uintptr(fd), "vkern-rings")
	// fallocate commits the pages, so that a machine out of memory fails
	// here rather than with a SIGBUS in the middle of a frame.
	if err := unix.Fallocate(fd, 0, 0, ringFileBytes); err != nil {
		file.Close()
		return nil, fmt.Errorf("kserver: sizing the shared-memory rings to %d bytes: %w: %w", ringFileBytes, ErrOutOfMemory, err)
	}
	// MAP_POPULATE maps every page now: no page faults in the middle of a
	// call, and a resident size that stays flat from the first call on.
	mem, err := unix.Mmap(fd, 0, ringFileBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("kserver: mapping the shared-memory rings: %w", err)
	}
	return &rings{file: file, mem: mem, req: ringAt(mem[:ringBytes]), resp: ringAt(mem[ringBytes:])}, nil
}

func ringAt(m []byte) ring {
	return ring{
		head:         (*uint64)(unsafe.Pointer(&m[ringHead])),
		tail:         (*uint64)(unsafe.Pointer(&m[ringTail])),
		readerAsleep: (*uint32)(unsafe.Pointer(&m[ringReaderAsleep])),
		writerAsleep: (*uint32)(unsafe.Pointer(&m[ringWriterAsleep])),
		data:         m[ringControlBytes:],
	}
}

// closeFile closes the host's descriptor once the child has its own (or
// will never start); the mapping stays.
func (r *rings) closeFile() {
	if r.file != nil {
		r.file.Close()
		r.file = nil
	}
}

// unmap ends the mapping. Nobody may touch the rings afterwards: the conn
// calls it once its reader has ended and no request is being written.
func (r *rings) unmap() {
	r.closeFile()
	if r.mem != nil {
		_ = unix.Munmap(r.mem)
		r.mem = nil
	}
}

// copyOut copies from stream position pos into p; copyIn copies p to pos.
func (g *ring) copyOut(pos uint64, p []byte) {
	at := pos & (ringDataBytes - 1)
	n := copy(p, g.data[at:])
	copy(p[n:], g.data)
}

func (g *ring) copyIn(pos uint64, p []byte) {
	at := pos & (ringDataBytes - 1)
	n := copy(g.data[at:], p)
	copy(g.data, p[n:])
}

var wakeByte = []byte{1}

// ringReader reads the response stream; only the holder of the reading role
// uses it.
type ringReader struct {
	g    *ring
	pos  uint64
	wake *os.File // the server's stdout: wake bytes, and its end when the server goes
	fd   int      // wake's descriptor, non-blocking
	kick *os.File // the server's stdin, for a server waiting for room
	spin time.Duration
	eof  bool

	kicks int // how often a server waiting for room was woken (for tests)
}

// ringStreams are the host's ends of r for the server p: the response
// stream it reads and the request stream it writes.
func ringStreams(r *rings, p process, spin time.Duration) (*ringReader, *ringWriter, error) {
	stdout, stdin := p.stdout(), p.stdin()
	fd := int(stdout.Fd())
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, nil, fmt.Errorf("kserver: making the server's stdout non-blocking: %w", err)
	}
	rr := &ringReader{g: &r.resp, wake: stdout, fd: fd, kick: stdin, spin: spin}
	w := &ringWriter{g: &r.req, kick: stdin, spin: spin, gone: func() bool { return p.wait(0) }}
	return rr, w, nil
}

func (rr *ringReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		ready := atomic.LoadUint64(rr.g.head) - rr.pos
		if ready > ringDataBytes {
			return 0, fmt.Errorf("%w: the response ring's head is %d bytes past the host's position, more than the ring's %d", ErrProtocol, ready, ringDataBytes)
		}
		if ready > 0 {
			n := int(min(uint64(len(p)), ready))
			rr.g.copyOut(rr.pos, p[:n])
			rr.pos += uint64(n)
			atomic.StoreUint64(rr.g.tail, rr.pos)
			if atomic.SwapUint32(rr.g.writerAsleep, 0) != 0 {
				// A server that has gone needs no wake-up; its end shows
				// on stdout.
				_, _ = rr.kick.Write(wakeByte)
				rr.kicks++
			}
			return n, nil
		}
		if rr.eof {
			return 0, io.EOF
		}
		if err := rr.wait(); err != nil {
			return 0, err
		}
	}
}

// wait returns once the ring has bytes or the server's stdout has ended.
func (rr *ringReader) wait() error {
	ready := func() bool { return atomic.LoadUint64(rr.g.head) != rr.pos }
	if spinUntil(rr.spin, ready) {
		return nil
	}
	// The word is set again before every look: a wake byte can be late,
	// sent for bytes an earlier look already found, and the swap that sent
	// it has then cleared the word of this sleep.
	defer atomic.StoreUint32(rr.g.readerAsleep, 0)
	for {
		atomic.StoreUint32(rr.g.readerAsleep, 1)
		if ready() || rr.eof {
			return nil
		}
		fds := []unix.PollFd{{Fd: int32(rr.fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			return &os.PathError{Op: "poll", Path: rr.wake.Name(), Err: err}
		}
		if err := rr.drain(); err != nil {
			return err
		}
	}
}

// drain reads the wake bytes that have come, noting the end of stdout.
func (rr *ringReader) drain() error {
	var buf [64]byte
	for {
		n, err := unix.Read(rr.fd, buf[:])
		switch {
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			return nil
		case err != nil:
			return &os.PathError{Op: "read", Path: rr.wake.Name(), Err: err}
		case n == 0:
			rr.eof = true
			return nil
		}
	}
}

// ringWriter writes the request stream; only the holder of conn.wlock uses it.
type ringWriter struct {
	g    *ring
	pos  uint64
	kick *os.File // the server's stdin: wake bytes
	spin time.Duration
	gone func() bool // reports whether the server has exited

	roomWaits int // how often the ring was full (for tests)
}

func (w *ringWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		used := w.pos - atomic.LoadUint64(w.g.tail)
		if used > ringDataBytes {
			return written, fmt.Errorf("%w: the request ring's tail is %d bytes behind the host's position, more than the ring's %d", ErrProtocol, used, ringDataBytes)
		}
		if used == ringDataBytes {
			if err := w.waitRoom(); err != nil {
				return written, err
			}
			continue
		}
		n := int(min(uint64(len(p)), ringDataBytes-used))
		w.g.copyIn(w.pos, p[:n])
		w.pos += uint64(n)
		p = p[n:]
		written += n
		atomic.StoreUint64(w.g.head, w.pos)
		if atomic.SwapUint32(w.g.readerAsleep, 0) != 0 {
			if _, err := w.kick.Write(wakeByte); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

// waitRoom returns once the request ring has room, or with an error once
// the server has exited.
func (w *ringWriter) waitRoom() error {
	w.roomWaits++
	room := func() bool { return w.pos-atomic.LoadUint64(w.g.tail) < ringDataBytes }
	if spinUntil(w.spin, room) {
		return nil
	}
	nap := 20 * time.Microsecond
	for !room() {
		if w.gone() {
			return &os.PathError{Op: "write", Path: "the request ring", Err: unix.EPIPE}
		}
		time.Sleep(nap)
		nap = min(2*nap, time.Millisecond)
	}
	return nil
}
