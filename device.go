package vkern

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/vkern/vkern/cache"
	"github.com/vkern/vkern/internal/le"
	"github.com/vkern/vkern/kernels"
	"github.com/vkern/vkern/kserver"
	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
	"github.com/vkern/vkern/toolchain"
)

// Errors a caller may want to tell apart (test with errors.Is).
var (
	// ErrStaleBuffer: the buffer belonged to a kernel server that has died.
	ErrStaleBuffer = kserver.ErrStaleHandle
)

// DefaultCallTimeout is the deadline of a call whose context has none,
// where Options.CallTimeout is zero.
const DefaultCallTimeout = kserver.DefaultCallTimeout

// Options configure Open. The zero value is usable: backend auto, the
// default cache folder, a 60 s deadline for calls whose context has none.
type Options struct {
	// Backend is "auto" (or empty), "cpu", "cuda" or "hip".
	Backend string
	// CacheDir overrides $VKERN_CACHE and the user cache folder.
	CacheDir string
	// CallTimeout is the deadline of a call whose context has none
	// (DefaultCallTimeout where zero), counted from the server's arrival
	// where the call starts the server.
	CallTimeout time.Duration
	// StartTimeout bounds the wait for the server's HELLO after it starts;
	// zero takes $VKERN_START_TIMEOUT (a Go duration, such as 2m), else
	// 10 s. A profiler that intercepts the server's device calls (Nsight
	// Compute) can make its start take longer than that. It bounds the
	// start of a call whose context has no deadline; one with a deadline
	// has that deadline for its start too.
	StartTimeout time.Duration
	// ServerWrapper, if set, is a command the server is started under (its
	// words; the server's path is appended): where nil, the words of
	// $VKERN_SERVER_WRAPPER. It is how Nsight Compute profiles the server's
	// kernels, as the server's parent; kserver.Config.Wrapper says what it
	// must do.
	ServerWrapper []string
	// Isolated runs every call that needs the server in a fresh server
	// process, shut down when the call ends; buffers then live in host
	// memory between calls. Slower by the cost of a process start per
	// call, for callers that want no state shared between calls.
	Isolated bool

	// EditSources, for tests that plant defects, edits the kernel sources
	// (by path, as kernels.Sources names them) before they are built; the
	// edited build gets its own cache key. The units compiled are the ones
	// kernels.Sources listed, so an edit to a header reaches every unit
	// that includes it.
	EditSources func(files map[string][]byte) error
	// GPU is the index of the GPU the server opens, among those visible
	// (CUDA_VISIBLE_DEVICES): one server per GPU in a data-parallel run.
	// The cpu backend ignores it.
	GPU int

	// QuickBuild compiles at -O1 instead of -O3: half the build time on
	// the cpu backend and slower kernels, for tests that build many
	// servers (one per planted defect) to check results, not speed.
	QuickBuild bool
}

// Info describes an open device: what it is, and what built its server.
type Info struct {
	Backend       string
	BackendReason string
	Device        map[string]string // the server's HELLO fields (nil from Build)
	Compiler      *toolchain.Compiler
	CacheKey      string
	SourceSHA256  string
	BinarySHA256  string
	BinaryPath    string
	Notes         []string // e.g. a cached binary that failed its recheck and was rebuilt
}

// Device is one kernel server and the buffers in it. Its methods are safe
// for concurrent use.
type Device struct {
	backend, reason string
	compiler        *toolchain.Compiler
	store           *cache.Store
	request         cache.Request
	client          *kserver.Client

	mu       sync.Mutex
	artifact *cache.Artifact
	notes    []string
}

// Build finds the compiler for the chosen backend and builds its kernel
// server, or finds it in the cache, without starting it. It needs no device
// when the target is given ($VKERN_CUDA_ARCH, $VKERN_HIP_ARCH): that is how
// CI compile-checks the HIP build.
func Build(ctx context.Context, opts Options) (Info, error) {
	d, err := build(ctx, opts)
	if err != nil {
		return Info{}, err
	}
	return d.info(nil), nil
}

