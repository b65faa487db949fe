package kserver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Config says which server binary to run and how patient to be with it.
// Zero durations and sizes take the defaults in their comments.
type Config struct {
	// Path is the server binary. It is run as is, never looked up in $PATH.
	Path string
	// Env is added to the host's environment for the child. kserver adds the
	// cookie (CookieEnv=CookieValue) itself; a different value is replaced.
	Env []string
	// BeforeStart, if set, is called before every start and restart; vkern
	// uses it to recheck the binary's SHA-256. An error aborts the start.
	BeforeStart func(ctx context.Context) error
	// CallTimeout is the deadline of a call whose ctx has none (60s),
	// counted from the server's arrival where the call starts one or waits
	// for another call's start (StartTimeout bounds that). It is also how
	// long the server may take over a request whose caller gave up
	// waiting for it, counted from when the server gets to it.
	CallTimeout time.Duration
	// StartTimeout bounds the wait for HELLO after a start (10s).
	StartTimeout time.Duration
	// Wrapper, if set, is a command the server runs under: its first word
	// (looked up in $PATH) is started with the other words and then Path as
	// its arguments, and is the server's parent. It must hand on the
	// server's stdin, stdout, stderr, descriptors 3 and 4 and environment,
	// and write nothing of its own to stdout: Nsight Compute with
	// --log-file, say, to profile the server's kernels (ncu as the direct
	// parent; under `ncu --target-processes all vkern …` the server does
	// not start). It must keep the server in its own process group: a kill
	// takes that group, and the group is killed when the wrapper exits.
	// BeforeStart still checks Path. After SHUTDOWN the wrapper may take
	// StartTimeout, not CloseTimeout, to exit (a profiler writes its report
	// then). The server is told (VKERN_WRAPPED=1) to end itself 2 s after
	// its stdin hangs up, since the host's parent-death signal reaches the
	// wrapper alone. A kill also signals the pid the server's HELLO names
	// (a pidfd), should the wrapper have moved it out of its group. A
	// DiedError's PID and exit status are the wrapper's.
	Wrapper []string
	// CloseTimeout bounds each step of Close: the SHUTDOWN reply (behind the
	// calls in flight) and the exit after it (2s; under a Wrapper, the exit
	// may take StartTimeout if that is longer).
	CloseTimeout time.Duration
	// StderrTail is how many bytes of the child's stderr are kept (64 KiB).
	StderrTail int
	// ExpectSourceSHA256, if set, must equal HELLO's source_sha256.
	ExpectSourceSHA256 string
	// ArenaBytes is the most the shared-memory arena may grow to (256 MiB).
	// Transfers of any size go through it in pieces; it bounds the host
	// memory that bulk data in flight can take.
	ArenaBytes uint64
	// Pipes sends frames over the child's stdin and stdout instead of the
	// shared-memory rings (PROTOCOL.md, "Rings"). It costs a few
	// microseconds more per call; it is there for comparison, and for
	// watching the frames with strace.
	Pipes bool
	// Isolated runs every call that needs the server (Hello, Ping, Sync,
	// Memory, Run, RunBatch) in a fresh server process that is shut down
	// when the call ends: the seed's one process per call. Buffers then
	// live in host memory between calls, and a Run copies the buffers it
	// names into its process and all of them back out. Nothing one call
	// does can outlive it, at the price of a process start per call.
	Isolated bool
}

// DefaultCallTimeout is Config.CallTimeout where it is zero.
const DefaultCallTimeout = 60 * time.Second

// The other defaults of Config.
const (
	defaultStartTimeout = 10 * time.Second
	defaultCloseTimeout = 2 * time.Second
	defaultStderrTail   = 64 << 10
	defaultArenaBytes   = 256 << 20
)

// exitGrace is how long a child whose stdout ended, or that announced a fatal
// error, may take to exit by itself before it is killed, so that the error
// reports its own exit status rather than the host's kill.
const exitGrace = time.Second

// framingHint explains a length prefix that makes no sense.
const framingHint = "the server's stdout carries frames only; text printed there (the bytes quoted above) breaks the stream and belongs on stderr"

// Handle names a buffer in one particular server. A Handle from a server that
// has since died is stale: calls with it fail with ErrStaleHandle.
type Handle struct {
	gen uint64 // which of the Client's servers made it: 1, 2, ...; 0 in isolated mode
	id  uint64 // the server's handle, never 0
}

// ID is the server's number for the buffer.
func (h Handle) ID() uint64 { return h.id }

