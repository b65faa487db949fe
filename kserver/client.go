package kserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
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
	// CallTimeout is the deadline of a call whose ctx has none (60s).
	CallTimeout time.Duration
	// StartTimeout bounds the wait for HELLO after a start (10s).
	StartTimeout time.Duration
	// CloseTimeout bounds each step of Close: waiting for a call in flight,
	// the SHUTDOWN reply, and the exit after it (2s).
	CloseTimeout time.Duration
	// StderrTail is how many bytes of the child's stderr are kept (64 KiB).
	StderrTail int
	// ExpectSourceSHA256, if set, must equal HELLO's source_sha256.
	ExpectSourceSHA256 string
}

// exitGrace is how long a child whose stdout ended, or that announced a fatal
// error, may take to exit by itself before it is killed, so that the error
// reports its own exit status rather than the host's kill.
const exitGrace = time.Second

// framingHint explains a length prefix that makes no sense.
const framingHint = "the server's stdout carries frames only; text printed there (the bytes quoted above) breaks the stream and belongs on stderr"

// readBufferBytes is the size of the buffered reader on the child's stdout.
const readBufferBytes = 64 << 10

// Handle names a buffer in one particular server. A Handle from a server that
// has since died is stale: calls with it fail with ErrStaleHandle.
type Handle struct {
	gen uint64 // which of the Client's servers made it: 1, 2, ...
	id  uint64 // the server's handle, never 0
}

// ID is the server's number for the buffer.
func (h Handle) ID() uint64 { return h.id }

// IsZero reports whether h is the zero Handle, which names no buffer.
func (h Handle) IsZero() bool { return h.id == 0 }

func (h Handle) String() string {
	return fmt.Sprintf("buffer %d of kernel server #%d", h.id, h.gen)
}

// Client talks to one kernel server at a time, starting it on the first call
// and starting a fresh one on the call after it dies. Its methods are safe
// for concurrent use; calls are serialised, one request in flight at a time.
type Client struct {
	cfg Config

	sem       chan struct{} // held by the call in flight
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	// Owned by the holder of sem.
	gen    uint64 // how many servers have been started
	hello  Hello
	in     *bufio.Reader
	nextID uint32
	wbuf   []byte
	rbuf   []byte

	// mu guards proc and last for Close and Stderr, which do not hold sem;
	// the holder of sem changes them under mu and may read them without it.
	mu   sync.Mutex
	proc process // the live server, or nil
	last process // the latest server, live or not, for Stderr
}

// New returns a Client for cfg. It starts nothing.
func New(cfg Config) *Client {
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 60 * time.Second
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 10 * time.Second
	}
	if cfg.CloseTimeout <= 0 {
		cfg.CloseTimeout = 2 * time.Second
	}
	if cfg.StderrTail <= 0 {
		cfg.StderrTail = 64 << 10
	}
	return &Client{cfg: cfg, sem: make(chan struct{}, 1), rbuf: make([]byte, 0, 4<<10)}
}

// Hello returns the current server's HELLO, starting the server if needed.
func (c *Client) Hello(ctx context.Context) (Hello, error) {
	ctx, end, err := c.begin(ctx, OpHello)
	if err != nil {
		return Hello{}, err
	}
	defer end()
	if err := c.ensureStarted(ctx); err != nil {
		return Hello{}, err
	}
	return Hello{Version: c.hello.Version, Fields: maps.Clone(c.hello.Fields)}, nil
}

// Ping asks the server for an empty reply.
func (c *Client) Ping(ctx context.Context) error {
	return c.simple(ctx, OpPing)
}

// Sync waits until the server's device work is done.
func (c *Client) Sync(ctx context.Context) error {
	return c.simple(ctx, OpSync)
}

func (c *Client) simple(ctx context.Context, op Opcode) error {
	ctx, end, err := c.begin(ctx, op)
	if err != nil {
		return err
	}
	defer end()
	if err := c.ensureStarted(ctx); err != nil {
		return err
	}
	return c.exchange(ctx, op, nil, nil, nil, expectEmpty(op))
}

