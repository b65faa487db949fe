package oracle

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
)

// TestEpilogueBoundsHoldForSimulatedKernels sums random products as each
// structure says, then adds a bias and an initial value in binary32
// (rounded to nearest, the kernels' epilogue), and checks every element
// against MatMulWith's bound; with no structure claimed, a kernel that
// folds the terms into a truncating sum in any order must pass too. Biases
// and initial values range from far below the dot products to far above
// them, and some cancel them.
func TestEpilogueBoundsHoldForSimulatedKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	type sim struct {
		acc Accumulation
		sum func([]float32) float32
	}
	sims := map[string]sim{
		"rn-blocked:256": {Accumulation{Kind: RNBlocked, Block: 256}, func(p []float32) float32 { return rnBlocked32(p, 256) }},
		"tc-fused:16:2":  {Accumulation{Kind: TCFused, Block: 16, Guard: 2}, func(p []float32) float32 { return tcFused32(p, 16, 2) }},
		"any":            {Accumulation{}, func(p []float32) float32 { return rnBlocked32(p, len(p)) }},
	}
	worst := map[string]float64{}
	for _, k := range []int{1, 17, 300, 4099} {
		for _, dist := range []string{"uniform", "normal", "wide"} {
			const m, n = 4, 6
			a, b := randomF16(rng, m*k, dist), randomF16(rng, k*n, dist)
			bias := make([]uint16, n)
			init := make([]float32, m*n)
			residual := make([]uint16, m*n)
			for j := range bias {
				bias[j] = f16.FromFloat64(math.Ldexp(rng.NormFloat64(), rng.IntN(30)-15))
			}
			products := func(i, j int) []float32 {
				p := make([]float32, k)
				for kk := range p {
					p[kk] = f16.ToFloat32(a[i*k+kk]) * f16.ToFloat32(b[kk*n+j])
				}
				return p
			}
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					switch (i*n + j) % 3 {
					case 0: // cancels the dot product and the bias (the residual to f16's precision, where it has the range)
						init[i*n+j] = -rnBlocked32(products(i, j), k) - f16.ToFloat32(bias[j])
						residual[i*n+j] = f16.FromFloat64(float64(init[i*n+j]))
						if math.IsInf(f16.ToFloat64(residual[i*n+j]), 0) {
							residual[i*n+j] = f16.FromFloat64(math.Ldexp(rng.NormFloat64(), rng.IntN(30)-15))
						}
					default:
						init[i*n+j] = float32(math.Ldexp(rng.NormFloat64(), rng.IntN(40)-20))
						residual[i*n+j] = f16.FromFloat64(math.Ldexp(rng.NormFloat64(), rng.IntN(30)-15))
					}
				}
			}
			for _, ep := range []Epilogue{{Bias: bias, Cols: n}, {Init: init, Cols: n}, {Bias: bias, Init: init, Cols: n},
				{Residual: residual, Cols: n}, {Bias: bias, Residual: residual, Cols: n}} {
				for name, sm := range sims {
					ref, err := MatMulWith(context.Background(), Matrix{a, m, k, false}, Matrix{b, k, n, false}, ep, sm.acc)
					if err != nil {
						t.Fatal(err)
					}
					for i := 0; i < m; i++ {
						for j := 0; j < n; j++ {
							p := products(i, j)
							got := sm.sum(p)
							var extra []float32
							if ep.Bias != nil {
								got += f16.ToFloat32(bias[j])
								extra = append(extra, f16.ToFloat32(bias[j]))
							}
							if ep.Init != nil {
								got = init[i*n+j] + got
								extra = append(extra, init[i*n+j])
							}
							if ep.Residual != nil {
								r := f16.ToFloat32(residual[i*n+j])
								got += r
								extra = append(extra, r)
							}
							results := []float32{got}
							if sm.acc.Kind == AnyOrder {
								// Folded: the terms join the products,
								// summed backward and truncating.
								all := append(append([]float32(nil), extra...), p...)
								results = append(results, accumulate32(all, orders(len(all), rng)["backward"], true))
							}
							idx := i*n + j
							for _, r := range results {
								e := math.Abs(float64(r) - ref.Value[idx])
								if e > ref.Bound[idx] {
									t.Fatalf("%s, K=%d, %s, %d terms: element (%d,%d) = %g errs by %g, over its bound %g",
										name, k, dist, ep.Terms(), i, j, r, e, ref.Bound[idx])
								}
								if ref.Bound[idx] > 0 {
									worst[name] = max(worst[name], e/ref.Bound[idx])
								}
							}
						}
					}
				}
			}
		}
	}
	for name, w := range worst {
		t.Logf("%s with an epilogue: worst error/bound %.3g", name, w)
	}
}

