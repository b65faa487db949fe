package oracle

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
)

// randomF16 draws n f16 values: "uniform" in [−1, 1), "normal" N(0, 1),
// "wide" with magnitudes 2⁻¹⁴…2¹⁴ and random signs.
// rowsF16 is rows×cols f16 values from randomF16's dist, or with dist
// "far" each row one 60 and the rest in [−40, −20], so that its terms
// e^(x − 60) lie between about 2⁻¹⁴⁴ and 2⁻¹¹⁵, many of them under 2⁻¹²⁶:
// what a kernel that flushes such terms to +0 (the CUDA row kernels' EX2)
// must still get within the bound.
func rowsF16(rng *rand.Rand, rows, cols int, dist string) []uint16 {
	if dist != "far" {
		return randomF16(rng, rows*cols, dist)
	}
	x := make([]uint16, rows*cols)
	for i := range x {
		x[i] = f16.FromFloat32(float32(-40 + 20*rng.Float64()))
	}
	for r := 0; r < rows; r++ {
		x[r*cols+rng.IntN(cols)] = f16.FromFloat32(60)
	}
	return x
}

func randomF16(rng *rand.Rand, n int, dist string) []uint16 {
	out := make([]uint16, n)
	for i := range out {
		var v float64
		switch dist {
		case "uniform":
			v = 2*rng.Float64() - 1
		case "normal":
			v = rng.NormFloat64()
		case "wide":
			v = math.Exp2(28*rng.Float64() - 14)
			if rng.IntN(2) == 0 {
				v = -v
			}
		}
		out[i] = f16.FromFloat64(v)
	}
	return out
}

// accumulate32 sums terms in binary32 in the given order; truncate makes
// every addition round toward zero, as some tensor-core accumulators do.
func accumulate32(terms []float32, order []int, truncate bool) float32 {
	var acc float32
	for _, k := range order {
		exact := float64(acc) + float64(terms[k])
		acc = float32(exact)
		if truncate && math.Abs(float64(acc)) > math.Abs(exact) {
			acc = math.Nextafter32(acc, 0)
		}
	}
	return acc
}

func orders(n int, rng *rand.Rand) map[string][]int {
	forward, backward, strided := make([]int, n), make([]int, n), make([]int, 0, n)
	for i := range forward {
		forward[i], backward[i] = i, n-1-i
	}
	for s := 0; s < 16; s++ {
		for i := s; i < n; i += 16 {
			strided = append(strided, i)
		}
	}
	return map[string][]int{"forward": forward, "backward": backward, "strided by 16": strided, "shuffled": rng.Perm(n)}
}

func TestMatMulBoundHoldsForBinary32KernelsInAnyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const m, n, k = 5, 7, 2000
	for _, dist := range []string{"uniform", "normal", "wide"} {
		a, b := randomF16(rng, m*k, dist), randomF16(rng, k*n, dist)
		ref, err := MatMul(context.Background(), Matrix{a, m, k, false}, Matrix{b, k, n, false}, Accumulation{})
		if err != nil {
			t.Fatal(err)
		}
		worst := 0.0
		for name, order := range orders(k, rng) {
			for _, truncate := range []bool{false, true} {
				for i := 0; i < m; i++ {
					for j := 0; j < n; j++ {
						terms := make([]float32, k)
						for kk := range terms {
							terms[kk] = f16.ToFloat32(a[i*k+kk]) * f16.ToFloat32(b[kk*n+j])
						}
						got := float64(accumulate32(terms, order, truncate))
						e := math.Abs(got - ref.Value[i*n+j])
						if e > ref.Bound[i*n+j] {
							t.Fatalf("%s, %s order, truncate=%v: element (%d,%d) error %g exceeds bound %g",
								dist, name, truncate, i, j, e, ref.Bound[i*n+j])
						}
						worst = max(worst, e/ref.Bound[i*n+j])
					}
				}
			}
		}
		t.Logf("%s: worst error/bound over all orders %.3g", dist, worst)
	}
}