// IsZero reports whether h is the zero Handle, which names no buffer.
func (h Handle) IsZero() bool { return h.id == 0 }

func (h Handle) String() string {
	if h.gen == 0 {
		return fmt.Sprintf("buffer %d (isolated mode)", h.id)
	}
	return fmt.Sprintf("buffer %d of kernel server #%d", h.id, h.gen)
}

// RunRequest is one RUN of a batch: kernel OpID with Params on Buffers
// (inputs first, then outputs).
type RunRequest struct {
	OpID   uint32
	Params []int64
	// Buffers are the operands' handles in wire order; the zero Handle
	// stands for an operand that is empty at these Params (a bias switched
	// off), which the server then checks.
	Buffers []Handle
	// Collective makes the entry a collective (PROTOCOL.md,
	// "Collectives"): OpID its CollectiveKind, Params count, dtype, redop
	// and timeout_ms (0: kserver sets what is left of the batch's
	// deadline, less a margin), and Buffers the communicator, send and
	// recv.
	Collective bool
	//
	// Untimed asks the server not to time the kernel; its time is then 0.
	// On a GPU that saves two timing events per run (about 3.5 µs of a
	// tiny run on an H100). The server may time an untimed batch entry
	// anyway when other entries of the batch are timed.
	Untimed bool
}

// Client talks to one kernel server at a time, starting it on the first call
// and starting a fresh one on the call after it dies. Its methods are safe
// for concurrent use, and concurrent calls are pipelined: each is sent as
// soon as it is ready, the server answers in order, and the caller of the
// oldest call reads the next answer itself, then passes the reading on. A
// transfer is split into pieces, so other calls go between them.
type Client struct {
	cfg Config

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
	starting  chan struct{} // held while a server starts
	iso       *isolated     // set in isolated mode

	mu         sync.Mutex
	arena      *arena // made on the first start, closed by Close
	gen        uint64 // how many servers have been started
	live       *conn  // the live server, or nil
	last       process
	unreported *DiedError // a death between calls that no call has been told of
}

// New returns a Client for cfg. It starts nothing.
func New(cfg Config) *Client {
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = defaultStartTimeout
	}
	if cfg.CloseTimeout <= 0 {
		cfg.CloseTimeout = defaultCloseTimeout
	}
	if cfg.StderrTail <= 0 {
		cfg.StderrTail = defaultStderrTail
	}
	if cfg.ArenaBytes == 0 {
		cfg.ArenaBytes = defaultArenaBytes
	}
	cfg.ArenaBytes = max(cfg.ArenaBytes, minArenaBytes)
	c := &Client{cfg: cfg, starting: make(chan struct{}, 1)}
	if cfg.Isolated {
		c.iso = newIsolated(c)
	}
	return c
}

// minArenaBytes is the smallest arena a Config may ask for.
const minArenaBytes = 64 << 10

// Hello returns the current server's HELLO, starting the server if needed.
func (c *Client) Hello(ctx context.Context) (Hello, error) {
	if c.iso != nil {
		return c.iso.hello(ctx)
	}
	cx, err := c.begin(ctx, OpHello)
	if err != nil {
		return Hello{}, err
	}
	s, err := c.server(&cx, OpHello, true)
	if err != nil {
		return Hello{}, err
	}
	return Hello{Version: s.hello.Version, Fields: maps.Clone(s.hello.Fields)}, nil
}

// Ping asks the server for an empty reply.
func (c *Client) Ping(ctx context.Context) error {
	if c.iso != nil {
		return c.iso.simple(ctx, OpPing)
	}
	return c.simple(ctx, OpPing)
}

// Sync waits until the server's device work is done.
func (c *Client) Sync(ctx context.Context) error {
	if c.iso != nil {
		return c.iso.simple(ctx, OpSync)
	}
	return c.simple(ctx, OpSync)
}

// Memory is the device's memory as a MEMORY request reports it: Total
// bytes in all, and Free bytes that new buffers could still get now, by
// the backend's estimate (PROTOCOL.md, "MEMORY").
type Memory struct {
	Free, Total uint64
}

// Memory asks the server how much device memory is free and how much there
// is in all, starting the server if needed. In isolated mode a fresh server
// answers, one that holds no buffers: the buffers the host keeps between
// calls are not in its count (on the cpu backend they lower Free only
// through the machine's available memory, once written).
func (c *Client) Memory(ctx context.Context) (Memory, error) {
	if c.iso != nil {
		return c.iso.memory(ctx)
	}
	cx, err := c.begin(ctx, OpMemory)
	if err != nil {
		return Memory{}, err
	}
	s, err := c.server(&cx, OpMemory, true)
	if err != nil {
		return Memory{}, err
	}
	cl := &call{op: OpMemory}
	if err := s.do(cx, cl, nil, nil); err != nil {
		return Memory{}, err
	}
	return cl.memory, nil
}

