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
// MEMORY's request and the OK responses to FREE, WRITE, READ and TEXT_WRITE;
// DecodeEmpty checks those.

// transferBytes is the size of a WRITE or READ request: handle, offset,
// arena offset, length.
const transferBytes = 32

// runHeadBytes is the size of a RUN request before its params: op id, param
// count, buffer count, reserved.
const runHeadBytes = 16

// batchHeadBytes is the size of a RUN_BATCH request before its entries:
// count, reserved.
const batchHeadBytes = 8

// MaxBatchRuns is the most RUNs one RUN_BATCH carries.
const MaxBatchRuns = 65536

// NoBatchEntry is the index a RUN_BATCH error carries when it is about the
// batch as a whole rather than one entry.
const NoBatchEntry = 0xFFFFFFFF

// textHeadBytes is the size of a TEXT_WRITE request before its text: handle,
// offset.
const textHeadBytes = 16

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

// AppendViewRequest appends a VIEW request: u64 handle, u64 byte offset,
// u64 bytes. The response is ALLOC's: the view's handle.
func AppendViewRequest(dst []byte, handle, offset, bytes uint64) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, handle)
	dst = binary.LittleEndian.AppendUint64(dst, offset)
	return binary.LittleEndian.AppendUint64(dst, bytes)
}

// AppendFreeRequest appends a FREE request: u64 handle.
func AppendFreeRequest(dst []byte, handle uint64) []byte {
	return binary.LittleEndian.AppendUint64(dst, handle)
}

// DecodeFreeRequest decodes a FREE request.
func DecodeFreeRequest(p []byte) (handle uint64, err error) {
	return decodeU64("FREE request", p)
}

// TransferRequest is a WRITE or READ request's payload: Length bytes move
// between the buffer Handle at byte Offset and the arena at ArenaOffset
// (arena to buffer for WRITE, buffer to arena for READ).
type TransferRequest struct {
	Handle, Offset, ArenaOffset, Length uint64
}

// AppendTransferRequest appends a WRITE or READ request: u64 handle, u64
// offset, u64 arena offset, u64 length.
func AppendTransferRequest(dst []byte, r TransferRequest) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, r.Handle)
	dst = binary.LittleEndian.AppendUint64(dst, r.Offset)
	dst = binary.LittleEndian.AppendUint64(dst, r.ArenaOffset)
	return binary.LittleEndian.AppendUint64(dst, r.Length)
}

// DecodeTransferRequest decodes a WRITE or READ request.
func DecodeTransferRequest(p []byte) (TransferRequest, error) {
	if len(p) != transferBytes {
		return TransferRequest{}, fmt.Errorf("%w: WRITE or READ request is %d bytes, want %d (handle, offset, arena offset, length)",
			ErrProtocol, len(p), transferBytes)
	}
	return TransferRequest{
		Handle:      binary.LittleEndian.Uint64(p),
		Offset:      binary.LittleEndian.Uint64(p[8:]),
		ArenaOffset: binary.LittleEndian.Uint64(p[16:]),
		Length:      binary.LittleEndian.Uint64(p[24:]),
	}, nil
}

// RunPayload is a RUN request's payload as it travels: which op, its
// params, and the server's handles of its buffers (inputs first, then
// outputs). RUN_BATCH carries a sequence of them.
type RunPayload struct {
	OpID    uint32
	Params  []int64
	Buffers []uint64
	Flags   uint32 // RunUntimed, or 0
}

// RunUntimed is the RUN flag that asks the server not to time the kernel
// (the response's kernel time is then 0). It is the only flag.
const RunUntimed uint32 = 1

// AppendRunPayload appends a RUN request: u32 op id, u32 param count, u32
// buffer count, u32 flags, the params as i64, the handles as u64.
func AppendRunPayload(dst []byte, r RunPayload) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, r.OpID)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Params)))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Buffers)))
	dst = binary.LittleEndian.AppendUint32(dst, r.Flags)
	for _, v := range r.Params {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(v))
	}
	for _, h := range r.Buffers {
		dst = binary.LittleEndian.AppendUint64(dst, h)
	}
	return dst
}