// Alloc allocates a device buffer of the given size.
func (c *Client) Alloc(ctx context.Context, bytes uint64) (Handle, error) {
	ctx, end, err := c.begin(ctx, OpAlloc)
	if err != nil {
		return Handle{}, err
	}
	defer end()
	if err := c.ensureStarted(ctx); err != nil {
		return Handle{}, err
	}
	var id uint64
	err = c.exchange(ctx, OpAlloc, AppendAllocRequest(nil, bytes), nil, nil, func(p []byte) (err error) {
		id, err = DecodeAllocResponse(p)
		return err
	})
	if err != nil {
		return Handle{}, err
	}
	return Handle{gen: c.gen, id: id}, nil
}

// Free frees a buffer.
func (c *Client) Free(ctx context.Context, h Handle) error {
	ctx, end, err := c.begin(ctx, OpFree)
	if err != nil {
		return err
	}
	defer end()
	if err := c.checkHandles(OpFree, h); err != nil {
		return err
	}
	return c.exchange(ctx, OpFree, AppendFreeRequest(nil, h.id), nil, nil, expectEmpty(OpFree))
}

// Write copies data into the buffer h from byte offset on, in as many WRITE
// frames as it takes (MaxWritePiece bytes each). The whole transfer shares
// ctx's deadline; no other call runs between its pieces.
func (c *Client) Write(ctx context.Context, h Handle, offset uint64, data []byte) error {
	ctx, end, err := c.begin(ctx, OpWrite)
	if err != nil {
		return err
	}
	defer end()
	if err := c.checkHandles(OpWrite, h); err != nil {
		return err
	}
	if err := checkSpan(OpWrite, offset, len(data)); err != nil {
		return err
	}
	var head [writeHeadBytes]byte
	for done := 0; ; {
		piece := data[done : done+min(len(data)-done, MaxWritePiece)]
		req := appendWriteHead(head[:0], h.id, offset+uint64(done))
		if err := c.exchange(ctx, OpWrite, req, piece, nil, expectEmpty(OpWrite)); err != nil {
			return inPiece(err, OpWrite, offset, len(data), done, MaxWritePiece)
		}
		done += len(piece)
		if done == len(data) {
			return nil
		}
	}
}

// Read copies len(dst) bytes of the buffer h from byte offset on into dst, in
// as many READ frames as it takes (MaxReadPiece bytes each). The data lands
// in dst directly; after an error, dst's contents are unspecified.
func (c *Client) Read(ctx context.Context, h Handle, offset uint64, dst []byte) error {
	ctx, end, err := c.begin(ctx, OpRead)
	if err != nil {
		return err
	}
	defer end()
	if err := c.checkHandles(OpRead, h); err != nil {
		return err
	}
	if err := checkSpan(OpRead, offset, len(dst)); err != nil {
		return err
	}
	var head [24]byte
	for done := 0; ; {
		n := min(len(dst)-done, MaxReadPiece)
		// A cap of exactly n makes ReadFrame put a payload of n bytes
		// straight into dst.
		piece := dst[done : done+n : done+n]
		req := AppendReadRequest(head[:0], ReadRequest{Handle: h.id, Offset: offset + uint64(done), Length: uint64(n)})
		err := c.exchange(ctx, OpRead, req, nil, piece[:0], func(p []byte) error {
			if len(p) != n {
				return fmt.Errorf("%w: READ response is %d bytes, asked for %d", ErrProtocol, len(p), n)
			}
			if n > 0 && &p[0] != &piece[0] {
				copy(piece, p)
			}
			return nil
		})
		if err != nil {
			return inPiece(err, OpRead, offset, len(dst), done, MaxReadPiece)
		}
		done += n
		if done == len(dst) {
			return nil
		}
	}
}

// Run runs kernel opID with params on bufs (inputs first, then outputs) and
// returns the kernel time the server measured, in nanoseconds.
func (c *Client) Run(ctx context.Context, opID uint32, params []int64, bufs []Handle) (kernelNs uint64, err error) {
	ctx, end, err := c.begin(ctx, OpRun)
	if err != nil {
		return 0, err
	}
	defer end()
	if err := c.checkHandles(OpRun, bufs...); err != nil {
		return 0, err
	}
	if err := c.ensureStarted(ctx); err != nil { // only when bufs is empty
		return 0, err
	}
	ids := make([]uint64, len(bufs))
	for i, h := range bufs {
		ids[i] = h.id
	}
	req := AppendRunRequest(nil, RunRequest{OpID: opID, Params: params, Buffers: ids})
	err = c.exchange(ctx, OpRun, req, nil, nil, func(p []byte) (err error) {
		kernelNs, err = DecodeRunResponse(p)
		return err
	})
	return kernelNs, err
}

