package oracle

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
)

// lnKernelSim is a binary32 layernorm kernel simulated in Go: the mean and
// variance two-pass or one-pass (Σx, Σx², clamped at 0), each sum in the
// order given, and the reciprocal square root pushed rsqrtULPs ulps off.
type lnKernelSim struct {
	name      string
	onePass   bool
	order     func(n int, rng *rand.Rand) []int
	rsqrtULPs int
}

func ascending(n int, _ *rand.Rand) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = i
	}
	return o
}

func descending(n int, _ *rand.Rand) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = n - 1 - i
	}
	return o
}

func shuffled(n int, rng *rand.Rand) []int { return rng.Perm(n) }

// ulps moves v by k binary32 ulps (toward +Inf for k > 0).
func ulps(v float32, k int) float32 {
	for ; k > 0; k-- {
		v = math.Nextafter32(v, float32(math.Inf(1)))
	}
	for ; k < 0; k++ {
		v = math.Nextafter32(v, float32(math.Inf(-1)))
	}
	return v
}

func (k lnKernelSim) row(x []float32, w, b []float32, eps float32, order []int) (y []float32, mean, rstd float32) {
	n := float32(len(x))
	var sum, squares float32
	for _, j := range order {
		sum += x[j]
		squares += x[j] * x[j]
	}
	mean = sum / n
	var variance float32
	if k.onePass {
		variance = squares/n - mean*mean
		if variance < 0 {
			variance = 0
		}
	} else {
		var s float32
		for _, j := range order {
			d := x[j] - mean
			s += d * d
		}
		variance = s / n
	}
	rstd = ulps(float32(1/math.Sqrt(float64(variance+eps))), k.rsqrtULPs)
	y = make([]float32, len(x))
	for j := range x {
		y[j] = (x[j]-mean)*rstd*w[j] + b[j]
	}
	return y, mean, rstd
}

func f32Values(hs []uint16) []float32 {
	out := make([]float32, len(hs))
	for i, h := range hs {
		out[i] = f16.ToFloat32(h)
	}
	return out
}

// worstRatio folds |got − want|/bound into worst; a finite got must meet a
// finite bound, and a non-finite want must be matched exactly.
func worstRatio(t *testing.T, what string, got float32, want, bound float64, worst *float64) {
	t.Helper()
	g := float64(got)
	switch {
	case math.IsNaN(want):
		if !math.IsNaN(g) {
			t.Fatalf("%s = %v, want NaN", what, g)
		}
	case math.IsInf(want, 0):
		if g != want {
			t.Fatalf("%s = %v, want %v", what, g, want)
		}
	case math.IsInf(bound, 1):
	default:
		e := math.Abs(g - want)
		if e > bound {
			t.Fatalf("%s = %v, reference %v: error %.3g over the bound %.3g", what, g, want, e, bound)
		}
		if e > 0 {
			*worst = max(*worst, e/bound)
		}
	}
}

