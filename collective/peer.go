package collective

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options are a group's patience. Zero values take the defaults in their
// comments.
type Options struct {
	// HeartbeatInterval is how often each side of a connection says it
	// lives (1 s, or a quarter of HeartbeatTimeout when that is shorter).
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is how long a rank may send nothing before it is
	// declared stopped or hung and the group fails (30 s). Heartbeats come
	// from a goroutine of their own, so a rank busy with a long step or a
	// checkpoint still sends them; only a stopped or wedged process
	// falls silent.
	HeartbeatTimeout time.Duration
	// OnWait, when set, hears once from Join when the ranks have not met
	// within WaitNotice (3 s): what this rank waits for and how long it
	// will, so that a process whose peers never come says so instead of
	// sitting silent until its deadline.
	OnWait     func(msg string)
	WaitNotice time.Duration
}

func (o Options) withDefaults() Options {
	if o.WaitNotice <= 0 {
		o.WaitNotice = 3 * time.Second
	}
	if o.HeartbeatTimeout <= 0 {
		o.HeartbeatTimeout = 30 * time.Second
	}
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = min(time.Second, o.HeartbeatTimeout/4)
	}
	return o
}

// Hello is what a rank says of itself when it joins.
type Hello struct {
	Rank int    `json:"rank"`
	Size int    `json:"size"`
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Match holds what every rank must share (vkern's version, the
	// backend, the CUDA and NCCL versions, the model, the run's settings);
	// rank 0 refuses the run on any difference, naming the rank and the
	// key.
	Match map[string]string `json:"match"`
}

// NewHello is a Hello for this process as rank of size.
func NewHello(rank, size int, match map[string]string) Hello {
	host, _ := os.Hostname()
	return Hello{Rank: rank, Size: size, Host: host, PID: os.Getpid(), Match: match}
}

// welcome is rank 0's answer to every rank's Hello.
type welcome struct {
	Error string  `json:"error,omitempty"`
	Ranks []Hello `json:"ranks,omitempty"`
}

// ErrPeerFailed is wrapped by the error of every call on a group one of
// whose ranks died, hung, left or failed: a *PeerError says which.
var ErrPeerFailed = errors.New("collective: a rank of the run failed")

// PeerError is a group's failure: which rank, and what is known of why.
type PeerError struct {
	Rank, Size int
	Host       string
	PID        int
	Reason     string
}

func (e *PeerError) Error() string {
	who := fmt.Sprintf("rank %d of %d", e.Rank, e.Size)
	if e.PID != 0 {
		who += fmt.Sprintf(" (pid %d on %s)", e.PID, e.Host)
	}
	return fmt.Sprintf("collective: %s %s", who, e.Reason)
}

func (e *PeerError) Unwrap() error { return ErrPeerFailed }

// Peer is this process's member of a group of ranks (doc.go). Its methods
// are safe for concurrent use, but a group's collectives must be called
// in the same order on every rank, one at a time.
type Peer struct {
	rank, size int
	opts       Options
	hellos     []Hello // every rank's, in rank order
	links      []*link // rank 0: links[r] for r ≥ 1; others: links[0], the hub

	ctx    context.Context // canceled with the group's failure as its cause
	cancel context.CancelCauseFunc

	collective sync.Mutex // one collective at a time
	seq        uint64     // collectives so far; guarded by collective

	closed atomic.Bool
	stop   chan struct{}
	wg     sync.WaitGroup
}

// Rank is this member's rank, from 0.
func (p *Peer) Rank() int { return p.rank }

// Size is the number of ranks.
func (p *Peer) Size() int { return p.size }

// Hellos are every rank's Hello, in rank order.
func (p *Peer) Hellos() []Hello { return append([]Hello(nil), p.hellos...) }

// Err is the group's failure (a *PeerError), or nil while it lives.
func (p *Peer) Err() error {
	if p.ctx.Err() == nil {
		return nil
	}
	return context.Cause(p.ctx)
}

// Done is closed when the group has failed.
func (p *Peer) Done() <-chan struct{} { return p.ctx.Done() }

// Watch returns a context that ctx's end or the group's failure cancels,
// with the failure as its cause: device calls under it stop (their
// servers ended, so no communicator is left waiting) when any rank fails.
func (p *Peer) Watch(ctx context.Context) (context.Context, context.CancelFunc) {
	w, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(p.ctx, func() { cancel(context.Cause(p.ctx)) })
	return w, func() {
		stop()
		cancel(context.Canceled)
	}
}

// peerError is a failure of rank r for reason.
func (p *Peer) peerError(r int, reason string) *PeerError {
	e := &PeerError{Rank: r, Size: p.size, Reason: reason}
	if r >= 0 && r < len(p.hellos) {
		e.Host, e.PID = p.hellos[r].Host, p.hellos[r].PID
	}
	return e
}

// Abort fails the group because of this rank: every other rank's calls on
// it return a *PeerError naming this rank with cause's message. A rank
// calls it when its own step failed (its kernel server died, say), so
// that the others stop waiting for it.
func (p *Peer) Abort(cause error) {
	p.fail(p.peerError(p.rank, "failed: "+cause.Error()), -1)
}

// fail records the group's failure (the first one wins) and tells the
// other ranks: rank 0 tells every rank but from, another rank tells rank
// 0 (unless the failure came from it).
func (p *Peer) fail(e *PeerError, from int) {
	if p.ctx.Err() != nil {
		return
	}
	p.cancel(e)
	if p.closed.Load() {
		return
	}
	msg := binary.LittleEndian.AppendUint32(nil, uint32(e.Rank))
	msg = append(msg, e.Reason...)
	for _, l := range p.links {
		if l == nil || l.rank == from {
			continue
		}
		go l.send(msgAbort, msg) // best effort: the others learn it from their own watch too
	}
}

// Close says goodbye to the other ranks and closes the connections. It is
// safe to call twice.
func (p *Peer) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	close(p.stop)
	for _, l := range p.links {
		if l != nil {
			l.send(msgBye, nil)
			l.conn.Close()
		}
	}
	p.cancel(errors.New("collective: the group was closed"))
	p.wg.Wait()
	return nil
}

