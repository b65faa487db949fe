package oracle

import (
	"math"
	"testing"
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
