package kserver

import (
	"encoding/binary"
	"fmt"
	"io"
)

// MaxFrameBytes caps a frame's body (header plus payload, not counting the
// length prefix), in both directions. A length prefix above it is an error,
// never an allocation. Bulk data moves through the arena, never in frames,
// so frames stay small.
const MaxFrameBytes = 1 << 20

// HeaderBytes is the size of the header that starts every frame body:
// u32 id, u16 opcode, u16 status.
const HeaderBytes = 8

// lengthBytes is the size of the length prefix in front of every body.
const lengthBytes = 4

// ProtocolVersion is the version of PROTOCOL.md this package speaks.
const ProtocolVersion = 2

// The environment cookie: the server binary refuses to run without
// CookieEnv=CookieValue, so that a person who runs it by hand is told what
// it is. kserver adds it to the child's environment itself.
const (
	CookieEnv   = "VKERN_KERNEL_SERVER"
	CookieValue = "5f0c9e7a-vkern-kernel-server-v1"
)

// Opcode says what a frame asks for.
type Opcode uint16

// The opcodes of protocol version 2.
const (
	OpHello    Opcode = 1
	OpPing     Opcode = 2
	OpAlloc    Opcode = 3
	OpFree     Opcode = 4
	OpWrite    Opcode = 5
	OpRead     Opcode = 6
	OpRun      Opcode = 7
	OpSync     Opcode = 8
	OpShutdown Opcode = 9
	OpRunBatch Opcode = 10
	// OpTextWrite and OpTextRead carry u16 values as decimal text inside
	// frames, the way the seed moved data. They exist only as the
	// benchmark baseline that the arena path is measured against.
	OpTextWrite Opcode = 11
	OpTextRead  Opcode = 12
	OpMemory    Opcode = 13
	OpView      Opcode = 14
	// The collectives (PROTOCOL.md, "Collectives"): communicators between
	// the servers of several devices, NCCL's on cuda.
	OpCommInfo          Opcode = 15
	OpCommUniqueID      Opcode = 16
	OpCommInit          Opcode = 17
	OpCommAllReduce     Opcode = 18
	OpCommReduceScatter Opcode = 19
	OpCommAllGather     Opcode = 20
	OpCommAbort         Opcode = 21
)

var opcodeNames = [...]string{
	OpHello: "HELLO", OpPing: "PING", OpAlloc: "ALLOC", OpFree: "FREE",
	OpWrite: "WRITE", OpRead: "READ", OpRun: "RUN", OpSync: "SYNC",
	OpShutdown: "SHUTDOWN", OpRunBatch: "RUN_BATCH", OpTextWrite: "TEXT_WRITE",
	OpTextRead: "TEXT_READ", OpMemory: "MEMORY", OpView: "VIEW",
	OpCommInfo: "COMM_INFO", OpCommUniqueID: "COMM_UNIQUE_ID", OpCommInit: "COMM_INIT",
	OpCommAllReduce: "COMM_ALL_REDUCE", OpCommReduceScatter: "COMM_REDUCE_SCATTER",
	OpCommAllGather: "COMM_ALL_GATHER", OpCommAbort: "COMM_ABORT",
}

// String returns the opcode's name from PROTOCOL.md, or "opcode N".
func (op Opcode) String() string {
	if int(op) < len(opcodeNames) && opcodeNames[op] != "" {
		return opcodeNames[op]
	}
	return fmt.Sprintf("opcode %d", uint16(op))
}

// Status is a response's status code.
type Status uint16

// The status codes of protocol version 2.
const (
	StatusOK              Status = 0
	StatusMalformed       Status = 1
	StatusUnknownOpcode   Status = 2
	StatusBadHandle       Status = 3
	StatusOutOfRange      Status = 4
	StatusOutOfMemory     Status = 5
	StatusInvalidArgument Status = 6
	// StatusDeviceError is the one status after which the server exits
	// (with ExitDeviceError) instead of serving on.
	StatusDeviceError Status = 7
	// StatusNotSupported: the backend has no kernel for the op, or no
	// collective engine.
	StatusNotSupported Status = 8
	// StatusCommFailed: a collective did not complete (a peer rank died or
	// hung past the timeout, or the engine failed); the communicator was
	// aborted and its handle is gone. The server serves on.
	StatusCommFailed Status = 9
)

