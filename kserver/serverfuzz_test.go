package kserver

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The real server's frame parser under malformed input: a seeded corpus of
// random, mutated, truncated and oversized frames sent through the real
// binary, one at a time. Every frame must get exactly one answer (or, for
// the fatal kinds, a clean exit with a message on stderr); never a crash,
// a hang, or memory past the frame cap. VKERN_SOAK=long sends ten times as
// many; VKERN_FUZZ_SEED picks another corpus.

// longRun reports whether VKERN_SOAK=long asks for the long versions of the
// fuzz, soak and chaos tests.
func longRun() bool { return os.Getenv("VKERN_SOAK") == "long" }

// fuzzSeed is the corpus seed: VKERN_FUZZ_SEED, or a fixed one.
func fuzzSeed(t testing.TB) uint64 {
	if s := os.Getenv("VKERN_FUZZ_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("VKERN_FUZZ_SEED=%q: %v", s, err)
		}
		return v
	}
	return 20261121
}

// rawServer is the real server driven frame by frame, without a Client,
// through the pipes or the rings.
type rawServer struct {
	p     *execProcess
	in    *frameReader
	out   io.Writer
	rings *rings // nil on the pipes
	arena *arena
}

// rawReplyTimeout is how long a frame may go unanswered before the server
// counts as hung.
const rawReplyTimeout = 10 * time.Second

func startRaw(t testing.TB, bin string, a *arena, useRings bool) *rawServer {
	t.Helper()
	var rf *rings
	var ringFile *os.File
	if useRings {
		var err error
		if rf, err = newRings(); err != nil {
			t.Fatal(err)
		}
		ringFile = rf.file
	}
	p, err := startProcess(bin, nil, childEnv(nil), 16<<10, a.file, ringFile)
	if rf != nil {
		rf.closeFile()
	}
	if err != nil {
		t.Fatal(err)
	}
	r := &rawServer{p: p, in: &frameReader{f: p.stdout()}, out: p.stdin(), rings: rf, arena: a}
	if rf != nil {
		rr, w, err := ringStreams(rf, p, defaultSpin)
		if err != nil {
			t.Fatal(err)
		}
		r.in.f, r.out = rr, w
	}
	f, err := r.reply()
	if err != nil || f.Opcode != OpHello {
		t.Fatalf("the server's first frame: %+v, %v\n%s", f, err, p.stderrTail())
	}
	return r
}

// reply reads one frame, killing the server if none comes in time.
func (r *rawServer) reply() (Frame, error) {
	hung := time.AfterFunc(rawReplyTimeout, r.p.kill)
	f, err := r.in.next()
	if !hung.Stop() {
		return f, fmt.Errorf("no answer within %v: the server hung", rawReplyTimeout)
	}
	return f, err
}

// end closes the server's stdin and returns how it ended.
func (r *rawServer) end() (exit string) {
	r.p.in.Close()
	defer r.release()
	if !r.p.wait(rawReplyTimeout) {
		r.p.kill()
		r.p.wait(waitDelay + time.Second)
		return "hung at the end of its input"
	}
	exit, _ = r.p.diagnose()
	return exit
}

// release closes the pipes and unmaps the rings of a server that has exited.
func (r *rawServer) release() {
	r.p.release()
	if r.rings != nil {
		r.rings.unmap()
	}
}

// peakRSS is the server's peak resident memory in bytes (VmHWM).
func peakRSS(pid int) (uint64, error) {
	return procStatusBytes(pid, "VmHWM:")
}

// procStatusBytes reads a "kB" line of /proc/pid/status (pid 0: this process).
func procStatusBytes(pid int, key string) (uint64, error) {
	path := "/proc/self/status"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("%s has no %s line", path, key)
}

// The kinds of corpus entry, by what the server must do with them.
const (
	frameAnswered  = iota // a body of 8 bytes or more: one answer with its id and opcode
	frameShortBody        // a body shorter than the header: MALFORMED with id 0
	frameOverCap          // a length prefix over the cap: MALFORMED with id 0, then exit 3
	frameTruncated        // input ends inside the frame: exit 2
)

// fuzzFrame is one corpus entry.
type fuzzFrame struct {
	kind  int
	bytes []byte // what is written, length prefix included
	id    uint32
	op    Opcode
}

