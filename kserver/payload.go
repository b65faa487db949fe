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
	Flags   uint32 // RunUntimed, RunCollective, or 0
}

// RunUntimed is the RUN flag that asks the server not to time the kernel
// (the response's kernel time is then 0). It is the only flag.
const RunUntimed uint32 = 1

// RunCollective is the RUN flag that makes a RUN_BATCH entry a collective:
// its op id is then a CollectiveKind (PROTOCOL.md, "Collectives").
const RunCollective uint32 = 2

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

// DecodeRunPayload decodes a RUN request. The counts must account for the
// payload exactly, and no flag but RunUntimed and RunCollective may be set.
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
	if r.Flags&^(RunUntimed|RunCollective) != 0 {
		return RunPayload{}, 0, fmt.Errorf("%w: RUN request's flags are %#x; only %#x (untimed) and %#x (collective) are defined", ErrProtocol, r.Flags, RunUntimed, RunCollective)
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

// The collectives (PROTOCOL.md, "Collectives").

// CommUniqueIDBytes is the size of a communicator's unique id: NCCL's
// ncclUniqueId, 128 opaque bytes, made by rank 0's server and relayed by
// the hosts to every rank.
const CommUniqueIDBytes = 128

// CollectiveKind says which collective a COMM request or a collective
// RUN_BATCH entry is.
type CollectiveKind uint32

// The collectives.
const (
	AllReduce     CollectiveKind = 1 // recv = the reduction over the ranks of send
	ReduceScatter CollectiveKind = 2 // recv = the rank's slice of that reduction
	AllGather     CollectiveKind = 3 // recv = every rank's send, in rank order
)

func (k CollectiveKind) String() string {
	switch k {
	case AllReduce:
		return "all_reduce"
	case ReduceScatter:
		return "reduce_scatter"
	case AllGather:
		return "all_gather"
	}
	return fmt.Sprintf("collective %d", uint32(k))
}

// opcode is the COMM request of k.
func (k CollectiveKind) opcode() Opcode {
	return map[CollectiveKind]Opcode{AllReduce: OpCommAllReduce, ReduceScatter: OpCommReduceScatter, AllGather: OpCommAllGather}[k]
}

// CommDType is a collective's element type on the wire.
type CommDType uint32

// The element types.
const (
	CommF16 CommDType = 1
	CommF32 CommDType = 2
	CommI32 CommDType = 3
)

// RedOp is a collective's reduction; all-gather's is RedNone.
type RedOp uint32

// The reductions.
const (
	RedNone RedOp = 0
	RedSum  RedOp = 1
	RedMax  RedOp = 2
)

// AppendCommInitRequest appends a COMM_INIT request, CommUniqueIDBytes + 16
// bytes: the unique id, rank, size, timeout_ms and a reserved word.
func AppendCommInitRequest(dst []byte, id [CommUniqueIDBytes]byte, rank, size, timeoutMs uint32) []byte {
	dst = append(dst, id[:]...)
	dst = binary.LittleEndian.AppendUint32(dst, rank)
	dst = binary.LittleEndian.AppendUint32(dst, size)
	dst = binary.LittleEndian.AppendUint32(dst, timeoutMs)
	return binary.LittleEndian.AppendUint32(dst, 0)
}

// CollectiveRequest is a COMM_ALL_REDUCE, COMM_REDUCE_SCATTER or
// COMM_ALL_GATHER request's payload: Count elements of DType per rank
// from the buffer Send into the buffer Recv, over the communicator Comm.
type CollectiveRequest struct {
	Comm, Send, Recv, Count uint64
	DType                   CommDType
	RedOp                   RedOp
	TimeoutMs               uint32
}

// collectiveBytes is the size of a COMM_ALL_REDUCE, COMM_REDUCE_SCATTER
// or COMM_ALL_GATHER request.
const collectiveBytes = 48

// AppendCollectiveRequest appends a collective request: u64 comm, u64
// send, u64 recv, u64 count, u32 dtype, u32 redop, u32 timeout_ms, u32
// reserved.
func AppendCollectiveRequest(dst []byte, r CollectiveRequest) []byte {
	for _, v := range []uint64{r.Comm, r.Send, r.Recv, r.Count} {
		dst = binary.LittleEndian.AppendUint64(dst, v)
	}
	for _, v := range []uint32{uint32(r.DType), uint32(r.RedOp), r.TimeoutMs, 0} {
		dst = binary.LittleEndian.AppendUint32(dst, v)
	}
	return dst
}

// DecodeCollectiveRequest decodes a collective request.
func DecodeCollectiveRequest(p []byte) (CollectiveRequest, error) {
	if len(p) != collectiveBytes {
		return CollectiveRequest{}, fmt.Errorf("%w: collective request is %d bytes, want %d", ErrProtocol, len(p), collectiveBytes)
	}
	le := binary.LittleEndian
	if reserved := le.Uint32(p[44:]); reserved != 0 {
		return CollectiveRequest{}, fmt.Errorf("%w: collective request's reserved field is %d, want 0", ErrProtocol, reserved)
	}
	return CollectiveRequest{Comm: le.Uint64(p), Send: le.Uint64(p[8:]), Recv: le.Uint64(p[16:]), Count: le.Uint64(p[24:]),
		DType: CommDType(le.Uint32(p[32:])), RedOp: RedOp(le.Uint32(p[36:])), TimeoutMs: le.Uint32(p[40:])}, nil
}

// CommInfo is a COMM_INFO answer: the engine's version code (NCCL's
// NCCL_VERSION_CODE, e.g. 22105 for 2.21.5; 0 for the cpu backend's copies)
// and a line that names it and where it was loaded from.
type CommInfo struct {
	Version uint32
	Text    string
}

// DecodeCommInfoResponse decodes a COMM_INFO answer: u32 version, text.
func DecodeCommInfoResponse(p []byte) (CommInfo, error) {
	if len(p) < 4 {
		return CommInfo{}, fmt.Errorf("%w: COMM_INFO answer is %d bytes, want at least 4", ErrProtocol, len(p))
	}
	return CommInfo{Version: binary.LittleEndian.Uint32(p), Text: ErrorMessage(p[4:])}, nil
}

// DecodeCommUniqueIDResponse decodes a COMM_UNIQUE_ID answer: the id.
func DecodeCommUniqueIDResponse(p []byte) (id [CommUniqueIDBytes]byte, err error) {
	if len(p) != CommUniqueIDBytes {
		return id, fmt.Errorf("%w: COMM_UNIQUE_ID answer is %d bytes, want %d", ErrProtocol, len(p), CommUniqueIDBytes)
	}
	copy(id[:], p)
	return id, nil
}

// DecodeCommInitResponse decodes a COMM_INIT answer: the communicator's
// handle, never 0.
func DecodeCommInitResponse(p []byte) (uint64, error) {
	h, err := decodeU64("COMM_INIT response", p)
	if err == nil && h == 0 {
		err = fmt.Errorf("%w: COMM_INIT response has handle 0, which the protocol never issues", ErrProtocol)
	}
	return h, err
}
