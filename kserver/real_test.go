package kserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vkern/vkern/cache"
	"github.com/vkern/vkern/kernels"
)

// These tests run the real C++ cpu server, built from ../kernels with g++
// into a temporary folder, and kill it for real. They skip without g++ or
// without the sources, and in -short mode (the build takes seconds).

const realSourceSHA = "kserver-real-test"

// The real server is built once per test binary, into realDir, which
// TestMain removes.
var (
	realOnce sync.Once
	realDir  string
	realBin  string
	realErr  error
	realSkip string
)

// buildRealServer compiles the cpu server and returns the binary's path.
func buildRealServer(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("building the C++ server takes seconds; skipped in -short mode")
	}
	realOnce.Do(func() {
		cxx, err := exec.LookPath("g++")
		if err != nil {
			realSkip = "no g++ to build the C++ server with"
			return
		}
		if realDir, realErr = os.MkdirTemp("", "kserver-real-"); realErr != nil {
			return
		}
		src := filepath.Join(realDir, "src")
		units, err := kernels.Write(src, "cpu")
		if err != nil {
			realErr = err
			return
		}
		// The unit that defines the sources' hash, as the builder writes it.
		if realErr = os.WriteFile(filepath.Join(src, cache.SourceUnit), cache.SourceUnitText(realSourceSHA), 0o644); realErr != nil {
			return
		}
		units = append(units, filepath.Join(src, cache.SourceUnit))
		bin := filepath.Join(realDir, "server")
		// -O1: the tests exercise the process, not the kernels' speed. g++
		// compiles each unit on its own and links them, as the builder does.
		args := []string{"-std=c++17", "-O1", "-pthread", "-I" + src, "-o", bin}
		cmd := exec.Command(cxx, append(args, units...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			realErr = fmt.Errorf("%v: %v\n%s", cmd, err, out)
			return
		}
		realBin = bin
	})
	if realSkip != "" {
		t.Skip(realSkip)
	}
	if realErr != nil {
		t.Fatal(realErr)
	}
	return realBin
}

func realConfig(bin string) Config {
	return Config{Path: bin, CallTimeout: 10 * time.Second, StartTimeout: 10 * time.Second,
		CloseTimeout: 2 * time.Second, ExpectSourceSHA256: realSourceSHA}
}

// f16 bit patterns of small integers, exact in binary16.
const (
	f16One = 0x3C00
	f16Two = 0x4000
)

func f16s(n int, bits uint16) []byte {
	b := make([]byte, 0, 2*n)
	for range n {
		b = binary.LittleEndian.AppendUint16(b, bits)
	}
	return b
}