// TestEpilogueViewsFollowTheSample checks that an epilogue's row and
// column views give the sampled elements of the whole reference.
func TestEpilogueViewsFollowTheSample(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	const m, n, k = 9, 7, 5
	a, b := randomF16(rng, m*k, "normal"), randomF16(rng, k*n, "normal")
	ep := Epilogue{Bias: randomF16(rng, n, "normal"), Init: make([]float32, m*n), Cols: n}
	for i := range ep.Init {
		ep.Init[i] = float32(rng.NormFloat64())
	}
	checkEpilogueViews(t, a, b, m, n, k, ep)
	checkEpilogueViews(t, a, b, m, n, k, Epilogue{Bias: ep.Bias, Residual: randomF16(rng, m*n, "normal"), Cols: n})
}

func checkEpilogueViews(t *testing.T, a, b []uint16, m, n, k int, ep Epilogue) {
	t.Helper()
	x, y := Matrix{a, m, k, false}, Matrix{b, k, n, false}
	whole, err := MatMulWith(context.Background(), x, y, ep, Accumulation{})
	if err != nil {
		t.Fatal(err)
	}
	rows, cols := []int{1, 4, 8}, []int{0, 6}
	byRows, err := MatMulWith(context.Background(), x.SelectRows(rows), y, ep.SelectRows(rows), Accumulation{})
	if err != nil {
		t.Fatal(err)
	}
	byCols, err := MatMulWith(context.Background(), x, y.SelectCols(cols), ep.SelectCols(cols), Accumulation{})
	if err != nil {
		t.Fatal(err)
	}
	for r, i := range rows {
		for j := 0; j < n; j++ {
			if byRows.Value[r*n+j] != whole.Value[i*n+j] {
				t.Errorf("row view (%d,%d) = %g, whole %g", i, j, byRows.Value[r*n+j], whole.Value[i*n+j])
			}
		}
	}
	for i := 0; i < m; i++ {
		for c, j := range cols {
			if byCols.Value[i*len(cols)+c] != whole.Value[i*n+j] {
				t.Errorf("column view (%d,%d) = %g, whole %g", i, j, byCols.Value[i*len(cols)+c], whole.Value[i*n+j])
			}
		}
	}
	v := []float64{1, -1, 1, 1, -1, -1, 1}
	p, err := ProjectWith(context.Background(), x, y, ep, v)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < m; i++ {
		var want float64
		for j := 0; j < n; j++ {
			want += whole.Value[i*n+j] * v[j]
		}
		if math.Abs(p.Value[i]-want) > 1e-12*p.Magnitude[i] {
			t.Errorf("row %d projects to %g, the whole reference to %g", i, p.Value[i], want)
		}
	}
	if p.Terms != k+2 {
		t.Errorf("the projection counts %d terms per element, want %d", p.Terms, k+2)
	}
}

// With bias 1, linear_grad_w's db reference is bias_grad's over its dy
// and db's initial values, value and bound alike (the kernels sum it as
// bias_grad does), and its dW reference is the one without db; with bias 0
// db is empty.
func TestLinearGradWColumnSumsAreBiasGrads(t *testing.T) {
	ctx := context.Background()
	same := func(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }
	for _, dist := range []Dist{Normal, Special} {
		s := op.LinearGradW.MustShape("130x20x7:bias=1")
		inputs, err := Generate(op.LinearGradW, s, dist, 3)
		if err != nil {
			t.Fatal(err)
		}
		refs, err := Compute(ctx, op.LinearGradW, s, inputs, Arithmetic{})
		if err != nil {
			t.Fatal(err)
		}
		if len(refs) != 2 || len(refs[1].Value) != 20 {
			t.Fatalf("%v: %d references, want dW's and db's 20", dist, len(refs))
		}
		bias := op.BiasGrad.MustShape("130x20")
		want, err := Compute(ctx, op.BiasGrad, bias, []Input{inputs[1], inputs[3]}, Arithmetic{})
		if err != nil {
			t.Fatal(err)
		}
		for j := range want[0].Value {
			got, w := refs[1].Value[j], want[0].Value[j]
			if !same(got, w) || !same(refs[1].Bound[j], want[0].Bound[j]) {
				t.Errorf("%v: db[%d] = %g ± %g, bias_grad's %g ± %g", dist, j, got, refs[1].Bound[j], w, want[0].Bound[j])
			}
		}
		noDB := append(append([]Input(nil), inputs[:3]...), Input{F32: []float32{}})
		plain, err := Compute(ctx, op.LinearGradW, op.LinearGradW.MustShape("130x20x7"), noDB, Arithmetic{})
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range plain[0].Value {
			if got := refs[0].Value[i]; !same(got, v) {
				t.Fatalf("%v: dW[%d] = %g with db, %g without", dist, i, got, v)
			}
		}
		if len(plain[1].Value) != 0 {
			t.Errorf("%v: bias 0 gave %d db values, want none", dist, len(plain[1].Value))
		}
	}
}