// runPayloadBytes is the encoded size of r.
func runPayloadBytes(r RunPayload) int {
	return runHeadBytes + 8*(len(r.Params)+len(r.Buffers))
}

// DecodeRunPayload decodes a RUN request. The counts must account for the
// payload exactly, and no flag but RunUntimed may be set.
func DecodeRunPayload(p []byte) (RunPayload, error) {
	r, n, err := decodeRunPrefix(p)
	if err == nil && n != len(p) {
		err = fmt.Errorf("%w: RUN request is %d bytes, want %d for %d params and %d buffers",
			ErrProtocol, len(p), n, len(r.Params), len(r.Buffers))
	}
	if err != nil {
		return RunPayload{}, err
	}
	return r, nil
}

// decodeRunPrefix decodes the RUN at the start of p and returns its length.
func decodeRunPrefix(p []byte) (RunPayload, int, error) {
	if len(p) < runHeadBytes {
		return RunPayload{}, 0, fmt.Errorf("%w: RUN request is %d bytes, want at least %d", ErrProtocol, len(p), runHeadBytes)
	}
	r := RunPayload{OpID: binary.LittleEndian.Uint32(p), Flags: binary.LittleEndian.Uint32(p[12:])}
	params := uint64(binary.LittleEndian.Uint32(p[4:]))
	buffers := uint64(binary.LittleEndian.Uint32(p[8:]))
	if r.Flags&^RunUntimed != 0 {
		return RunPayload{}, 0, fmt.Errorf("%w: RUN request's flags are %#x; only %#x (untimed) is defined", ErrProtocol, r.Flags, RunUntimed)
	}
	want := runHeadBytes + 8*(params+buffers)
	if uint64(len(p)) < want {
		return RunPayload{}, 0, fmt.Errorf("%w: RUN request is %d bytes, want %d for %d params and %d buffers",
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
	return r, int(want), nil
}

// AppendRunResponse appends a RUN response: u64 kernel time in nanoseconds.
func AppendRunResponse(dst []byte, kernelNs uint64) []byte {
	return binary.LittleEndian.AppendUint64(dst, kernelNs)
}

// DecodeRunResponse decodes a RUN response.
func DecodeRunResponse(p []byte) (kernelNs uint64, err error) {
	return decodeU64("RUN response", p)
}

// AppendRunBatchRequest appends a RUN_BATCH request: u32 count, u32
// reserved (0), then each entry laid out as a RUN request.
func AppendRunBatchRequest(dst []byte, runs []RunPayload) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(runs)))
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	for _, r := range runs {
		dst = AppendRunPayload(dst, r)
	}
	return dst
}

// DecodeRunBatchRequest decodes a RUN_BATCH request: the entries must
// account for the payload exactly.
func DecodeRunBatchRequest(p []byte) ([]RunPayload, error) {
	if len(p) < batchHeadBytes {
		return nil, fmt.Errorf("%w: RUN_BATCH request is %d bytes, want at least %d (count, reserved)", ErrProtocol, len(p), batchHeadBytes)
	}
	count := binary.LittleEndian.Uint32(p)
	if reserved := binary.LittleEndian.Uint32(p[4:]); reserved != 0 {
		return nil, fmt.Errorf("%w: RUN_BATCH request's reserved field is %d, want 0", ErrProtocol, reserved)
	}
	rest := p[batchHeadBytes:]
	if uint64(count)*runHeadBytes > uint64(len(rest)) {
		return nil, fmt.Errorf("%w: RUN_BATCH claims %d entries but has only %d bytes for them", ErrProtocol, count, len(rest))
	}
	runs := make([]RunPayload, count)
	for i := range runs {
		r, n, err := decodeRunPrefix(rest)
		if err != nil {
			return nil, fmt.Errorf("RUN_BATCH entry %d of %d: %w", i, count, err)
		}
		runs[i] = r
		rest = rest[n:]
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: RUN_BATCH has %d bytes after its %d entries", ErrProtocol, len(rest), count)
	}
	return runs, nil
}