// CommInfo asks the server what its collective engine is (COMM_INFO),
// starting the server if needed. A backend without one answers
// NOT_SUPPORTED (errors.Is(err, op.ErrNotSupported)) with the reason:
// what was searched for NCCL, say. Isolated mode has no collectives.
func (c *Client) CommInfo(ctx context.Context) (CommInfo, error) {
	cl, err := c.commCall(ctx, OpCommInfo, nil)
	if err != nil {
		return CommInfo{}, err
	}
	return DecodeCommInfoResponse(cl.text)
}

// CommUniqueID asks the server for a new communicator's unique id, which
// every rank then joins with (CommInit).
func (c *Client) CommUniqueID(ctx context.Context) (id [CommUniqueIDBytes]byte, err error) {
	cl, err := c.commCall(ctx, OpCommUniqueID, nil)
	if err != nil {
		return id, err
	}
	copy(id[:], cl.text)
	return id, nil
}

// CommInit joins the communicator id names as rank of size ranks and
// returns its handle. The server waits for the other ranks until a little
// before ctx's deadline (or CallTimeout), then aborts the communicator and
// answers COMM_FAILED (errors.Is(err, ErrCommFailed)), so that the answer
// comes before the host would end the server.
func (c *Client) CommInit(ctx context.Context, id [CommUniqueIDBytes]byte, rank, size int) (Handle, error) {
	if size < 1 || rank < 0 || rank >= size || size > math.MaxUint32 {
		return Handle{}, fmt.Errorf("kserver: COMM_INIT: rank %d of size %d; want size >= 1 and rank in [0, size)", rank, size)
	}
	var gen uint64
	cl, err := c.commCall(ctx, OpCommInit, func(cx callCtx, s *conn) ([]byte, error) {
		gen = s.gen
		return AppendCommInitRequest(nil, id, uint32(rank), uint32(size), serverTimeoutMs(cx)), nil
	})
	if err != nil {
		return Handle{}, err
	}
	return Handle{gen: gen, id: cl.u64}, nil
}

// Collective is one collective request: Count elements of DType per rank
// from Send into Recv over the communicator Comm (handles of one server).
// Reduce-scatter's Send and all-gather's Recv hold size·Count elements;
// in place is Send == Recv for all-reduce, and as NCCL defines it for the
// others.
type Collective struct {
	Kind             CollectiveKind
	Comm, Send, Recv Handle
	Count            uint64
	DType            CommDType
	RedOp            RedOp // RedNone for AllGather
}

// Collective runs one collective and waits for it. The server gives up
// a little before ctx's deadline (or CallTimeout): it then aborts the
// communicator and answers COMM_FAILED (errors.Is(err, ErrCommFailed)),
// and the communicator's handle is gone.
func (c *Client) Collective(ctx context.Context, col Collective) error {
	op := col.Kind.opcode()
	if op == 0 {
		return fmt.Errorf("kserver: unknown collective %v", col.Kind)
	}
	_, err := c.commCall(ctx, op, func(cx callCtx, s *conn) ([]byte, error) {
		if err := s.checkHandles(op, col.Comm, col.Send, col.Recv); err != nil {
			return nil, err
		}
		return AppendCollectiveRequest(nil, CollectiveRequest{Comm: col.Comm.id, Send: col.Send.id, Recv: col.Recv.id,
			Count: col.Count, DType: col.DType, RedOp: col.RedOp, TimeoutMs: serverTimeoutMs(cx)}), nil
	})
	return err
}

// CommAbort ends the communicator comm at once, without waiting for its
// peers (COMM_ABORT): at the end of a run, and after a peer's failure.
func (c *Client) CommAbort(ctx context.Context, comm Handle) error {
	_, err := c.commCall(ctx, OpCommAbort, func(cx callCtx, s *conn) ([]byte, error) {
		if err := s.checkHandles(OpCommAbort, comm); err != nil {
			return nil, err
		}
		return AppendFreeRequest(nil, comm.id), nil
	})
	return err
}

