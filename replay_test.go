package vkern

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/kserver"
	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/toolchain"
)

// A GPU server replays a RUN_BATCH that repeats as a CUDA graph
// (kernels/cuda/device.cu, BatchGraphs): the first run launches the
// entries, the second captures them, and the later ones replay the
// graph. checkRepeatedBatch runs batches the way a training step does, on
// the same buffers with new data each time, and checks every run's
// outputs exactly, so that a replay is held to the launches it stands
// for:
//   - the main batch has a dependency chain (the second add reads the
//     first's output) and two inputs the kernels check (two embeddings'
//     tokens), each with its problem word in the graph; a bad token in the
//     second must be named as entry 3's, and the runs after it must not
//     see it again;
//   - between two of its runs a global_norm allocates its scratch for the
//     first time, which drops the graph (capture.h) and makes the batch
//     captured again;
//   - a batch that differs only in one parameter (the adds' n one less)
//     must leave the element it does not cover alone, and one that differs
//     only in its buffers must write its own: neither may be taken for
//     the main batch.
func checkRepeatedBatch(t *testing.T, d *Device) {
	t.Helper()
	ctx := context.Background()
	const (
		n             = 4103
		B, T, C, V    = 2, 5, 24, 11
		runs, badRun  = 7, 5
		normRun       = 6 // the global_norm comes just before this run
		badAt, badTok = 7, V
	)
	alloc := func(bytes int64) *Buffer { return allocFreed(t, d, bytes) }
	shape := func(o *op.Op, dims ...int64) op.Shape { return mustShape(t, o, dims) }
	prepare := func(calls ...Call) *Batch {
		for i := range calls {
			calls[i].Untimed = true
		}
		batch, err := d.Prepare(calls)
		if err != nil {
			t.Fatal(err)
		}
		return batch
	}
	a, b, y, z, y3, z3 := alloc(2*n), alloc(2*n), alloc(2*n), alloc(2*n), alloc(2*n), alloc(2*n)
	tokens, tokens2 := alloc(4*B*T), alloc(4*B*T)
	wte, wpe, x, x2 := alloc(2*V*C), alloc(2*T*C), alloc(2*B*T*C), alloc(2*B*T*C)
	addShape, embShape := shape(op.Add, n), shape(op.Embedding, B, T, C, V)
	embeddings := []Call{
		{Op: op.Embedding, Shape: embShape, Buffers: []*Buffer{tokens, wte, wpe, x}},
		{Op: op.Embedding, Shape: embShape, Buffers: []*Buffer{tokens2, wte, wpe, x2}},
	}
	adds := func(s op.Shape, y, z *Buffer) []Call {
		return []Call{
			{Op: op.Add, Shape: s, Buffers: []*Buffer{a, b, y}},
			{Op: op.Add, Shape: s, Buffers: []*Buffer{y, b, z}},
		}
	}
	repeated := prepare(append(adds(addShape, y, z), embeddings...)...)
	short := prepare(append(adds(shape(op.Add, n-1), y, z), embeddings...)...)
	moved := prepare(append(adds(addShape, y3, z3), embeddings...)...)

	bv, wteV, wpeV := make([]uint16, n), make([]uint16, V*C), make([]uint16, T*C)
	for i := range bv {
		bv[i] = f16.FromFloat64(0.125 * float64(i%13))
	}
	for i := range wteV {
		wteV[i] = f16.FromFloat64(float64(i%29) - 14)
	}
	for i := range wpeV {
		wpeV[i] = f16.FromFloat64(0.5 * float64(i%7))
	}
	for buf, v := range map[*Buffer][]uint16{b: bv, wte: wteV, wpe: wpeV} {
		if err := buf.WriteF16(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	readF16 := func(buf *Buffer, count int) []uint16 {
		v := make([]uint16, count)
		if err := buf.ReadF16(ctx, v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	// write gives a and both token buffers new values for run number
	// run of a batch and returns them.
	write := func(run int) (av []uint16, tok, tok2 []int32) {
		av, tok, tok2 = make([]uint16, n), make([]int32, B*T), make([]int32, B*T)
		for i := range av {
			av[i] = f16.FromFloat64(float64((i*run)%97) - 48.25)
		}
		for i := range tok {
			tok[i] = int32((i + 3*run) % V)
			tok2[i] = int32((5*i + run) % V)
		}
		if err := a.WriteF16(ctx, av); err != nil {
			t.Fatal(err)
		}
		if err := tokens.WriteI32(ctx, tok); err != nil {
			t.Fatal(err)
		}
		if err := tokens2.WriteI32(ctx, tok2); err != nil {
			t.Fatal(err)
		}
		return av, tok, tok2
	}
	// check compares z (the adds' first count elements) and x, x2 with
	// what the run's inputs give.
	check := func(what string, z *Buffer, count int, av []uint16, tok, tok2 []int32) {
		t.Helper()
		gotZ := readF16(z, n)
		for i := 0; i < count; i++ {
			yi := f16.FromFloat64(f16.ToFloat64(av[i]) + f16.ToFloat64(bv[i]))
			if want := f16.FromFloat64(f16.ToFloat64(yi) + f16.ToFloat64(bv[i])); gotZ[i] != want {
				t.Fatalf("%s: z[%d] = %v, want %v", what, i, f16.ToFloat64(gotZ[i]), f16.ToFloat64(want))
			}
		}
		for out, ids := range map[*Buffer][]int32{x: tok, x2: tok2} {
			got := readF16(out, B*T*C)
			for r := 0; r < B*T; r++ {
				for c := 0; c < C; c++ {
					want := f16.FromFloat64(f16.ToFloat64(wteV[int(ids[r])*C+c]) + f16.ToFloat64(wpeV[(r%T)*C+c]))
					if got[r*C+c] != want {
						t.Fatalf("%s: an embedding's x[%d, %d] = %v, want %v", what, r, c, f16.ToFloat64(got[r*C+c]), f16.ToFloat64(want))
					}
				}
			}
		}
	}

	for run := 1; run <= runs; run++ {
		if run == normRun {
			g, sumsq, nonfinite := alloc(4*1000), alloc(4), alloc(4)
			gv := make([]float32, 1000)
			for i := range gv {
				gv[i] = float32(i % 5)
			}
			if err := g.WriteF32(ctx, gv); err != nil {
				t.Fatal(err)
			}
			if _, err := d.Run(ctx, op.GlobalNorm, shape(op.GlobalNorm, 1000), g, sumsq, nonfinite); err != nil {
				t.Fatalf("global_norm between runs: %v", err)
			}
			got := make([]float32, 1)
			if err := sumsq.ReadF32(ctx, got); err != nil || got[0] != 6000 {
				t.Fatalf("global_norm between runs: sumsq %v (%v), want 6000", got, err)
			}
		}
		av, tok, tok2 := write(run)
		if run == badRun {
			tok2[badAt] = badTok
			if err := tokens2.WriteI32(ctx, tok2); err != nil {
				t.Fatal(err)
			}
		}
		_, err := repeated.Run(ctx)
		if run == badRun {
			// The bad token is the batch's error, naming its entry (the
			// second embedding's), after every entry ran.
			var be *kserver.BatchError
			if !errors.As(err, &be) || be.Index != 3 || !strings.Contains(err.Error(), fmt.Sprintf("tokens[%d] = %d", badAt, badTok)) {
				t.Fatalf("run %d, with the second embedding's tokens[%d] = %d: %v, want the error of entry 3 naming the token", run, badAt, badTok, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		check(fmt.Sprintf("run %d", run), z, n, av, tok, tok2)
	}

	sentinel := f16.FromFloat64(-1234)
	for run := 1; run <= 3; run++ {
		if err := z.Write(ctx, 2*(n-1), []byte{byte(sentinel), byte(sentinel >> 8)}); err != nil {
			t.Fatal(err)
		}
		av, tok, tok2 := write(10 + run)
		if _, err := short.Run(ctx); err != nil {
			t.Fatalf("the batch with n - 1, run %d: %v", run, err)
		}
		check(fmt.Sprintf("the batch with n - 1, run %d", run), z, n-1, av, tok, tok2)
		if got := readF16(z, n)[n-1]; got != sentinel {
			t.Fatalf("the batch with n - 1, run %d: z[%d] = %v, want it left at %v", run, n-1, f16.ToFloat64(got), f16.ToFloat64(sentinel))
		}
	}
	for run := 1; run <= 3; run++ {
		av, tok, tok2 := write(20 + run)
		if _, err := moved.Run(ctx); err != nil {
			t.Fatalf("the batch on other buffers, run %d: %v", run, err)
		}
		check(fmt.Sprintf("the batch on other buffers, run %d", run), z3, n, av, tok, tok2)
	}
}

func TestCPURunsARepeatedBatchAlike(t *testing.T) {
	checkRepeatedBatch(t, openCPU(t, Options{}))
}

// On cuda the log says what the server did with the three batches: each
// captured at its second run and replayed from then on (the main batch's
// runs 2 to 7, the bad token's among them, and the others' runs 2 and 3),
// the main one's graph dropped before run 6 for global_norm's first
// scratch and captured again; or, with VKERN_GRAPHS=0, nothing captured.
func TestCUDAReplaysARepeatedBatch(t *testing.T) {
	for _, tt := range []struct{ graphs, want string }{
		{"1", "graphs: 4 captured, 10 replays, 0 refused, 1 dropped"},
		{"0", "graphs: 0 captured, 0 replays, 0 refused, 0 dropped"},
	} {
		t.Run("VKERN_GRAPHS="+tt.graphs, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "graphs.log")
			t.Setenv("VKERN_GRAPHS", tt.graphs)
			t.Setenv("VKERN_GRAPHS_LOG", log)
			d := openBackend(t, "cuda", Options{})
			checkRepeatedBatch(t, d)
			d.Close()
			wantLogLine(t, log, tt.want)
		})
	}
}

// allocFreed allocates bytes on d, freed when the test ends.
func allocFreed(t *testing.T, d *Device, bytes int64) *Buffer {
	t.Helper()
	buf, err := d.Alloc(context.Background(), bytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { buf.Free(context.Background()) })
	return buf
}

// mustShape is o's shape at dims and settings.
func mustShape(t *testing.T, o *op.Op, dims []int64, settings ...op.Setting) op.Shape {
	t.Helper()
	s, err := o.Shape(dims, settings...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// wantLogLine wants the server's graph log at path (VKERN_GRAPHS_LOG) to
// hold line, once the server has exited.
func wantLogLine(t *testing.T, path, line string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), line) {
		t.Errorf("the server's graph log:\n%s\nwant a line %q", got, line)
	}
}

// A VKERN_GRAPHS that is neither 0 nor 1 stops the server before it
// serves, with the value and what it may be.
func TestCUDARefusesAnUnknownGraphsSetting(t *testing.T) {
	wantRefused(t, "VKERN_GRAPHS", "yes", `VKERN_GRAPHS is "yes"`)
}

// wantRefused wants a cuda server started with $name=value to stop before
// it serves, with an error that holds want.
func wantRefused(t *testing.T, name, value, want string) {
	t.Helper()
	if _, err := toolchain.Detect(context.Background(), "cuda"); err != nil {
		t.Skipf("the cuda backend cannot be built or run here: %v", err)
	}
	t.Setenv(name, value)
	_, err := Open(context.Background(), Options{Backend: "cuda", CacheDir: cacheDir(t)})
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open with %s=%s: %v, want the server's refusal, %q", name, value, err, want)
	}
}