func TestRealServer(t *testing.T) {
	t.Parallel()
	bin := buildRealServer(t)

	t.Run("answers every call", func(t *testing.T) {
		c := New(realConfig(bin))
		defer func() {
			if err := c.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}()
		ctx := context.Background()
		h, err := c.Hello(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if h.Version != ProtocolVersion || h.Backend() != "cpu" || h.SourceSHA256() != realSourceSHA {
			t.Errorf("Hello = %+v", h)
		}
		// kernels/cpu/gemm.cc sums in depth blocks of kDepthBlock = 256.
		if got := h.Fields["dot_accumulation"]; got != "rn-blocked:256" {
			t.Errorf("HELLO's dot_accumulation = %q, want rn-blocked:256", got)
		}
		if pid, err := h.Uint("pid"); err != nil || int(pid) != c.lastProcess().pid() {
			t.Errorf("HELLO's pid = %v, %v; want the server's, %d", pid, err, c.lastProcess().pid())
		}
		if err := c.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		// C (f32, M×N) = A (f16 M×K, all 1) · B (f16 K×N, all 2) = 2K everywhere.
		const m, n, k = 3, 5, 7
		a, err := c.Alloc(ctx, 2*m*k)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := c.Alloc(ctx, 2*k*n)
		out, err := c.Alloc(ctx, 4*m*n)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Write(ctx, a, 0, f16s(m*k, f16One)); err != nil {
			t.Fatal(err)
		}
		if err := c.Write(ctx, b, 0, f16s(k*n, f16Two)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Run(ctx, 1, []int64{m, n, k}, []Handle{a, b, out}); err != nil {
			t.Fatal(err)
		}
		if err := c.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 4*m*n)
		if err := c.Read(ctx, out, 0, got); err != nil {
			t.Fatal(err)
		}
		for i := range m * n {
			if v := math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:])); v != 2*k {
				t.Fatalf("C[%d] = %v, want %d", i, v, 2*k)
			}
		}
		// A wrong shape is an INVALID_ARGUMENT, and the server serves on.
		_, err = c.Run(ctx, 1, []int64{m, n, k + 1}, []Handle{a, b, out})
		var se *ServerError
		if !errors.As(err, &se) || se.StatusName != "INVALID_ARGUMENT" || errors.Is(err, ErrServerDied) {
			t.Errorf("gemm with K too large = %v, want INVALID_ARGUMENT", err)
		}
		// A transfer of several pieces.
		big := make([]byte, 3*c.pieceBytes()+4096)
		for i := range big {
			big[i] = byte(i * 13)
		}
		hb, err := c.Alloc(ctx, uint64(len(big)))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Write(ctx, hb, 0, big); err != nil {
			t.Fatal(err)
		}
		back := make([]byte, len(big))
		if err := c.Read(ctx, hb, 0, back); err != nil || !bytes.Equal(back, big) {
			t.Errorf("a four-piece round trip: equal = %v, %v", bytes.Equal(back, big), err)
		}
		if err := c.Free(ctx, hb); err != nil {
			t.Fatal(err)
		}
		if err := c.Free(ctx, hb); !errors.As(err, &se) || se.StatusName != "BAD_HANDLE" {
			t.Errorf("a second Free = %v, want BAD_HANDLE", err)
		}
	})

	t.Run("kill -9 between calls", func(t *testing.T) {
		c := New(realConfig(bin))
		defer c.Close()
		ctx := context.Background()
		h, err := c.Alloc(ctx, 16)
		if err != nil {
			t.Fatal(err)
		}
		pid := c.liveConn().p.pid()
		syscall.Kill(pid, syscall.SIGKILL)
		c.lastProcess().wait(5 * time.Second)
		err = c.Write(ctx, h, 0, make([]byte, 16))
		checkErr(t, err, []error{ErrServerDied}, "signal: killed")
		if err := c.Write(ctx, h, 0, make([]byte, 16)); !errors.Is(err, ErrStaleHandle) {
			t.Errorf("the handle after the restart: %v, want ErrStaleHandle", err)
		}
		if err := c.Ping(ctx); err != nil {
			t.Errorf("the next call: %v", err)
		}
		checkGone(t, pid)
	})

	// Stopped, the server cannot answer, so the call is surely in flight when
	// the SIGKILL comes: a Read waits for its reply, a large Write is blocked
	// on the full pipe.
	for _, call := range []string{"Read", "Write"} {
		t.Run("kill -9 during a "+call, func(t *testing.T) {
			c := New(realConfig(bin))
			defer c.Close()
			ctx := context.Background()
			const size = 8 << 20
			h, err := c.Alloc(ctx, size)
			if err != nil {
				t.Fatal(err)
			}
			pid := c.liveConn().p.pid()
			syscall.Kill(pid, syscall.SIGSTOP)
			done := make(chan error)
			go func() {
				if call == "Read" {
					done <- c.Read(ctx, h, 0, make([]byte, size))
				} else {
					done <- c.Write(ctx, h, 0, make([]byte, size))
				}
			}()
			time.Sleep(100 * time.Millisecond)
			syscall.Kill(pid, syscall.SIGKILL)
			select {
			case err := <-done:
				checkErr(t, err, []error{ErrServerDied}, "signal: killed", "died")
			case <-time.After(5 * time.Second):
				t.Fatal("the call did not return after its server was killed")
			}
			if err := c.Ping(ctx); err != nil {
				t.Errorf("the next call: %v", err)
			}
			checkGone(t, pid)
		})
	}

	for _, call := range []struct {
		name string
		do   func(context.Context, *Client) error
	}{
		{"Ping", func(ctx context.Context, c *Client) error { return c.Ping(ctx) }},
		{"Memory", func(ctx context.Context, c *Client) error { _, err := c.Memory(ctx); return err }},
	} {
		t.Run("SIGSTOP past a deadline of a "+call.name, func(t *testing.T) {
			c := New(realConfig(bin))
			defer c.Close()
			if err := c.Ping(context.Background()); err != nil {
				t.Fatal(err)
			}
			pid := c.liveConn().p.pid()
			syscall.Kill(pid, syscall.SIGSTOP)
			began := time.Now()
			err := call.do(withTimeout(t, 200*time.Millisecond), c)
			checkErr(t, err, []error{ErrServerDied, context.DeadlineExceeded}, "killed by the host", "signal: killed")
			if took := time.Since(began); took > 3*time.Second {
				t.Errorf("the call took %v", took)
			}
			checkGone(t, pid)
			if err := call.do(context.Background(), c); err != nil {
				t.Errorf("the next call: %v", err)
			}
		})
	}

	t.Run("refuses to run without the cookie", func(t *testing.T) {
		cmd := exec.Command(bin)
		cmd.Env = []string{}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != ExitNoCookie || !strings.Contains(string(out), "not run by hand") {
			t.Errorf("without the cookie: %v, %q; want exit status 64 and an explanation", err, out)
		}
	})

	t.Run("refuses a RUN with an unknown flag and serves on", func(t *testing.T) {
		p, in := startRawServer(t, bin)
		run := AppendRunPayload(nil, RunPayload{OpID: 4, Params: []int64{1, 1}, Buffers: []uint64{1, 2}, Flags: 4})
		var w bytes.Buffer
		if err := WriteFrame(&w, Frame{ID: 7, Opcode: OpRun, Payload: run}); err != nil {
			t.Fatal(err)
		}
		if err := WriteFrame(&w, Frame{ID: 8, Opcode: OpPing}); err != nil {
			t.Fatal(err)
		}
		p.stdin().Write(w.Bytes())
		f, err := in.next()
		if err != nil || f.ID != 7 || f.Status != StatusMalformed || !strings.Contains(ErrorMessage(f.Payload), "RUN flags are 4; only bits 0") {
			t.Errorf("answer to RUN flags 4: %+v (%q), %v; want MALFORMED naming the flags", f, ErrorMessage(f.Payload), err)
		}
		if f, err := in.next(); err != nil || f.ID != 8 || f.Status != StatusOK {
			t.Errorf("the PING after it: %+v, %v", f, err)
		}
	})

	t.Run("ends on a length prefix over the cap", func(t *testing.T) {
		p, in := startRawServer(t, bin)
		p.stdin().Write(binary.LittleEndian.AppendUint32(nil, MaxFrameBytes+1))
		f, err := in.next()
		if err != nil || f.ID != 0 || f.Status != StatusMalformed {
			t.Errorf("answer to an over-cap prefix: %+v, %v; want MALFORMED with id 0", f, err)
		}
		if !p.wait(5 * time.Second) {
			t.Fatal("the server did not exit")
		}
		if exit, _ := p.diagnose(); exit != "exit status 3" {
			t.Errorf("it ended with %s, want exit status 3", exit)
		}
	})
}

