package kserver

import (
	"errors"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// spinWait is how long a read of the server's stdout that finds the pipe
// empty keeps retrying before it sleeps in poll(2). An answer that comes
// within it (a ping, a tiny kernel with its device sync) is read without a
// scheduler wake-up, which on a virtual machine costs as much as the rest of
// the round trip; a longer call costs this much of one core and then sleeps
// as before. The server spins the same way for its next request
// (kernels/core/server.cc, kSpinNs).
const spinWait = 50 * time.Microsecond

// spinReader reads a pipe through its raw, non-blocking descriptor: it
// retries an empty read for spinWait, then waits in poll(2). The *os.File
// stays the descriptor's owner (it closes it); only this reader reads it.
type spinReader struct {
	f  *os.File
	fd int
}

// newPipeReader is the reader of the server's stdout: a spinReader when the
// descriptor can be made non-blocking, else the file itself.
func newPipeReader(f *os.File) io.Reader {
	fd := int(f.Fd())
	if err := unix.SetNonblock(fd, true); err != nil {
		return f
	}
	return &spinReader{f: f, fd: fd}
}

func (r *spinReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var spinStart time.Time
	for {
		n, err := unix.Read(r.fd, p)
		switch {
		case err == nil && n > 0:
			return n, nil
		case err == nil:
			return 0, io.EOF
		case errors.Is(err, unix.EINTR):
			continue
		case !errors.Is(err, unix.EAGAIN):
			return 0, &os.PathError{Op: "read", Path: r.f.Name(), Err: err}
		}
		now := time.Now()
		if spinStart.IsZero() {
			spinStart = now
			continue
		}
		if now.Sub(spinStart) < spinWait {
			continue
		}
		fds := []unix.PollFd{{Fd: int32(r.fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			return 0, &os.PathError{Op: "poll", Path: r.f.Name(), Err: err}
		}
		spinStart = time.Time{}
	}
}
