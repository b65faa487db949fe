package oracle

import (
	"context"
	"math"
	"testing"

	"github.com/vkern/vkern/op"
)

func TestGlobalNormBoundHoldsForBinary64SumsInAnyOrder(t *testing.T) {
	for _, text := range []string{"7", "4099", "65536"} {
		s := op.GlobalNorm.MustShape(text)
		for _, d := range []Dist{Integer, Uniform, Normal, Wide} {
			in, err := Generate(op.GlobalNorm, s, d, 3)
			if err != nil {
				t.Fatal(err)
			}
			refs, err := Compute(context.Background(), op.GlobalNorm, s, in, Arithmetic{})
			if err != nil {
				t.Fatal(err)
			}
			g := in[0].F32
			want, bound := refs[0].Value[0], refs[0].Bound[0]
			var forward, backward, f32 float64
			var single float32
			for i := range g {
				forward += float64(g[i]) * float64(g[i])
				x := float64(g[len(g)-1-i])
				backward += x * x
				single += g[i] * g[i]
			}
			f32 = float64(single)
			for name, sum := range map[string]float64{"forward": forward, "backward": backward} {
				if e := math.Abs(float64(float32(sum)) - want); e > bound {
					t.Errorf("%s %s: the %s binary64 sum is off by %.3g, over the bound %.3g", text, d, name, e, bound)
				}
			}
			// A binary32 sum is caught where its error has had room to grow.
			if e := math.Abs(f32 - want); d != Integer && len(g) >= 4099 && e <= bound {
				t.Errorf("%s %s: a binary32 sum is off by %.3g, within the bound %.3g", text, d, e, bound)
			}
		}
	}
}

func TestGlobalNormSpecials(t *testing.T) {
	s := op.GlobalNorm.MustShape("6")
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	for _, tt := range []struct {
		g     []float32
		sum   float64
		count float64
	}{
		{[]float32{1, 2, 3, 0, -1, 0}, 15, 0},
		{[]float32{1, -inf, 3, 0, inf, 0}, math.Inf(1), 2},
		{[]float32{1, -inf, nan, 0, inf, 0}, math.NaN(), 3},
		{[]float32{1e30, 1e30, 0, 0, 0, 0}, math.Inf(1), 0}, // 2·10⁶⁰ is past binary32's range
		{[]float32{0x1p-149, 0, 0, 0, 0, 0}, 0x1p-298, 0},   // rounds to 0 in binary32, within 2⁻¹⁵⁰
	} {
		refs, err := Compute(context.Background(), op.GlobalNorm, s, []Input{{F32: tt.g}}, Arithmetic{})
		if err != nil {
			t.Fatal(err)
		}
		got, count := refs[0].Value[0], refs[1].Value[0]
		same := got == tt.sum || math.IsNaN(got) && math.IsNaN(tt.sum)
		if !same || count != tt.count || refs[1].Bound[0] != 0 {
			t.Errorf("g = %v: sum %v, count %v (bound %v), want %v, %v (bound 0)", tt.g, got, count, refs[1].Bound[0], tt.sum, tt.count)
		}
		if b := refs[0].Bound[0]; !math.IsNaN(got) && !math.IsInf(got, 0) && b < math.Abs(got-float64(float32(got))) {
			t.Errorf("g = %v: bound %g is below the rounding to binary32 itself", tt.g, b)
		}
	}
}