// commCall sends one collective request, its payload made by payload
// (nil: empty) once the server is known, and waits for the answer.
func (c *Client) commCall(ctx context.Context, op Opcode, payload func(callCtx, *conn) ([]byte, error)) (*call, error) {
	if c.iso != nil {
		return nil, isolatedError(op, StatusNotSupported, "%v: isolated mode starts a fresh server per call, and a communicator cannot outlive one; use the persistent server", op)
	}
	cx, err := c.begin(ctx, op)
	if err != nil {
		return nil, err
	}
	s, err := c.server(&cx, op, op == OpCommInfo || op == OpCommUniqueID || op == OpCommInit)
	if err != nil {
		return nil, err
	}
	var p []byte
	if payload != nil {
		if p, err = payload(cx, s); err != nil {
			return nil, err
		}
	}
	cl := &call{op: op}
	if err := s.do(cx, cl, p, nil); err != nil {
		return nil, err
	}
	return cl, nil
}

// serverTimeoutMs is how long the server may wait on its peers in a
// collective: what is left of the call's deadline, less a tenth of it (at
// most 2 s), so that it aborts and answers before the host would end it.
func serverTimeoutMs(cx callCtx) uint32 {
	left := time.Until(cx.deadline)
	left -= min(left/10, 2*time.Second)
	ms := left.Milliseconds()
	return uint32(min(max(ms, 1), math.MaxUint32))
}

func (c *Client) simple(ctx context.Context, op Opcode) error {
	cx, err := c.begin(ctx, op)
	if err != nil {
		return err
	}
	s, err := c.server(&cx, op, true)
	if err != nil {
		return err
	}
	return s.do(cx, &call{op: op}, nil, nil)
}

// Alloc allocates a device buffer of the given size.
func (c *Client) Alloc(ctx context.Context, bytes uint64) (Handle, error) {
	if c.iso != nil {
		return c.iso.alloc(bytes)
	}
	cx, err := c.begin(ctx, OpAlloc)
	if err != nil {
		return Handle{}, err
	}
	s, err := c.server(&cx, OpAlloc, true)
	if err != nil {
		return Handle{}, err
	}
	var head [8]byte
	cl := &call{op: OpAlloc}
	if err := s.do(cx, cl, AppendAllocRequest(head[:0], bytes), nil); err != nil {
		return Handle{}, err
	}
	return Handle{gen: s.gen, id: cl.u64}, nil
}

// ViewAlign is the alignment of a view's start within its allocation
// (PROTOCOL.md, VIEW).
const ViewAlign = 256

// View makes a handle on bytes [offset, offset + bytes) of the buffer h, so
// that a call can name part of a buffer: the view's reads and writes are
// the buffer's. The start must lie a multiple of ViewAlign bytes into the
// allocation. Freeing h frees its views; freeing a view frees nothing else.
// Isolated mode has no views: each call copies whole buffers in and out of
// a fresh server, so it refuses.
func (c *Client) View(ctx context.Context, h Handle, offset, bytes uint64) (Handle, error) {
	if c.iso != nil {
		return Handle{}, isolatedError(OpView, StatusNotSupported, "VIEW: isolated mode copies whole buffers into a fresh server per call and keeps no views; use the persistent server")
	}
	cx, err := c.begin(ctx, OpView)
	if err != nil {
		return Handle{}, err
	}
	s, err := c.serverFor(&cx, OpView, h)
	if err != nil {
		return Handle{}, err
	}
	var head [24]byte
	cl := &call{op: OpView}
	if err := s.do(cx, cl, AppendViewRequest(head[:0], h.id, offset, bytes), nil); err != nil {
		return Handle{}, err
	}
	return Handle{gen: s.gen, id: cl.u64}, nil
}

// Free frees a buffer.
func (c *Client) Free(ctx context.Context, h Handle) error {
	if c.iso != nil {
		return c.iso.free(h)
	}
	cx, err := c.begin(ctx, OpFree)
	if err != nil {
		return err
	}
	s, err := c.serverFor(&cx, OpFree, h)
	if err != nil {
		return err
	}
	var head [8]byte
	return s.do(cx, &call{op: OpFree}, AppendFreeRequest(head[:0], h.id), nil)
}

// Write copies data into the buffer h from byte offset on. The bytes go
// once, straight from data into the shared-memory arena, and the server
// copies them from there into the buffer; a large transfer moves in pieces,
// several in flight at once, so the two copies overlap, and other calls may
// run between the pieces. The whole transfer shares ctx's deadline.
func (c *Client) Write(ctx context.Context, h Handle, offset uint64, data []byte) error {
	if c.iso != nil {
		return c.iso.write(h, offset, data)
	}
	return c.transfer(ctx, OpWrite, h, offset, data)
}