// TestLinearGradWOverwritesWithAccumulateZero: with accumulate 0 the
// initial dW is an input the reference ignores; with 1 it is added.
func TestLinearGradWOverwritesWithAccumulateZero(t *testing.T) {
	for _, tt := range []struct {
		shape string
		adds  bool
	}{{"5x3x4:accumulate=0", false}, {"5x3x4", true}} {
		s := op.LinearGradW.MustShape(tt.shape)
		inputs, err := Generate(op.LinearGradW, s, Integer, 1)
		if err != nil {
			t.Fatal(err)
		}
		refs, err := Compute(context.Background(), op.LinearGradW, s, inputs, Arithmetic{})
		if err != nil {
			t.Fatal(err)
		}
		x, dy, dw := inputs[0].F16, inputs[1].F16, inputs[2].F32
		for kk := 0; kk < 4; kk++ {
			for j := 0; j < 3; j++ {
				var want float64
				if tt.adds {
					want = float64(dw[kk*3+j])
				}
				for i := 0; i < 5; i++ {
					want += f16.ToFloat64(x[i*4+kk]) * f16.ToFloat64(dy[i*3+j])
				}
				if got := refs[0].Value[kk*3+j]; got != want {
					t.Errorf("%s: dW[%d,%d] = %g, want %g", tt.shape, kk, j, got, want)
				}
			}
		}
	}
}

// TestBiasGradBoundHoldsForTheKernelsStructure sums columns in binary32,
// rounded to nearest, as the kernels do (blocks of BiasGradRowBlock rows in
// order, then the block sums and db: in order with db last, as the cpu
// does, and shuffled, as a GPU's tree may), on inputs that cancel and on
// inputs of one sign, and checks the bound; it also holds the bound to
// being far tighter than the order-free γ(M)·S on deep sums.
func TestBiasGradBoundHoldsForTheKernelsStructure(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 36))
	for _, rows := range []int{1, 7, 64, 65, 1000, 5000} {
		for _, dist := range []string{"uniform", "normal", "wide", "positive"} {
			const cols = 5
			s := op.BiasGrad.MustShape(fmt.Sprintf("%dx%d", rows, cols))
			var dy []uint16
			if dist == "positive" {
				dy = randomF16(rng, rows*cols, "uniform")
				for i := range dy {
					dy[i] &^= 0x8000
				}
			} else {
				dy = randomF16(rng, rows*cols, dist)
			}
			db := make([]float32, cols)
			for j := range db {
				db[j] = float32(math.Ldexp(rng.NormFloat64(), rng.IntN(20)-10))
			}
			refs, err := Compute(context.Background(), op.BiasGrad, s, []Input{{F16: dy}, {F32: db}}, Arithmetic{})
			if err != nil {
				t.Fatal(err)
			}
			ref := refs[0]
			worst, looser := 0.0, math.Inf(1)
			for j := 0; j < cols; j++ {
				var sums []float32 // the block sums, then db
				var magnitude float64
				for b0 := 0; b0 < rows; b0 += BiasGradRowBlock {
					var block float32
					for i := b0; i < min(rows, b0+BiasGradRowBlock); i++ {
						block += f16.ToFloat32(dy[i*cols+j])
						magnitude += math.Abs(f16.ToFloat64(dy[i*cols+j]))
					}
					sums = append(sums, block)
				}
				sums = append(sums, db[j])
				for name, order := range orders(len(sums), rng) {
					got := accumulate32(sums, order, false)
					e := math.Abs(float64(got) - ref.Value[j])
					if e > ref.Bound[j] {
						t.Fatalf("M=%d, %s, block sums %s: column %d = %g errs by %g, over its bound %g", rows, dist, name, j, got, e, ref.Bound[j])
					}
					if ref.Bound[j] > 0 {
						worst = max(worst, e/ref.Bound[j])
					}
				}
				if ref.Bound[j] > 0 {
					looser = min(looser, Gamma(int64(rows), 0x1p-24)*(magnitude+math.Abs(float64(db[j])))/ref.Bound[j])
				}
			}
			t.Logf("M=%d, %s: worst error/bound %.3g; γ(M)·S is at least %.3g× the bound", rows, dist, worst, looser)
			if rows == 5000 && dist != "positive" && looser < 20 {
				t.Errorf("M=%d, %s: the bound is only %.3g× tighter than γ(M)·S", rows, dist, looser)
			}
		}
	}
}