// maxFuzzAlloc bounds the ALLOCs the corpus makes, so that a mutated RUN
// that happens to be valid stays a small kernel; larger sizes are sent only
// where they exceed the machine (OUT_OF_MEMORY).
const maxFuzzAlloc = 64 << 10

// corpus generates frames from a seed.
type corpus struct {
	rng     *rand.Rand
	id      uint32
	handles []uint64 // handles the current server gave out
}

func (g *corpus) u64() uint64 {
	switch g.rng.IntN(8) {
	case 0:
		return 0
	case 1:
		return 1 << (g.rng.IntN(64))
	case 2:
		return ^uint64(0) >> g.rng.IntN(64)
	case 3:
		if len(g.handles) > 0 {
			return g.handles[g.rng.IntN(len(g.handles))]
		}
	case 4:
		return uint64(g.rng.IntN(64))
	}
	return g.rng.Uint64()
}

func (g *corpus) handle() uint64 {
	if len(g.handles) > 0 && g.rng.IntN(4) != 0 {
		return g.handles[g.rng.IntN(len(g.handles))]
	}
	return g.u64()
}

func (g *corpus) randomBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.rng.Uint32())
	}
	return b
}

// run is a RUN payload with plausible or random fields.
func (g *corpus) run() []byte {
	op := uint32(g.rng.IntN(8)) // 1..6 are ops; 0 and 7 are not
	params, buffers := g.rng.IntN(5), g.rng.IntN(5)
	if g.rng.IntN(8) == 0 {
		params, buffers = int(g.rng.Uint32()), int(g.rng.Uint32())
	}
	b := binary.LittleEndian.AppendUint32(nil, op)
	b = binary.LittleEndian.AppendUint32(b, uint32(params))
	b = binary.LittleEndian.AppendUint32(b, uint32(buffers))
	b = binary.LittleEndian.AppendUint32(b, 0)
	for i := 0; i < params && i < 8; i++ {
		b = binary.LittleEndian.AppendUint64(b, uint64(g.rng.IntN(70))-4)
	}
	for i := 0; i < buffers && i < 8; i++ {
		b = binary.LittleEndian.AppendUint64(b, g.handle())
	}
	return b
}

// payload is a payload for op, valid or nearly so.
func (g *corpus) payload(op Opcode) []byte {
	u64s := func(vs ...uint64) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint64(b, v)
		}
		return b
	}
	switch op {
	case OpAlloc:
		if g.rng.IntN(16) == 0 {
			return u64s(g.u64())
		}
		return u64s(uint64(g.rng.IntN(maxFuzzAlloc)))
	case OpFree:
		return u64s(g.handle())
	case OpWrite, OpRead:
		return u64s(g.handle(), uint64(g.rng.IntN(128)), uint64(g.rng.IntN(2<<20)), uint64(g.rng.IntN(4096)))
	case OpRun:
		return g.run()
	case OpRunBatch:
		n := g.rng.IntN(6)
		b := binary.LittleEndian.AppendUint32(nil, uint32(n))
		if g.rng.IntN(8) == 0 {
			b = binary.LittleEndian.AppendUint32(nil, g.rng.Uint32())
		}
		b = binary.LittleEndian.AppendUint32(b, 0)
		for range n {
			b = append(b, g.run()...)
		}
		return b
	case OpTextWrite:
		b := u64s(g.handle(), uint64(g.rng.IntN(64)))
		for range g.rng.IntN(40) {
			b = strconv.AppendUint(b, uint64(g.rng.IntN(70000)), 10)
			b = append(b, " \n\tx-+"[g.rng.IntN(6)])
		}
		return b
	case OpTextRead:
		return u64s(g.handle(), uint64(g.rng.IntN(64)), g.u64()%(1<<20))
	}
	return nil
}

// mutate damages p a little.
func (g *corpus) mutate(p []byte) []byte {
	switch g.rng.IntN(5) {
	case 0: // flip bytes
		for range 1 + g.rng.IntN(4) {
			if len(p) > 0 {
				p[g.rng.IntN(len(p))] ^= byte(1 + g.rng.IntN(255))
			}
		}
	case 1: // truncate
		if len(p) > 0 {
			p = p[:g.rng.IntN(len(p))]
		}
	case 2: // extend
		p = append(p, g.randomBytes(1+g.rng.IntN(16))...)
	case 3: // an extreme u64 somewhere
		if len(p) >= 8 {
			at := g.rng.IntN(len(p)/8) * 8
			binary.LittleEndian.PutUint64(p[at:], g.u64())
		}
	}
	return p
}