// Message kinds on a connection: u8 kind, u32 payload length, payload.
const (
	msgHello     byte = 1 // JSON Hello, a rank to rank 0
	msgWelcome   byte = 2 // JSON welcome, rank 0 to a rank
	msgHeartbeat byte = 3 // empty
	msgData      byte = 4 // u64 collective, u32 chunk, u32 chunks, bytes
	msgAbort     byte = 5 // u32 the failed rank, its reason
	msgBye       byte = 6 // empty: the rank leaves the run
)

// maxMessageBytes caps a message's payload; a larger length is a broken
// stream, never an allocation.
const maxMessageBytes = chunkBytes + 64

// chunkBytes is the most data one message carries, so that heartbeats
// pass between the pieces of a large collective.
const chunkBytes = 4 << 20

func writeMessage(w io.Writer, kind byte, payload []byte) error {
	head := make([]byte, 5, 5+len(payload))
	head[0] = kind
	binary.LittleEndian.PutUint32(head[1:], uint32(len(payload)))
	_, err := w.Write(append(head, payload...))
	return err
}

func readMessage(r io.Reader) (byte, []byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint32(head[1:])
	if n > maxMessageBytes {
		return 0, nil, fmt.Errorf("a message of %d bytes, over the cap of %d: not a vkern rank, or a broken stream", n, maxMessageBytes)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, nil, err
	}
	return head[0], p, nil
}

// link is one connection: to rank 0 on the other ranks, to rank r on
// rank 0.
type link struct {
	p        *Peer
	rank     int // the rank at the other end
	conn     net.Conn
	wmu      sync.Mutex
	lastSeen atomic.Int64 // unix nanoseconds of the last message read
	left     atomic.Bool  // it said goodbye

	qmu    sync.Mutex
	queue  [][]byte      // data messages not yet taken
	notify chan struct{} // signalled when queue grows
}

func newLink(p *Peer, rank int, conn net.Conn) *link {
	l := &link{p: p, rank: rank, conn: conn, notify: make(chan struct{}, 1)}
	l.lastSeen.Store(time.Now().UnixNano())
	return l
}