// Close asks the server to shut down, waits up to CloseTimeout for it to
// exit, then kills it. A call still in flight after CloseTimeout is ended by
// killing its server. Later calls fail with ErrClosed. Close is safe to call
// more than once and from several goroutines; all get the first one's result.
func (c *Client) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.shutdown() })
	return c.closeErr
}

func (c *Client) shutdown() error {
	c.closed.Store(true)
	t := time.NewTimer(c.cfg.CloseTimeout)
	defer t.Stop()
	select {
	case c.sem <- struct{}{}:
	case <-t.C:
		c.mu.Lock()
		if c.proc != nil {
			c.proc.kill()
		}
		c.mu.Unlock()
		c.sem <- struct{}{} // the call in flight returns now that its server is dead
	}
	defer func() { <-c.sem }()
	p := c.proc
	if p == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.CloseTimeout)
	defer cancel()
	if err := c.exchange(ctx, OpShutdown, nil, nil, nil, expectEmpty(OpShutdown)); err != nil {
		return err // exchange has already killed and reaped it
	}
	var err error
	if !p.wait(c.cfg.CloseTimeout) {
		p.kill()
		p.wait(waitDelay + time.Second)
		err = fmt.Errorf("kserver: close: kernel server #%d (pid %d) answered SHUTDOWN but had not exited %v later; killed it", c.gen, p.pid(), c.cfg.CloseTimeout)
	} else if exit, _ := p.diagnose(); exit != "exit status 0" {
		err = fmt.Errorf("kserver: close: kernel server #%d (pid %d) ended with %s after SHUTDOWN, want exit status 0\n--- stderr tail ---\n%s",
			c.gen, p.pid(), exit, p.stderrTail())
	}
	p.release()
	c.setProc(nil)
	return err
}

// Stderr returns the tail of the latest server's stderr (live or dead).
func (c *Client) Stderr() string {
	c.mu.Lock()
	p := c.last
	c.mu.Unlock()
	if p == nil {
		return ""
	}
	return p.stderrTail()
}

// begin checks that c is open, gives ctx a deadline if it has none, takes the
// call lock, and reports a server that died since the last call. end releases
// the lock.
func (c *Client) begin(ctx context.Context, op Opcode) (_ context.Context, end func(), err error) {
	if c.closed.Load() {
		return nil, nil, fmt.Errorf("kserver: %v: %w", op, ErrClosed)
	}
	cancel := context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, c.cfg.CallTimeout)
	}
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		cancel()
		return nil, nil, fmt.Errorf("kserver: %v: gave up waiting for the call in flight: %w", op, ctx.Err())
	}
	end = func() {
		<-c.sem
		cancel()
	}
	if c.closed.Load() {
		end()
		return nil, nil, fmt.Errorf("kserver: %v: %w", op, ErrClosed)
	}
	if c.proc != nil && c.proc.wait(0) {
		err := c.discard(op.String(), failure{cause: errors.New("it exited while idle, between calls")})
		end()
		return nil, nil, err
	}
	return ctx, end, nil
}

// ensureStarted starts a server if none is running.
func (c *Client) ensureStarted(ctx context.Context) error {
	if c.proc != nil {
		return nil
	}
	return c.start(ctx)
}

// checkHandles reports handles that name no buffer of the live server.
func (c *Client) checkHandles(op Opcode, hs ...Handle) error {
	for i, h := range hs {
		switch {
		case h.id == 0:
			return fmt.Errorf("kserver: %v: buffer %d is the zero Handle: %w", op, i, ErrStaleHandle)
		case c.proc == nil:
			return fmt.Errorf("kserver: %v: %v is gone with its server, and no server is running: %w", op, h, ErrStaleHandle)
		case h.gen != c.gen:
			return fmt.Errorf("kserver: %v: %v is gone with its server (the live one is #%d): %w", op, h, c.gen, ErrStaleHandle)
		}
	}
	return nil
}

