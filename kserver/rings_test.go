package kserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The host's ring writer and reader, joined through one ring and one wake
// pipe, move a stream of random-sized writes intact, with the reader asleep
// as often as awake. With the spin off every wait sleeps, which is where a
// lost wake-up would hang; the random pauses make the late wake bytes that
// once did.
func TestRingsCarryAStreamIntact(t *testing.T) {
	for _, spin := range []time.Duration{0, defaultSpin} {
		t.Run(spin.String(), func(t *testing.T) {
			r, err := newRings()
			if err != nil {
				t.Fatal(err)
			}
			r.closeFile()
			defer r.unmap()
			wakeR, wakeW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer wakeR.Close()
			fd := int(wakeR.Fd())
			if err := unix.SetNonblock(fd, true); err != nil {
				t.Fatal(err)
			}
			w := &ringWriter{g: &r.req, kick: wakeW, spin: spin, gone: func() bool { return false }}
			rr := &ringReader{g: &r.req, wake: wakeR, fd: fd, kick: wakeW, spin: spin}

			rng := rand.New(rand.NewPCG(1, 2))
			want := make([]byte, 5*ringDataBytes+12345) // wraps the ring several times
			for i := range want {
				want[i] = byte(rng.Uint32())
			}
			var wg sync.WaitGroup
			var writeErr error
			wg.Go(func() {
				defer wakeW.Close() // the end of the stream
				wr := rand.New(rand.NewPCG(3, 4))
				for p := want; len(p) > 0; {
					n := min(len(p), 1+wr.IntN(300_000))
					if _, err := w.Write(p[:n]); err != nil {
						writeErr = err
						return
					}
					p = p[n:]
					if wr.IntN(8) == 0 {
						time.Sleep(time.Duration(wr.IntN(200)) * time.Microsecond)
					}
				}
			})
			got := make([]byte, 0, len(want))
			buf := make([]byte, 100_000)
			rdr := rand.New(rand.NewPCG(5, 6))
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) {
				n, err := rr.Read(buf[:1+rdr.IntN(len(buf))])
				got = append(got, buf[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if rdr.IntN(8) == 0 {
					time.Sleep(time.Duration(rdr.IntN(200)) * time.Microsecond)
				}
			}
			wg.Wait()
			if writeErr != nil {
				t.Fatal(writeErr)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("read %d bytes, wrote %d; they differ", len(got), len(want))
			}
		})
	}
}

// A server whose response does not fit in the response ring waits, asleep,
// for room, and the host's reading wakes it. A TEXT_READ of textReadValues
// values of 65535 answers with a frame one byte longer than the ring, and
// the host reads nothing until the server sleeps.
func TestRealServerWaitsForRoomInTheResponseRing(t *testing.T) {
	t.Parallel()
	r := startRaw(t, buildRealServer(t), testArena(t), true)
	defer r.end()
	send := func(id uint32, op Opcode, payload []byte) {
		t.Helper()
		if _, err := r.out.Write(append(appendHeader(nil, len(payload), id, op, StatusOK), payload...)); err != nil {
			t.Fatal(err)
		}
	}
	answer := func(id uint32, op Opcode) Frame {
		t.Helper()
		f, err := r.reply()
		if err != nil || f.ID != id || f.Opcode != op || f.Status != StatusOK {
			t.Fatalf("answer to %v: %+v (%q), %v\n%s", op, f, ErrorMessage(f.Payload), err, r.p.stderrTail())
		}
		return f
	}
	const count = textReadValues
	send(1, OpAlloc, AppendAllocRequest(nil, 2*count))
	h, err := DecodeAllocResponse(answer(1, OpAlloc).Payload)
	if err != nil {
		t.Fatal(err)
	}
	copy(r.arena.mem, f16s(count, 0xFFFF))
	send(2, OpWrite, AppendTransferRequest(nil, TransferRequest{Handle: h, Length: 2 * count}))
	answer(2, OpWrite)

	send(3, OpTextRead, AppendTextReadRequest(nil, TextReadRequest{Handle: h, Count: count}))
	if frame := lengthBytes + HeaderBytes + 6*count - 1; frame != ringDataBytes+1 {
		t.Fatalf("the TEXT_READ answer takes %d bytes, want the ring's %d and one more", frame, ringDataBytes)
	}
	for end := time.Now().Add(10 * time.Second); atomic.LoadUint32(r.rings.resp.writerAsleep) == 0; {
		if time.Now().After(end) {
			t.Fatalf("the server did not go to sleep waiting for room in 10s\n%s", r.p.stderrTail())
		}
		time.Sleep(time.Millisecond)
	}
	text := answer(3, OpTextRead).Payload
	dst := make([]uint16, count)
	if err := parseText(text, dst); err != nil {
		t.Fatal(err)
	}
	for i, v := range dst {
		if v != 0xFFFF {
			t.Fatalf("value %d came back as %d, want 65535", i, v)
		}
	}
	if kicks := r.in.f.(*ringReader).kicks; kicks != 1 {
		t.Errorf("the host woke the server %d times, want once", kicks)
	}
	send(4, OpPing, nil)
	answer(4, OpPing)
}

// The host's writer waits for room in the request ring when requests queue
// behind the server: while it works on a large GEMM, three RUN_BATCH frames
// of nearly a MiB each fill the ring of one MiB, and all are answered.
func TestRealServerRequestsLargerThanTheRing(t *testing.T) {
	t.Parallel()
	c := realClient(t, buildRealServer(t), nil)
	ctx := withTimeout(t, 60*time.Second)
	x, err := c.Alloc(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	y, _ := c.Alloc(ctx, 2)
	if err := c.Write(ctx, x, 0, f16s(1, f16Two)); err != nil {
		t.Fatal(err)
	}
	const m = 768 // a GEMM of m³ keeps the server busy for tens of milliseconds
	a, _ := c.Alloc(ctx, 2*m*m)
	out, err := c.Alloc(ctx, 4*m*m)
	if err != nil {
		t.Fatal(err)
	}
	var busy sync.WaitGroup
	busy.Go(func() {
		if _, err := c.Run(ctx, 1, []int64{m, m, m}, []Handle{a, a, out}); err != nil {
			t.Error(err)
		}
	})
	// The batches go once the server has taken the GEMM's request.
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Microsecond) {
		if time.Now().After(end) {
			t.Fatal("the server did not take the GEMM's request in 10s")
		}
		if s := c.liveConn(); s != nil {
			s.mu.Lock()
			sent := len(s.pending) == 1
			s.mu.Unlock()
			if sent && atomic.LoadUint64(s.rings.req.tail) == atomic.LoadUint64(s.rings.req.head) {
				break
			}
		}
	}
	// A softmax RUN entry takes 16 + 8·2 + 8·2 bytes; fill most of a frame.
	runs := make([]RunRequest, (MaxFrameBytes-64)/48)
	for i := range runs {
		runs[i] = softmaxRun(1, 1, x, y)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Go(func() {
			if times, err := c.RunBatch(ctx, runs); err != nil {
				errs <- err
			} else if len(times) != len(runs) {
				errs <- fmt.Errorf("%d kernel times for %d runs", len(times), len(runs))
			}
		})
	}
	wg.Wait()
	busy.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if c.liveConn().w.(*ringWriter).roomWaits == 0 {
		t.Error("the host never waited for room in the request ring, so this test shows nothing")
	}
	got := make([]byte, 2)
	if err := c.Read(ctx, y, 0, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, f16s(1, f16One)) { // softmax of one value: 1
		t.Errorf("y = % x after the batches, want % x", got, f16s(1, f16One))
	}
}

// A server asked for rings it cannot have says why on stderr and exits with
// status 6, before it sends anything.
func TestRealServerRefusesBadRings(t *testing.T) {
	t.Parallel()
	bin := buildRealServer(t)
	a := testArena(t)
	small, err := os.CreateTemp(t.TempDir(), "rings")
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	if err := small.Truncate(4096); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		value string
		rings *os.File
		want  string
	}{
		{"the variable names another descriptor", "5", small, `VKERN_KERNEL_SERVER_RINGS is "5"`},
		{"no file on descriptor 4", "4", nil, "file descriptor 4 is not open"},
		{"a file of the wrong size", "4", small, "is not a ring file of 2105344 bytes (it has 4096)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin)
			cmd.Env = append(childEnv(nil), ringsEnv+"="+tc.value)
			cmd.ExtraFiles = []*os.File{a.file}
			if tc.rings != nil {
				cmd.ExtraFiles = append(cmd.ExtraFiles, tc.rings)
			}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != ExitNoArena {
				t.Fatalf("exit: %v, want exit status %d; stderr:\n%s", err, ExitNoArena, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q does not say %q", stderr.String(), tc.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("it wrote %d bytes to stdout before exiting", stdout.Len())
			}
		})
	}
}

// testArena is an arena of 1 MiB for a raw server, closed after the test.
func testArena(t *testing.T) *arena {
	t.Helper()
	a, err := newArena(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.close)
	return a
}