// send writes one message, giving up after HeartbeatTimeout (a peer that
// does not read is stopped or gone).
func (l *link) send(kind byte, payload []byte) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.conn.SetWriteDeadline(time.Now().Add(l.p.opts.HeartbeatTimeout))
	return writeMessage(l.conn, kind, payload)
}

// read runs on its own goroutine for the life of the link: data goes to
// the queue, heartbeats refresh lastSeen, an abort or the end of the
// connection fails the group.
func (l *link) read() {
	defer l.p.wg.Done()
	for {
		kind, payload, err := readMessage(l.conn)
		if err != nil {
			l.ended(err)
			return
		}
		l.lastSeen.Store(time.Now().UnixNano())
		switch kind {
		case msgHeartbeat:
		case msgData:
			l.qmu.Lock()
			l.queue = append(l.queue, payload)
			l.qmu.Unlock()
			select {
			case l.notify <- struct{}{}:
			default:
			}
		case msgAbort:
			origin, reason := l.rank, "failed"
			if len(payload) >= 4 {
				origin, reason = int(binary.LittleEndian.Uint32(payload)), string(payload[4:])
			}
			l.p.fail(l.p.peerError(origin, reason), l.rank)
		case msgBye:
			l.left.Store(true)
		default:
			l.ended(fmt.Errorf("a message of unknown kind %d", kind))
			return
		}
	}
}

// ended is the end of the connection: the group fails naming the rank
// unless this side is closing.
func (l *link) ended(err error) {
	if l.p.closed.Load() {
		return
	}
	reason := fmt.Sprintf("is gone: its connection ended (%v); the process died or was killed", err)
	if l.left.Load() {
		reason = "left the run (it finished, or was interrupted)"
	}
	l.p.fail(l.p.peerError(l.rank, reason), l.rank)
}

// recv takes the next data message, waiting until one comes, the group
// fails or ctx ends. Data that came before a failure is still taken.
func (l *link) recv(ctx context.Context) ([]byte, error) {
	for {
		l.qmu.Lock()
		if len(l.queue) > 0 {
			m := l.queue[0]
			l.queue = l.queue[1:]
			l.qmu.Unlock()
			return m, nil
		}
		l.qmu.Unlock()
		select {
		case <-l.notify:
		case <-l.p.ctx.Done():
			l.qmu.Lock()
			more := len(l.queue) > 0
			l.qmu.Unlock()
			if !more {
				return nil, context.Cause(l.p.ctx)
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("collective: waiting for rank %d: %w", l.rank, context.Cause(ctx))
		}
	}
}

// heartbeat sends heartbeats and declares silent ranks failed, until the
// peer closes.
func (p *Peer) heartbeat() {
	defer p.wg.Done()
	t := time.NewTicker(p.opts.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		now := time.Now()
		for _, l := range p.links {
			if l == nil || p.ctx.Err() != nil {
				continue // a failed group has nothing left to watch
			}
			if silent := now.Sub(time.Unix(0, l.lastSeen.Load())); silent > p.opts.HeartbeatTimeout && p.ctx.Err() == nil {
				p.fail(p.peerError(l.rank, fmt.Sprintf("sent nothing for %v (heartbeats every %v): it is stopped (SIGSTOP), hung or cut off",
					silent.Round(time.Millisecond), p.opts.HeartbeatInterval)), -1)
			}
			go func() {
				if err := l.send(msgHeartbeat, nil); err != nil && !p.closed.Load() && p.ctx.Err() == nil {
					p.fail(p.peerError(l.rank, writeFailure(err, p.opts.HeartbeatTimeout)), -1)
				}
			}()
		}
	}
}

// writeFailure says what a failed write to a rank means: a rank that
// reads nothing for timeout is stopped or hung; one whose connection
// broke is gone.
func writeFailure(err error, timeout time.Duration) string {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Sprintf("read nothing for %v: it is stopped (SIGSTOP), hung or cut off", timeout)
	}
	return fmt.Sprintf("is gone: writing to it failed (%v); the process died or was killed", err)
}

// start begins reading and heartbeating once the handshake is done.
func (p *Peer) start() {
	for _, l := range p.links {
		if l != nil {
			p.wg.Add(1)
			go l.read()
		}
	}
	p.wg.Add(1)
	go p.heartbeat()
}