// Read copies len(dst) bytes of the buffer h from byte offset on into dst.
// The server copies them into the shared-memory arena and the host copies
// them from there straight into dst, in pieces as Write does. After an
// error, dst's contents are unspecified.
func (c *Client) Read(ctx context.Context, h Handle, offset uint64, dst []byte) error {
	if c.iso != nil {
		return c.iso.read(h, offset, dst)
	}
	return c.transfer(ctx, OpRead, h, offset, dst)
}

func (c *Client) transfer(ctx context.Context, op Opcode, h Handle, offset uint64, buf []byte) error {
	cx, err := c.begin(ctx, op)
	if err != nil {
		return err
	}
	s, err := c.serverFor(&cx, op, h)
	if err != nil {
		return err
	}
	if err := checkSpan(op, offset, len(buf)); err != nil {
		return err
	}
	return s.transfer(cx, op, h.id, offset, buf)
}

// Run runs kernel opID with params on bufs (inputs first, then outputs) and
// returns the kernel time the server measured, in nanoseconds.
func (c *Client) Run(ctx context.Context, opID uint32, params []int64, bufs []Handle) (kernelNs uint64, err error) {
	return c.run(ctx, RunRequest{OpID: opID, Params: params, Buffers: bufs})
}

// RunUntimed is Run without the kernel's timing, for callers that need
// only the result: the server still waits for the kernel to finish before
// it answers.
func (c *Client) RunUntimed(ctx context.Context, opID uint32, params []int64, bufs []Handle) error {
	_, err := c.run(ctx, RunRequest{OpID: opID, Params: params, Buffers: bufs, Untimed: true})
	return err
}

func (c *Client) run(ctx context.Context, r RunRequest) (kernelNs uint64, err error) {
	if c.iso != nil {
		return c.iso.run(ctx, r.OpID, r.Params, r.Buffers)
	}
	cx, err := c.begin(ctx, OpRun)
	if err != nil {
		return 0, err
	}
	s, err := c.serverFor(&cx, OpRun, named(r.Buffers)...)
	if err != nil {
		return 0, err
	}
	req := appendRun(make([]byte, 0, runHeadBytes+8*(len(r.Params)+len(r.Buffers))), r)
	cl := &call{op: OpRun}
	if err := s.do(cx, cl, req, nil); err != nil {
		return 0, err
	}
	return cl.u64, nil
}

// RunBatch runs the runs in order in one round trip and returns each one's
// kernel time in nanoseconds. The server checks every entry before it runs
// any; an error names the failing entry (a *BatchError). At most
// MaxBatchRuns runs, whose encoding must fit a frame.
func (c *Client) RunBatch(ctx context.Context, runs []RunRequest) (kernelNs []uint64, err error) {
	if c.iso != nil {
		return c.iso.runBatch(ctx, runs)
	}
	cx, err := c.begin(ctx, OpRunBatch)
	if err != nil {
		return nil, err
	}
	if len(runs) == 0 {
		return []uint64{}, nil
	}
	if len(runs) > MaxBatchRuns {
		return nil, fmt.Errorf("kserver: RUN_BATCH of %d runs; at most %d fit one batch", len(runs), MaxBatchRuns)
	}
	size := batchHeadBytes
	withBuffers := false
	for _, r := range runs {
		size += runHeadBytes + 8*(len(r.Params)+len(r.Buffers))
		withBuffers = withBuffers || len(named(r.Buffers)) > 0
	}
	if size > MaxFrameBytes-HeaderBytes {
		return nil, fmt.Errorf("kserver: RUN_BATCH of %d runs is %d bytes, over the frame cap of %d bytes: split it", len(runs), size, MaxFrameBytes)
	}
	s, err := c.server(&cx, OpRunBatch, !withBuffers)
	if err != nil {
		return nil, err
	}
	for i, r := range runs {
		if err := s.checkHandles(OpRunBatch, named(r.Buffers)...); err != nil {
			return nil, &BatchError{Index: i, Count: len(runs), OpID: r.OpID, Err: err}
		}
	}
	req := make([]byte, 0, size)
	req = binary.LittleEndian.AppendUint32(req, uint32(len(runs)))
	req = binary.LittleEndian.AppendUint32(req, 0)
	for _, r := range runs {
		if r.Collective && len(r.Params) == 4 && r.Params[3] == 0 {
			// A collective entry's timeout: the batch's own deadline.
			r.Params = append([]int64(nil), r.Params...)
			r.Params[3] = int64(serverTimeoutMs(cx))
		}
		req = appendRun(req, r)
	}
	cl := &call{op: OpRunBatch, times: make([]uint64, len(runs))}
	err = s.do(cx, cl, req, nil)
	var se *ServerError
	if errors.As(err, &se) && cl.batchEntry < uint32(len(runs)) {
		return nil, &BatchError{Index: int(cl.batchEntry), Count: len(runs), OpID: runs[cl.batchEntry].OpID, Err: err}
	}
	if err != nil {
		return nil, err
	}
	return cl.times, nil
}