// Open builds (or finds in the cache) the backend's kernel server, starts it
// and completes the handshake.
func Open(ctx context.Context, opts Options) (*Device, error) {
	d, err := build(ctx, opts)
	if err != nil {
		return nil, err
	}
	if opts.GPU < 0 {
		return nil, fmt.Errorf("vkern: GPU %d: want an index from 0", opts.GPU)
	}
	start, err := startTimeout(opts.StartTimeout, os.LookupEnv)
	if err != nil {
		return nil, err
	}
	d.client = kserver.New(kserver.Config{
		Path:               d.artifact.Binary,
		Env:                []string{fmt.Sprintf("VKERN_DEVICE=%d", opts.GPU)},
		BeforeStart:        d.recheck,
		CallTimeout:        opts.CallTimeout,
		StartTimeout:       start,
		Wrapper:            serverWrapper(opts.ServerWrapper, os.LookupEnv),
		ExpectSourceSHA256: d.artifact.Manifest.SourceSHA256,
		Isolated:           opts.Isolated,
	})
	if _, err := d.client.Hello(ctx); err != nil {
		d.client.Close()
		return nil, fmt.Errorf("vkern: starting the %s kernel server: %w", d.backend, err)
	}
	return d, nil
}

// ServerWrapperEnv names the environment variable that sets
// Options.ServerWrapper where a caller leaves it nil: words separated by
// blanks, without quoting, e.g. "ncu --log-file /tmp/ncu.log -o /tmp/rows
// --set full -k regex:layernorm_grad -c 1".
const ServerWrapperEnv = "VKERN_SERVER_WRAPPER"

// serverWrapper is the wrapper Open gives the server: set, else the words
// of $VKERN_SERVER_WRAPPER (read through lookup), else none.
func serverWrapper(set []string, lookup func(string) (string, bool)) []string {
	if set != nil {
		return set
	}
	v, _ := lookup(ServerWrapperEnv)
	return strings.Fields(v)
}

// StartTimeoutEnv names the environment variable that sets
// Options.StartTimeout where a caller leaves it zero.
const StartTimeoutEnv = "VKERN_START_TIMEOUT"

// startTimeout is the start timeout Open gives the server: set, else the
// one $VKERN_START_TIMEOUT names (read through lookup), else 0 (kserver's
// default).
func startTimeout(set time.Duration, lookup func(string) (string, bool)) (time.Duration, error) {
	if set != 0 {
		if set < 0 {
			return 0, fmt.Errorf("vkern: start timeout %v: want a positive duration", set)
		}
		return set, nil
	}
	v, ok := lookup(StartTimeoutEnv)
	if !ok || strings.TrimSpace(v) == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("vkern: %s=%q: want a positive Go duration such as 30s or 2m", StartTimeoutEnv, v)
	}
	return d, nil
}

// build does Open's work up to a built artifact.
func build(ctx context.Context, opts Options) (*Device, error) {
	backend, compiler, reason, err := chooseBackend(ctx, opts.Backend)
	if err != nil {
		return nil, err
	}
	files, units, err := kernels.Sources(backend)
	if err != nil {
		return nil, fmt.Errorf("vkern: %w", err)
	}
	if opts.EditSources != nil {
		if err := opts.EditSources(files); err != nil {
			return nil, err
		}
	}
	if opts.QuickBuild {
		quick := *compiler
		quick.Flags = nil
		for _, f := range compiler.Flags {
			if f == "-O3" {
				f = "-O1"
			}
			quick.Flags = append(quick.Flags, f)
		}
		compiler = &quick
	}
	dir := opts.CacheDir
	if dir == "" {
		if dir, err = cache.DefaultDir(); err != nil {
			return nil, fmt.Errorf("vkern: %w", err)
		}
	}
	store, err := cache.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("vkern: %w", err)
	}
	d := &Device{
		backend: backend, reason: reason, compiler: compiler, store: store,
		request: cache.Request{Files: files, Units: units, Compiler: compiler},
	}
	d.artifact, err = store.Build(ctx, d.request)
	if errors.Is(err, cache.ErrBadEntry) {
		// A damaged entry is reported and replaced, never run.
		d.notes = append(d.notes, fmt.Sprintf("%v: the entry was rebuilt", err))
		d.artifact, err = store.Rebuild(ctx, d.request)
	}
	if err != nil {
		return nil, fmt.Errorf("vkern: building the %s kernel server: %w", backend, err)
	}
	return d, nil
}