func (c *Client) setProc(p process) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.proc = p
	if p != nil {
		c.last = p
	}
}

// start runs BeforeStart, starts a server and reads its HELLO.
func (c *Client) start(ctx context.Context) error {
	if c.cfg.Path == "" {
		return errors.New("kserver: start: Config.Path is empty; it names the kernel-server binary")
	}
	if c.cfg.BeforeStart != nil {
		if err := c.cfg.BeforeStart(ctx); err != nil {
			return fmt.Errorf("kserver: not starting %s: %w", c.cfg.Path, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kserver: start: %w (nothing was started)", err)
	}
	p, err := startProcess(c.cfg.Path, childEnv(c.cfg.Env), c.cfg.StderrTail)
	if err != nil {
		if hint := startHint(err); hint != "" {
			return fmt.Errorf("kserver: start kernel server: %w\nhint: %s", err, hint)
		}
		return fmt.Errorf("kserver: start kernel server: %w", err)
	}
	c.gen++
	c.setProc(p)
	c.in = bufio.NewReaderSize(p.stdout(), readBufferBytes)
	c.nextID = 0

	startCtx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	stop := context.AfterFunc(startCtx, p.kill)
	f, err := ReadFrame(c.in, c.rbuf[:0])
	if !stop() {
		cause := fmt.Errorf("no HELLO within StartTimeout (%v): %w", c.cfg.StartTimeout, startCtx.Err())
		if ctx.Err() != nil {
			cause = fmt.Errorf("no HELLO before the call's deadline: %w", ctx.Err())
		}
		return c.discard("start", failure{cause: cause, killed: true,
			hint: fmt.Sprintf("is %s a vkern kernel server? A server sends HELLO at once; a slow device initialisation needs a longer StartTimeout", c.cfg.Path)})
	}
	if errors.Is(err, ErrProtocol) {
		return c.discard("start", failure{cause: fmt.Errorf("reading HELLO: %w", err), hint: framingHint})
	}
	if err != nil {
		return c.discard("start", failure{cause: fmt.Errorf("reading HELLO: %w", err), grace: exitGrace,
			hint: "the server ended before its HELLO; its stderr usually says why (no device, a missing driver library, ...)"})
	}
	switch {
	case f.Status != StatusOK:
		return c.discard("start", failure{cause: fmt.Errorf("%w: the first frame is %v %v with id %d, want HELLO: %s",
			ErrProtocol, f.Opcode, f.Status, f.ID, ErrorMessage(f.Payload)), grace: exitGrace})
	case f.Opcode != OpHello || f.ID != 0:
		return c.discard("start", failure{cause: fmt.Errorf("%w: the first frame is %v with id %d, want HELLO with id 0",
			ErrProtocol, f.Opcode, f.ID)})
	}
	h, err := DecodeHello(f.Payload)
	if err != nil {
		return c.discard("start", failure{cause: err})
	}
	if want := c.cfg.ExpectSourceSHA256; want != "" && h.SourceSHA256() != want {
		return c.discard("start", failure{cause: fmt.Errorf("the server was built from kernel sources with SHA-256 %q, this vkern embeds %q: rebuild with `vkern cache clean`",
			h.SourceSHA256(), want)})
	}
	c.hello = h
	return nil
}

// exchange sends one request (header, head, then tail) and reads its
// response into into, under ctx's deadline. A missed deadline, a dead or
// misbehaving server, or an OK payload that decode rejects ends the server
// and returns a *DiedError; a non-OK status returns a *ServerError.
func (c *Client) exchange(ctx context.Context, op Opcode, head, tail, into []byte, decode func([]byte) error) error {
	if n := len(head) + len(tail); n > MaxFrameBytes-HeaderBytes {
		return fmt.Errorf("kserver: %v: request payload of %d bytes is over the frame cap of %d bytes", op, n, MaxFrameBytes)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kserver: %v: %w (nothing was sent)", op, err)
	}
	p := c.proc
	if into == nil {
		into = c.rbuf[:0]
	}
	c.nextID++
	if c.nextID == 0 {
		c.nextID = 1
	}
	id := c.nextID
	c.wbuf = append(appendHeader(c.wbuf[:0], len(head)+len(tail), id, op, StatusOK), head...)

	began := time.Now()
	stop := context.AfterFunc(ctx, p.kill)
	_, err := p.stdin().Write(c.wbuf)
	if err == nil && len(tail) > 0 {
		_, err = p.stdin().Write(tail)
	}
	var f Frame
	if err != nil {
		err = fmt.Errorf("sending the request: %w", err)
	} else if f, err = ReadFrame(c.in, into); err != nil {
		err = fmt.Errorf("reading the response: %w", err)
	}
	if !stop() {
		return c.discard(op.String(), failure{killed: true, cause: fmt.Errorf(
			"no reply %v after the request, when the call's context ended (%w); a late reply could not be matched to its request, so the next call starts a fresh server",
			time.Since(began).Round(time.Millisecond), ctx.Err())})
	}
	if errors.Is(err, ErrProtocol) { // from ReadFrame: the stream is out of step
		return c.discard(op.String(), failure{cause: err, hint: framingHint})
	}
	if err != nil { // its stdout ended: let it report its own exit status
		return c.discard(op.String(), failure{cause: err, grace: exitGrace})
	}
	switch {
	case f.ID == 0 && f.Status != StatusOK:
		return c.discard(op.String(), failure{grace: exitGrace, cause: fmt.Errorf(
			"%w: the server sent %v with id 0, an error not tied to a request: %s", ErrProtocol, f.Status, ErrorMessage(f.Payload))})
	case f.ID != id:
		return c.discard(op.String(), failure{cause: fmt.Errorf("%w: response has id %d, want %d", ErrProtocol, f.ID, id)})
	case f.Opcode != op:
		return c.discard(op.String(), failure{cause: fmt.Errorf("%w: response to request %d has opcode %v", ErrProtocol, id, f.Opcode)})
	case f.Status == StatusDeviceError:
		return c.discard(op.String(), failure{cause: newServerError(op, f), grace: exitGrace})
	case f.Status != StatusOK:
		return newServerError(op, f)
	}
	if err := decode(f.Payload); err != nil {
		return c.discard(op.String(), failure{cause: err})
	}
	return nil
}

// failure is why the server is being given up.
type failure struct {
	cause  error
	grace  time.Duration // how long it may take to exit by itself before it is killed
	killed bool          // the host has already killed it
	hint   string        // used when its exit status has no hint of its own
}

// discard ends the live server after f, reaps it, and returns the error that
// says what happened: its exit status and the tail of its stderr.
func (c *Client) discard(op string, f failure) error {
	p := c.proc
	if !p.wait(f.grace) {
		p.kill()
		f.killed = true
	}
	// After SIGKILL the exit is prompt; the bound covers stderr held open by
	// a grandchild, which exec's WaitDelay closes.
	p.wait(waitDelay + time.Second)
	p.release()
	c.setProc(nil)
	exit, hint := p.diagnose()
	if f.killed {
		hint = "" // the exit status's hint would blame a SIGKILL on someone else
	}
	if hint == "" {
		hint = f.hint
	}
	err := &DiedError{Op: op, PID: p.pid(), Gen: c.gen, Cause: f.cause, Killed: f.killed, Exit: exit, Hint: hint, Stderr: p.stderrTail()}
	if c.closed.Load() && op != OpShutdown.String() {
		return fmt.Errorf("%w during the call: %w", ErrClosed, err)
	}
	return err
}

func expectEmpty(op Opcode) func([]byte) error {
	return func(p []byte) error { return DecodeEmpty(op, p) }
}

// checkSpan rejects a transfer whose end does not fit in a u64 offset.
func checkSpan(op Opcode, offset uint64, n int) error {
	if uint64(n) > math.MaxUint64-offset {
		return fmt.Errorf("kserver: %v: offset %d + %d bytes does not fit in a u64", op, offset, n)
	}
	return nil
}

// inPiece says which piece of a multi-piece transfer failed.
func inPiece(err error, op Opcode, offset uint64, total, done, pieceBytes int) error {
	if total <= pieceBytes {
		return err
	}
	return fmt.Errorf("kserver: %v of %d bytes at offset %d, piece at offset %d: %w", op, total, offset, offset+uint64(done), err)
}