// appendRun appends r's RUN payload, naming the server's ids of its buffers.
func appendRun(dst []byte, r RunRequest) []byte {
	var flags uint32
	if r.Untimed {
		flags |= RunUntimed
	}
	if r.Collective {
		flags |= RunCollective
	}
	dst = binary.LittleEndian.AppendUint32(dst, r.OpID)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Params)))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Buffers)))
	dst = binary.LittleEndian.AppendUint32(dst, flags)
	for _, v := range r.Params {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(v))
	}
	for _, h := range r.Buffers {
		dst = binary.LittleEndian.AppendUint64(dst, h.id)
	}
	return dst
}

// Close asks the server to shut down once the calls in flight are answered,
// waits up to CloseTimeout for that and up to CloseTimeout (under a Wrapper,
// StartTimeout where longer) for the exit, and
// kills it when either runs out; calls still in flight then fail with an
// error wrapping ErrClosed. Later calls fail with ErrClosed. Close is safe
// to call more than once and from several goroutines; all get the first
// one's result.
func (c *Client) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.shutdown() })
	return c.closeErr
}

func (c *Client) shutdown() error {
	c.closed.Store(true)
	if c.iso != nil {
		return c.iso.close()
	}
	// A start in progress finishes (or sees closed and ends its server).
	t := time.NewTimer(c.cfg.CloseTimeout)
	select {
	case c.starting <- struct{}{}:
		defer func() { <-c.starting }()
	case <-t.C:
	}
	t.Stop()
	c.mu.Lock()
	s := c.live
	c.mu.Unlock()
	var err error
	if s != nil {
		err = s.shutdown()
	}
	c.mu.Lock()
	a := c.arena
	c.mu.Unlock()
	if a != nil {
		a.close()
	}
	return err
}

// Stderr returns the tail of the latest server's stderr (live or dead).
func (c *Client) Stderr() string {
	if c.iso != nil {
		return c.iso.stderr()
	}
	c.mu.Lock()
	p := c.last
	c.mu.Unlock()
	if p == nil {
		return ""
	}
	return p.stderrTail()
}

// begin checks that c is open and fixes the call's deadline: ctx's, or,
// where ctx has none, CallTimeout from now (implicit: a server start the
// call makes or waits for moves it, see server).
func (c *Client) begin(ctx context.Context, op Opcode) (callCtx, error) {
	if c.closed.Load() {
		return callCtx{}, fmt.Errorf("kserver: %v: %w", op, ErrClosed)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(c.cfg.CallTimeout)
	}
	return callCtx{ctx: ctx, deadline: deadline, implicit: !ok}, nil
}

// server returns the live server, starting one if there is none and start
// is set (else it returns nil). A server that died between calls is
// reported, once, to the call that finds out. Where cx's deadline is
// implicit, a start is bounded by StartTimeout alone (a server under Nsight
// Compute can take minutes to say HELLO, past CallTimeout), as is the wait
// for another call's start, and the call's CallTimeout then counts from
// the server's arrival: server moves cx's deadline so.
func (c *Client) server(cx *callCtx, op Opcode, start bool) (*conn, error) {
	s, waited, err := c.serverOrStart(cx, op, start)
	if waited && err == nil && cx.implicit {
		cx.deadline = time.Now().Add(c.cfg.CallTimeout) // from the server's arrival
	}
	return s, err
}

// serverOrStart is server's loop; waited says whether it waited for a start
// or made one.
func (c *Client) serverOrStart(cx *callCtx, op Opcode, start bool) (s *conn, waited bool, err error) {
	for {
		c.mu.Lock()
		if d := c.unreported; d != nil {
			c.unreported = nil
			c.mu.Unlock()
			e := *d
			e.Op = op.String()
			return nil, waited, &e
		}
		s = c.live
		c.mu.Unlock()
		if s != nil {
			if !s.p.wait(0) {
				return s, waited, nil
			}
			s.reap() // it exited between calls
			continue
		}
		if !start {
			return nil, waited, nil
		}
		waited = true
		cx.allow(c.cfg.StartTimeout)
		if err := cx.acquire(c.starting); err != nil {
			return nil, waited, fmt.Errorf("kserver: %v: gave up waiting for the server to start: %w", op, err)
		}
		c.mu.Lock()
		again := c.live != nil || c.unreported != nil
		c.mu.Unlock()
		if again {
			<-c.starting
			continue
		}
		if c.closed.Load() {
			<-c.starting
			return nil, waited, fmt.Errorf("kserver: %v: %w", op, ErrClosed)
		}
		cx.allow(c.cfg.StartTimeout)
		s, err = c.start(*cx)
		<-c.starting
		return s, waited, err
	}
}