// chooseBackend resolves "auto" to the first backend whose compiler and
// device answer — cuda, then hip, then cpu — and says why; a named backend
// must work or its error is returned.
func chooseBackend(ctx context.Context, name string) (backend string, c *toolchain.Compiler, reason string, err error) {
	switch name {
	case "cpu", "cuda", "hip":
		c, err := toolchain.Detect(ctx, name)
		if err != nil {
			return "", nil, "", fmt.Errorf("vkern: %s backend: %w", name, err)
		}
		return name, c, "--backend " + name + " was given", nil
	case "", "auto":
	default:
		return "", nil, "", fmt.Errorf("vkern: unknown backend %q: want auto, cpu, cuda or hip", name)
	}
	var skipped []string
	for _, gpu := range []string{"cuda", "hip"} {
		c, err := toolchain.Detect(ctx, gpu)
		switch {
		case err == nil:
			return gpu, c, fmt.Sprintf("auto: %s (%s) and a %s device answered", gpu, c.Version, c.Target), nil
		case errors.Is(err, toolchain.ErrNoDevice):
			skipped = append(skipped, gpu+": compiler found but no device")
		default:
			skipped = append(skipped, gpu+": no compiler")
		}
	}
	c, err = toolchain.Detect(ctx, "cpu")
	if err != nil {
		return "", nil, "", fmt.Errorf("vkern: auto: no GPU backend (%s), and the cpu backend: %w", strings.Join(skipped, "; "), err)
	}
	return "cpu", c, "auto: " + strings.Join(skipped, "; ") + "; using cpu", nil
}

// recheck runs before every server start: a binary whose SHA-256 no longer
// matches its manifest is reported and rebuilt, never executed.
func (d *Device) recheck(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.artifact.Recheck()
	if err == nil {
		return nil
	}
	art, rerr := d.store.Rebuild(ctx, d.request)
	if rerr != nil {
		return fmt.Errorf("%w; rebuilding it failed: %v", err, rerr)
	}
	if art.Binary != d.artifact.Binary {
		return fmt.Errorf("vkern: rebuilt server moved from %s to %s", d.artifact.Binary, art.Binary)
	}
	d.notes = append(d.notes, fmt.Sprintf("%v: the entry was rebuilt before the server was started", err))
	d.artifact = art
	return nil
}

// Info describes the device and its server. It starts the server if it is
// not running.
func (d *Device) Info(ctx context.Context) (Info, error) {
	hello, err := d.client.Hello(ctx)
	if err != nil {
		return Info{}, err
	}
	return d.info(hello.Fields), nil
}

func (d *Device) info(device map[string]string) Info {
	d.mu.Lock()
	defer d.mu.Unlock()
	return Info{
		Backend: d.backend, BackendReason: d.reason, Device: device, Compiler: d.compiler,
		CacheKey: d.artifact.Key, SourceSHA256: d.artifact.Manifest.SourceSHA256,
		BinarySHA256: d.artifact.Manifest.BinarySHA256, BinaryPath: d.artifact.Binary,
		Notes: append([]string(nil), d.notes...),
	}
}

// Arithmetic is what the device's server states, in its handshake, about
// how its kernels compute (PROTOCOL.md, HELLO's dot_accumulation). Package
// verify derives its GEMM bounds from it (verify.Options.Arithmetic); a
// server that states nothing gets bounds that hold for any summation order.
// It starts the server if it is not running.
func (d *Device) Arithmetic(ctx context.Context) (oracle.Arithmetic, error) {
	hello, err := d.client.Hello(ctx)
	if err != nil {
		return oracle.Arithmetic{}, err
	}
	dot, err := oracle.ParseAccumulation(hello.Fields["dot_accumulation"])
	if err != nil {
		return oracle.Arithmetic{}, fmt.Errorf("vkern: the %s kernel server's handshake: %w", d.backend, err)
	}
	return oracle.Arithmetic{Dot: dot}, nil
}

