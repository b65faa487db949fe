package kserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests run the real C++ cpu server, built from ../kernels with g++
// into a temporary folder, and kill it for real. They skip without g++ or
// without the sources, and in -short mode (the build takes seconds).

const realSourceSHA = "kserver-real-test"

// buildRealServer compiles the cpu server and returns the binary's path.
func buildRealServer(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("building the C++ server takes seconds; skipped in -short mode")
	}
	cxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("no g++ to build the C++ server with")
	}
	src := filepath.Join("..", "kernels")
	main := filepath.Join(src, "cpu", "main.cc")
	if _, err := os.Stat(main); err != nil {
		t.Skipf("no C++ server sources: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "server")
	// -O1: the tests exercise the process, not the kernels' speed.
	cmd := exec.Command(cxx, "-std=c++17", "-O1", "-pthread", "-I"+src,
		`-DVKERN_SOURCE_SHA256="`+realSourceSHA+`"`, "-o", bin, main)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, out)
	}
	return bin
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
		if h.Version != 1 || h.Backend() != "cpu" || h.SourceSHA256() != realSourceSHA {
			t.Errorf("Hello = %+v", h)
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
		// A transfer over one frame.
		big := make([]byte, MaxWritePiece+4096)
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
			t.Errorf("a two-frame round trip: equal = %v, %v", bytes.Equal(back, big), err)
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
		pid := c.proc.pid()
		syscall.Kill(pid, syscall.SIGKILL)
		c.proc.wait(5 * time.Second)
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
			pid := c.proc.pid()
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

	t.Run("SIGSTOP past a deadline", func(t *testing.T) {
		c := New(realConfig(bin))
		defer c.Close()
		if err := c.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
		pid := c.proc.pid()
		syscall.Kill(pid, syscall.SIGSTOP)
		began := time.Now()
		err := c.Ping(withTimeout(t, 200*time.Millisecond))
		checkErr(t, err, []error{ErrServerDied, context.DeadlineExceeded}, "killed by the host", "signal: killed")
		if took := time.Since(began); took > 3*time.Second {
			t.Errorf("the call took %v", took)
		}
		checkGone(t, pid)
		if err := c.Ping(context.Background()); err != nil {
			t.Errorf("the next call: %v", err)
		}
	})

	t.Run("refuses to run without the cookie", func(t *testing.T) {
		cmd := exec.Command(bin)
		cmd.Env = []string{}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != ExitNoCookie || !strings.Contains(string(out), "not run by hand") {
			t.Errorf("without the cookie: %v, %q; want exit status 64 and an explanation", err, out)
		}
	})

	t.Run("ends on a length prefix over the cap", func(t *testing.T) {
		p, err := startProcess(bin, childEnv(nil), 4<<10)
		if err != nil {
			t.Fatal(err)
		}
		defer p.release()
		defer p.kill()
		in := bufio.NewReader(p.stdout())
		if f, err := ReadFrame(in, nil); err != nil || f.Opcode != OpHello {
			t.Fatalf("first frame: %+v, %v", f, err)
		}
		p.stdin().Write(binary.LittleEndian.AppendUint32(nil, MaxFrameBytes+1))
		f, err := ReadFrame(in, nil)
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