func TestLayerNormBoundHoldsForTwoPassAndOnePassKernels(t *testing.T) {
	kernels := []lnKernelSim{
		{"two-pass ascending, rsqrt +2 ulps", false, ascending, 2},
		{"two-pass descending, rsqrt −2 ulps", false, descending, -2},
		{"two-pass shuffled, exact rsqrt", false, shuffled, 0},
		{"one-pass ascending, rsqrt +2 ulps", true, ascending, 2},
		{"one-pass shuffled, rsqrt −2 ulps", true, shuffled, -2},
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, shape := range []string{"1x1", "1x2", "7x769", "64x768", "3x4099:eps=1e-3", "2x65537"} {
		s, err := op.LayerNorm.ParseShape(shape)
		if err != nil {
			t.Fatal(err)
		}
		rows, cols := int(s.Dims[0]), int(s.Dims[1])
		eps := s.Value("eps")
		for _, d := range []Dist{Integer, Uniform, Normal, Wide, Special} {
			in, err := Generate(op.LayerNorm, s, d, 1)
			if err != nil {
				t.Fatal(err)
			}
			refs, err := Compute(context.Background(), op.LayerNorm, s, in, Arithmetic{})
			if err != nil {
				t.Fatal(err)
			}
			w, b := f32Values(in[1].F16), f32Values(in[2].F16)
			for _, k := range kernels {
				var worstY, worstMean, worstRstd float64
				for r := 0; r < rows; r++ {
					x := f32Values(in[0].F16[r*cols : (r+1)*cols])
					y, mean, rstd := k.row(x, w, b, float32(eps), k.order(cols, rng))
					worstRatio(t, "mean", mean, refs[1].Value[r], refs[1].Bound[r], &worstMean)
					worstRatio(t, "rstd", rstd, refs[2].Value[r], refs[2].Bound[r], &worstRstd)
					for j := range y {
						i := r*cols + j
						worstRatio(t, "y", y[j], refs[0].Value[i], refs[0].Bound[i], &worstY)
					}
				}
				t.Logf("%s %s %s: worst error/bound y %.3g, mean %.3g, rstd %.3g", shape, d, k.name, worstY, worstMean, worstRstd)
			}
		}
	}
}

// lnGradSim is a binary32 layernorm_grad kernel simulated in Go, its sums
// in the order given.
func lnGradSim(dy, x, w []float32, mean, rstd float32, order []int) []float32 {
	n := float32(len(x))
	var a, c float32
	for _, j := range order {
		g := w[j] * dy[j]
		a += g
		c += g * ((x[j] - mean) * rstd)
	}
	a /= n
	c /= n
	dx := make([]float32, len(x))
	for j := range x {
		xh := (x[j] - mean) * rstd
		dx[j] = (w[j]*dy[j] - a - xh*c) * rstd
	}
	return dx
}

func TestLayerNormGradBoundHoldsInAnyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	orders := map[string]func(int, *rand.Rand) []int{"ascending": ascending, "descending": descending, "shuffled": shuffled}
	for _, shape := range []string{"1x1", "1x2", "7x769", "64x768", "300x64", "2x65537", "1x1:residual=1", "7x769:residual=1", "64x768:residual=1",
		"7x769:dx_sum=1", "64x768:residual=1,dx_sum=1", "300x64:residual=1,dx_sum=1"} {
		s, err := op.LayerNormGrad.ParseShape(shape)
		if err != nil {
			t.Fatal(err)
		}
		rows, cols := int(s.Dims[0]), int(s.Dims[1])
		for _, d := range []Dist{Integer, Uniform, Normal, Wide, Special} {
			in, err := Generate(op.LayerNormGrad, s, d, 1)
			if err != nil {
				t.Fatal(err)
			}
			for r, rs := range in[4].F32 {
				if !(rs > 0) || math.IsInf(float64(rs), 0) || math.IsNaN(float64(in[3].F32[r])) {
					t.Fatalf("%s %s: row %d has mean %v and rstd %v; want finite, rstd > 0", shape, d, r, in[3].F32[r], rs)
				}
			}
			refs, err := Compute(context.Background(), op.LayerNormGrad, s, in, Arithmetic{})
			if err != nil {
				t.Fatal(err)
			}
			dy, x, w, res := f32Values(in[0].F16), f32Values(in[1].F16), f32Values(in[2].F16), f32Values(in[5].F16)
			for name, order := range orders {
				var worstDx, worstDw, worstDb, worstDxs float64
				all := make([]float32, rows*cols) // the f32 dx values, for dxs
				for r := 0; r < rows; r++ {
					row := dy[r*cols : (r+1)*cols]
					dx := lnGradSim(row, x[r*cols:(r+1)*cols], w, in[3].F32[r], in[4].F32[r], order(cols, rng))
					for j := range dx {
						i := r*cols + j
						if len(res) > 0 {
							dx[j] = res[i] + dx[j] // the kernel's one f32 addition
						}
						worstRatio(t, "dx", dx[j], refs[0].Value[i], refs[0].Bound[i], &worstDx)
						all[i] = dx[j]
					}
				}
				rowOrder := order(rows, rng)
				for j := 0; j < cols; j++ {
					dw, db := in[6].F32[j], in[7].F32[j]
					for _, r := range rowOrder {
						dw += dy[r*cols+j] * ((x[r*cols+j] - in[3].F32[r]) * in[4].F32[r])
						db += dy[r*cols+j]
					}
					worstRatio(t, "dw", dw, refs[1].Value[j], refs[1].Bound[j], &worstDw)
					worstRatio(t, "db", db, refs[2].Value[j], refs[2].Bound[j], &worstDb)
					if s.Int("dx_sum") == 1 {
						dxs := in[8].F32[j]
						for _, r := range rowOrder {
							dxs += all[r*cols+j]
						}
						worstRatio(t, "dxs", dxs, refs[3].Value[j], refs[3].Bound[j], &worstDxs)
					}
				}
				t.Logf("%s %s %s: worst error/bound dx %.3g, dw %.3g, db %.3g, dxs %.3g", shape, d, name, worstDx, worstDw, worstDb, worstDxs)
			}
		}
	}
}