// clampAlloc keeps a well-formed ALLOC below maxFuzzAlloc unless it asks
// for more than any machine has.
func clampAlloc(op Opcode, status uint16, p []byte) {
	if op != OpAlloc || status != 0 || len(p) != 8 {
		return
	}
	if n := binary.LittleEndian.Uint64(p); n > maxFuzzAlloc && n < 1<<50 {
		binary.LittleEndian.PutUint64(p, n%maxFuzzAlloc)
	}
}

// next generates the next corpus entry.
func (g *corpus) next() fuzzFrame {
	g.id++
	if g.id == 0 {
		g.id = 1
	}
	roll := g.rng.IntN(1000)
	switch {
	case roll < 4:
		n := uint32(MaxFrameBytes + 1 + g.rng.IntN(1<<30))
		return fuzzFrame{kind: frameOverCap, bytes: append(binary.LittleEndian.AppendUint32(nil, n), g.randomBytes(g.rng.IntN(64))...)}
	case roll < 8:
		body := append(appendHeader(nil, 0, g.id, Opcode(g.rng.IntN(int(OpMemory)+1)), 0)[4:], g.randomBytes(g.rng.IntN(64))...)
		full := binary.LittleEndian.AppendUint32(nil, uint32(len(body)+1+g.rng.IntN(1000)))
		return fuzzFrame{kind: frameTruncated, bytes: append(full, body[:g.rng.IntN(len(body)+1)]...)}
	case roll < 60:
		body := g.randomBytes(g.rng.IntN(HeaderBytes))
		return fuzzFrame{kind: frameShortBody, bytes: append(binary.LittleEndian.AppendUint32(nil, uint32(len(body))), body...)}
	}
	op := Opcode(2 + g.rng.IntN(int(OpMemory)-1)) // PING to MEMORY
	status := uint16(0)
	var p []byte
	switch {
	case roll < 300: // random payload, random opcode
		op = Opcode(g.rng.IntN(16))
		if g.rng.IntN(4) == 0 {
			op = Opcode(g.rng.Uint32())
		}
		if g.rng.IntN(10) == 0 {
			status = uint16(g.rng.Uint32())
		}
		n := g.rng.IntN(64)
		if g.rng.IntN(50) == 0 {
			n = g.rng.IntN(MaxFrameBytes - HeaderBytes)
		}
		p = g.randomBytes(n)
	case roll < 700: // a mutated request
		p = g.mutate(g.payload(op))
	default: // a well-formed request
		p = g.payload(op)
	}
	clampAlloc(op, status, p)
	if op == OpShutdown && status == 0 && len(p) == 0 && g.rng.IntN(20) != 0 {
		// A well-formed SHUTDOWN ends the server; keep them rare, so that
		// the corpus is spent on frames rather than on starts.
		p = append(p, 0)
	}
	return fuzzFrame{kind: frameAnswered, id: g.id, op: op,
		bytes: append(appendHeader(nil, len(p), g.id, op, Status(status)), p...)}
}

