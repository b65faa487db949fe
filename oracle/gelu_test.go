package oracle

import (
	"math"
	"testing"

	"github.com/vkern/vkern/f16"
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
// form in binary32 at every finite f16 x, with its exp2f and its two
// divisions each 2 ulps off either way (the CUDA Math API's claims) in
// all four combinations, and holds gelu and gelu′ to geluValue's and
// geluGradFactor's bounds. It fails if the derivation in geluLogistic
// misses a term the arithmetic makes.
func TestGELULogisticFormWithinItsBounds(t *testing.T) {
	const (
		a  = float32(-2.302208198)
		b  = float32(-0.1029432396)
		w1 = float32(1.595769122)
		w3 = float32(0.2140644488)
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
		for _, off := range [][2]int{{-2, -2}, {-2, 2}, {2, -2}, {2, 2}} {
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
			if ybound > 0 {
				worstY = max(worstY, math.Abs(float64(yk)-y)/ybound)
			}
			worstG = max(worstG, math.Abs(float64(gk)-g)/(eg+own(g)+own(second)))
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
	t.Logf("worst error over its bound: gelu %.3f, gelu′ %.3f", worstY, worstG)
}
