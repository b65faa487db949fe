package kserver

import (
	"errors"
	"fmt"
	"strings"

	"github.com/vkern/vkern/op"
)

var (
	// ErrProtocol: a frame or payload broke PROTOCOL.md. When the server sent
	// it, the client has killed the server, since the stream can no longer be
	// trusted.
	ErrProtocol = errors.New("kserver: protocol error")

	// ErrServerDied: the kernel server is gone (it crashed, exited, broke the
	// protocol, or was killed after a missed deadline). The error is a
	// *DiedError with the exit status and the tail of its stderr. The next
	// call starts a fresh server.
	ErrServerDied = errors.New("kserver: kernel server died")

	// ErrStaleHandle: a Handle from a server that has since died, or the zero
	// Handle. Its buffer is gone; kserver never re-creates it behind the
	// caller's back.
	ErrStaleHandle = errors.New("kserver: stale buffer handle")

	// ErrClosed: the Client has been closed.
	ErrClosed = errors.New("kserver: client closed")

	// ErrOutOfMemory: the server answered OUT_OF_MEMORY (device memory or
	// kernel scratch), or the host could not grow the shared-memory arena.
	// The server keeps serving.
	ErrOutOfMemory = errors.New("kserver: out of memory")

	// ErrCommFailed: the server answered COMM_FAILED: a collective did not
	// complete (a peer rank died or hung past the timeout, or the engine
	// failed), and its communicator was aborted. The server keeps serving;
	// its buffers stay valid.
	ErrCommFailed = errors.New("kserver: collective failed")
)

// ServerError is a response whose status is not OK. Except for
// DEVICE_ERROR, the server keeps serving, and buffer handles stay valid.
type ServerError struct {
	Op         string // the request's opcode name: "ALLOC", "RUN", ...
	Status     uint16
	StatusName string // "OUT_OF_MEMORY", ...
	Message    string // the server's message, naming the values involved
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("kserver: %s: server answered %s: %s", e.Op, e.StatusName, e.Message)
}

// Is reports whether e is an OUT_OF_MEMORY answer, for errors.Is(err,
// ErrOutOfMemory), a NOT_SUPPORTED one, for errors.Is(err,
// op.ErrNotSupported), or a COMM_FAILED one, for errors.Is(err,
// ErrCommFailed).
func (e *ServerError) Is(target error) bool {
	switch target {
	case ErrOutOfMemory:
		return Status(e.Status) == StatusOutOfMemory
	case op.ErrNotSupported:
		return Status(e.Status) == StatusNotSupported
	case ErrCommFailed:
		return Status(e.Status) == StatusCommFailed
	}
	return false
}

func newServerError(op Opcode, f Frame) *ServerError {
	return &ServerError{Op: op.String(), Status: uint16(f.Status), StatusName: f.Status.String(), Message: ErrorMessage(f.Payload)}
}

// BatchError says which entry of a RunBatch failed and why. When the server
// refused the entry (a stale or unknown handle, a bad shape), no entry of the
// batch ran; when the entry failed while running (OUT_OF_MEMORY for its
// scratch memory), the entries before it ran and those after it did not; when
// an input broke its domain (a cross_entropy label out of range), every entry
// ran, and the message says so.
type BatchError struct {
	Index int    // the failing entry, from 0
	Count int    // the entries in the batch
	OpID  uint32 // the failing entry's op id
	Err   error  // a *ServerError, or an ErrStaleHandle error found before sending
}

func (e *BatchError) Error() string {
	return fmt.Sprintf("kserver: RUN_BATCH entry %d of %d (op id %d): %s", e.Index, e.Count, e.OpID, strings.TrimPrefix(e.Err.Error(), "kserver: "))
}

func (e *BatchError) Unwrap() error { return e.Err }

// errorStderrBytes is how much of the stderr tail a DiedError's message
// quotes; Client.Stderr and DiedError.Stderr have the whole ring.
const errorStderrBytes = 4 << 10

// DiedError says that the kernel server is gone and why. It wraps
// ErrServerDied and Cause (a context error after a missed deadline, an
// ErrProtocol error, io.ErrUnexpectedEOF, a *ServerError for DEVICE_ERROR,
// ...).
type DiedError struct {
	Op     string // the call that found out: "RUN", "start", ...
	PID    int
	Gen    uint64 // which of this Client's servers: 1 for the first, 2 after a restart, ...
	Cause  error  // what the host saw
	Killed bool   // the host killed it (deadline, protocol error, no HELLO)
	Exit   string // how it ended: "exit status 3", "signal: killed", ...
	Hint   string // what to do, where one is known
	Stderr string // the tail of its stderr
}

func (e *DiedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "kserver: %s: kernel server #%d (pid %d) ", e.Op, e.Gen, e.PID)
	if e.Killed {
		fmt.Fprintf(&b, "killed by the host: %v; it ended with %s", e.Cause, e.Exit)
	} else {
		fmt.Fprintf(&b, "died: %v; it ended with %s", e.Cause, e.Exit)
	}
	if e.Hint != "" {
		fmt.Fprintf(&b, "\nhint: %s", e.Hint)
	}
	tail := e.Stderr
	if tail == "" {
		b.WriteString("\n(its stderr was empty)")
		return b.String()
	}
	if len(tail) > errorStderrBytes {
		tail = tail[len(tail)-errorStderrBytes:]
		if i := strings.IndexByte(tail, '\n'); i >= 0 && i < len(tail)-1 {
			tail = tail[i+1:]
		}
	}
	fmt.Fprintf(&b, "\n--- kernel server stderr, last %d bytes ---\n%s", len(tail), strings.TrimRight(tail, "\n"))
	return b.String()
}

func (e *DiedError) Unwrap() []error { return []error{ErrServerDied, e.Cause} }