// Ping makes one round trip to the server.
func (d *Device) Ping(ctx context.Context) error { return d.client.Ping(ctx) }

// Memory is a device's memory, as its server reports it (PROTOCOL.md,
// "MEMORY").
type Memory struct {
	// Free is the server's estimate of the bytes new buffers could still
	// get now; other processes may take some before the next Alloc.
	Free int64
	// Total is the device's memory in all.
	Total int64
	// Host is true when the device's memory is the host's own (the cpu
	// backend): buffers then compete with everything else on the machine,
	// the caller's copies of their data included, and Free already counts
	// what those take.
	Host bool
}

// Memory asks the server how much memory the device has free and in all.
// It starts the server if it is not running; with Options.Isolated a fresh
// server answers, which counts none of the buffers the host keeps between
// calls as its own.
func (d *Device) Memory(ctx context.Context) (Memory, error) {
	m, err := d.client.Memory(ctx)
	if err != nil {
		return Memory{}, err
	}
	return Memory{Free: clampInt64(m.Free), Total: clampInt64(m.Total), Host: d.backend == "cpu"}, nil
}

// clampInt64 converts a byte count to int64, saturating: no device has
// 2⁶³ bytes, so only a nonsense figure is changed.
func clampInt64(n uint64) int64 {
	return int64(min(n, math.MaxInt64))
}

// Stderr returns the tail of the server's stderr.
func (d *Device) Stderr() string { return d.client.Stderr() }

// Close shuts the server down: politely, then by force. It is safe to call
// more than once.
func (d *Device) Close() error { return d.client.Close() }

// freeTimeout bounds the clean-up after RunOp, whatever the caller's context.
const freeTimeout = 5 * time.Second

// Buffer is memory in the kernel server, Bytes long.
type Buffer struct {
	d      *Device
	handle kserver.Handle
	Bytes  int64
}

// Alloc makes a buffer of n bytes in the server.
func (d *Device) Alloc(ctx context.Context, n int64) (*Buffer, error) {
	if n < 1 {
		return nil, fmt.Errorf("vkern: Alloc(%d): a buffer needs at least 1 byte", n)
	}
	h, err := d.client.Alloc(ctx, uint64(n))
	if err != nil {
		return nil, err
	}
	return &Buffer{d: d, handle: h, Bytes: n}, nil
}

// Free releases the buffer. Freeing a buffer frees its views; freeing a
// view frees only the view.
func (b *Buffer) Free(ctx context.Context) error { return b.d.client.Free(ctx, b.handle) }

// ViewAlign is the alignment of a view's offset: every view starts on a
// ViewAlign-byte boundary of its buffer, where any kernel's vector loads
// are aligned.
const ViewAlign = kserver.ViewAlign

// View returns a buffer that is bytes [offset, offset + n) of b: what a call
// writes through the view, b holds. It lets one allocation hold many
// tensors (a model's parameters, its gradients) that calls name one by one
// and an optimizer step names all at once. offset must be a multiple of
// ViewAlign. The view lives until it or b is freed.
func (b *Buffer) View(ctx context.Context, offset, n int64) (*Buffer, error) {
	if n < 1 || offset < 0 || offset > b.Bytes-n {
		return nil, fmt.Errorf("vkern: View(%d, %d) of a %d-byte buffer: a view needs at least 1 byte, inside the buffer", offset, n, b.Bytes)
	}
	if offset%ViewAlign != 0 {
		return nil, fmt.Errorf("vkern: View at offset %d: views start on multiples of %d bytes; pad the layout", offset, ViewAlign)
	}
	h, err := b.d.client.View(ctx, b.handle, uint64(offset), uint64(n))
	if err != nil {
		return nil, err
	}
	return &Buffer{d: b.d, handle: h, Bytes: n}, nil
}

// Write copies data into the buffer starting at byte offset.
func (b *Buffer) Write(ctx context.Context, offset int64, data []byte) error {
	if err := b.inside("Write", "into", offset, int64(len(data))); err != nil {
		return err
	}
	return b.d.client.Write(ctx, b.handle, uint64(offset), data)
}

