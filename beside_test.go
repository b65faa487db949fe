package vkern

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
)

// besideBatch is a batch whose linear_grad_w entries a GPU server may run
// beside the others, on a second stream (kernels/cuda/beside.h), laid out
// so that each kind of conflict between the two lanes comes up once:
//
//	0 linear_grad_w x, dy → dW, db  (beside)
//	1 add p + q → r                 no conflict: runs while 0 does
//	2 bias_grad dy' → db2           no conflict: runs while 0 does, and
//	                                uses the scratch 0's db uses, its lane's
//	3 global_norm dW                reads what 0 writes: waits for 0
//	4 linear_grad_w x, dy → dW2     (beside)
//	5 add dy' + zero → dy           writes what 4 reads: waits for 4
//	6 linear_grad_w x, dy → dW2     (beside) forks from 5, whose dy it
//	                                reads, and adds to 4's dW2
//	7 add x2 + zero → x             writes what 6 reads: waits for 6
//
// and the batch's end waits for the side lane before dW2 is read. Each
// product is large enough on a GPU that a missing wait would let the entry
// after it overwrite its operand while it still reads it.
type besideBatch struct {
	batch   *Batch
	m, n, k int64
	// The inputs run writes, and the outputs it reads back.
	x, dy, dyNext, p, q     *Buffer
	dW, db, db2, dW2, sumsq *Buffer
	r                       *Buffer
}

func newBesideBatch(t *testing.T, d *Device, m, n, k int64) *besideBatch {
	t.Helper()
	ctx := context.Background()
	alloc := func(bytes int64) *Buffer { return allocFreed(t, d, bytes) }
	shape := func(o *op.Op, dims []int64, settings ...op.Setting) op.Shape {
		return mustShape(t, o, dims, settings...)
	}
	b := &besideBatch{m: m, n: n, k: k}
	b.x, b.dy, b.dyNext, b.p, b.q = alloc(2*m*k), alloc(2*m*n), alloc(2*m*n), alloc(2*m*k), alloc(2*m*k)
	b.dW, b.db, b.db2, b.dW2 = alloc(4*k*n), alloc(4*n), alloc(4*n), alloc(4*k*n)
	b.sumsq, b.r = alloc(4), alloc(2*m*k)
	wide := m * max(k, n)
	zero, x2, nonfinite := alloc(2*wide), alloc(2*m*k), alloc(4)
	overwrite := shape(op.LinearGradW, []int64{m, n, k}, op.Setting{Name: "accumulate", Value: 0}, op.Setting{Name: "bias", Value: 1})
	accumulate := shape(op.LinearGradW, []int64{m, n, k})
	addX, addDy := shape(op.Add, []int64{m * k}), shape(op.Add, []int64{m * n})
	calls := []Call{
		{Op: op.LinearGradW, Shape: overwrite, Buffers: []*Buffer{b.x, b.dy, b.dW, b.db}},
		{Op: op.Add, Shape: addX, Buffers: []*Buffer{b.p, b.q, b.r}},
		{Op: op.BiasGrad, Shape: shape(op.BiasGrad, []int64{m, n}), Buffers: []*Buffer{b.dyNext, b.db2}},
		{Op: op.GlobalNorm, Shape: shape(op.GlobalNorm, []int64{k * n}), Buffers: []*Buffer{b.dW, b.sumsq, nonfinite}},
		{Op: op.LinearGradW, Shape: accumulate, Buffers: []*Buffer{b.x, b.dy, b.dW2, nil}},
		{Op: op.Add, Shape: addDy, Buffers: []*Buffer{b.dyNext, zero, b.dy}},
		{Op: op.LinearGradW, Shape: accumulate, Buffers: []*Buffer{b.x, b.dy, b.dW2, nil}},
		{Op: op.Add, Shape: addX, Buffers: []*Buffer{x2, zero, b.x}},
	}
	for i := range calls {
		calls[i].Untimed = true
	}
	batch, err := d.Prepare(calls)
	if err != nil {
		t.Fatal(err)
	}
	b.batch = batch
	if err := zero.WriteF16(ctx, make([]uint16, wide)); err != nil {
		t.Fatal(err)
	}
	if err := x2.WriteF16(ctx, halves(m*k, 100)); err != nil { // a seed no run's x has
		t.Fatal(err)
	}
	return b
}

// halves is count f16 values, whole numbers from -8 to 8 varied by seed,
// so that sums of their products are exact in f32 (below 2²⁴ for up to
// 2¹⁸ products) and any wrong operand shows.
func halves(count int64, seed int) []uint16 {
	v := make([]uint16, count)
	for i := range v {
		v[i] = f16.FromFloat64(float64((i*7+seed*13)%17 - 8))
	}
	return v
}

