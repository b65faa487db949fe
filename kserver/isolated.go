package kserver

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// isolated is the Client in isolated mode (Config.Isolated): one fresh
// server process per call, the seed's one-shot. Buffers live in host memory
// between calls, so Alloc, Free, Write and Read start nothing; every call
// that needs the device starts a server, copies in the buffers it names,
// runs, copies every one of them back (a kernel that wrote into an input
// shows), and shuts the server down. A server that dies takes only its own
// call with it: no buffer is ever stale.
//
// The errors are the persistent mode's: a bad handle or range is a
// *ServerError with the status the server would have answered.
type isolated struct {
	c *Client

	mu        sync.Mutex
	next      uint64
	bufs      map[uint64]*shadow
	liveBytes uint64
	running   map[*Client]struct{} // one-shot servers of the calls in flight
	last      *Client              // the latest one, for Stderr
}

// shadow is a buffer held by the host between isolated calls.
type shadow struct {
	mu   sync.RWMutex
	data []byte
}

func newIsolated(c *Client) *isolated {
	return &isolated{c: c, bufs: map[uint64]*shadow{}, running: map[*Client]struct{}{}}
}

// oneShot runs fn against a fresh server and shuts it down. Where ctx has
// no deadline, the server's start is bounded by StartTimeout and fn by
// CallTimeout from the server's arrival, as a persistent Client's call
// that starts its server (Client.server).
func (m *isolated) oneShot(ctx context.Context, op Opcode, fn func(ctx context.Context, one *Client) error) error {
	cx, err := m.c.begin(ctx, op)
	if err != nil {
		return err
	}
	cfg := m.c.cfg
	cfg.Isolated = false
	one := New(cfg)
	m.mu.Lock()
	if m.c.closed.Load() {
		m.mu.Unlock()
		return fmt.Errorf("kserver: %v: %w", op, ErrClosed)
	}
	m.running[one] = struct{}{}
	m.last = one
	m.mu.Unlock()
	if cx.implicit {
		_, err = one.server(&cx, op, true)
	}
	if err == nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, cx.deadline)
		defer cancel()
		err = fn(ctx, one)
	}
	if cerr := one.Close(); err == nil && cerr != nil {
		err = cerr
	}
	m.mu.Lock()
	delete(m.running, one)
	m.mu.Unlock()
	return err
}

func (m *isolated) hello(ctx context.Context) (Hello, error) {
	var h Hello
	err := m.oneShot(ctx, OpHello, func(ctx context.Context, one *Client) (err error) {
		h, err = one.Hello(ctx)
		return err
	})
	return h, err
}

func (m *isolated) simple(ctx context.Context, op Opcode) error {
	return m.oneShot(ctx, op, func(ctx context.Context, one *Client) error { return one.simple(ctx, op) })
}

func (m *isolated) memory(ctx context.Context) (Memory, error) {
	var mem Memory
	err := m.oneShot(ctx, OpMemory, func(ctx context.Context, one *Client) (err error) {
		mem, err = one.Memory(ctx)
		return err
	})
	return mem, err
}

// physicalMemory is the machine's memory, which bounds the buffers an
// isolated Client holds, as the cpu server bounds its own.
func physicalMemory() uint64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	return uint64(si.Totalram) * uint64(si.Unit)
}

func isolatedError(op Opcode, status Status, format string, args ...any) error {
	return &ServerError{Op: op.String(), Status: uint16(status), StatusName: status.String(), Message: fmt.Sprintf(format, args...)}
}