func newPeer(rank, size int, opts Options) *Peer {
	p := &Peer{rank: rank, size: size, opts: opts.withDefaults(), stop: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancelCause(context.Background())
	return p
}

// Local makes a group of size ranks in this process (`vkern train --gpus
// N`), joined through in-memory pipes: the same messages, heartbeats and
// failures as over TCP. hello(r) is rank r's Hello.
func Local(ctx context.Context, size int, hello func(rank int) Hello, opts Options) ([]*Peer, error) {
	if size < 1 {
		return nil, fmt.Errorf("collective: a group of %d ranks; want at least 1", size)
	}
	peers := make([]*Peer, size)
	hubConns := make([]net.Conn, size)
	for r := range peers {
		peers[r] = newPeer(r, size, opts)
		if r > 0 {
			a, b := net.Pipe()
			hubConns[r] = a
			peers[r].links = []*link{newLink(peers[r], 0, b)}
		}
	}
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := 1; r < size; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = peers[r].greet(ctx, hello(r))
		}()
	}
	errs[0] = peers[0].welcome(ctx, hello(0), func(context.Context) (net.Conn, error) { return nil, nil }, hubConns)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range hubConns {
			if c != nil {
				c.Close()
			}
		}
		for _, p := range peers {
			for _, l := range p.links {
				if l != nil {
					l.conn.Close()
				}
			}
		}
		return nil, err
	}
	for _, p := range peers {
		p.start()
	}
	return peers, nil
}

// Env is where a process of a multi-process run finds rank 0, and which
// rank it is: torchrun's environment.
type Env struct {
	Addr       string // MASTER_ADDR:MASTER_PORT, where rank 0 listens
	Rank, Size int    // RANK, WORLD_SIZE
	LocalRank  int    // LOCAL_RANK: the GPU on this machine (RANK when unset)
}

// EnvFrom reads torchrun's variables through getenv (os.Getenv): ok is
// false when neither WORLD_SIZE nor RANK is set (not a multi-process run).
// Every variable that is missing or malformed is named in one error, with
// what it wants.
func EnvFrom(getenv func(string) string) (env Env, ok bool, err error) {
	if getenv("WORLD_SIZE") == "" && getenv("RANK") == "" {
		return Env{}, false, nil
	}
	var problems []string
	num := func(name string, def, lo, hi int) int {
		v := getenv(name)
		if v == "" {
			if def >= 0 {
				return def
			}
			problems = append(problems, name+" is unset")
			return -1
		}
		var n int
		if _, err := fmt.Sscanf(v, "%d", &n); err != nil || fmt.Sprint(n) != v || n < lo || n > hi {
			problems = append(problems, fmt.Sprintf("%s=%q is not a whole number in %d..%d", name, v, lo, hi))
			return -1
		}
		return n
	}
	env.Size = num("WORLD_SIZE", -1, 1, 1<<16)
	env.Rank = num("RANK", -1, 0, 1<<16)
	if env.Size > 0 && env.Rank >= env.Size {
		problems = append(problems, fmt.Sprintf("RANK=%d is not below WORLD_SIZE=%d (ranks are 0..WORLD_SIZE−1)", env.Rank, env.Size))
	}
	env.LocalRank = num("LOCAL_RANK", max(env.Rank, 0), 0, 1<<16)
	port := num("MASTER_PORT", -1, 1, 65535)
	host := getenv("MASTER_ADDR")
	if host == "" {
		problems = append(problems, "MASTER_ADDR is unset")
	}
	if len(problems) > 0 {
		return Env{}, true, fmt.Errorf("collective: %s; a process of a multi-process run needs MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE, as torchrun sets them (unset WORLD_SIZE and RANK for a run of one process)",
			strings.Join(problems, "; "))
	}
	env.Addr = net.JoinHostPort(host, fmt.Sprint(port))
	return env, true, nil
}