// run writes run number i's inputs, runs the batch and reads every output
// back (the f16 ones widened to f32).
func (b *besideBatch) run(t *testing.T, i int) map[string][]float32 {
	t.Helper()
	ctx := context.Background()
	for buf, v := range map[*Buffer][]uint16{
		b.x: halves(b.m*b.k, i), b.dy: halves(b.m*b.n, i+1), b.dyNext: halves(b.m*b.n, i+2),
		b.p: halves(b.m*b.k, i+4), b.q: halves(b.m*b.k, i+5),
	} {
		if err := buf.WriteF16(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.dW2.WriteF32(ctx, make([]float32, b.k*b.n)); err != nil {
		t.Fatal(err)
	}
	for _, db := range []*Buffer{b.db, b.db2} {
		if err := db.WriteF32(ctx, make([]float32, b.n)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.batch.Run(ctx); err != nil {
		t.Fatalf("run %d: %v", i, err)
	}
	out := map[string][]float32{}
	for _, o := range []struct {
		name  string
		buf   *Buffer
		count int64
		half  bool
	}{
		{"dW", b.dW, b.k * b.n, false}, {"db", b.db, b.n, false}, {"db2", b.db2, b.n, false},
		{"dW2", b.dW2, b.k * b.n, false}, {"sumsq", b.sumsq, 1, false},
		{"x", b.x, b.m * b.k, true}, {"dy", b.dy, b.m * b.n, true}, {"r", b.r, b.m * b.k, true},
	} {
		v := make([]float32, o.count)
		if !o.half {
			if err := o.buf.ReadF32(ctx, v); err != nil {
				t.Fatal(err)
			}
		} else {
			h := make([]uint16, o.count)
			if err := o.buf.ReadF16(ctx, h); err != nil {
				t.Fatal(err)
			}
			for j := range h {
				v[j] = float32(f16.ToFloat64(h[j]))
			}
		}
		out[o.name] = v
	}
	return out
}

// checkBesideBatch runs the batch on got and on want (a server that runs
// every entry on one stream) runs times, and wants every output the same,
// bit for bit: the lanes change when kernels run, never what they compute.
// It also checks the first run's dW2 and the norm against sums of the
// inputs, so that two servers that agree in a wrong answer are caught.
func checkBesideBatch(t *testing.T, got, want *Device, m, n, k int64, runs int) {
	t.Helper()
	bg, bw := newBesideBatch(t, got, m, n, k), newBesideBatch(t, want, m, n, k)
	for i := 1; i <= runs; i++ {
		g, w := bg.run(t, i), bw.run(t, i)
		for name, wv := range w {
			gv := g[name]
			for j := range wv {
				if math.Float32bits(gv[j]) != math.Float32bits(wv[j]) {
					t.Fatalf("run %d: %s[%d] = %v beside, %v on one stream", i, name, j, gv[j], wv[j])
				}
			}
		}
		if i > 1 {
			continue
		}
		// dW2 = xᵀ·dy + xᵀ·dy', with dy' the second add's; every product
		// and sum is exact in f32 (halves' whole numbers).
		x, dy, dy2 := halves(m*k, i), halves(m*n, i+1), halves(m*n, i+2)
		for _, at := range [][2]int64{{0, 0}, {k - 1, n - 1}, {k / 2, n / 3}} {
			var sum float64
			for r := int64(0); r < m; r++ {
				xr := f16.ToFloat64(x[r*k+at[0]])
				sum += xr*f16.ToFloat64(dy[r*n+at[1]]) + xr*f16.ToFloat64(dy2[r*n+at[1]])
			}
			if gv := g["dW2"][at[0]*n+at[1]]; float64(gv) != sum {
				t.Fatalf("run %d: dW2[%d, %d] = %v, want %v", i, at[0], at[1], gv, sum)
			}
		}
		// db2 = the column sums of dy', bias_grad's beside the first
		// linear_grad_w's db on the other lane.
		for _, j := range []int64{0, n / 2, n - 1} {
			var sum float64
			for r := int64(0); r < m; r++ {
				sum += f16.ToFloat64(dy2[r*n+j])
			}
			if gv := g["db2"][j]; float64(gv) != sum {
				t.Fatalf("run %d: db2[%d] = %v, want %v", i, j, gv, sum)
			}
		}
		var sumsq float64
		for _, v := range g["dW"] {
			sumsq += float64(v) * float64(v)
		}
		if rel := math.Abs(float64(g["sumsq"][0])-sumsq) / sumsq; !(rel < 1e-3) {
			t.Fatalf("run %d: global_norm of dW = %v, want %v (relative error %v)", i, g["sumsq"][0], sumsq, rel)
		}
	}
}

func TestCPURunsABatchWithLinearGradWBesideAlike(t *testing.T) {
	checkBesideBatch(t, openCPU(t, Options{}), openCPU(t, Options{}), 96, 40, 24, 2)
}

// On cuda, with VKERN_BESIDE=1, the server runs the three linear_grad_w
// entries beside the others and makes three waits, every run (or, when a
// repeated batch is replayed as a graph, in its first run and its
// capture), and computes what a server without it does. The products are
// long enough (x 32768×768) that a missing wait lets an add overwrite an
// operand under them.
func TestCUDARunsLinearGradWBeside(t *testing.T) {
	const runs = 4
	for _, tt := range []struct{ graphs, want string }{
		{"0", fmt.Sprintf("lanes: %d entries beside, %d waits", 3*runs, 3*runs)},
		{"1", "lanes: 6 entries beside, 6 waits"},
	} {
		t.Run("VKERN_GRAPHS="+tt.graphs, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "graphs.log")
			t.Setenv("VKERN_GRAPHS", tt.graphs)
			t.Setenv("VKERN_BESIDE", "0")
			want := openBackend(t, "cuda", Options{})
			t.Setenv("VKERN_BESIDE", "1")
			t.Setenv("VKERN_GRAPHS_LOG", log)
			got := openBackend(t, "cuda", Options{})
			checkBesideBatch(t, got, want, 32768, 768, 768, runs)
			got.Close()
			wantLogLine(t, log, tt.want)
		})
	}
}

// A VKERN_BESIDE that names no op stops the server before it serves, with
// the value and what it may be.
func TestCUDARefusesAnUnknownBesideOp(t *testing.T) {
	wantRefused(t, "VKERN_BESIDE", "linear_grad_w,no_such_op", `"no_such_op" is not a built-in op`)
}