func TestMatMulTypicalModelFlagsALostTermThatTheBoundHides(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const m, n, k = 4, 64, 4096
	a, b := randomF16(rng, m*k, "normal"), randomF16(rng, k*n, "normal")
	ref, err := MatMul(context.Background(), Matrix{a, m, k, false}, Matrix{b, k, n, false}, Accumulation{})
	if err != nil {
		t.Fatal(err)
	}
	flagged, hidden := 0, 0
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var correct, lost float32
			for kk := 0; kk < k; kk++ {
				p := f16.ToFloat32(a[i*k+kk]) * f16.ToFloat32(b[kk*n+j])
				correct += p
				if kk != k-1 {
					lost += p
				}
			}
			idx := i*n + j
			if e := math.Abs(float64(correct) - ref.Value[idx]); e > 16*ref.Typical[idx] {
				t.Fatalf("a correct sum at (%d,%d) is an outlier: error %g, typical %g", i, j, e, ref.Typical[idx])
			}
			e := math.Abs(float64(lost) - ref.Value[idx])
			if e <= ref.Bound[idx] {
				hidden++
			}
			if e > 16*ref.Typical[idx] {
				flagged++
			}
		}
	}
	t.Logf("lost last term: %d of %d elements under the worst-case bound, %d flagged by the typical model", hidden, m*n, flagged)
	if flagged < m*n/4 {
		t.Errorf("the typical model flagged only %d of %d elements that lost a term", flagged, m*n)
	}
}

func TestMatMulSpecialsFollowIEEE(t *testing.T) {
	nan, inf, ninf, one := f16.NaN, f16.PosInf, f16.NegInf, f16.FromFloat32(1)
	// Row i of A against the single column of B (all ones).
	a := []uint16{
		one, one, // 2
		inf, one, // +Inf
		inf, ninf, // NaN
		nan, one, // NaN
		ninf, ninf, // −Inf
	}
	b := []uint16{one, one}
	ref, err := MatMul(context.Background(), Matrix{a, 5, 2, false}, Matrix{b, 2, 1, false}, Accumulation{})
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{2, math.Inf(1), math.NaN(), math.NaN(), math.Inf(-1)}
	for i, w := range want {
		got := ref.Value[i]
		if math.IsNaN(w) != math.IsNaN(got) || (!math.IsNaN(w) && got != w) {
			t.Errorf("row %d = %v, want %v", i, got, w)
		}
	}
}

func TestTransposedViewsMatchTheGradientDefinitions(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const m, n, k = 3, 4, 5
	dc, b, a := randomF16(rng, m*n, "uniform"), randomF16(rng, k*n, "uniform"), randomF16(rng, m*k, "uniform")
	s := op.Shape{Dims: []int64{m, n, k}}
	gradA, _ := op.Lookup("gemm_grad_a")
	gradB, _ := op.Lookup("gemm_grad_b")
	refA, err := Compute(context.Background(), gradA, s, []Input{{F16: dc}, {F16: b}}, Arithmetic{})
	if err != nil {
		t.Fatal(err)
	}
	refB, err := Compute(context.Background(), gradB, s, []Input{{F16: a}, {F16: dc}}, Arithmetic{})
	if err != nil {
		t.Fatal(err)
	}
	ra, rb := refA[0], refB[0]
	x := func(v []uint16, i int) float64 { return f16.ToFloat64(v[i]) }
	for i := 0; i < m; i++ {
		for kk := 0; kk < k; kk++ {
			var want float64
			for j := 0; j < n; j++ {
				want += x(dc, i*n+j) * x(b, kk*n+j)
			}
			if got := ra.Value[i*k+kk]; math.Abs(got-want) > 1e-12 {
				t.Errorf("dA[%d,%d] = %v, want %v", i, kk, got, want)
			}
		}
	}
	for kk := 0; kk < k; kk++ {
		for j := 0; j < n; j++ {
			var want float64
			for i := 0; i < m; i++ {
				want += x(a, i*k+kk) * x(dc, i*n+j)
			}
			if got := rb.Value[kk*n+j]; math.Abs(got-want) > 1e-12 {
				t.Errorf("dB[%d,%d] = %v, want %v", kk, j, got, want)
			}
		}
	}
}

