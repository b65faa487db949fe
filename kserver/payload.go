package kserver

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Payload encoders and decoders, one pair per opcode and direction
// (PROTOCOL.md, "Opcodes"). Decoders check lengths exactly, allocate nothing
// that the payload's own length does not pay for, and return errors wrapping
// ErrProtocol. PING, SYNC and SHUTDOWN carry empty payloads both ways, as do
// the OK responses to FREE and WRITE; DecodeEmpty checks those.

// writeHeadBytes is the size of a WRITE request before its data: handle, offset.
const writeHeadBytes = 16

// runHeadBytes is the size of a RUN request before its params: op id, param
// count, buffer count, reserved.
const runHeadBytes = 16

// MaxWritePiece is the most data one WRITE frame carries.
const MaxWritePiece = MaxFrameBytes - HeaderBytes - writeHeadBytes

// MaxReadPiece is the most data one READ response carries.
const MaxReadPiece = MaxFrameBytes - HeaderBytes

// DecodeEmpty checks that an op's payload is empty.
func DecodeEmpty(op Opcode, p []byte) error {
	if len(p) != 0 {
		return fmt.Errorf("%w: %v payload is %d bytes, want none", ErrProtocol, op, len(p))
	}
	return nil
}

func decodeU64(what string, p []byte) (uint64, error) {
	if len(p) != 8 {
		return 0, fmt.Errorf("%w: %s is %d bytes, want 8 (u64)", ErrProtocol, what, len(p))
	}
	return binary.LittleEndian.Uint64(p), nil
}

// AppendAllocRequest appends an ALLOC request: u64 bytes.
func AppendAllocRequest(dst []byte, bytes uint64) []byte {
	return binary.LittleEndian.AppendUint64(dst, bytes)
}

// DecodeAllocRequest decodes an ALLOC request.
func DecodeAllocRequest(p []byte) (bytes uint64, err error) {
	return decodeU64("ALLOC request", p)
}

// AppendAllocResponse appends an ALLOC response: u64 handle.
func AppendAllocResponse(dst []byte, handle uint64) []byte {
	return binary.LittleEndian.AppendUint64(dst, handle)
}

// DecodeAllocResponse decodes an ALLOC response; handle 0 is an error.
func DecodeAllocResponse(p []byte) (handle uint64, err error) {
	handle, err = decodeU64("ALLOC response", p)
	if err == nil && handle == 0 {
		err = fmt.Errorf("%w: ALLOC response has handle 0, which the protocol never issues", ErrProtocol)
	}
	return handle, err
}

// AppendFreeRequest appends a FREE request: u64 handle.
func AppendFreeRequest(dst []byte, handle uint64) []byte {
	return binary.LittleEndian.AppendUint64(dst, handle)
}

// DecodeFreeRequest decodes a FREE request.
func DecodeFreeRequest(p []byte) (handle uint64, err error) {
	return decodeU64("FREE request", p)
}

// WriteRequest is a WRITE request's payload: Data goes to the buffer Handle
// at byte Offset.
type WriteRequest struct {
	Handle, Offset uint64
	Data           []byte
}

// appendWriteHead appends the part of a WRITE request before its data.
func appendWriteHead(dst []byte, handle, offset uint64) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, handle)
	return binary.LittleEndian.AppendUint64(dst, offset)
}

// AppendWriteRequest appends a WRITE request: u64 handle, u64 offset, data.
func AppendWriteRequest(dst []byte, w WriteRequest) []byte {
	return append(appendWriteHead(dst, w.Handle, w.Offset), w.Data...)
}

// DecodeWriteRequest decodes a WRITE request; Data aliases p.
func DecodeWriteRequest(p []byte) (WriteRequest, error) {
	if len(p) < writeHeadBytes {
		return WriteRequest{}, fmt.Errorf("%w: WRITE request is %d bytes, want at least %d (handle, offset)", ErrProtocol, len(p), writeHeadBytes)
	}
	return WriteRequest{
		Handle: binary.LittleEndian.Uint64(p),
		Offset: binary.LittleEndian.Uint64(p[8:]),
		Data:   p[writeHeadBytes:],
	}, nil
}

