package kserver

import (
	"errors"
	"io"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// defaultSpin is how long a read of the server's stdout that finds the pipe
// empty keeps retrying before it sleeps in poll(2). An answer that comes
// within it (a ping, a tiny kernel with its device sync) is read without a
// scheduler wake-up, which on a virtual machine costs as much as the rest of
// the round trip; a longer call costs this much of one core and then sleeps
// as before. The server spins the same way for its next request
// (kernels/core/server.cc, spin_ns).
const defaultSpin = 50 * time.Microsecond

// SpinEnv names the environment variable that sets both sides' spin, in
// whole microseconds (0: never spin, sleep at once). The server inherits it.
const SpinEnv = "VKERN_SPIN_US"

// spinFromEnv is the spin $VKERN_SPIN_US asks for, or defaultSpin when it
// is unset or not a whole number of microseconds from 0 to 10,000.
func spinFromEnv() time.Duration {
	v, ok := os.LookupEnv(SpinEnv)
	if !ok {
		return defaultSpin
	}
	us, err := strconv.Atoi(v)
	if err != nil || us < 0 || us > 10000 {
		return defaultSpin
	}
	return time.Duration(us) * time.Microsecond
}

// spinReader reads a pipe through its raw, non-blocking descriptor: it
// retries an empty read for spin, then waits in poll(2). The *os.File
// stays the descriptor's owner (it closes it); only this reader reads it.
type spinReader struct {
	f    *os.File
	fd   int
	spin time.Duration
}

// newPipeReader is the reader of the server's stdout: a spinReader when the
// descriptor can be made non-blocking and spinning is on, else the file
// itself (whose reads block).
func newPipeReader(f *os.File, spin time.Duration) io.Reader {
	if spin <= 0 {
		return f
	}
	fd := int(f.Fd())
	if err := unix.SetNonblock(fd, true); err != nil {
		return f
	}
	return &spinReader{f: f, fd: fd, spin: spin}
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
		// Let whatever else is ready run first: on a busy machine that
		// may be the server this reader is waiting for.
		_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		now := time.Now()
		if spinStart.IsZero() {
			spinStart = now
			continue
		}
		if now.Sub(spinStart) < r.spin {
			continue
		}
		fds := []unix.PollFd{{Fd: int32(r.fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			return 0, &os.PathError{Op: "poll", Path: r.f.Name(), Err: err}
		}
		spinStart = time.Time{}
	}
}

// spinUntil calls ready until it reports true or spin passes, and reports
// which. It yields the core every microsecond, so that on a busy machine
// the server it waits for can run.
func spinUntil(spin time.Duration, ready func() bool) bool {
	if ready() {
		return true
	}
	if spin <= 0 {
		return false
	}
	start := time.Now()
	yielded := start
	for {
		if ready() {
			return true
		}
		now := time.Now()
		if now.Sub(start) > spin {
			return false
		}
		if now.Sub(yielded) > time.Microsecond {
			_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			yielded = now
		}
	}
}