var statusNames = [...]string{
	StatusOK: "OK", StatusMalformed: "MALFORMED",
	StatusUnknownOpcode: "UNKNOWN_OPCODE", StatusBadHandle: "BAD_HANDLE",
	StatusOutOfRange: "OUT_OF_RANGE", StatusOutOfMemory: "OUT_OF_MEMORY",
	StatusInvalidArgument: "INVALID_ARGUMENT", StatusDeviceError: "DEVICE_ERROR",
	StatusNotSupported: "NOT_SUPPORTED", StatusCommFailed: "COMM_FAILED",
}

// String returns the status's name from PROTOCOL.md, or "status N".
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status %d", uint16(s))
}

// The server's exit statuses (PROTOCOL.md, "Exit statuses").
const (
	ExitClean        = 0  // SHUTDOWN, or end of input at a frame boundary
	ExitTruncated    = 2  // end of input inside a frame
	ExitOverCap      = 3  // a length prefix over MaxFrameBytes
	ExitDeviceError  = 4  // a device error (after a DEVICE_ERROR response)
	ExitOutputClosed = 5  // stdout could not be written
	ExitNoArena      = 6  // file descriptor 3 is not a mappable arena
	ExitNoCookie     = 64 // started without the environment cookie
)

// Frame is one decoded frame.
type Frame struct {
	ID      uint32 // chosen by the host, echoed by the server; 0 for HELLO
	Opcode  Opcode
	Status  Status // 0 in requests
	Payload []byte
}

// ReadFrame reads one frame from r.
//
// It returns io.EOF, unwrapped, only when r ends exactly at a frame boundary,
// and io.ErrUnexpectedEOF, unwrapped, when r ends inside a frame. A length
// prefix above MaxFrameBytes or below HeaderBytes is an error wrapping
// ErrProtocol, and nothing is allocated for it.
//
// The payload is read into buf when it fits in cap(buf), so Payload then
// aliases buf; pass Payload[:0] back in to reuse a buffer that grew. When it
// does not fit, the payload buffer grows as bytes actually arrive, so a
// stream that lies about its length costs at most twice what it delivered.
func ReadFrame(r io.Reader, buf []byte) (Frame, error) {
	var scratch []byte
	if cap(buf) >= HeaderBytes {
		scratch = buf[:HeaderBytes]
	} else {
		scratch = make([]byte, HeaderBytes)
	}
	if _, err := io.ReadFull(r, scratch[:lengthBytes]); err != nil {
		return Frame{}, err // io.EOF at the boundary, io.ErrUnexpectedEOF inside the prefix
	}
	n := binary.LittleEndian.Uint32(scratch)
	if n > MaxFrameBytes {
		return Frame{}, fmt.Errorf("%w: frame length %d (the bytes %q) is over the cap of %d bytes", ErrProtocol, n, scratch[:lengthBytes], MaxFrameBytes)
	}
	if n < HeaderBytes {
		return Frame{}, fmt.Errorf("%w: frame length %d (the bytes %q) is shorter than the %d-byte header", ErrProtocol, n, scratch[:lengthBytes], HeaderBytes)
	}
	if _, err := io.ReadFull(r, scratch); err != nil {
		return Frame{}, noEOF(err)
	}
	f := Frame{
		ID:     binary.LittleEndian.Uint32(scratch[0:]),
		Opcode: Opcode(binary.LittleEndian.Uint16(scratch[4:])),
		Status: Status(binary.LittleEndian.Uint16(scratch[6:])),
	}
	payload, err := readPayload(r, buf[:0], int(n)-HeaderBytes)
	if err != nil {
		return Frame{}, noEOF(err)
	}
	f.Payload = payload
	return f, nil
}

// growStep is the first allocation readPayload makes for a payload that does
// not fit the caller's buffer; later steps double it.
const growStep = 64 << 10

