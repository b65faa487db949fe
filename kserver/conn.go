package kserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// conn is one incarnation of the kernel server as the Client sees it: the
// process, the write side (one frame at a time), and the queue of calls in
// flight in the order they were sent. The server answers in order, so the
// next answer always belongs to the oldest call in the queue, the head.
//
// Reading. Whoever owns the head call reads its answer itself, on its own
// goroutine: a lone call costs one write and one read, with no goroutine
// hand-off, and the read spins briefly before it sleeps (spinReader), so a
// quick answer costs no scheduler wake-up either. Having read it, it passes the reading role to
// the owner of the next call in the queue, whose wait wakes up to read its
// own answer. A head whose caller gave up is read by a drain goroutine,
// which hands the role back as soon as a waiting call is at the head.
//
// Deadlines. A call whose deadline passes (or whose context ends) while it
// is the head, or while its request is being written, kills the server: the
// server is stuck or too slow, the kill ends the blocked read or write, and
// the next call starts a fresh server. One watchdog timer per server covers
// those deadlines; it is re-armed only when a call needs it earlier. A call
// whose deadline passes while its request waits behind others leaves the
// server alone: its caller gets an error at once, and the answer, when it
// comes, is dropped (a buffer an abandoned ALLOC made is freed). An abandoned
// request that the server then works on for longer than CallTimeout kills it,
// so that nothing waits forever.
type conn struct {
	c     *Client
	gen   uint64
	p     process
	rings *rings    // the shared-memory rings the frames travel through; nil when they use the pipes
	w     io.Writer // the request stream: the rings, or the child's stdin in blocking mode
	hello Hello
	fr    frameReader   // the response stream (the rings, or a spinReader of the child's stdout); used only by the holder of the reading role
	wlock chan struct{} // held while a frame is written
	wbuf  []byte        // guarded by wlock
	done  chan struct{} // closed once the server is gone and every call in flight has its error

	mu       sync.Mutex
	pending  []*call // sent and not yet answered, oldest first
	nextID   uint32
	reader   *call // who holds the reading role: a call, &drainer, or nil
	writing  *call // whose request is being written
	dead     bool  // no more calls may be sent
	closing  bool  // SHUTDOWN was sent: the exit is expected
	failed   *failure
	died     *DiedError // set before done is closed
	watchdog *time.Timer
	watchAt  time.Time // when the watchdog fires; zero when it is not armed
}

// drainer stands for the drain goroutine in conn.reader.
var drainer = &call{op: OpPing}

// call is one request and, once done is closed, its outcome.
type call struct {
	op       Opcode
	id       uint32
	ctx      context.Context
	deadline time.Time
	sent     time.Time
	times    []uint64 // RUN_BATCH: where the reader puts the kernel times

	// Set before done is closed.
	u64        uint64 // ALLOC's handle, RUN's kernel time
	memory     Memory // MEMORY's answer
	text       []byte // TEXT_READ's text; COMM_INFO's and COMM_UNIQUE_ID's answer
	batchEntry uint32 // a RUN_BATCH error's entry
	err        error
	done       chan struct{}
	turn       chan struct{} // closed when the call is the head and its caller should read
	stopCtx    func() bool   // stops the context watch armed when it became the head

	// Guarded by conn.mu.
	answered  bool      // the answer (or the server's end) is in
	abandoned bool      // its caller stopped waiting; whoever ends it cleans up
	headSince time.Time // when it became the head
	region    span      // the arena range an abandoned call releases
}