// startRawServer starts the real server at bin with a 1 MiB arena, outside any
// Client, reads its HELLO and returns the process and a reader of its
// frames; the server is killed and the arena closed when the test ends.
func startRawServer(t *testing.T, bin string) (*execProcess, *frameReader) {
	t.Helper()
	a, err := newArena(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.close() })
	p, err := startProcess(bin, nil, childEnv(nil), 4<<10, a.file, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.kill()
		p.release()
	})
	in := &frameReader{f: p.stdout()}
	if f, err := in.next(); err != nil || f.Opcode != OpHello {
		t.Fatalf("first frame: %+v, %v", f, err)
	}
	return p, in
}

// realClient returns a Client of the real server that is closed (and must
// close cleanly) when the test ends.
func realClient(t *testing.T, bin string, edit func(*Config)) *Client {
	t.Helper()
	cfg := realConfig(bin)
	if edit != nil {
		edit(&cfg)
	}
	c := New(cfg)
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// softmaxRun is a softmax of R×C on x into y.
func softmaxRun(r, cols int64, x, y Handle) RunRequest {
	return RunRequest{OpID: 4, Params: []int64{r, cols}, Buffers: []Handle{x, y}}
}

func TestRealServerRunsBatches(t *testing.T) {
	t.Parallel()
	c := realClient(t, buildRealServer(t), nil)
	ctx := withTimeout(t, 30*time.Second)
	const rows, cols = 2, 4
	x, err := c.Alloc(ctx, 2*rows*cols)
	if err != nil {
		t.Fatal(err)
	}
	y, _ := c.Alloc(ctx, 2*rows*cols)
	z, _ := c.Alloc(ctx, 2*rows*cols)
	// softmax of a row of equal values is 1/cols everywhere: 0.25 is 0x3400.
	if err := c.Write(ctx, x, 0, f16s(rows*cols, f16One)); err != nil {
		t.Fatal(err)
	}
	poison := f16s(rows*cols, 0x7E00)
	check := func(h Handle, want uint16, what string) {
		t.Helper()
		got := make([]byte, 2*rows*cols)
		if err := c.Read(ctx, h, 0, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, f16s(rows*cols, want)) {
			t.Errorf("%s: % x, want every element %#04x", what, got, want)
		}
	}

	t.Run("runs every entry in order", func(t *testing.T) {
		c.Write(ctx, y, 0, poison)
		c.Write(ctx, z, 0, poison)
		// y = softmax(x), then z = softmax(y): the second sees the first's output.
		times, err := c.RunBatch(ctx, []RunRequest{softmaxRun(rows, cols, x, y), softmaxRun(rows, cols, y, z)})
		if err != nil || len(times) != 2 {
			t.Fatalf("RunBatch = %v, %v", times, err)
		}
		check(y, 0x3400, "y")
		check(z, 0x3400, "z") // softmax of equal values again
	})

	t.Run("untimed runs and batches compute the same and report no time", func(t *testing.T) {
		c.Write(ctx, y, 0, poison)
		if err := c.RunUntimed(ctx, 4, []int64{rows, cols}, []Handle{x, y}); err != nil {
			t.Fatalf("RunUntimed: %v", err)
		}
		check(y, 0x3400, "y after RunUntimed")
		c.Write(ctx, y, 0, poison)
		c.Write(ctx, z, 0, poison)
		first, second := softmaxRun(rows, cols, x, y), softmaxRun(rows, cols, y, z)
		first.Untimed, second.Untimed = true, true
		times, err := c.RunBatch(ctx, []RunRequest{first, second})
		if err != nil || len(times) != 2 || times[0] != 0 || times[1] != 0 {
			t.Fatalf("an untimed RunBatch = %v, %v; want two zero times", times, err)
		}
		check(y, 0x3400, "y after an untimed batch")
		check(z, 0x3400, "z after an untimed batch")
	})

	t.Run("a bad entry is named, and nothing runs", func(t *testing.T) {
		c.Write(ctx, y, 0, poison)
		runs := []RunRequest{softmaxRun(rows, cols, x, y), softmaxRun(rows, cols, x, y), softmaxRun(rows, cols, x, y),
			softmaxRun(0, cols, x, y), softmaxRun(rows, cols, x, y)}
		_, err := c.RunBatch(ctx, runs)
		var be *BatchError
		var se *ServerError
		if !errors.As(err, &be) || be.Index != 3 || be.Count != 5 || be.OpID != 4 || !errors.As(err, &se) || se.StatusName != "INVALID_ARGUMENT" {
			t.Fatalf("RunBatch with entry 3 bad = %v, want a *BatchError for entry 3 wrapping INVALID_ARGUMENT", err)
		}
		if !strings.Contains(err.Error(), "RUN_BATCH entry 3 of 5 (op id 4)") || !strings.Contains(err.Error(), "softmax: R = 0, want >= 1") {
			t.Errorf("the error reads %q", err)
		}
		check(y, 0x7E00, "y after a refused batch")
		_, err = c.RunBatch(ctx, []RunRequest{softmaxRun(rows, cols, x, y), softmaxRun(rows, cols, y, y)})
		if !errors.As(err, &be) || be.Index != 1 || !strings.Contains(err.Error(), "outputs must not alias") {
			t.Errorf("an aliased output in entry 1 = %v", err)
		}
	})

	t.Run("a zero handle stands only for an empty operand", func(t *testing.T) {
		_, err := c.RunBatch(ctx, []RunRequest{softmaxRun(rows, cols, x, y), softmaxRun(rows, cols, x, Handle{})})
		var be *BatchError
		var se *ServerError
		if !errors.As(err, &be) || be.Index != 1 || !errors.As(err, &se) || se.StatusName != "INVALID_ARGUMENT" ||
			!strings.Contains(err.Error(), "Y (handle 0) has 0 bytes") {
			t.Errorf("a zero handle for entry 1's output = %v, want a *BatchError for entry 1 wrapping INVALID_ARGUMENT that names Y", err)
		}
	})

	t.Run("a batch too large for a frame is refused before sending", func(t *testing.T) {
		runs := make([]RunRequest, MaxFrameBytes/32)
		for i := range runs {
			runs[i] = softmaxRun(rows, cols, x, y)
		}
		if _, err := c.RunBatch(ctx, runs); err == nil || !strings.Contains(err.Error(), "over the frame cap") {
			t.Errorf("a batch of %d runs = %v", len(runs), err)
		}
		if times, err := c.RunBatch(ctx, nil); err != nil || len(times) != 0 {
			t.Errorf("an empty batch = %v, %v", times, err)
		}
	})
	if err := c.Ping(ctx); err != nil {
		t.Errorf("the server after the batches: %v", err)
	}
}

func TestRealServerOutOfMemoryKeepsServing(t *testing.T) {
	t.Parallel()
	c := realClient(t, buildRealServer(t), func(cfg *Config) { cfg.ArenaBytes = 1 << 20 })
	ctx := withTimeout(t, 30*time.Second)
	keep, err := c.Alloc(ctx, 64)
	if err != nil {
		t.Fatal(err)
	}
	pid := c.liveConn().p.pid()

	t.Run("an allocation past the machine's memory", func(t *testing.T) {
		_, err := c.Alloc(ctx, 2*physicalMemory())
		var se *ServerError
		if !errors.Is(err, ErrOutOfMemory) || !errors.As(err, &se) || se.StatusName != "OUT_OF_MEMORY" ||
			!strings.Contains(err.Error(), "machine's") || errors.Is(err, ErrServerDied) {
			t.Errorf("Alloc(2 × memory) = %v, want OUT_OF_MEMORY naming the machine's memory", err)
		}
	})

	t.Run("a transfer larger than the arena moves in pieces", func(t *testing.T) {
		big := make([]byte, 5<<20) // five times ArenaBytes
		for i := range big {
			big[i] = byte(i % 251)
		}
		h, err := c.Alloc(ctx, uint64(len(big)))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Write(ctx, h, 0, big); err != nil {
			t.Fatal(err)
		}
		back := make([]byte, len(big))
		if err := c.Read(ctx, h, 0, back); err != nil || !bytes.Equal(back, big) {
			t.Errorf("round trip through a small arena: equal = %v, %v", bytes.Equal(back, big), err)
		}
		c.Free(ctx, h)
	})

	t.Run("an arena that cannot grow", func(t *testing.T) {
		c2 := realClient(t, buildRealServer(t), func(cfg *Config) { cfg.ArenaBytes = 64 << 20 })
		h, err := c2.Alloc(ctx, 32<<20)
		if err != nil {
			t.Fatal(err)
		}
		// The machine refuses more shared memory: fallocate fails as it
		// does when memory (or the memfd's limit) runs out.
		c2.arena.mu.Lock()
		c2.arena.grow = func(int, uint32, int64, int64) error { return syscall.ENOSPC }
		c2.arena.mu.Unlock()
		err = c2.Write(ctx, h, 0, make([]byte, 32<<20))
		if !errors.Is(err, ErrOutOfMemory) || !strings.Contains(err.Error(), "growing the shared-memory arena") || errors.Is(err, ErrServerDied) {
			t.Errorf("a write that needs a larger arena = %v, want ErrOutOfMemory saying the arena could not grow", err)
		}
		if err := c2.Write(ctx, h, 0, make([]byte, 4096)); err != nil {
			t.Errorf("a write that fits the arena as it is: %v", err)
		}
		if used := c2.arena.inUse(); used != 0 {
			t.Errorf("%d arena bytes still reserved", used)
		}
	})

	if err := c.Write(ctx, keep, 0, make([]byte, 64)); err != nil {
		t.Errorf("a buffer from before the refusals: %v", err)
	}
	if now := c.liveConn().p.pid(); now != pid {
		t.Errorf("the server changed from pid %d to %d", pid, now)
	}
}

func TestRealServerAnswersAFastCallBetweenPiecesOfASlowOne(t *testing.T) {
	t.Parallel()
	c := realClient(t, buildRealServer(t), nil)
	ctx := withTimeout(t, 60*time.Second)
	const size = 96 << 20 // 12 pieces
	h, err := c.Alloc(ctx, size)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, size)
	if err := c.Write(ctx, h, 0, data); err != nil { // warm the buffer's pages
		t.Fatal(err)
	}
	writeDone := make(chan error, 1)
	var pingsDuring int
	go func() { writeDone <- c.Write(ctx, h, 0, data) }()
	for {
		if err := c.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-writeDone:
			if err != nil {
				t.Fatal(err)
			}
			if pingsDuring == 0 {
				t.Error("no ping was answered while a 96 MiB write was in flight")
			}
			t.Logf("%d pings answered during the write", pingsDuring)
			return
		default:
			pingsDuring++
		}
	}
}