// serverFor returns the live server after checking that every handle names
// one of its buffers. It never starts a server.
func (c *Client) serverFor(cx *callCtx, op Opcode, hs ...Handle) (*conn, error) {
	for i, h := range hs {
		if h.id == 0 {
			return nil, fmt.Errorf("kserver: %v: buffer %d is the zero Handle: %w", op, i, ErrStaleHandle)
		}
	}
	s, err := c.server(cx, op, len(hs) == 0)
	if err != nil {
		return nil, err
	}
	if err := s.checkHandles(op, hs...); err != nil {
		return nil, err
	}
	return s, nil
}

// named returns the handles of hs that are not the zero Handle: a RUN's
// buffers less its empty operands, which name no buffer.
func named(hs []Handle) []Handle {
	out := make([]Handle, 0, len(hs))
	for _, h := range hs {
		if !h.IsZero() {
			out = append(out, h)
		}
	}
	return out
}

// checkHandles reports handles that name no buffer of s, which may be nil
// (no server running).
func (s *conn) checkHandles(op Opcode, hs ...Handle) error {
	for i, h := range hs {
		switch {
		case h.id == 0:
			return fmt.Errorf("kserver: %v: buffer %d is the zero Handle: %w", op, i, ErrStaleHandle)
		case s == nil:
			return fmt.Errorf("kserver: %v: %v is gone with its server, and no server is running: %w", op, h, ErrStaleHandle)
		case h.gen != s.gen:
			return fmt.Errorf("kserver: %v: %v is gone with its server (the live one is #%d): %w", op, h, s.gen, ErrStaleHandle)
		}
	}
	return nil
}

