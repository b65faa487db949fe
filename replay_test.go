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
// graph. checkRepeatedBatch runs one batch the way a training step does,
// on the same buffers with new data each time, and checks every run's
// outputs exactly, so that a replay is held to the launches it stands
// for. The batch has a dependency chain (the second add reads the first's
// output) and an input the kernels check (embedding's tokens), whose
// problem words the graph clears.
func checkRepeatedBatch(t *testing.T, d *Device) {
	t.Helper()
	ctx := context.Background()
	const (
		n             = 4103
		B, T, C, V    = 2, 5, 24, 11
		runs, badRun  = 7, 5
		badAt, badTok = 7, V
	)
	alloc := func(bytes int64) *Buffer {
		buf, err := d.Alloc(ctx, bytes)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { buf.Free(ctx) })
		return buf
	}
	shape := func(o *op.Op, dims ...int64) op.Shape {
		s, err := o.Shape(dims)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b, y, z := alloc(2*n), alloc(2*n), alloc(2*n), alloc(2*n)
	tokens, wte, wpe, x := alloc(4*B*T), alloc(2*V*C), alloc(2*T*C), alloc(2*B*T*C)
	addShape, embShape := shape(op.Add, n), shape(op.Embedding, B, T, C, V)
	batch, err := d.Prepare([]Call{
		{Op: op.Add, Shape: addShape, Buffers: []*Buffer{a, b, y}, Untimed: true},
		{Op: op.Add, Shape: addShape, Buffers: []*Buffer{y, b, z}, Untimed: true},
		{Op: op.Embedding, Shape: embShape, Buffers: []*Buffer{tokens, wte, wpe, x}, Untimed: true},
	})
	if err != nil {
		t.Fatal(err)
	}
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
	for run := 1; run <= runs; run++ {
		// New data in the same buffers, as a step's tokens.
		av, tok := make([]uint16, n), make([]int32, B*T)
		for i := range av {
			av[i] = f16.FromFloat64(float64((i*run)%97) - 48.25)
		}
		for i := range tok {
			tok[i] = int32((i + 3*run) % V)
		}
		if run == badRun {
			tok[badAt] = badTok
		}
		if err := a.WriteF16(ctx, av); err != nil {
			t.Fatal(err)
		}
		if err := tokens.WriteI32(ctx, tok); err != nil {
			t.Fatal(err)
		}
		_, err := batch.Run(ctx)
		if run == badRun {
			// The bad token is the batch's error, naming its entry, after
			// every entry ran: replayed or not.
			var be *kserver.BatchError
			if !errors.As(err, &be) || be.Index != 2 || !strings.Contains(err.Error(), fmt.Sprintf("tokens[%d] = %d", badAt, badTok)) {
				t.Fatalf("run %d, with tokens[%d] = %d: %v, want the error of entry 2 naming the token", run, badAt, badTok, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		gotZ, gotX := make([]uint16, n), make([]uint16, B*T*C)
		if err := z.ReadF16(ctx, gotZ); err != nil {
			t.Fatal(err)
		}
		if err := x.ReadF16(ctx, gotX); err != nil {
			t.Fatal(err)
		}
		for i := range gotZ {
			yi := f16.FromFloat64(f16.ToFloat64(av[i]) + f16.ToFloat64(bv[i]))
			want := f16.FromFloat64(f16.ToFloat64(yi) + f16.ToFloat64(bv[i]))
			if gotZ[i] != want {
				t.Fatalf("run %d: z[%d] = %v, want %v", run, i, f16.ToFloat64(gotZ[i]), f16.ToFloat64(want))
			}
		}
		for r := 0; r < B*T; r++ {
			for c := 0; c < C; c++ {
				want := f16.FromFloat64(f16.ToFloat64(wteV[int(tok[r])*C+c]) + f16.ToFloat64(wpeV[(r%T)*C+c]))
				if got := gotX[r*C+c]; got != want {
					t.Fatalf("run %d: x[%d, %d] = %v, want %v", run, r, c, f16.ToFloat64(got), f16.ToFloat64(want))
				}
			}
		}
	}

	// The same batch but for one parameter, the adds' n one less, on the
	// same buffers: it is another batch, whose adds leave z's last element
	// alone. Were it taken for the first (a key without the parameters),
	// the first's graph would write that element.
	short, err := d.Prepare([]Call{
		{Op: op.Add, Shape: shape(op.Add, n-1), Buffers: []*Buffer{a, b, y}, Untimed: true},
		{Op: op.Add, Shape: shape(op.Add, n-1), Buffers: []*Buffer{y, b, z}, Untimed: true},
		{Op: op.Embedding, Shape: embShape, Buffers: []*Buffer{tokens, wte, wpe, x}, Untimed: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	sentinel := f16.FromFloat64(-1234)
	for run := 1; run <= 3; run++ {
		if err := z.Write(ctx, 2*(n-1), []byte{byte(sentinel), byte(sentinel >> 8)}); err != nil {
			t.Fatal(err)
		}
		if _, err := short.Run(ctx); err != nil {
			t.Fatalf("the batch with n - 1, run %d: %v", run, err)
		}
		last := make([]byte, 2)
		if err := z.Read(ctx, 2*(n-1), last); err != nil {
			t.Fatal(err)
		}
		if got := uint16(last[0]) | uint16(last[1])<<8; got != sentinel {
			t.Fatalf("the batch with n - 1, run %d: z[%d] = %v, want it left at %v", run, n-1, f16.ToFloat64(got), f16.ToFloat64(sentinel))
		}
	}
}

func TestCPURunsARepeatedBatchAlike(t *testing.T) {
	checkRepeatedBatch(t, openCPU(t, Options{}))
}

// On cuda the log says what the server did with the two batches: each
// captured at its second run and replayed from then on (the first's runs
// 2 to 7, the bad token's among them, and the second's runs 2 and 3), or,
// with VKERN_GRAPHS=0, never captured.
func TestCUDAReplaysARepeatedBatch(t *testing.T) {
	for _, tt := range []struct{ graphs, want string }{
		{"1", "graphs: 2 captured, 8 replays, 0 refused, 0 dropped"},
		{"0", "graphs: 0 captured, 0 replays, 0 refused, 0 dropped"},
	} {
		t.Run("VKERN_GRAPHS="+tt.graphs, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "graphs.log")
			t.Setenv("VKERN_GRAPHS", tt.graphs)
			t.Setenv("VKERN_GRAPHS_LOG", log)
			d := openBackend(t, "cuda", Options{})
			checkRepeatedBatch(t, d)
			d.Close()
			got, err := os.ReadFile(log)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(got), tt.want) {
				t.Errorf("the server's graph log:\n%s\nwant a line %q", got, tt.want)
			}
		})
	}
}

// A VKERN_GRAPHS that is neither 0 nor 1 stops the server before it
// serves, with the value and what it may be.
func TestCUDARefusesAnUnknownGraphsSetting(t *testing.T) {
	if _, err := toolchain.Detect(context.Background(), "cuda"); err != nil {
		t.Skipf("the cuda backend cannot be built or run here: %v", err)
	}
	t.Setenv("VKERN_GRAPHS", "yes")
	_, err := Open(context.Background(), Options{Backend: "cuda", CacheDir: cacheDir(t)})
	if err == nil || !strings.Contains(err.Error(), `VKERN_GRAPHS is "yes"`) {
		t.Fatalf("Open with VKERN_GRAPHS=yes: %v, want the server's refusal naming the value", err)
	}
}