func TestRealServerTextBaselineRoundTrips(t *testing.T) {
	t.Parallel()
	c := realClient(t, buildRealServer(t), nil)
	ctx := withTimeout(t, 30*time.Second)
	n := 3*textReadValues + 17 // several frames each way
	values := make([]uint16, n)
	for i := range values {
		values[i] = uint16(i * 40503)
	}
	h, err := c.Alloc(ctx, uint64(2*n+2))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.TextWrite(ctx, h, 2, values); err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 2*n)
	if err := c.Read(ctx, h, 2, raw); err != nil {
		t.Fatal(err)
	}
	for i, v := range values {
		if got := binary.LittleEndian.Uint16(raw[2*i:]); got != v {
			t.Fatalf("value %d: the text path stored %d, want %d", i, got, v)
		}
	}
	back := make([]uint16, n)
	if err := c.TextRead(ctx, h, 2, back); err != nil {
		t.Fatal(err)
	}
	if !slicesEqual(back, values) {
		t.Error("TextRead returned other values")
	}
	var se *ServerError
	if err := c.TextWrite(ctx, h, 4, values); !errors.As(err, &se) || se.StatusName != "OUT_OF_RANGE" {
		t.Errorf("a text write past the end = %v, want OUT_OF_RANGE", err)
	}
}