func (m *isolated) alloc(bytes uint64) (Handle, error) {
	if m.c.closed.Load() {
		return Handle{}, fmt.Errorf("kserver: %v: %w", OpAlloc, ErrClosed)
	}
	if bytes == 0 {
		return Handle{}, isolatedError(OpAlloc, StatusInvalidArgument, "ALLOC of 0 bytes; want >= 1")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	limit := physicalMemory()
	if limit != 0 && (bytes > limit || m.liveBytes > limit-bytes) {
		return Handle{}, isolatedError(OpAlloc, StatusOutOfMemory,
			"ALLOC of %d bytes with %d bytes live would pass the machine's %d bytes of memory (isolated mode keeps buffers in host memory)", bytes, m.liveBytes, limit)
	}
	m.next++
	m.bufs[m.next] = &shadow{data: make([]byte, bytes)}
	m.liveBytes += bytes
	return Handle{id: m.next}, nil
}

// find returns the shadow of h.
func (m *isolated) find(op Opcode, h Handle) (*shadow, error) {
	if m.c.closed.Load() {
		return nil, fmt.Errorf("kserver: %v: %w", op, ErrClosed)
	}
	if h.id == 0 {
		return nil, fmt.Errorf("kserver: %v: the zero Handle: %w", op, ErrStaleHandle)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.bufs[h.id]
	if b == nil || h.gen != 0 {
		return nil, isolatedError(op, StatusBadHandle, "%v: no live buffer has handle %d", op, h.id)
	}
	return b, nil
}

func (m *isolated) free(h Handle) error {
	b, err := m.find(OpFree, h)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.bufs[h.id] == b {
		delete(m.bufs, h.id)
		m.liveBytes -= uint64(len(b.data))
	}
	return nil
}

func checkRange(op Opcode, h Handle, offset uint64, n int, size int) error {
	if offset <= uint64(size) && uint64(n) <= uint64(size)-offset {
		return nil
	}
	return isolatedError(op, StatusOutOfRange, "%v of %d bytes at offset %d overruns buffer %d of %d bytes", op, n, offset, h.id, size)
}

func (m *isolated) write(h Handle, offset uint64, data []byte) error {
	b, err := m.find(OpWrite, h)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := checkRange(OpWrite, h, offset, len(data), len(b.data)); err != nil {
		return err
	}
	copy(b.data[offset:], data)
	return nil
}

func (m *isolated) read(h Handle, offset uint64, dst []byte) error {
	b, err := m.find(OpRead, h)
	if err != nil {
		return err
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := checkRange(OpRead, h, offset, len(dst), len(b.data)); err != nil {
		return err
	}
	copy(dst, b.data[offset:])
	return nil
}

func (m *isolated) run(ctx context.Context, opID uint32, params []int64, bufs []Handle) (uint64, error) {
	times, err := m.runs(ctx, OpRun, []RunRequest{{OpID: opID, Params: params, Buffers: bufs}})
	if err != nil {
		return 0, err
	}
	return times[0], nil
}

func (m *isolated) runBatch(ctx context.Context, runs []RunRequest) ([]uint64, error) {
	if len(runs) == 0 {
		return []uint64{}, nil
	}
	return m.runs(ctx, OpRunBatch, runs)
}

// runs runs one RUN (op OpRun) or a batch in a fresh server: every buffer
// the runs name goes in, all of them come back out.
func (m *isolated) runs(ctx context.Context, op Opcode, runs []RunRequest) ([]uint64, error) {
	byID := map[uint64]*shadow{}
	for i, r := range runs {
		for _, h := range named(r.Buffers) {
			b, err := m.find(op, h)
			if err != nil {
				if op == OpRunBatch {
					return nil, &BatchError{Index: i, Count: len(runs), OpID: r.OpID, Err: err}
				}
				return nil, err
			}
			byID[h.id] = b
		}
	}
	// Lock in id order, so that two calls on the same buffers cannot deadlock.
	ids := make([]uint64, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		byID[id].mu.Lock()
		defer byID[id].mu.Unlock()
	}
	var times []uint64
	err := m.oneShot(ctx, op, func(ctx context.Context, one *Client) error {
		inner := map[uint64]Handle{}
		for _, id := range ids {
			b := byID[id]
			h, err := one.Alloc(ctx, uint64(len(b.data)))
			if err == nil {
				err = one.Write(ctx, h, 0, b.data)
			}
			if err != nil {
				return err
			}
			inner[id] = h
		}
		mapped := make([]RunRequest, len(runs))
		for i, r := range runs {
			mapped[i] = RunRequest{OpID: r.OpID, Params: r.Params, Buffers: make([]Handle, len(r.Buffers))}
			for j, h := range r.Buffers {
				mapped[i].Buffers[j] = inner[h.id] // an empty operand's zero Handle stays zero
			}
		}
		var err error
		if op == OpRun {
			var ns uint64
			ns, err = one.Run(ctx, mapped[0].OpID, mapped[0].Params, mapped[0].Buffers)
			times = []uint64{ns}
		} else {
			times, err = one.RunBatch(ctx, mapped)
		}
		if err != nil {
			return err
		}
		for _, id := range ids {
			if err := one.Read(ctx, inner[id], 0, byID[id].data); err != nil {
				return err
			}
		}
		return nil
	})
	return times, err
}

func (m *isolated) stderr() string {
	m.mu.Lock()
	last := m.last
	m.mu.Unlock()
	if last == nil {
		return ""
	}
	return last.Stderr()
}

// close ends the servers of the calls in flight and drops the buffers.
func (m *isolated) close() error {
	m.mu.Lock()
	running := make([]*Client, 0, len(m.running))
	for one := range m.running {
		running = append(running, one)
	}
	m.bufs = map[uint64]*shadow{}
	m.liveBytes = 0
	m.mu.Unlock()
	for _, one := range running {
		one.Close()
	}
	return nil
}