// newConn is the Client's side of a started server: through r when it is
// not nil, else through the pipes.
func newConn(c *Client, gen uint64, p process, r *rings) (*conn, error) {
	s := &conn{
		c: c, gen: gen, p: p, rings: r,
		wlock: make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	spin := spinFromEnv()
	if r == nil {
		s.w, s.fr.f = p.stdin(), newPipeReader(p.stdout(), spin)
		return s, nil
	}
	rr, w, err := ringStreams(r, p, spin)
	if err != nil {
		return nil, err
	}
	s.fr.f, s.w = rr, w
	return s, nil
}

// callCtx is a call's context and the deadline it runs under: the
// context's own, or (implicit) CallTimeout from the call's start, or from
// the arrival of the server it started or waited for (Client.server).
type callCtx struct {
	ctx      context.Context
	deadline time.Time
	implicit bool // ctx has no deadline: the deadline is CallTimeout's
}

// allow moves an implicit deadline to d from now, where that is later: the
// wait for a server's start (Client.server). A deadline of the context's
// own stays.
func (cx *callCtx) allow(d time.Duration) {
	if t := time.Now().Add(d); cx.implicit && t.After(cx.deadline) {
		cx.deadline = t
	}
}

// err is the context's error (its cause, when it was cancelled with one:
// a data-parallel rank's calls end with the failure of the rank that ended
// them), or DeadlineExceeded once the deadline passed.
func (cx callCtx) err() error {
	if cx.ctx.Err() != nil {
		return context.Cause(cx.ctx)
	}
	if !time.Now().Before(cx.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// block waits for ch to be ready, the context to end or the deadline to
// pass. The timer is made only when it has to wait.
func (cx callCtx) block(ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	default:
	}
	t := time.NewTimer(time.Until(cx.deadline))
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-cx.ctx.Done():
		return context.Cause(cx.ctx)
	case <-t.C:
		return context.DeadlineExceeded
	}
}

// acquire takes a one-slot semaphore, giving up when cx ends.
func (cx callCtx) acquire(sem chan struct{}) error {
	select {
	case sem <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(time.Until(cx.deadline))
	defer t.Stop()
	select {
	case sem <- struct{}{}:
		return nil
	case <-cx.ctx.Done():
		return context.Cause(cx.ctx)
	case <-t.C:
		return context.DeadlineExceeded
	}
}

// do sends cl's request and waits for its outcome.
func (s *conn) do(cx callCtx, cl *call, head, tail []byte) error {
	if err := s.send(cx, cl, head, tail); err != nil {
		return err
	}
	return s.wait(cx, cl)
}

// send writes cl's request (header, head, then tail) and queues cl for its
// answer. An error means nothing was sent; after a nil return the outcome,
// whatever happens, comes through wait.
func (s *conn) send(cx callCtx, cl *call, head, tail []byte) error {
	if n := len(head) + len(tail); n > MaxFrameBytes-HeaderBytes {
		return fmt.Errorf("kserver: %v: request payload of %d bytes is over the frame cap of %d bytes", cl.op, n, MaxFrameBytes)
	}
	if err := cx.err(); err != nil {
		return fmt.Errorf("kserver: %v: %w (nothing was sent)", cl.op, err)
	}
	if err := cx.acquire(s.wlock); err != nil {
		return fmt.Errorf("kserver: %v: gave up waiting for the call in flight to finish sending its request: %w (nothing was sent)", cl.op, err)
	}
	cl.ctx, cl.deadline = cx.ctx, cx.deadline
	cl.done = make(chan struct{})
	cl.turn = make(chan struct{})
	s.mu.Lock()
	if s.dead {
		s.mu.Unlock()
		<-s.wlock
		<-s.done
		return s.lateError(cl.op)
	}
	s.nextID++
	if s.nextID == 0 {
		s.nextID = 1
	}
	cl.id = s.nextID
	cl.sent = time.Now()
	s.pending = append(s.pending, cl)
	if s.reader == nil {
		s.handLocked(cl.sent)
	}
	// A write blocks only when the pipe is full; one that outlives the
	// call's deadline leaves half a frame behind, so the server must go.
	s.writing = cl
	s.armLocked(cl.deadline)
	s.mu.Unlock()

	s.wbuf = append(appendHeader(s.wbuf[:0], len(head)+len(tail), cl.id, cl.op, StatusOK), head...)
	if len(tail) <= 4<<10 {
		s.wbuf = append(s.wbuf, tail...)
		tail = nil
	}
	var stop func() bool
	if len(tail) > 0 && cx.ctx.Done() != nil {
		stop = context.AfterFunc(cx.ctx, func() { s.expire(cl, true) })
	}
	_, err := s.w.Write(s.wbuf)
	if err == nil && len(tail) > 0 {
		_, err = s.w.Write(tail)
	}
	if stop != nil {
		stop()
	}
	if cap(s.wbuf) > 64<<10 {
		s.wbuf = nil
	}
	s.mu.Lock()
	s.writing = nil
	s.mu.Unlock()
	<-s.wlock
	if err != nil {
		s.fail(failure{cause: fmt.Errorf("sending the request: %w", err), grace: exitGrace})
	}
	return nil
}

// wait waits for cl's outcome, reading it itself when its turn comes.
func (s *conn) wait(cx callCtx, cl *call) error {
	return s.waitHolding(cx, cl, span{})
}

// waitHolding is wait for a call that holds an arena range: if its caller
// gives up, the range goes with the abandoned call, and done stays open.
func (s *conn) waitHolding(cx callCtx, cl *call, region span) error {
	var t *time.Timer
	for {
		select {
		case <-cl.done:
			return cl.err
		case <-cl.turn:
			s.read(cl)
			continue
		default:
		}
		if t == nil {
			t = time.NewTimer(time.Until(cl.deadline))
			defer t.Stop()
		}
		select {
		case <-cl.done:
			return cl.err
		case <-cl.turn:
			s.read(cl)
		case <-cx.ctx.Done():
			return s.giveUp(cl, region)
		case <-t.C:
			return s.giveUp(cl, region)
		}
	}
}

// giveUp ends the wait of a call whose context ended or whose deadline
// passed: a head kills the server (and its outcome says so); a call behind
// others is abandoned.
func (s *conn) giveUp(cl *call, region span) error {
	s.mu.Lock()
	switch {
	case cl.answered || s.dead:
		// The outcome is on its way.
	case s.pending[0] == cl:
		s.expireLocked(cl, false)
	default:
		ahead := slices.Index(s.pending, cl)
		oldest := s.pending[0]
		cl.abandoned = true
		cl.region = region
		err := fmt.Errorf("kserver: %v: gave up waiting for the call in flight ahead of it (%v, request %d, sent %v before; %d requests ahead): %w",
			cl.op, oldest.op, oldest.id, time.Since(oldest.sent).Round(time.Microsecond), ahead, ctxCause(cl))
		s.mu.Unlock()
		return err
	}
	s.mu.Unlock()
	s.finish(cl)
	return cl.err
}

// finish waits, without a deadline, for the outcome of a call whose server
// is ending or has answered, reading if its turn comes.
func (s *conn) finish(cl *call) {
	for {
		select {
		case <-cl.done:
			return
		case <-cl.turn:
			s.read(cl)
		}
	}
}

// ctxCause is why cl's wait ended: its context's error, or DeadlineExceeded.
func ctxCause(cl *call) error {
	if cl.ctx.Err() != nil {
		return context.Cause(cl.ctx)
	}
	return context.DeadlineExceeded
}

// expire kills the server for cl's missed deadline if cl is still the head
// (or, with writing, still being written).
func (s *conn) expire(cl *call, writing bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if writing && s.writing == cl || !writing && len(s.pending) > 0 && s.pending[0] == cl && !cl.answered {
		s.expireLocked(cl, writing)
	}
}

func (s *conn) expireLocked(cl *call, writing bool) {
	if writing {
		s.failLocked(failure{killed: true, call: cl, cause: fmt.Errorf(
			"the request could not be written before the call's deadline (%w): the server was not reading its input", ctxCause(cl))})
		return
	}
	if cl.abandoned {
		s.failLocked(failure{killed: true, call: cl, cause: fmt.Errorf(
			"no reply within CallTimeout (%v) to %v (request %d), whose caller had given up waiting", s.c.cfg.CallTimeout, cl.op, cl.id)})
		return
	}
	s.failLocked(failure{killed: true, call: cl, cause: fmt.Errorf(
		"no reply %v after the request, when the call's context ended (%w); the server was working on this request, so the next call starts a fresh server",
		time.Since(cl.sent).Round(time.Millisecond), ctxCause(cl))})
}

// armLocked makes sure the watchdog fires no later than at.
func (s *conn) armLocked(at time.Time) {
	if !s.watchAt.IsZero() && !at.Before(s.watchAt) {
		return
	}
	s.watchAt = at
	if s.watchdog == nil {
		s.watchdog = time.AfterFunc(time.Until(at), s.watch)
	} else {
		s.watchdog.Reset(time.Until(at))
	}
}

// watch is the watchdog: it kills the server for the head or the request
// being written when its deadline has passed, and else re-arms itself for
// the earlier of the two.
func (s *conn) watch() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watchAt = time.Time{}
	if s.dead {
		return
	}
	now := time.Now()
	var next time.Time
	if len(s.pending) > 0 {
		head := s.pending[0]
		due := head.deadline
		if head.abandoned {
			due = head.headSince.Add(s.c.cfg.CallTimeout)
		}
		if !now.Before(due) {
			s.expireLocked(head, false)
			return
		}
		next = due
	}
	if w := s.writing; w != nil {
		if !now.Before(w.deadline) {
			s.expireLocked(w, true)
			return
		}
		if next.IsZero() || w.deadline.Before(next) {
			next = w.deadline
		}
	}
	if !next.IsZero() {
		s.armLocked(next)
	}
}

// fail records why the server must end and, for a kill, kills it; the
// holder of the reading role then ends the server and tells every call in
// flight.
func (s *conn) fail(f failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failLocked(f)
}

func (s *conn) failLocked(f failure) {
	if s.failed == nil {
		s.failed = &f
	}
	if f.killed {
		s.p.kill()
	} else {
		// Its stdout will end, which ends the read; should the server
		// linger with stdout open, the kill makes sure.
		time.AfterFunc(f.grace+waitDelay, s.p.kill)
	}
	if s.reader == nil {
		// Nobody is reading, so nobody would see the end: the drain
		// goroutine will.
		s.reader = drainer
		go s.drain()
	}
}

// handLocked gives the reading role to the head, or to the drain goroutine
// when the head's caller gave up, or to nobody when no call is in flight.
// The caller holds the role (or nobody does).
func (s *conn) handLocked(now time.Time) {
	if len(s.pending) == 0 {
		s.reader = nil
		return
	}
	head := s.pending[0]
	head.headSince = now
	if head.abandoned {
		s.armLocked(now.Add(s.c.cfg.CallTimeout))
		if s.reader != drainer {
			s.reader = drainer
			go s.drain()
		}
		return
	}
	s.reader = head
	if head.ctx.Done() != nil {
		// A context that ends early must end the read; deadlines are the
		// watchdog's.
		head.stopCtx = context.AfterFunc(head.ctx, func() { s.expire(head, false) })
	}
	s.armLocked(head.deadline)
	close(head.turn)
}

// read reads answers while cl holds the reading role: normally just its
// own, after which the role has passed on.
func (s *conn) read(cl *call) {
	for {
		s.mu.Lock()
		mine := s.reader == cl && !s.dead
		s.mu.Unlock()
		if !mine {
			return
		}
		if !s.readOne() {
			return
		}
	}
}

// drain reads answers while the drain goroutine holds the reading role.
func (s *conn) drain() {
	for {
		s.mu.Lock()
		mine := s.reader == drainer && !s.dead
		s.mu.Unlock()
		if !mine {
			return
		}
		if !s.readOne() {
			return
		}
	}
}

// readOne reads one frame and hands it to the head; it reports false when
// the server has ended.
func (s *conn) readOne() bool {
	f, err := s.fr.next()
	switch {
	case errors.Is(err, ErrProtocol): // the stream is out of step
		s.end(failure{cause: err, hint: framingHint})
		return false
	case err != nil: // its stdout ended: let it report its own exit status
		s.end(failure{cause: fmt.Errorf("reading the response: %w", err), grace: exitGrace})
		return false
	}
	if bad := s.answer(f); bad != nil {
		s.end(*bad)
		return false
	}
	return true
}

// answer hands f to the head, or says why it cannot be.
func (s *conn) answer(f Frame) *failure {
	s.mu.Lock()
	var cl *call
	if len(s.pending) > 0 {
		cl = s.pending[0]
	}
	var bad *failure
	switch {
	case f.ID == 0 && f.Status != StatusOK:
		bad = &failure{grace: exitGrace, cause: fmt.Errorf(
			"%w: the server sent %v with id 0, an error not tied to a request: %s", ErrProtocol, f.Status, ErrorMessage(f.Payload))}
	case cl == nil:
		bad = &failure{cause: fmt.Errorf("%w: a response with id %d (%v) came with no request in flight", ErrProtocol, f.ID, f.Opcode)}
	case f.ID != cl.id:
		bad = &failure{cause: fmt.Errorf("%w: response has id %d, want %d", ErrProtocol, f.ID, cl.id)}
	case f.Opcode != cl.op:
		bad = &failure{cause: fmt.Errorf("%w: response to request %d has opcode %v", ErrProtocol, cl.id, f.Opcode)}
	case f.Status == StatusDeviceError:
		bad = &failure{cause: newServerError(cl.op, f), grace: exitGrace, call: cl}
	case f.Status == StatusOK:
		if err := decodeAnswer(cl, f.Payload); err != nil {
			bad = &failure{cause: err, call: cl}
		}
	default:
		cl.err = answerError(cl, f)
		if errors.Is(cl.err, ErrProtocol) {
			bad = &failure{cause: cl.err, call: cl}
		}
	}
	if bad != nil {
		s.mu.Unlock()
		return bad
	}
	s.pending[0] = nil
	s.pending = s.pending[1:]
	cl.answered = true
	if cl.stopCtx != nil {
		cl.stopCtx()
	}
	abandoned := cl.abandoned
	s.handLocked(time.Now())
	s.mu.Unlock()
	if abandoned {
		s.cleanUp(cl)
	} else {
		close(cl.done)
	}
	return nil
}

// decodeAnswer decodes an OK payload into cl.
func decodeAnswer(cl *call, p []byte) (err error) {
	switch cl.op {
	case OpAlloc, OpView:
		cl.u64, err = DecodeAllocResponse(p)
	case OpRun:
		cl.u64, err = DecodeRunResponse(p)
	case OpRunBatch:
		err = DecodeRunBatchResponse(p, cl.times)
	case OpTextRead, OpCommInfo:
		cl.text = append([]byte(nil), p...)
	case OpCommUniqueID:
		_, err = DecodeCommUniqueIDResponse(p)
		cl.text = append([]byte(nil), p...)
	case OpCommInit:
		cl.u64, err = DecodeCommInitResponse(p)
	case OpMemory:
		cl.memory, err = DecodeMemoryResponse(p)
	default:
		err = DecodeEmpty(cl.op, p)
	}
	return err
}

// answerError is the error of a response whose status is not OK.
func answerError(cl *call, f Frame) error {
	if cl.op != OpRunBatch {
		return newServerError(cl.op, f)
	}
	entry, msg, err := DecodeRunBatchError(f.Payload)
	if err != nil {
		return err
	}
	if entry != NoBatchEntry && entry >= uint32(len(cl.times)) {
		return fmt.Errorf("%w: RUN_BATCH error names entry %d of a batch of %d", ErrProtocol, entry, len(cl.times))
	}
	cl.batchEntry = entry
	msg = strings.TrimPrefix(msg, fmt.Sprintf("RUN_BATCH entry %d of %d: ", entry, len(cl.times)))
	return &ServerError{Op: OpRunBatch.String(), Status: uint16(f.Status), StatusName: f.Status.String(), Message: msg}
}

// abandon tells the reader that cl's caller no longer waits; the range is
// released when the answer comes. It reports false when the outcome is
// already in (or the server is ending): the caller then cleans up itself,
// after finish.
func (s *conn) abandon(cl *call, region span) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cl.answered || s.dead {
		return false
	}
	cl.abandoned = true
	cl.region = region
	if s.reader == cl {
		// It holds the reading role but stops waiting: the drain
		// goroutine reads in its place.
		s.reader = drainer
		go s.drain()
	}
	return true
}