func slicesEqual(a, b []uint16) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRealServerInIsolatedMode(t *testing.T) {
	t.Parallel()
	c := realClient(t, buildRealServer(t), func(cfg *Config) { cfg.Isolated = true })
	ctx := withTimeout(t, 30*time.Second)
	const m, n, k = 3, 5, 7
	a, err := c.Alloc(ctx, 2*m*k)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := c.Alloc(ctx, 2*k*n)
	out, _ := c.Alloc(ctx, 4*m*n)
	if err := c.Write(ctx, a, 0, f16s(m*k, f16One)); err != nil {
		t.Fatal(err)
	}
	c.Write(ctx, b, 0, f16s(k*n, f16Two))
	pids := map[string]bool{}
	for range 3 {
		if _, err := c.Run(ctx, 1, []int64{m, n, k}, []Handle{a, b, out}); err != nil {
			t.Fatal(err)
		}
		// Each call's server says its pid on its first stderr line.
		pids[strings.SplitN(c.Stderr(), ",", 2)[0]] = true
	}
	if len(pids) != 3 {
		t.Errorf("three runs ran in %d processes (%v), want three", len(pids), pids)
	}
	got := make([]byte, 4*m*n)
	if err := c.Read(ctx, out, 0, got); err != nil {
		t.Fatal(err)
	}
	for i := range m * n {
		if v := math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:])); v != 2*k {
			t.Fatalf("C[%d] = %v, want %d", i, v, 2*k)
		}
	}
	if times, err := c.RunBatch(ctx, []RunRequest{{OpID: 1, Params: []int64{m, n, k}, Buffers: []Handle{a, b, out}}}); err != nil || len(times) != 1 {
		t.Errorf("RunBatch = %v, %v", times, err)
	}
	var se *ServerError
	if _, err := c.Run(ctx, 1, []int64{m, n, k + 1}, []Handle{a, b, out}); !errors.As(err, &se) || se.StatusName != "INVALID_ARGUMENT" {
		t.Errorf("a wrong shape = %v, want INVALID_ARGUMENT from the one-shot server", err)
	}
	if err := c.Write(ctx, a, 2*m*k-1, []byte{1, 2}); !errors.As(err, &se) || se.StatusName != "OUT_OF_RANGE" {
		t.Errorf("a write past the end = %v, want OUT_OF_RANGE", err)
	}
	if err := c.Free(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(ctx, 1, []int64{m, n, k}, []Handle{a, b, out}); !errors.As(err, &se) || se.StatusName != "BAD_HANDLE" {
		t.Errorf("a run on a freed buffer = %v, want BAD_HANDLE", err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Error(err)
	}
	if h, err := c.Hello(ctx); err != nil || h.Backend() != "cpu" {
		t.Errorf("Hello = %+v, %v", h, err)
	}
}

func TestRealServerChecksCrossEntropyParamsAndLabels(t *testing.T) {
	t.Parallel()
	c := realClient(t, buildRealServer(t), nil)
	ctx := withTimeout(t, 30*time.Second)
	const rows, classes, unset = 3, 4, math.MinInt64
	logits, _ := c.Alloc(ctx, 2*rows*classes)
	labels, _ := c.Alloc(ctx, 4*rows)
	loss, _ := c.Alloc(ctx, 4*rows)
	grad, _ := c.Alloc(ctx, 2*rows*classes)
	short, err := c.Alloc(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	c.Write(ctx, logits, 0, f16s(rows*classes, f16One))
	setLabels := func(v ...int32) {
		b := make([]byte, 4*len(v))
		for i, l := range v {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(l))
		}
		if err := c.Write(ctx, labels, 0, b); err != nil {
			t.Fatal(err)
		}
	}
	one := int64(math.Float64bits(1)) // grad_scale, a binary64 on the wire
	run := func(r, v, ignore int64) RunRequest {
		return RunRequest{OpID: 6, Params: []int64{r, v, ignore, one}, Buffers: []Handle{logits, labels, loss, grad}}
	}
	setLabels(0, 3, -100)
	for _, tt := range []struct {
		name string
		run  RunRequest
		want string // "" for a run that must succeed
	}{
		{"ignore_index -100 marks row 2", run(rows, classes, -100), ""},
		{"ignore_index past 32 bits", run(rows, classes, 1<<40), "cross_entropy: ignore_index = 1099511627776, want a 32-bit label value"},
		{"V of 0", run(rows, 0, unset), "cross_entropy: V = 0, want >= 1 (R=3, V=0, ignore_index=unset, grad_scale=1)"},
		{"logits too short for R·V", run(rows+1, classes, unset), "logits (handle 1) has 24 bytes, want R·V·2 = 32"},
		{"labels too short for R", RunRequest{OpID: 6, Params: []int64{rows, classes, unset, one}, Buffers: []Handle{logits, short, loss, grad}},
			"labels (handle 5) has 8 bytes, want R·4 = 12"},
		{"label -100 with no ignore_index", run(rows, classes, unset), "labels[2] = -100 is outside its domain: a class index in [0, V), or the ignore_index (set ignore_index to the label that marks rows to skip) (R=3, V=4, ignore_index=unset, grad_scale=1); fix the labels"},
	} {
		_, err := c.Run(ctx, tt.run.OpID, tt.run.Params, tt.run.Buffers)
		var se *ServerError
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (!errors.As(err, &se) || se.StatusName != "INVALID_ARGUMENT" || !strings.Contains(se.Message, tt.want)):
			t.Errorf("%s: %v, want INVALID_ARGUMENT containing %q", tt.name, err, tt.want)
		}
	}

	// A label found bad while a batch runs is the batch's error, naming
	// the entry; every entry ran (a GPU checks the labels after the batch's
	// one wait), those after it on whatever it left.
	setLabels(0, 3, 4)
	y, _ := c.Alloc(ctx, 2*rows*classes)
	c.Write(ctx, y, 0, f16s(rows*classes, 0x7E00))
	_, err = c.RunBatch(ctx, []RunRequest{run(rows, classes, 4), run(rows, classes, unset), softmaxRun(rows, classes, logits, y)})
	var be *BatchError
	if !errors.As(err, &be) || be.Index != 1 || !strings.Contains(err.Error(), "labels[2] = 4") || !strings.Contains(err.Error(), "(every entry ran)") {
		t.Errorf("a batch whose entry 1 has a bad label = %v", err)
	}
	got := make([]byte, 2*rows*classes)
	if err := c.Read(ctx, y, 0, got); err != nil || bytes.Equal(got, f16s(rows*classes, 0x7E00)) {
		t.Errorf("entry 2 did not run after entry 1's bad label (%v)", err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Errorf("the server after the refused calls: %v", err)
	}
}

func TestRealServerReportsMemory(t *testing.T) {
	t.Parallel()
	bin := buildRealServer(t)
	const big = 64 << 20

	// sane checks what any MEMORY answer must hold: 0 < Free ≤ Total, and
	// Total the machine's memory as HELLO reports it.
	sane := func(t *testing.T, c *Client, m Memory) {
		t.Helper()
		h, err := c.Hello(withTimeout(t, 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		total, err := h.MemoryBytes()
		if err != nil {
			t.Fatal(err)
		}
		if m.Free == 0 || m.Free > m.Total || m.Total != total {
			t.Errorf("Memory = %+v, want 0 < Free <= Total = memory_bytes %d", m, total)
		}
	}

	t.Run("a large ALLOC comes off Free, as the server counts its buffers", func(t *testing.T) {
		t.Parallel()
		c := realClient(t, bin, nil)
		ctx := withTimeout(t, 30*time.Second)
		before, err := c.Memory(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sane(t, c, before)
		// Free is the smaller of Total − live buffers and MemAvailable, and
		// MemAvailable moves with the rest of the machine. A buffer of
		// Total − Free + 64 MiB makes the first term at most Free − 64 MiB,
		// so Free must fall by at least 64 MiB whatever MemAvailable does.
		// The buffer is never written: it takes address space, not memory.
		if before.Free < 2*big {
			t.Skipf("only %d bytes free; the test needs %d", before.Free, 2*big)
		}
		n := before.Total - before.Free + big
		h, err := c.Alloc(ctx, n)
		if errors.Is(err, ErrOutOfMemory) {
			t.Skipf("this machine will not map an untouched buffer of %d bytes (strict overcommit?): %v", n, err)
		}
		if err != nil {
			t.Fatal(err)
		}
		after, err := c.Memory(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sane(t, c, after)
		t.Logf("Free: %d of %d bytes, then %d after an ALLOC of %d", before.Free, before.Total, after.Free, n)
		if after.Free > before.Free-big {
			t.Errorf("Free was %d before an ALLOC of %d bytes and %d after, want at most %d (a drop of 64 MiB or more)",
				before.Free, n, after.Free, before.Free-big)
		}
		if err := c.Free(ctx, h); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("in isolated mode a fresh server answers", func(t *testing.T) {
		t.Parallel()
		c := realClient(t, bin, func(cfg *Config) { cfg.Isolated = true })
		ctx := withTimeout(t, 30*time.Second)
		// The host keeps isolated buffers itself, out of the fresh server's
		// accounting. Written, this one is host memory in use, which
		// MemAvailable and so Free leave out: Free ≤ Total − 64 MiB holds,
		// though the machine's other memory in use would make it hold too.
		// What this shows is that each call gets a fresh server's answer,
		// sane with host buffers live.
		h, err := c.Alloc(ctx, big)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Write(ctx, h, 0, bytes.Repeat([]byte{0x5A}, big)); err != nil {
			t.Fatal(err)
		}
		pids := map[string]bool{}
		for range 2 {
			m, err := c.Memory(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// Each call's server says its pid on its first stderr line.
			pids[strings.SplitN(c.Stderr(), ",", 2)[0]] = true
			sane(t, c, m)
			if m.Free > m.Total-big {
				t.Errorf("Free = %d with %d bytes of host memory written, want at most Total − 64 MiB = %d", m.Free, big, m.Total-big)
			}
		}
		if len(pids) != 2 {
			t.Errorf("two Memory calls ran in %d processes (%v), want two", len(pids), pids)
		}
	})

	t.Run("a MEMORY with a payload is MALFORMED, and the server serves on", func(t *testing.T) {
		t.Parallel()
		p, in := startRawServer(t, bin)
		var w bytes.Buffer
		WriteFrame(&w, Frame{ID: 3, Opcode: OpMemory, Payload: []byte{0}})
		WriteFrame(&w, Frame{ID: 4, Opcode: OpMemory})
		p.stdin().Write(w.Bytes())
		f, err := in.next()
		if err != nil || f.ID != 3 || f.Status != StatusMalformed || ErrorMessage(f.Payload) != "MEMORY payload has 1 bytes, want 0" {
			t.Errorf("answer to MEMORY with 1 byte: %+v (%q), %v; want MALFORMED", f, ErrorMessage(f.Payload), err)
		}
		f, err = in.next()
		if err != nil || f.ID != 4 || f.Status != StatusOK {
			t.Fatalf("answer to MEMORY: %+v, %v", f, err)
		}
		if m, err := DecodeMemoryResponse(f.Payload); err != nil || m.Free == 0 || m.Free > m.Total {
			t.Errorf("MEMORY answered %+v, %v", m, err)
		}
	})
}

// testHostEnv makes the test binary busyWrappedHost, a host that the test
// kills in the middle of a call.
const testHostEnv = "VKERN_KSERVER_TEST_HOST"

// busyWrappedHost starts the real server at bin under a shell wrapper that
// stays its parent, prints "wrapper PID", and runs a GEMM of about 275
// GFLOP: many seconds of a -O1 cpu server's time.
func busyWrappedHost(bin string) int {
	c := New(Config{Path: bin, Wrapper: []string{"sh", "-c", `"$@"; exit $?`, "sh"}, CallTimeout: 10 * time.Minute})
	ctx := context.Background()
	const m, n, k = 8192, 4096, 4096
	var hs []Handle
	for _, bytes := range []uint64{2 * m * k, 2 * k * n, 4 * m * n} {
		h, err := c.Alloc(ctx, bytes)
		if err != nil {
			fmt.Fprintln(os.Stderr, "busyWrappedHost:", err)
			return 1
		}
		hs = append(hs, h)
	}
	fmt.Printf("wrapper %d\n", c.lastProcess().pid())
	_, err := c.Run(ctx, 1, []int64{m, n, k}, hs)
	fmt.Fprintln(os.Stderr, "busyWrappedHost: the GEMM ended before the host was killed:", err)
	return 1
}

// childOf is the pid of a process whose parent is pid, or 0.
func childOf(pid int) int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold blanks and parentheses.
		fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			child, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(filepath.Dir(path)), "/"))
			return child
		}
	}
	return 0
}

// A server under a wrapper, busy in a long kernel when its host is killed,
// ends soon after (the host's parent-death signal reaches the wrapper
// alone; the server watches its stdin, server.cc's watch_host_when_wrapped)
// rather than when the kernel would have finished.
func TestAWrappedServerEndsWhenItsHostIsKilled(t *testing.T) {
	t.Parallel()
	bin := buildRealServer(t)
	host := exec.Command(os.Args[0])
	host.Env = append(os.Environ(), testHostEnv+"="+bin)
	var stderr bytes.Buffer
	host.Stderr = &stderr
	out, err := host.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		host.Process.Kill()
		host.Wait()
	}()
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	var wrapper int
	select {
	case s := <-line:
		if _, err := fmt.Sscanf(s, "wrapper %d", &wrapper); err != nil {
			t.Fatalf("the host said %q (stderr: %s)", s, stderr.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the host did not start its server (stderr: %s)", stderr.String())
	}
	var server int
	for end := time.Now().Add(10 * time.Second); server == 0 && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		server = childOf(wrapper)
	}
	if server == 0 {
		t.Fatalf("no child of the wrapper %d found", wrapper)
	}
	t.Cleanup(func() { // a server the watch missed, if it is still ours
		if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", server)); strings.HasPrefix(string(cmd), bin) {
			syscall.Kill(server, syscall.SIGKILL)
		}
	})
	time.Sleep(500 * time.Millisecond) // the GEMM under way
	host.Process.Kill()
	host.Wait()
	began := time.Now()
	waitGone(t, wrapper)
	for {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", server))
		if err != nil || strings.Contains(string(stat), ") Z ") {
			break
		}
		if time.Since(began) > 10*time.Second {
			t.Fatalf("the server %d still runs 10 s after its host was killed: %s", server, stat)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the server ended %v after its host was killed", time.Since(began).Round(10*time.Millisecond))
}