// Read fills dst from the buffer starting at byte offset.
func (b *Buffer) Read(ctx context.Context, offset int64, dst []byte) error {
	if err := b.inside("Read", "from", offset, int64(len(dst))); err != nil {
		return err
	}
	return b.d.client.Read(ctx, b.handle, uint64(offset), dst)
}

// inside refuses a transfer of n bytes at offset that does not lie inside
// the buffer, naming what (Write or Read) and the sizes.
func (b *Buffer) inside(what, prep string, offset, n int64) error {
	if offset < 0 || offset+n > b.Bytes {
		return fmt.Errorf("vkern: %s of %d bytes at offset %d %s a %d-byte buffer runs past its end", what, n, offset, prep, b.Bytes)
	}
	return nil
}

// WriteF16 writes f16 bit patterns from the start of the buffer.
func (b *Buffer) WriteF16(ctx context.Context, v []uint16) error {
	return b.writeChunks(ctx, len(v), 2, func(dst []byte, from int) { le.PutUint16s(dst, v[from:from+len(dst)/2]) })
}

// ReadF16 reads len(dst) f16 bit patterns from the start of the buffer.
func (b *Buffer) ReadF16(ctx context.Context, dst []uint16) error {
	return b.readChunks(ctx, 0, len(dst), 2, func(src []byte, from int) { le.Uint16s(dst[from:from+len(src)/2], src) })
}

// WriteI32 writes int32 values (cross_entropy's labels) from the start of
// the buffer.
func (b *Buffer) WriteI32(ctx context.Context, v []int32) error {
	return b.writeChunks(ctx, len(v), 4, func(dst []byte, from int) { le.PutInt32s(dst, v[from:from+len(dst)/4]) })
}

// WriteF32 writes float32 values from the start of the buffer.
func (b *Buffer) WriteF32(ctx context.Context, v []float32) error {
	return b.writeChunks(ctx, len(v), 4, func(dst []byte, from int) { le.PutFloat32s(dst, v[from:from+len(dst)/4]) })
}

// ReadF32 reads len(dst) float32 values from the start of the buffer.
func (b *Buffer) ReadF32(ctx context.Context, dst []float32) error {
	return b.ReadF32At(ctx, 0, dst)
}

// ReadF32At reads len(dst) float32 values from the buffer's value at
// (byte offset 4·at on).
func (b *Buffer) ReadF32At(ctx context.Context, at int64, dst []float32) error {
	if at < 0 {
		return fmt.Errorf("vkern: ReadF32At(%d): want a value index ≥ 0", at)
	}
	return b.readChunks(ctx, 4*at, len(dst), 4, func(src []byte, from int) { le.Float32s(dst[from:from+len(src)/4], src) })
}

// convertChunk is the most bytes the typed transfers (WriteF32 and its
// kin, through package le) hold encoded at once. A tensor is converted and sent a chunk at a
// time through one reused slice, never as a copy of its own size: a
// 124M-parameter model's f32 masters would be a 500 MB allocation, and the
// kernel pages cleared for it cost more than the encoding.
const convertChunk = 4 << 20

// writeChunks writes n elements of size bytes from the start of the
// buffer: encode fills dst with the elements from index from on, as many
// as dst holds. A write past the buffer's end is refused before any chunk
// is sent.
func (b *Buffer) writeChunks(ctx context.Context, n, size int, encode func(dst []byte, from int)) error {
	if err := b.inside("Write", "into", 0, int64(n)*int64(size)); err != nil {
		return err
	}
	if n == 0 {
		return b.Write(ctx, 0, nil) // the server still checks the handle
	}
	buf := make([]byte, min(n*size, convertChunk))
	per := len(buf) / size
	for from := 0; from < n; from += per {
		chunk := buf[:min(per, n-from)*size]
		encode(chunk, from)
		if err := b.Write(ctx, int64(from)*int64(size), chunk); err != nil {
			return err
		}
	}
	return nil
}