// cleanUp finishes a call whose caller stopped waiting.
func (s *conn) cleanUp(cl *call) {
	if cl.region.n > 0 {
		s.c.arena.release(cl.region.off, cl.region.n)
	}
	if (cl.op == OpAlloc || cl.op == OpView || cl.op == OpCommInit) && cl.err == nil && cl.u64 != 0 {
		go s.freeAbandoned(cl.op, cl.u64)
	}
}

// freeAbandoned frees a buffer or view that an abandoned ALLOC or VIEW
// made, or aborts the communicator of an abandoned COMM_INIT.
func (s *conn) freeAbandoned(made Opcode, handle uint64) {
	cx := callCtx{ctx: context.Background(), deadline: time.Now().Add(s.c.cfg.CallTimeout)}
	var head [8]byte
	cl := &call{op: OpFree}
	if made == OpCommInit {
		cl.op = OpCommAbort
	}
	if s.send(cx, cl, AppendFreeRequest(head[:0], handle), nil) == nil && !s.abandon(cl, span{}) {
		s.finish(cl)
	}
}

// end ends the server after f (unless an earlier failure was recorded),
// tells every call in flight, and closes done. Only the holder of the
// reading role calls it.
func (s *conn) end(f failure) {
	s.mu.Lock()
	if s.failed != nil {
		f = *s.failed
	} else {
		s.failed = &f
	}
	s.dead = true
	if s.watchdog != nil {
		s.watchdog.Stop()
	}
	s.mu.Unlock()

	d := endProcess(s.p, f)
	d.Gen = s.gen
	if s.rings != nil {
		// The process is gone, so a write in progress ends soon; once it
		// has, nothing touches the rings again (send sees dead).
		s.wlock <- struct{}{}
		s.rings.unmap()
		<-s.wlock
	}

	s.mu.Lock()
	pending := s.pending
	s.pending = nil
	s.reader = nil
	closing := s.closing
	s.mu.Unlock()

	c := s.c
	c.mu.Lock()
	if c.live == s {
		c.live = nil
	}
	if len(pending) == 0 && !closing {
		idle := *d
		idle.Cause = errors.New("it exited while idle, between calls")
		c.unreported = &idle
	}
	c.mu.Unlock()

	d.Op = "end"
	s.died = d
	for _, cl := range pending {
		e := *d
		e.Op = cl.op.String()
		e.Cause = causeFor(cl, f)
		cl.err = c.duringClose(cl.op, &e)
		s.mu.Lock()
		abandoned := cl.abandoned
		cl.answered = true
		s.mu.Unlock()
		if cl.stopCtx != nil {
			cl.stopCtx()
		}
		if abandoned {
			s.cleanUp(cl)
		} else {
			close(cl.done)
		}
	}
	close(s.done)
}

