package oracle

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
)

// TestGELUConstants checks the constants of the GELU epilogue's bound
// (geluOfInexact) on a grid of step 10⁻⁴: |gelu′| stays under geluSlope
// and s·sech²(s) under 0.448. Between grid points neither moves by more
// than 10⁻⁴ times its derivative's bound (|gelu″| < 2, |(s·sech² s)′| ≤ 1),
// which the margins cover; past |x| = 20, gelu′ is 0 or 1 and s·sech² s
// under 10⁻¹⁵.
func TestGELUConstants(t *testing.T) {
	var slope, peak float64
	for i := -200000; i <= 200000; i++ {
		x := float64(i) * 1e-4
		g, _, _ := geluGradFactor(x)
		slope = max(slope, math.Abs(g))
		if x > 0 {
			c := 1 / math.Cosh(x)
			peak = max(peak, x*c*c)
		}
	}
	if slope+2e-4 > geluSlope {
		t.Errorf("max |gelu′| on the grid is %.6f: geluSlope %.2f leaves no margin", slope, geluSlope)
	}
	if peak+1e-4 > 0.448 {
		t.Errorf("max s·sech²(s) on the grid is %.6f: 0.448 leaves no margin", peak)
	}
	t.Logf("max |gelu′| %.6f, max s·sech²(s) %.6f", slope, peak)
}

// TestGELUEMax checks geluEMax against geluParts on the grid of
// TestGELUConstants; between grid points the bound moves by less than the
// margin (its terms are sech² and |t|·sech² times constants of 2⁻²⁰).
func TestGELUEMax(t *testing.T) {
	worst := 0.0
	for i := -200000; i <= 200000; i++ {
		_, _, e := geluParts(float64(i) * 1e-4)
		worst = max(worst, e)
	}
	if worst*(1+1e-3) > geluEMax {
		t.Errorf("geluParts' bound reaches %.6g on the grid: geluEMax %.6g leaves no margin", worst, geluEMax)
	}
	t.Logf("max bound %.6g, geluEMax %.6g", worst, geluEMax)
}