// readChunks reads n elements of size bytes from byte offset on, as
// writeChunks writes them: decode takes src's elements, from index from on.
// After an error, the elements not yet decoded are unchanged.
func (b *Buffer) readChunks(ctx context.Context, offset int64, n, size int, decode func(src []byte, from int)) error {
	if err := b.inside("Read", "from", offset, int64(n)*int64(size)); err != nil {
		return err
	}
	if n == 0 {
		return b.Read(ctx, offset, nil)
	}
	buf := make([]byte, min(n*size, convertChunk))
	per := len(buf) / size
	for from := 0; from < n; from += per {
		chunk := buf[:min(per, n-from)*size]
		if err := b.Read(ctx, offset+int64(from)*int64(size), chunk); err != nil {
			return err
		}
		decode(chunk, from)
	}
	return nil
}

// Run executes o at shape s on buffers in wire order (inputs, then the
// outputs) and returns the kernel's own time as measured by the server. Each
// buffer must be at least as large as its operand. The shape carries the
// op's value parameters, such as cross_entropy's ignore_index.
func (d *Device) Run(ctx context.Context, o *op.Op, s op.Shape, buffers ...*Buffer) (time.Duration, error) {
	req, err := d.runRequest(Call{Op: o, Shape: s, Buffers: buffers})
	if err != nil {
		return 0, err
	}
	ns, err := d.client.Run(ctx, req.OpID, req.Params, req.Buffers)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", o.Name, s, err)
	}
	return nanoseconds(ns), nil
}

// RunUntimed is Run for callers that need only the result: the server
// waits for the kernel as Run does but does not time it, which on a GPU
// saves two timing events (about 3.5 µs of a tiny kernel's round trip on an
// H100).
func (d *Device) RunUntimed(ctx context.Context, o *op.Op, s op.Shape, buffers ...*Buffer) error {
	req, err := d.runRequest(Call{Op: o, Shape: s, Buffers: buffers})
	if err != nil {
		return err
	}
	if err := d.client.RunUntimed(ctx, req.OpID, req.Params, req.Buffers); err != nil {
		return fmt.Errorf("%s %s: %w", o.Name, s, err)
	}
	return nil
}

// Call is one op on device buffers, for RunBatch, or a collective
// (Collective set, Op nil; Comm.AllReduceCall makes one).
type Call struct {
	Op      *op.Op
	Shape   op.Shape
	Buffers []*Buffer // inputs, then the outputs; nil for an operand empty at Shape
	// Untimed asks the server not to time this call (its time is then 0);
	// a batch whose calls are all untimed records no timing events at all.
	Untimed bool
	// Collective, when set, makes the call a collective on a
	// communicator of this device's server; its time is 0.
	Collective *Collective
}

// RunBatch executes calls in order in one round trip to the server, the
// shape of a training step, and returns each kernel's time. Every call is
// checked before any runs; an error names the failing call's index and op.
// A GPU server replays an untimed batch it has met before (the same calls
// on the same buffers) as a CUDA graph, and runs an untimed batch's
// linear_grad_w calls on a second stream, each still reading what the
// calls before it left: PROTOCOL.md, RUN_BATCH.
func (d *Device) RunBatch(ctx context.Context, calls []Call) ([]time.Duration, error) {
	b, err := d.Prepare(calls)
	if err != nil {
		return nil, err
	}
	return b.Run(ctx)
}

// Batch is a list of calls checked against their ops' contracts once
// (Prepare), to be run as often as needed: a training step's program,
// the same calls on the same buffers step after step, is a few hundred
// calls whose checks would otherwise cost the host about as much time
// per step as a small kernel, with the device idle.
type Batch struct {
	d    *Device
	reqs []kserver.RunRequest
}

// Prepare checks calls as RunBatch does and returns them ready to run. A
// buffer freed afterwards is refused when the batch runs.
func (d *Device) Prepare(calls []Call) (*Batch, error) {
	reqs := make([]kserver.RunRequest, len(calls))
	for i, c := range calls {
		req, err := d.runRequest(c)
		if err != nil {
			return nil, fmt.Errorf("batch call %d of %d: %w", i, len(calls), err)
		}
		reqs[i] = req
	}
	return &Batch{d: d, reqs: reqs}, nil
}