// ReadRequest is a READ request's payload: Length bytes of the buffer Handle
// from byte Offset.
type ReadRequest struct {
	Handle, Offset, Length uint64
}

// AppendReadRequest appends a READ request: u64 handle, u64 offset, u64 length.
func AppendReadRequest(dst []byte, r ReadRequest) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, r.Handle)
	dst = binary.LittleEndian.AppendUint64(dst, r.Offset)
	return binary.LittleEndian.AppendUint64(dst, r.Length)
}

// DecodeReadRequest decodes a READ request.
func DecodeReadRequest(p []byte) (ReadRequest, error) {
	if len(p) != 24 {
		return ReadRequest{}, fmt.Errorf("%w: READ request is %d bytes, want 24 (handle, offset, length)", ErrProtocol, len(p))
	}
	return ReadRequest{
		Handle: binary.LittleEndian.Uint64(p),
		Offset: binary.LittleEndian.Uint64(p[8:]),
		Length: binary.LittleEndian.Uint64(p[16:]),
	}, nil
}

// RunRequest is a RUN request's payload: which op, its params, and its
// buffers (inputs first, then outputs).
type RunRequest struct {
	OpID    uint32
	Params  []int64
	Buffers []uint64
}

// AppendRunRequest appends a RUN request: u32 op id, u32 param count, u32
// buffer count, u32 reserved (0), the params as i64, the handles as u64.
func AppendRunRequest(dst []byte, r RunRequest) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, r.OpID)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Params)))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Buffers)))
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	for _, v := range r.Params {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(v))
	}
	for _, h := range r.Buffers {
		dst = binary.LittleEndian.AppendUint64(dst, h)
	}
	return dst
}

// DecodeRunRequest decodes a RUN request. The counts must account for the
// payload exactly, and reserved must be 0.
func DecodeRunRequest(p []byte) (RunRequest, error) {
	if len(p) < runHeadBytes {
		return RunRequest{}, fmt.Errorf("%w: RUN request is %d bytes, want at least %d", ErrProtocol, len(p), runHeadBytes)
	}
	r := RunRequest{OpID: binary.LittleEndian.Uint32(p)}
	params := uint64(binary.LittleEndian.Uint32(p[4:]))
	buffers := uint64(binary.LittleEndian.Uint32(p[8:]))
	if reserved := binary.LittleEndian.Uint32(p[12:]); reserved != 0 {
		return RunRequest{}, fmt.Errorf("%w: RUN request's reserved field is %d, want 0", ErrProtocol, reserved)
	}
	if want := runHeadBytes + 8*(params+buffers); uint64(len(p)) != want {
		return RunRequest{}, fmt.Errorf("%w: RUN request is %d bytes, want %d for %d params and %d buffers",
			ErrProtocol, len(p), want, params, buffers)
	}
	rest := p[runHeadBytes:]
	r.Params = make([]int64, params)
	for i := range r.Params {
		r.Params[i] = int64(binary.LittleEndian.Uint64(rest[8*i:]))
	}
	rest = rest[8*params:]
	r.Buffers = make([]uint64, buffers)
	for i := range r.Buffers {
		r.Buffers[i] = binary.LittleEndian.Uint64(rest[8*i:])
	}
	return r, nil
}

// AppendRunResponse appends a RUN response: u64 kernel time in nanoseconds.
func AppendRunResponse(dst []byte, kernelNs uint64) []byte {
	return binary.LittleEndian.AppendUint64(dst, kernelNs)
}

// DecodeRunResponse decodes a RUN response.
func DecodeRunResponse(p []byte) (kernelNs uint64, err error) {
	return decodeU64("RUN response", p)
}

// ErrorMessage returns the message a non-OK response carries as its whole
// payload, with invalid UTF-8 replaced.
func ErrorMessage(p []byte) string {
	return strings.ToValidUTF8(string(p), "\uFFFD")
}