// TestGELULogisticFormWithinItsBounds evaluates cuda/gelu.cuh's logistic
// form in binary32 at every finite f16 x, its exp2f and its two divisions
// each the correctly rounded result moved 3 ulps either way (within 3.5
// ulps of the exact value, under the 4 the bounds allow; the CUDA Math
// API claims 2) in all four combinations. It holds gelu and gelu′ to
// geluValue's and geluGradFactor's bounds, and to geluLogistic's own
// against the logistic form evaluated in float64 (σ = 1/(1 + e^(−2t)) and
// 1 − σ = 1/(1 + e^(2t)), which do not cancel where tanh t rounds to −1).
// The worst errors come to 0.86 (gelu) and 0.72 (gelu′) of geluLogistic's
// bounds; moved 4 ulps (4.5 from the exact value, past the allowance) gelu
// reaches 1.10 of it, so the division's term is tight. Leaving out
// expRelative, or the division's error from the forward's bound, fails the
// test; a single rounding's term (u₂₄) it cannot show missing, since these
// inputs do not line the roundings up to their worst case.
func TestGELULogisticFormWithinItsBounds(t *testing.T) {
	// gelu.cuh's kGeluA, kGeluB, kGeluW1 and kGeluW3: these expressions
	// rounded to binary32, as its literals are.
	var (
		a  = float32(-2 * geluC * math.Log2E)
		b  = float32(-2 * geluC * geluK * math.Log2E)
		w1 = float32(2 * geluC)
		w3 = float32(6 * geluC * geluK)
	)
	fma := func(x, y, z float32) float32 { return float32(math.FMA(float64(x), float64(y), float64(z))) }
	ulps := func(v float32, n int) float32 {
		if v == 0 || math.IsInf(float64(v), 0) {
			return v // a relative error leaves these as they are
		}
		dir := float32(math.Inf(1))
		if n < 0 {
			dir, n = float32(math.Inf(-1)), -n
		}
		for ; n > 0; n-- {
			v = math.Nextafter32(v, dir)
		}
		return v
	}
	bad, worstY, worstG := 0, 0.0, 0.0
	for h := 0; h < 1<<16; h++ {
		xf := f16.ToFloat64(uint16(h))
		if math.IsInf(xf, 0) || math.IsNaN(xf) {
			continue
		}
		x := float32(xf)
		y, ybound := geluValue(xf)
		g, eg, second := geluGradFactor(xf)
		// The logistic form's own reference and bounds.
		tt := geluC * (xf + geluK*xf*xf*xf)
		sig, q := 1/(1+math.Exp(-2*tt)), 1/(1+math.Exp(2*tt))
		wl := xf * (2*geluC + 6*geluC*geluK*xf*xf)
		yl, gl := xf*sig, sig*(1+wl*q)
		lb := geluLogistic(xf, tt)
		ylBound := 0.5*math.Abs(xf)*lb.eT + own(yl)
		glBound := lb.eg + own(gl) + own(sig*math.Abs(wl)*q)
		for _, off := range [][2]int{{-3, -3}, {-3, 3}, {3, -3}, {3, 3}} {
			x2 := x * x
			e := ulps(float32(math.Exp2(float64(x*fma(b, x2, a)))), off[0])
			d := 1 + e
			div := func(n float32) float32 {
				if d > 0x1p126 {
					return 0 // __fdividef past 2¹²⁶
				}
				return ulps(float32(float64(n)/float64(d)), off[1])
			}
			yk := div(x)
			s := div(1)
			q := e * s
			if !(q < 1) {
				q = 1 // CUDA's fminf: NaN (Inf·0) gives the other argument
			}
			w := x * fma(w3, x2, w1)
			gk := s * fma(w, q, 1)
			if ylBound > 0 {
				worstY = max(worstY, math.Abs(float64(yk)-yl)/ylBound)
			}
			worstG = max(worstG, math.Abs(float64(gk)-gl)/glBound)
			if d := math.Abs(float64(yk) - yl); !(d <= ylBound) {
				if bad++; bad <= 5 {
					t.Errorf("gelu(%g) = %g, %g off the logistic form's %g, past geluLogistic's bound %g (exp2f %+d ulps, division %+d)", xf, yk, d, yl, ylBound, off[0], off[1])
				}
			}
			if d := math.Abs(float64(gk) - gl); !(d <= glBound) {
				if bad++; bad <= 5 {
					t.Errorf("gelu′(%g) = %g, %g off the logistic form's %g, past geluLogistic's bound %g (exp2f %+d ulps, division %+d)", xf, gk, d, gl, glBound, off[0], off[1])
				}
			}
			if d := math.Abs(float64(yk) - y); !(d <= ybound) {
				if bad++; bad <= 5 {
					t.Errorf("gelu(%g) = %g, %g off the reference %g, past its bound %g (exp2f %+d ulps, division %+d)", xf, yk, d, y, ybound, off[0], off[1])
				}
			}
			if d := math.Abs(float64(gk) - g); !(d <= eg+own(g)+own(second)) {
				if bad++; bad <= 5 {
					t.Errorf("gelu′(%g) = %g, %g off the reference %g, past its bound %g (exp2f %+d ulps, division %+d)", xf, gk, d, g, eg, off[0], off[1])
				}
			}
		}
	}
	if bad > 5 {
		t.Errorf("%d results past their bounds in all", bad)
	}
	t.Logf("worst error over geluLogistic's bound: gelu %.3f, gelu′ %.3f", worstY, worstG)
}

// TestGELUGradOfAnInfiniteDyWhereGIsNearZero: with dy = +Inf, gelu_grad's
// reference is +Inf·g where g is clear of its bound (x = 1, −1, −3), and
// undetermined (NaN with an infinite bound) for x ≪ 0, where the float64
// tanh is −1 and g is 0 while a kernel's ĝ is not (x = −8 on the logistic
// form), or the reverse (x = −6 on a binary32 tanh that rounds to −1).
func TestGELUGradOfAnInfiniteDyWhereGIsNearZero(t *testing.T) {
	xs := []float64{1, -1, -3, -6, -8, -10}
	in := []Input{{F16: make([]uint16, len(xs))}, {F16: make([]uint16, len(xs))}}
	for i, x := range xs {
		in[0].F16[i] = f16.FromFloat64(x)
		in[1].F16[i] = f16.FromFloat64(math.Inf(1))
	}
	s, err := op.GELUGrad.ParseShape(fmt.Sprint(len(xs)))
	if err != nil {
		t.Fatal(err)
	}
	refs, err := geluGradCompute(context.Background(), s, in, Arithmetic{})
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range xs {
		v, b := refs[0].Value[i], refs[0].Bound[i]
		undetermined := math.IsNaN(v) && math.IsInf(b, 1)
		if want := x <= -6; undetermined != want {
			t.Errorf("gelu_grad(x %g, dy +Inf): reference %g ± %g, undetermined %v, want %v", x, v, b, undetermined, want)
		}
		if x > -6 && !(math.IsInf(v, 0) && (v > 0) == (x > -0.7518)) {
			t.Errorf("gelu_grad(x %g, dy +Inf): reference %g, want the infinity of gelu′'s sign", x, v)
		}
	}
}