// reap ends a server whose process has exited while no call was in
// flight: it reads what is left of its output, then the end.
func (s *conn) reap() {
	s.mu.Lock()
	if s.reader == nil && !s.dead {
		s.reader = drainer
		go s.drain()
	}
	s.mu.Unlock()
	<-s.done
}

// causeFor is what a call in flight is told about f.
func causeFor(cl *call, f failure) error {
	if f.call == nil || f.call == cl {
		return f.cause
	}
	return fmt.Errorf("it was ended over %v (request %d): %v", f.call.op, f.call.id, f.cause)
}

// lateError is the error of a call that found the server already gone.
func (s *conn) lateError(op Opcode) error {
	e := *s.died
	e.Op = op.String()
	e.Cause = fmt.Errorf("it was gone before the request was sent: %w", s.died.Cause)
	return s.c.duringClose(op, &e)
}

// duringClose marks errors of calls that Close ended.
func (c *Client) duringClose(op Opcode, err *DiedError) error {
	if c.closed.Load() && op != OpShutdown {
		return fmt.Errorf("%w during the call: %w", ErrClosed, err)
	}
	return err
}

// shutdown sends SHUTDOWN behind the calls in flight, waits up to
// CloseTimeout for its answer and as long again for the exit (under a
// wrapper, StartTimeout where that is longer), and kills the server when
// either runs out.
func (s *conn) shutdown() error {
	cfg := s.c.cfg
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	cx := callCtx{ctx: context.Background(), deadline: time.Now().Add(cfg.CloseTimeout)}
	cl := &call{op: OpShutdown}
	if err := s.send(cx, cl, nil, nil); err != nil {
		s.fail(failure{killed: true, cause: fmt.Errorf("close: %w", err)})
		<-s.done
		return err
	}
	// The SHUTDOWN is killed at its deadline wherever it is in the queue.
	stop := time.AfterFunc(time.Until(cx.deadline), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !cl.answered {
			s.failLocked(failure{killed: true, call: cl, cause: fmt.Errorf(
				"close: no answer to SHUTDOWN within CloseTimeout (%v), so the server was killed with the calls in flight", cfg.CloseTimeout)})
		}
	})
	s.finish(cl)
	stop.Stop()
	if cl.err != nil {
		<-s.done
		return cl.err
	}
	var err error
	grace := cfg.CloseTimeout
	if len(cfg.Wrapper) > 0 {
		grace = max(grace, cfg.StartTimeout) // a profiler writes its report after the server exits
	}
	if !s.p.wait(grace) {
		s.p.kill()
		s.p.wait(waitDelay + time.Second)
		err = fmt.Errorf("kserver: close: kernel server #%d (pid %d) answered SHUTDOWN but had not exited %v later; killed it", s.gen, s.p.pid(), grace)
	} else if exit, _ := s.p.diagnose(); exit != "exit status 0" {
		err = fmt.Errorf("kserver: close: kernel server #%d (pid %d) ended with %s after SHUTDOWN, want exit status 0\n--- stderr tail ---\n%s",
			s.gen, s.p.pid(), exit, s.p.stderrTail())
	}
	s.reap()
	return err
}