// checkAnswer checks the server's answer to an answered frame and reports
// whether the server should now exit (an OK SHUTDOWN).
func checkAnswer(ff fuzzFrame, f Frame, g *corpus) (exits bool, err error) {
	switch {
	case f.ID != ff.id || f.Opcode != ff.op:
		return false, fmt.Errorf("answer has id %d opcode %d, want %d and %d", f.ID, f.Opcode, ff.id, ff.op)
	case f.Status > StatusNotSupported:
		return false, fmt.Errorf("answer has unknown status %d", f.Status)
	case f.Status == StatusDeviceError:
		return false, fmt.Errorf("the cpu server answered DEVICE_ERROR: %s", f.Payload)
	case f.Status != StatusOK:
		msg := f.Payload
		if ff.op == OpRunBatch {
			entry, m, err := DecodeRunBatchError(f.Payload)
			if err != nil {
				return false, err
			}
			_ = entry
			msg = []byte(m)
		}
		if len(msg) == 0 {
			return false, fmt.Errorf("%v answer carries no message", f.Status)
		}
		return false, nil
	}
	// An OK answer must decode as its opcode's answer.
	switch ff.op {
	case OpAlloc:
		h, err := DecodeAllocResponse(f.Payload)
		if err != nil {
			return false, err
		}
		if len(g.handles) < 64 {
			g.handles = append(g.handles, h)
		}
	case OpRun:
		_, err = DecodeRunResponse(f.Payload)
	case OpRunBatch:
		if len(f.Payload)%8 != 0 {
			err = fmt.Errorf("RUN_BATCH answer of %d bytes", len(f.Payload))
		}
	case OpTextRead:
	case OpCommInfo:
		_, err = DecodeCommInfoResponse(f.Payload)
	case OpCommUniqueID:
		_, err = DecodeCommUniqueIDResponse(f.Payload)
	case OpCommInit:
		_, err = DecodeCommInitResponse(f.Payload)
	case OpMemory:
		var m Memory
		if m, err = DecodeMemoryResponse(f.Payload); err == nil && (m.Free > m.Total || m.Total == 0) {
			err = fmt.Errorf("MEMORY answer says %d bytes free of %d", m.Free, m.Total)
		}
	default:
		err = DecodeEmpty(ff.op, f.Payload)
	}
	return ff.op == OpShutdown, err
}

// fuzzServer sends n corpus frames through the real server and checks
// every answer and every ending.
func fuzzServer(t *testing.T, bin string, seed uint64, n int, useRings bool) {
	a, err := newArena(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	g := &corpus{rng: rand.New(rand.NewPCG(seed, seed^0x5eed))}
	var r *rawServer
	starts := 0
	restart := func() {
		if r != nil {
			if exit := r.end(); exit != "exit status 0" {
				t.Fatalf("the server ended its input with %s\n%s", exit, r.p.stderrTail())
			}
		}
		r = startRaw(t, bin, a, useRings)
		g.handles = g.handles[:0]
		starts++
	}
	restart()
	var peak uint64
	kinds := map[int]int{}
	began := time.Now()
	for i := range n {
		ff := g.next()
		kinds[ff.kind]++
		if i%5000 == 4999 { // bound the buffers the corpus piles up
			if hwm, err := peakRSS(r.p.pid()); err == nil {
				peak = max(peak, hwm)
			}
			restart()
		}
		if _, err := r.out.Write(ff.bytes); err != nil {
			t.Fatalf("frame %d (% x...): writing it: %v\n%s", i, head(ff.bytes), err, r.p.stderrTail())
		}
		switch ff.kind {
		case frameAnswered, frameShortBody:
			f, err := r.reply()
			if err != nil {
				t.Fatalf("frame %d (% x...): %v\n%s", i, head(ff.bytes), err, r.p.stderrTail())
			}
			if ff.kind == frameShortBody {
				if f.ID != 0 || f.Opcode != 0 || f.Status != StatusMalformed || len(f.Payload) == 0 {
					t.Fatalf("frame %d (a %d-byte body): answer %+v, want MALFORMED with id 0", i, len(ff.bytes)-4, f)
				}
				continue
			}
			exits, err := checkAnswer(ff, f, g)
			if err != nil {
				t.Fatalf("frame %d (% x...): %v", i, head(ff.bytes), err)
			}
			if exits {
				if !r.p.wait(rawReplyTimeout) {
					t.Fatalf("frame %d: SHUTDOWN answered OK but the server did not exit", i)
				}
				r.release()
				if exit, _ := r.p.diagnose(); exit != "exit status 0" {
					t.Fatalf("frame %d: after SHUTDOWN the server ended with %s", i, exit)
				}
				r = nil
				restart()
			}
		case frameOverCap:
			f, err := r.reply()
			if err != nil || f.ID != 0 || f.Status != StatusMalformed || !bytes.Contains(f.Payload, []byte("exceeds maxFrameBytes")) {
				t.Fatalf("frame %d (prefix % x): answer %+v, %v; want MALFORMED naming the cap", i, ff.bytes[:4], f, err)
			}
			checkEnd(t, r, i, "exit status 3", "exceeds maxFrameBytes")
			r = nil
			restart()
		case frameTruncated:
			checkEnd(t, r, i, "exit status 2", "input ended inside")
			r = nil
			restart()
		}
	}
	if hwm, err := peakRSS(r.p.pid()); err == nil {
		peak = max(peak, hwm)
	}
	restart()
	r.end()
	transport := map[bool]string{false: "pipes", true: "rings"}[useRings]
	t.Logf("%d frames (%d answered, %d short, %d over the cap, %d truncated) on the %s through %d servers in %v; peak server RSS %d MiB; seed %d",
		n, kinds[frameAnswered], kinds[frameShortBody], kinds[frameOverCap], kinds[frameTruncated], transport, starts, time.Since(began).Round(time.Millisecond), peak>>20, seed)
	// The server's own footprint is a few MiB; the corpus's buffers stay
	// under 5000/frame × 64 KiB; a 1 GiB frame allocated would show.
	if peak > 256<<20 {
		t.Errorf("the server's peak RSS was %d MiB", peak>>20)
	}
}

// checkEnd checks that the server ends by itself with exit and says why.
func checkEnd(t *testing.T, r *rawServer, i int, exit, says string) {
	t.Helper()
	got := r.end()
	if got != exit || !strings.Contains(r.p.stderrTail(), says) {
		t.Fatalf("frame %d: the server ended with %s, stderr %q; want %s saying %q", i, got, r.p.stderrTail(), exit, says)
	}
}

func head(b []byte) []byte { return b[:min(len(b), 24)] }

func TestRealServerSurvivesMalformedFrames(t *testing.T) {
	t.Parallel()
	bin := buildRealServer(t)
	n := 100_000
	if longRun() {
		n = 1_000_000
	}
	for _, transport := range []string{"pipes", "rings"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			fuzzServer(t, bin, fuzzSeed(t), n, transport == "rings")
		})
	}
}