// AppendRunBatchResponse appends a RUN_BATCH response: one u64 kernel time
// per entry, in nanoseconds.
func AppendRunBatchResponse(dst []byte, kernelNs []uint64) []byte {
	for _, ns := range kernelNs {
		dst = binary.LittleEndian.AppendUint64(dst, ns)
	}
	return dst
}

// DecodeRunBatchResponse decodes a RUN_BATCH response into kernelNs, whose
// length is the number of entries the request had.
func DecodeRunBatchResponse(p []byte, kernelNs []uint64) error {
	if len(p) != 8*len(kernelNs) {
		return fmt.Errorf("%w: RUN_BATCH response is %d bytes, want %d for %d entries", ErrProtocol, len(p), 8*len(kernelNs), len(kernelNs))
	}
	for i := range kernelNs {
		kernelNs[i] = binary.LittleEndian.Uint64(p[8*i:])
	}
	return nil
}

// AppendRunBatchError appends the payload of a RUN_BATCH response whose
// status is not OK: u32 entry index (NoBatchEntry for the batch as a
// whole), then the message.
func AppendRunBatchError(dst []byte, entry uint32, message string) []byte {
	return append(binary.LittleEndian.AppendUint32(dst, entry), message...)
}

// DecodeRunBatchError decodes the payload of a RUN_BATCH error response.
func DecodeRunBatchError(p []byte) (entry uint32, message string, err error) {
	if len(p) < 4 {
		return 0, "", fmt.Errorf("%w: RUN_BATCH error is %d bytes, too short for its u32 entry index", ErrProtocol, len(p))
	}
	return binary.LittleEndian.Uint32(p), ErrorMessage(p[4:]), nil
}

// appendTextHead appends the part of a TEXT_WRITE request before its text.
func appendTextHead(dst []byte, handle, offset uint64) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, handle)
	return binary.LittleEndian.AppendUint64(dst, offset)
}

// TextReadRequest is a TEXT_READ request's payload: Count u16 values of the
// buffer Handle from byte Offset.
type TextReadRequest struct {
	Handle, Offset, Count uint64
}

// AppendTextReadRequest appends a TEXT_READ request: u64 handle, u64 offset,
// u64 count.
func AppendTextReadRequest(dst []byte, r TextReadRequest) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, r.Handle)
	dst = binary.LittleEndian.AppendUint64(dst, r.Offset)
	return binary.LittleEndian.AppendUint64(dst, r.Count)
}

// memoryBytes is the size of a MEMORY response: free bytes, total bytes.
const memoryBytes = 16

// AppendMemoryResponse appends a MEMORY response: u64 free bytes, u64 total
// bytes.
func AppendMemoryResponse(dst []byte, m Memory) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, m.Free)
	return binary.LittleEndian.AppendUint64(dst, m.Total)
}

// DecodeMemoryResponse decodes a MEMORY response. It checks the length
// only: what free means is the backend's (PROTOCOL.md, "MEMORY").
func DecodeMemoryResponse(p []byte) (Memory, error) {
	if len(p) != memoryBytes {
		return Memory{}, fmt.Errorf("%w: MEMORY response is %d bytes, want %d (u64 free bytes, u64 total bytes)", ErrProtocol, len(p), memoryBytes)
	}
	return Memory{Free: binary.LittleEndian.Uint64(p), Total: binary.LittleEndian.Uint64(p[8:])}, nil
}

// ErrorMessage returns the message a non-OK response carries as its whole
// payload, with invalid UTF-8 replaced.
func ErrorMessage(p []byte) string {
	return strings.ToValidUTF8(string(p), "\uFFFD")
}