// Run executes the batch as RunBatch does.
func (b *Batch) Run(ctx context.Context) ([]time.Duration, error) {
	ns, err := b.d.client.RunBatch(ctx, b.reqs)
	if err != nil {
		return nil, err
	}
	times := make([]time.Duration, len(ns))
	for i, t := range ns {
		times[i] = nanoseconds(t)
	}
	return times, nil
}

// runRequest checks a call against its op's contract and makes its RUN.
func (d *Device) runRequest(c Call) (kserver.RunRequest, error) {
	if c.Collective != nil {
		if c.Op != nil {
			return kserver.RunRequest{}, fmt.Errorf("vkern: a call with both an op (%s) and a collective", c.Op.Name)
		}
		if c.Collective.Comm == nil || c.Collective.Comm.d != d {
			return kserver.RunRequest{}, fmt.Errorf("vkern: a collective on another device's communicator")
		}
		return c.Collective.runRequest()
	}
	o, s := c.Op, c.Shape
	if o == nil {
		return kserver.RunRequest{}, errors.New("vkern: a call with no op")
	}
	// Made again as o's: a Shape written by hand, or another op's, is
	// checked and measured as one of o's.
	s, err := o.Shape(s.Dims, s.Settings...)
	if err != nil {
		return kserver.RunRequest{}, err
	}
	operands := o.Operands
	if len(c.Buffers) != len(operands) {
		return kserver.RunRequest{}, fmt.Errorf("%s: got %d buffers, want %d (inputs then outputs)", o.Name, len(c.Buffers), len(operands))
	}
	handles := make([]kserver.Handle, len(c.Buffers))
	for i, b := range c.Buffers {
		if b == nil && s.Bytes(operands[i]) == 0 {
			continue // an operand empty at this shape (a bias switched off) needs no buffer: the zero handle
		}
		if b == nil || b.d != d {
			return kserver.RunRequest{}, fmt.Errorf("%s: buffer %s is nil or belongs to another device", o.Name, operands[i].Name)
		}
		if want := s.Bytes(operands[i]); b.Bytes < want {
			return kserver.RunRequest{}, fmt.Errorf("%s: buffer %s has %d bytes, want at least %d for %s at shape %s",
				o.Name, operands[i].Name, b.Bytes, want, operands[i].DType, s)
		}
		handles[i] = b.handle
	}
	return kserver.RunRequest{OpID: uint32(o.ID), Params: o.WireParams(s), Buffers: handles, Untimed: c.Untimed}, nil
}

func nanoseconds(ns uint64) time.Duration {
	if ns > math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// RunOp allocates a buffer per slice, uploads them all, runs o, reads every
// buffer back into its slice and frees the buffers; an empty slice (an
// operand switched off) gets no buffer. It is how package verify drives a
// device: reading the inputs back shows whether a kernel wrote into them.
func (d *Device) RunOp(ctx context.Context, o *op.Op, s op.Shape, data [][]byte) (time.Duration, error) {
	buffers := make([]*Buffer, 0, len(data))
	defer func() {
		// Freeing is best effort: when the server died, its buffers died
		// with it and Free reports a stale handle at once.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), freeTimeout)
		defer cancel()
		for _, b := range buffers {
			if b != nil {
				b.Free(fctx)
			}
		}
	}()
	for _, bytes := range data {
		if len(bytes) == 0 {
			buffers = append(buffers, nil) // an empty operand: no buffer
			continue
		}
		b, err := d.Alloc(ctx, int64(len(bytes)))
		if err != nil {
			return 0, err
		}
		buffers = append(buffers, b)
		if err := b.Write(ctx, 0, bytes); err != nil {
			return 0, err
		}
	}
	elapsed, err := d.Run(ctx, o, s, buffers...)
	if err != nil {
		return 0, err
	}
	for i, b := range buffers {
		if b == nil {
			continue
		}
		if err := b.Read(ctx, 0, data[i]); err != nil {
			return 0, err
		}
	}
	return elapsed, nil
}