// Join joins the group env describes over TCP, until ctx ends: rank 0
// listens on env.Addr's port (every interface) and waits for every other
// rank; the others dial it, retrying while it is not up yet.
func Join(ctx context.Context, env Env, hello Hello, opts Options) (*Peer, error) {
	p := newPeer(env.Rank, env.Size, opts)
	hello.Rank, hello.Size = env.Rank, env.Size
	if o := opts.withDefaults(); o.OnWait != nil {
		what := fmt.Sprintf("rank %d of %d: waiting for rank 0 at %s (MASTER_ADDR:MASTER_PORT)", env.Rank, env.Size, env.Addr)
		if env.Rank == 0 {
			others := "rank 1"
			if env.Size > 2 {
				others = fmt.Sprintf("ranks 1 to %d", env.Size-1)
			}
			what = fmt.Sprintf("rank 0 of %d: waiting on %s for %s to join", env.Size, env.Addr, others)
		}
		// The notice holds mu while it speaks, and Join takes it before
		// returning: no notice comes after Join has returned.
		var mu sync.Mutex
		returned := false
		notice := time.AfterFunc(o.WaitNotice, func() {
			mu.Lock()
			defer mu.Unlock()
			if returned {
				return
			}
			if deadline, ok := ctx.Deadline(); ok {
				what += fmt.Sprintf("; giving up in %v", time.Until(deadline).Round(time.Second))
			}
			o.OnWait(what)
		})
		defer func() {
			notice.Stop()
			mu.Lock()
			returned = true
			mu.Unlock()
		}()
	}
	if env.Rank == 0 {
		_, port, err := net.SplitHostPort(env.Addr)
		if err != nil {
			return nil, fmt.Errorf("collective: %q: %w", env.Addr, err)
		}
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", ":"+port)
		if err != nil {
			return nil, fmt.Errorf("collective: rank 0 cannot listen on port %s (MASTER_PORT): %w; choose a free port", port, err)
		}
		defer ln.Close()
		stop := context.AfterFunc(ctx, func() { ln.Close() })
		defer stop()
		accept := func(ctx context.Context) (net.Conn, error) {
			c, err := ln.Accept()
			if err != nil && ctx.Err() != nil {
				err = context.Cause(ctx)
			}
			return c, err
		}
		if err := p.welcome(ctx, hello, accept, nil); err != nil {
			return nil, err
		}
	} else {
		conn, err := dial(ctx, env.Addr)
		if err != nil {
			return nil, fmt.Errorf("collective: rank %d cannot reach rank 0 at %s (MASTER_ADDR:MASTER_PORT): %w", env.Rank, env.Addr, err)
		}
		p.links = []*link{newLink(p, 0, conn)}
		if err := p.greet(ctx, hello); err != nil {
			conn.Close()
			return nil, err
		}
	}
	p.start()
	return p, nil
}

// dial connects to addr, retrying every 200 ms while nothing listens yet.
func dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last try: %v)", context.Cause(ctx), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// greet is a rank's side of the start: its Hello, then rank 0's answer.
func (p *Peer) greet(ctx context.Context, hello Hello) error {
	l := p.links[0]
	hello.Rank, hello.Size = p.rank, p.size
	body, err := json.Marshal(hello)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { l.conn.SetDeadline(time.Now()) })
	defer stop()
	if err := writeMessage(l.conn, msgHello, body); err != nil {
		return fmt.Errorf("collective: rank %d saying hello to rank 0: %w", p.rank, orCause(ctx, err))
	}
	kind, payload, err := readMessage(l.conn)
	if err != nil {
		return fmt.Errorf("collective: rank %d waiting for rank 0's answer: %w", p.rank, orCause(ctx, err))
	}
	var w welcome
	if kind != msgWelcome || json.Unmarshal(payload, &w) != nil {
		return fmt.Errorf("collective: rank %d: rank 0 answered with a message of kind %d, not a welcome: is MASTER_PORT another program's?", p.rank, kind)
	}
	if w.Error != "" {
		return errors.New(w.Error)
	}
	l.conn.SetDeadline(time.Time{})
	p.hellos = w.Ranks
	return nil
}

func orCause(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", context.Cause(ctx), err)
	}
	return err
}