// readPayload reads exactly n bytes into buf, growing it only as data arrives.
func readPayload(r io.Reader, buf []byte, n int) ([]byte, error) {
	if n <= cap(buf) {
		buf = buf[:n]
		_, err := io.ReadFull(r, buf)
		return buf, err
	}
	for len(buf) < n {
		want := min(n, max(2*len(buf), growStep))
		if cap(buf) < want {
			grown := make([]byte, len(buf), want)
			copy(grown, buf)
			buf = grown
		}
		got, err := io.ReadFull(r, buf[len(buf):want])
		buf = buf[:len(buf)+got]
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// noEOF turns io.EOF into io.ErrUnexpectedEOF: past the length prefix, the
// stream is inside a frame.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// AppendFrame appends f, length prefix included, to dst. It fails, wrapping
// ErrProtocol, when the body would be over MaxFrameBytes.
func AppendFrame(dst []byte, f Frame) ([]byte, error) {
	if len(f.Payload) > MaxFrameBytes-HeaderBytes {
		return dst, fmt.Errorf("%w: %v payload of %d bytes does not fit a frame (cap %d bytes with the %d-byte header)",
			ErrProtocol, f.Opcode, len(f.Payload), MaxFrameBytes, HeaderBytes)
	}
	dst = appendHeader(dst, len(f.Payload), f.ID, f.Opcode, f.Status)
	return append(dst, f.Payload...), nil
}

// appendHeader appends the length prefix and header of a frame whose payload
// is payloadBytes long; the caller has checked that it fits.
func appendHeader(dst []byte, payloadBytes int, id uint32, op Opcode, status Status) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(HeaderBytes+payloadBytes))
	dst = binary.LittleEndian.AppendUint32(dst, id)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(op))
	return binary.LittleEndian.AppendUint16(dst, uint16(status))
}

// WriteFrame writes f to w in one Write call.
func WriteFrame(w io.Writer, f Frame) error {
	b, err := AppendFrame(make([]byte, 0, lengthBytes+HeaderBytes+len(f.Payload)), f)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// frameReader reads frames from the server's stdout, which the holder of
// the reading role reads with plain blocking reads. It keeps a partly read
// frame between calls (a read is never cut short by the host, but the
// buffer survives one that is), grows its buffer only as bytes arrive, and
// is as exact as ReadFrame about EOF and bad length prefixes.
type frameReader struct {
	f    io.Reader
	buf  []byte
	r, w int // buf[r:w] is read and not yet returned
}

// frameReadBytes is the frameReader's first buffer; it grows for larger frames.
const frameReadBytes = 16 << 10

// next returns the next frame; its payload is valid until the next call.
func (fr *frameReader) next() (Frame, error) {
	if err := fr.fill(lengthBytes); err != nil {
		if err == io.EOF && fr.w == fr.r {
			return Frame{}, io.EOF
		}
		return Frame{}, noEOF(err)
	}
	prefix := fr.buf[fr.r : fr.r+lengthBytes]
	n := binary.LittleEndian.Uint32(prefix)
	if n > MaxFrameBytes {
		return Frame{}, fmt.Errorf("%w: frame length %d (the bytes %q) is over the cap of %d bytes", ErrProtocol, n, prefix, MaxFrameBytes)
	}
	if n < HeaderBytes {
		return Frame{}, fmt.Errorf("%w: frame length %d (the bytes %q) is shorter than the %d-byte header", ErrProtocol, n, prefix, HeaderBytes)
	}
	if err := fr.fill(lengthBytes + int(n)); err != nil {
		return Frame{}, noEOF(err)
	}
	body := fr.buf[fr.r+lengthBytes : fr.r+lengthBytes+int(n)]
	fr.r += lengthBytes + int(n)
	return Frame{
		ID:      binary.LittleEndian.Uint32(body),
		Opcode:  Opcode(binary.LittleEndian.Uint16(body[4:])),
		Status:  Status(binary.LittleEndian.Uint16(body[6:])),
		Payload: body[HeaderBytes:],
	}, nil
}

// fill reads until buf[r:w] holds at least n bytes.
func (fr *frameReader) fill(n int) error {
	for fr.w-fr.r < n {
		if fr.w == len(fr.buf) {
			// No room to read into: move the partial frame to the front,
			// growing the buffer when the frame fills it, to at most twice
			// what has arrived of it.
			have := fr.w - fr.r
			size := len(fr.buf)
			if have == size || size < frameReadBytes {
				size = max(frameReadBytes, min(n, 2*have))
			}
			buf := fr.buf
			if size != len(buf) {
				buf = make([]byte, size)
			}
			copy(buf, fr.buf[fr.r:fr.w])
			fr.buf, fr.r, fr.w = buf, 0, have
		}
		m, err := fr.f.Read(fr.buf[fr.w:])
		fr.w += m
		if err != nil && fr.w-fr.r < n {
			return err
		}
	}
	return nil
}