func TestSoftmaxBoundHoldsForABinary32Kernel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const rows, cols = 6, 3000
	for _, dist := range []string{"uniform", "normal", "wide", "far"} {
		x := rowsF16(rng, rows, cols, dist)
		ref, err := SoftmaxRows(context.Background(), x, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		worst := 0.0
		for r := 0; r < rows; r++ {
			row := x[r*cols : (r+1)*cols]
			m := float32(math.Inf(-1))
			for _, h := range row {
				m = max(m, f16.ToFloat32(h))
			}
			// A binary32 kernel that goes through exp2, as GPU kernels do,
			// keeping terms under 2⁻¹²⁶ or flushing them to +0 (the CUDA
			// row kernel's EX2).
			for _, flush := range []bool{false, true} {
				e := make([]float32, cols)
				var sum float32
				for j, h := range row {
					e[j] = float32(math.Exp2(float64((f16.ToFloat32(h) - m) * float32(math.Log2E))))
					if flush && e[j] < 0x1p-126 {
						e[j] = 0
					}
					sum += e[j]
				}
				for j := range row {
					got := float64(e[j] / sum)
					idx := r*cols + j
					if err := math.Abs(got - ref.Value[idx]); err > ref.Bound[idx] {
						t.Fatalf("%s, flush=%v: (%d,%d) error %g exceeds bound %g", dist, flush, r, j, err, ref.Bound[idx])
					}
					if ref.Bound[idx] > 0 {
						worst = max(worst, math.Abs(got-ref.Value[idx])/ref.Bound[idx])
					}
				}
			}
		}
		t.Logf("%s: worst error/bound %.3g", dist, worst)
	}
}

func TestSoftmaxSpecialRows(t *testing.T) {
	nan, inf, ninf, zero := f16.NaN, f16.PosInf, f16.NegInf, f16.FromFloat32(0)
	x := []uint16{
		zero, ninf, zero, // masked entry -> 0, others 1/2
		ninf, ninf, ninf, // fully masked -> NaN
		zero, nan, zero, // NaN -> row NaN
		zero, inf, zero, // +Inf -> row NaN
	}
	ref, err := SoftmaxRows(context.Background(), x, 4, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{0.5, 0, 0.5}
	for j, w := range want {
		if ref.Value[j] != w {
			t.Errorf("masked row [%d] = %v, want %v", j, ref.Value[j], w)
		}
	}
	for j := 3; j < 12; j++ {
		if !math.IsNaN(ref.Value[j]) {
			t.Errorf("element %d = %v, want NaN", j, ref.Value[j])
		}
	}
}

func TestSoftmaxGradBoundHoldsForBothEvaluationOrders(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const rows, cols = 4, 4099
	for _, dist := range []string{"uniform", "normal", "wide"} {
		dy, y := randomF16(rng, rows*cols, dist), randomF16(rng, rows*cols, dist)
		ref, err := SoftmaxGradRows(context.Background(), dy, y, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		for r := 0; r < rows; r++ {
			var dot float32
			for j := 0; j < cols; j++ {
				dot += f16.ToFloat32(dy[r*cols+j]) * f16.ToFloat32(y[r*cols+j])
			}
			for j := 0; j < cols; j++ {
				idx := r*cols + j
				g, yy := f16.ToFloat32(dy[idx]), f16.ToFloat32(y[idx])
				factored := float64(yy * (g - dot))
				distributed := float64(yy*g - yy*dot)
				for name, got := range map[string]float64{"y·(g−D)": factored, "y·g − y·D": distributed} {
					if e := math.Abs(got - ref.Value[idx]); e > ref.Bound[idx] {
						t.Fatalf("%s, %s: (%d,%d) error %g exceeds bound %g", dist, name, r, j, e, ref.Bound[idx])
					}
				}
			}
		}
	}
}

func TestOutputBoundAddsF16Rounding(t *testing.T) {
	for _, v := range []float64{0, 1e-7, 0.3, 1000.7, 65000} {
		b := OutputBound(op.F16, v, 0)
		if e := math.Abs(f16.ToFloat64(f16.FromFloat64(v)) - v); e > b {
			t.Errorf("rounding %v to f16 errs by %g, more than OutputBound %g", v, e, b)
		}
	}
	if OutputBound(op.F32, 3, 0.5) != 0.5 {
		t.Error("f32 output must not add rounding")
	}
}

func BenchmarkMatMulOracle(b *testing.B) {
	rng := rand.New(rand.NewPCG(11, 12))
	const n = 1024
	x, y := randomF16(rng, n*n, "uniform"), randomF16(rng, n*n, "uniform")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := MatMul(context.Background(), Matrix{x, n, n, false}, Matrix{y, n, n, false}, Accumulation{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(2*n*n*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