// FuzzServerFrame sends one frame body, as the fuzzer makes it, through a
// real server shared by the whole run (restarted when a frame ends it).
// Under plain go test it runs the seeds.
func FuzzServerFrame(f *testing.F) {
	bin := buildRealServer(f)
	g := &corpus{rng: rand.New(rand.NewPCG(1, 2))}
	for op := range OpMemory + 2 { // every opcode, and 0 and OpMemory+1, which are unknown
		p := g.payload(op)
		f.Add(append(appendHeader(nil, len(p), 7, op, 0)[4:], p...))
	}
	f.Add([]byte{1, 2, 3})
	var mu sync.Mutex
	var r *rawServer
	var a *arena
	f.Cleanup(func() {
		if r != nil {
			r.end()
		}
		if a != nil {
			a.close()
		}
	})
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > MaxFrameBytes {
			t.Skip()
		}
		mu.Lock()
		defer mu.Unlock()
		if a == nil {
			var err error
			if a, err = newArena(1 << 20); err != nil {
				t.Fatal(err)
			}
		}
		if r == nil {
			r = startRaw(t, bin, a, true)
		}
		ff := fuzzFrame{kind: frameAnswered}
		if len(body) < HeaderBytes {
			ff.kind = frameShortBody
		} else {
			ff.id = binary.LittleEndian.Uint32(body)
			ff.op = Opcode(binary.LittleEndian.Uint16(body[4:]))
			clampAlloc(ff.op, binary.LittleEndian.Uint16(body[6:]), body[HeaderBytes:])
		}
		if _, err := r.out.Write(append(binary.LittleEndian.AppendUint32(nil, uint32(len(body))), body...)); err != nil {
			t.Fatalf("writing the frame: %v\n%s", err, r.p.stderrTail())
		}
		got, err := r.reply()
		if err != nil {
			t.Fatalf("%v\n%s", err, r.p.stderrTail())
		}
		if ff.kind == frameShortBody {
			if got.ID != 0 || got.Status != StatusMalformed {
				t.Fatalf("answer %+v to a %d-byte body, want MALFORMED with id 0", got, len(body))
			}
			return
		}
		exits, err := checkAnswer(ff, got, &corpus{})
		if err != nil {
			t.Fatal(err)
		}
		if exits {
			r.end()
			r = nil
		}
	})
}