// welcome is rank 0's side of the start: every other rank's Hello (from
// conns[r], or accepted when conns is nil), the comparison, and one
// answer to all.
func (p *Peer) welcome(ctx context.Context, hello Hello, accept func(context.Context) (net.Conn, error), conns []net.Conn) error {
	hello.Rank, hello.Size = 0, p.size
	hellos := make([]Hello, p.size)
	hellos[0] = hello
	byRank := make([]net.Conn, p.size)
	var mu sync.Mutex
	var problems []string
	stops := []func() bool{}
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	receive := func(c net.Conn) {
		stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
		mu.Lock()
		stops = append(stops, stop)
		mu.Unlock()
		kind, payload, err := readMessage(c)
		var h Hello
		if err == nil && (kind != msgHello || json.Unmarshal(payload, &h) != nil) {
			err = fmt.Errorf("a message of kind %d, not a hello", kind)
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("a connection from %v sent no hello: %v", c.RemoteAddr(), orCause(ctx, err)))
			c.Close()
		case h.Size != p.size:
			problems = append(problems, fmt.Sprintf("rank %d (pid %d on %s) has WORLD_SIZE %d, rank 0 has %d", h.Rank, h.PID, h.Host, h.Size, p.size))
			writeMessage(c, msgWelcome, mustJSON(welcome{Error: "collective: " + problems[len(problems)-1]}))
			c.Close()
		case h.Rank < 1 || h.Rank >= p.size || byRank[h.Rank] != nil:
			problems = append(problems, fmt.Sprintf("a second rank %d (pid %d on %s) joined; every process needs its own RANK in 1..%d", h.Rank, h.PID, h.Host, p.size-1))
			writeMessage(c, msgWelcome, mustJSON(welcome{Error: "collective: " + problems[len(problems)-1]}))
			c.Close()
		default:
			hellos[h.Rank] = h
			byRank[h.Rank] = c
		}
	}
	if conns != nil {
		var wg sync.WaitGroup
		for r := 1; r < p.size; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				receive(conns[r])
			}()
		}
		wg.Wait()
	} else {
		for joined := 1; joined < p.size && len(problems) == 0; joined++ {
			c, err := accept(ctx)
			if err != nil {
				problems = append(problems, fmt.Sprintf("waiting for ranks: %v", err))
				break
			}
			receive(c)
		}
	}
	if len(problems) == 0 {
		problems = compare(hellos)
	}
	var w welcome
	if len(problems) > 0 {
		missing := []string{}
		for r := 1; r < p.size; r++ {
			if byRank[r] == nil {
				missing = append(missing, fmt.Sprint(r))
			}
		}
		if len(missing) > 0 && conns == nil {
			problems = append(problems, fmt.Sprintf("rank(s) %s never joined", strings.Join(missing, ", ")))
		}
		w.Error = "collective: the run cannot start: " + strings.Join(problems, "; ")
	} else {
		w.Ranks = hellos
	}
	body := mustJSON(w)
	for r := 1; r < p.size; r++ {
		if c := byRank[r]; c != nil {
			c.SetWriteDeadline(time.Now().Add(p.opts.HeartbeatTimeout))
			writeMessage(c, msgWelcome, body)
			c.SetDeadline(time.Time{})
			if w.Error != "" {
				c.Close()
			}
		}
	}
	if w.Error != "" {
		return errors.New(w.Error)
	}
	p.hellos = hellos
	p.links = make([]*link, p.size)
	for r := 1; r < p.size; r++ {
		p.links[r] = newLink(p, r, byRank[r])
	}
	return nil
}

// compare lists how each rank's Match differs from rank 0's.
func compare(hellos []Hello) []string {
	var out []string
	base := hellos[0]
	for _, h := range hellos[1:] {
		keys := map[string]bool{}
		for k := range base.Match {
			keys[k] = true
		}
		for k := range h.Match {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			if h.Match[k] != base.Match[k] {
				out = append(out, fmt.Sprintf("rank %d (pid %d on %s) has %s %q, rank 0 (pid %d on %s) has %q: every rank must run the same",
					h.Rank, h.PID, h.Host, k, h.Match[k], base.PID, base.Host, base.Match[k]))
			}
		}
	}
	return out
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("collective: " + err.Error()) // the types above always marshal
	}
	return b
}
