package oracle

import (
	"context"
	"math"
	"testing"

	"github.com/vkern/vkern/op"
)

// adamW32 is a binary32 AdamW kernel as the cpu and cuda kernels compute it,
// every operation rounded to binary32 by an explicit conversion (Go may
// not fuse across one); with fused set, the multiply-adds are fused
// instead, as nvcc and GCC may do. broken plants a defect by name.
type adamW32 struct {
	scale, decay, beta1, keep1, beta2, keep2, stepSize, root2, eps float32
	fused                                                          bool
	broken                                                         string
}

func newAdamW32(s op.Shape, fused bool, broken string) adamW32 {
	lr, wd, t := s.Value("lr"), s.Value("weight_decay"), s.Value("t")
	b1, b2 := s.Value("beta1"), s.Value("beta2")
	c1, c2 := -math.Expm1(t*math.Log(b1)), -math.Expm1(t*math.Log(b2))
	k := adamW32{
		scale: float32(s.Value("grad_scale")), decay: float32(math.FMA(-lr, wd, 1)),
		beta1: float32(b1), keep1: float32(1 - b1), beta2: float32(b2), keep2: float32(1 - b2),
		stepSize: float32(lr / c1), root2: float32(math.Sqrt(c2)), eps: float32(s.Value("eps")),
		fused: fused, broken: broken,
	}
	if broken == "no bias correction" {
		k.stepSize, k.root2 = float32(lr), 1
	}
	return k
}

// madd is a·b + c, fused or rounded twice.
func (k adamW32) madd(a, b, c float32) float32 {
	if k.fused {
		return float32(math.FMA(float64(a), float64(b), float64(c)))
	}
	return float32(float32(a*b) + c)
}

func (k adamW32) step(p, grad, m, v float32) (float32, float32, float32) {
	g := float32(grad * k.scale)
	decayed := float32(p * k.decay)
	m = k.madd(k.beta1, m, float32(k.keep1*g))
	v = k.madd(k.beta2, v, float32(k.keep2*float32(g*g)))
	if k.broken == "beta2 for m" {
		m = float32(float32(k.beta2*m) + float32(k.keep2*g))
	}
	denom := float32(float32(float32(math.Sqrt(float64(v)))/k.root2) + k.eps)
	if k.broken == "eps inside the root" {
		denom = float32(math.Sqrt(float64(float32(float32(v/float32(k.root2*k.root2)) + k.eps))))
	}
	q := float32(m / denom)
	return k.madd(-k.stepSize, q, decayed), m, v
}

func TestAdamWBoundHoldsForBinary32Kernels(t *testing.T) {
	shapes := append(append([]string(nil), op.AdamW.Shapes.Quick...), op.AdamW.Shapes.Default...)
	for _, text := range shapes {
		s := op.AdamW.MustShape(text)
		if s.Dims[0] > 65536 {
			continue
		}
		for _, d := range []Dist{Integer, Uniform, Normal, Wide, Special} {
			in, err := Generate(op.AdamW, s, d, 7)
			if err != nil {
				t.Fatal(err)
			}
			refs, err := Compute(context.Background(), op.AdamW, s, in, Arithmetic{})
			if err != nil {
				t.Fatal(err)
			}
			for _, fused := range []bool{false, true} {
				k := newAdamW32(s, fused, "")
				worst := [3]float64{}
				for i := range in[0].F32 {
					p, m, v := k.step(in[0].F32[i], in[1].F32[i], in[2].F32[i], in[3].F32[i])
					for j, got := range []float32{p, m, v} {
						want, bound := refs[j].Value[i], refs[j].Bound[i]
						if math.IsNaN(want) || math.IsInf(want, 0) {
							if !(math.IsNaN(want) && math.IsNaN(float64(got))) && float64(got) != want {
								t.Errorf("%s %s fused=%v element %d output %d: got %v, want %v", text, d, fused, i, j, got, want)
							}
							continue
						}
						e := math.Abs(float64(got) - want)
						if e > bound {
							t.Errorf("%s %s fused=%v element %d output %d: error %.3g over the bound %.3g", text, d, fused, i, j, e, bound)
						}
						if e > 0 {
							worst[j] = max(worst[j], e/bound)
						}
					}
				}
				t.Logf("%s %s fused=%v: worst error/bound param %.3f m %.3f v %.3f", text, d, fused, worst[0], worst[1], worst[2])
			}
		}
	}
}

func TestAdamWBoundCatchesDefects(t *testing.T) {
	for _, tt := range []struct{ broken, shape string }{
		{"no bias correction", "4099"},
		{"beta2 for m", "4099"},
		{"eps inside the root", "65536:eps=1e-3,beta1=0.5,beta2=0.95,t=3"},
	} {
		s := op.AdamW.MustShape(tt.shape)
		in, _ := Generate(op.AdamW, s, Normal, 1)
		refs, err := Compute(context.Background(), op.AdamW, s, in, Arithmetic{})
		if err != nil {
			t.Fatal(err)
		}
		k := newAdamW32(s, false, tt.broken)
		caught := 0
		for i := range in[0].F32 {
			p, m, _ := k.step(in[0].F32[i], in[1].F32[i], in[2].F32[i], in[3].F32[i])
			if math.Abs(float64(p)-refs[0].Value[i]) > refs[0].Bound[i] || math.Abs(float64(m)-refs[1].Value[i]) > refs[1].Bound[i] {
				caught++
			}
		}
		if caught == 0 {
			t.Errorf("%s at %s: every element within its bound", tt.broken, tt.shape)
		}
		t.Logf("%s at %s: %d of %d elements outside their bound", tt.broken, tt.shape, caught, len(in[0].F32))
	}
}

// The bias corrections are exact where β = 0 (0ᵗ = 0), and accurate where
// βᵗ is close to 1: at t = 1, 1 − β is exact in binary64 for β ≥ ½.
func TestAdamWCorrections(t *testing.T) {
	s := op.AdamW.MustShape("1:beta1=0,beta2=0.999999,lr=1")
	c := newAdamWConstants(s)
	if c.stepSize.v != 1 {
		t.Errorf("β1 = 0: step size %v, want lr/(1 − 0) = 1", c.stepSize.v)
	}
	beta2 := s.Value("beta2") // a variable: 1 − β2 is then binary64 arithmetic
	want := math.Sqrt(1 - beta2)
	if got := c.root2.v; math.Abs(got-want) > 0x1p-48*want {
		t.Errorf("√(1 − β2) = %.17g, want %.17g", got, want)
	}
}