// start runs BeforeStart, starts a server, reads its HELLO and starts its
// reader. The caller holds c.starting.
func (c *Client) start(cx callCtx) (*conn, error) {
	ctx, cancel := context.WithDeadline(cx.ctx, cx.deadline)
	defer cancel()
	if c.cfg.Path == "" {
		return nil, errors.New("kserver: start: Config.Path is empty; it names the kernel-server binary")
	}
	if c.cfg.BeforeStart != nil {
		if err := c.cfg.BeforeStart(ctx); err != nil {
			return nil, fmt.Errorf("kserver: not starting %s: %w", c.cfg.Path, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("kserver: start: %w (nothing was started)", err)
	}
	c.mu.Lock()
	if c.arena == nil {
		a, err := newArena(c.cfg.ArenaBytes)
		if err != nil {
			c.mu.Unlock()
			return nil, err
		}
		c.arena = a
	}
	a := c.arena
	c.mu.Unlock()
	var r *rings
	var ringFile *os.File
	if !c.cfg.Pipes {
		var err error
		if r, err = newRings(); err != nil {
			return nil, err
		}
		ringFile = r.file
	}
	p, err := startProcess(c.cfg.Path, c.cfg.Wrapper, childEnv(c.cfg.Env), c.cfg.StderrTail, a.file, ringFile)
	started := false
	if r != nil {
		r.closeFile() // the child has its own, or never will
		defer func() {
			if !started { // the process, if any, has been reaped
				r.unmap()
			}
		}()
	}
	if err != nil {
		if hint := startHint(err); hint != "" {
			return nil, fmt.Errorf("kserver: start kernel server: %w\nhint: %s", err, hint)
		}
		return nil, fmt.Errorf("kserver: start kernel server: %w", err)
	}
	c.mu.Lock()
	c.gen++
	gen := c.gen
	c.last = p
	c.mu.Unlock()
	s, err := newConn(c, gen, p, r)
	if err != nil {
		p.kill()
		return nil, c.endStart(p, gen, failure{cause: err, killed: true})
	}

	startCtx, cancelStart := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancelStart()
	stop := context.AfterFunc(startCtx, p.kill)
	f, err := s.fr.next()
	if !stop() {
		cause := fmt.Errorf("no HELLO within StartTimeout (%v): %w", c.cfg.StartTimeout, startCtx.Err())
		hint := fmt.Sprintf("is %s a vkern kernel server? A server sends HELLO at once; a slow device initialisation (under a profiler such as Nsight Compute) needs a longer StartTimeout (vkern: $VKERN_START_TIMEOUT, e.g. 2m)", c.cfg.Path)
		// The call's own deadline ended the wait where its context has one
		// (an implicit deadline was moved to StartTimeout's end: server).
		if cx.ctx.Err() != nil || (!cx.implicit && ctx.Err() != nil) {
			cause = fmt.Errorf("no HELLO before the call's deadline: %w", ctx.Err())
			hint = "the call's context ended before StartTimeout did: give the call a later deadline (or none: then StartTimeout alone bounds the start)"
		}
		return nil, c.endStart(p, gen, failure{cause: cause, killed: true, hint: hint})
	}
	if errors.Is(err, ErrProtocol) {
		return nil, c.endStart(p, gen, failure{cause: fmt.Errorf("reading HELLO: %w", err), hint: framingHint})
	}
	if err != nil {
		return nil, c.endStart(p, gen, failure{cause: fmt.Errorf("reading HELLO: %w", err), grace: exitGrace,
			hint: "the server ended before its HELLO; its stderr usually says why (no device, a missing driver library, no arena on fd 3, ...)"})
	}
	switch {
	case f.Status != StatusOK:
		return nil, c.endStart(p, gen, failure{cause: fmt.Errorf("%w: the first frame is %v %v with id %d, want HELLO: %s",
			ErrProtocol, f.Opcode, f.Status, f.ID, ErrorMessage(f.Payload)), grace: exitGrace})
	case f.Opcode != OpHello || f.ID != 0:
		return nil, c.endStart(p, gen, failure{cause: fmt.Errorf("%w: the first frame is %v with id %d, want HELLO with id 0",
			ErrProtocol, f.Opcode, f.ID)})
	}
	h, err := DecodeHello(f.Payload)
	if err != nil {
		return nil, c.endStart(p, gen, failure{cause: err})
	}
	if want := c.cfg.ExpectSourceSHA256; want != "" && h.SourceSHA256() != want {
		return nil, c.endStart(p, gen, failure{cause: fmt.Errorf("the server was built from kernel sources with SHA-256 %q, this vkern embeds %q: rebuild with `vkern cache clean`",
			h.SourceSHA256(), want)})
	}
	s.hello = h
	if len(c.cfg.Wrapper) > 0 {
		if pid, err := h.Uint("pid"); err == nil && pid > 0 {
			p.adopt(int(pid))
		}
	}
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		p.kill()
		p.wait(waitDelay + time.Second)
		p.release()
		return nil, fmt.Errorf("kserver: start: %w while the server was starting", ErrClosed)
	}
	c.live = s
	c.mu.Unlock()
	started = true
	return s, nil
}

// endStart ends a server whose start failed and says what happened.
func (c *Client) endStart(p process, gen uint64, f failure) error {
	d := endProcess(p, f)
	d.Op, d.Gen = "start", gen
	return d
}

// failure is why a server is being given up.
type failure struct {
	cause  error
	grace  time.Duration // how long it may take to exit by itself before it is killed
	killed bool          // the host has already killed it
	hint   string        // used when its exit status has no hint of its own
	call   *call         // the call whose deadline or answer ended it, if any
}

// endProcess ends p after f, reaps it, and returns the error that says what
// happened (without Op and Gen): its exit status and the tail of its stderr.
func endProcess(p process, f failure) *DiedError {
	if !f.killed && !p.wait(f.grace) {
		p.kill()
		f.killed = true
	}
	// After SIGKILL the exit is prompt; the bound covers stderr held open by
	// a grandchild, which exec's WaitDelay closes.
	p.wait(waitDelay + time.Second)
	p.release()
	exit, hint := p.diagnose()
	if f.killed {
		hint = "" // the exit status's hint would blame a SIGKILL on someone else
	}
	if hint == "" {
		hint = f.hint
	}
	return &DiedError{PID: p.pid(), Cause: f.cause, Killed: f.killed, Exit: exit, Hint: hint, Stderr: p.stderrTail()}
}

// checkSpan rejects a transfer whose end does not fit in a u64 offset.
func checkSpan(op Opcode, offset uint64, n int) error {
	if uint64(n) > math.MaxUint64-offset {
		return fmt.Errorf("kserver: %v: offset %d + %d bytes does not fit in a u64", op, offset, n)
	}
	return nil
}
