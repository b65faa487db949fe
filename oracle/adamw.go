package oracle

import (
	"context"
	"math"
	"math/rand/v2"

	"github.com/vkern/vkern/op"
)

func init() {
	mustRegister(op.AdamW, Spec{Compute: adamWCompute, Generate: adamWGenerate})
}

// scalarRelative bounds the relative error of the constants a kernel's host
// computes in binary64 before rounding them to binary32 (and of the
// oracle's own copies): 1 − βᵗ as −expm1(t·log β), with log and expm1
// within 1 ulp (glibc's and Go's), is within 2⁻⁵⁰ (the error of t·log β,
// near 2⁻⁵², passes to expm1 at most unamplified, since x/(eˣ − 1) ≤ 1);
// lr/(1 − β1ᵗ) and √(1 − β2ᵗ) add a rounding each.
const scalarRelative = 0x1p-48

// bounded32 is one quantity of the AdamW step: the oracle's binary64 value v,
// a bound o on |v − x| for the exact x, and a bound k on |x̂ − x| for a
// correct binary32 kernel's x̂. Its Bound as an output is k + o.
type bounded32 struct{ v, k, o float64 }

// hi and lo bound |x| from above and below.
func (a bounded32) hi() float64 { return math.Abs(a.v) + a.o }
func (a bounded32) lo() float64 { return math.Max(0, math.Abs(a.v)-a.o) }

// finite says whether the value is finite: an infinite or NaN value is the
// same in the kernel (no finite binary32 intermediate overflows, as the
// NonClaims say), so it carries no error.
func (a bounded32) finite() bool { return !math.IsInf(a.v, 0) && !math.IsNaN(a.v) }

// ieee is a result computed from a non-finite operand: IEEE gives
// the kernel the same special value, or the same signed zero (x/±Inf).
func ieee(v float64) bounded32 { return bounded32{v: v} }

// exact32 is a binary32 operand, exact.
func exact32(x float32) bounded32 { return bounded32{v: float64(x)} }

// scalar32 is a binary64 constant c̃ within rho·|c| of the exact c (rho = 0:
// c̃ = c), which the kernel's host computes as well as the oracle does and
// rounds to binary32. When every value within 2·rho·|c̃| of c̃ rounds to the
// same binary32 value, that is the kernel's constant.
func scalar32(c, rho float64) bounded32 {
	o := rho * math.Abs(c) * (1 + 2*rho)
	spread := 2 * o
	if float32(c-spread) == float32(c+spread) {
		return bounded32{v: c, o: o, k: math.Abs(float64(float32(c))-c) + o}
	}
	mag := math.Abs(c) + o
	return bounded32{v: c, o: o, k: o + u24*mag*(1+rho) + 0x1p-150}
}

// times is a·b rounded once: |âb̂ − ab| ≤ |a|·k_b + |b|·k_a + k_a·k_b, plus
// the rounding, u₂₄ of the result or 2⁻¹⁵⁰ among the subnormals.
func (a bounded32) times(b bounded32) bounded32 {
	v := a.v * b.v
	if !a.finite() || !b.finite() {
		return ieee(v)
	}
	A, B := a.hi(), b.hi()
	d := A*b.k + B*a.k + a.k*b.k
	return bounded32{v: v, k: d + u24*(A*B+d) + 0x1p-150, o: A*b.o + B*a.o + a.o*b.o + 2*U64*math.Abs(v) + 0x1p-1074}
}

// plus is a + b rounded once (a sum that lands among the subnormals is
// exact).
func (a bounded32) plus(b bounded32) bounded32 {
	v := a.v + b.v
	if !a.finite() || !b.finite() {
		return ieee(v)
	}
	o := a.o + b.o + 2*U64*math.Abs(v)
	d := a.k + b.k
	return bounded32{v: v, k: d + u24*(math.Abs(v)+o+d), o: o}
}

// minus is a − b rounded once.
func (a bounded32) minus(b bounded32) bounded32 { return a.plus(bounded32{v: -b.v, k: b.k, o: b.o}) }

// over is a/b rounded once: |â/b̂ − a/b| ≤ (k_a·|b| + |a|·k_b)/(|b|·|b̂|),
// with |b̂| ≥ |b| − k_b; unbounded where b̂ may be 0.
func (a bounded32) over(b bounded32) bounded32 {
	v := a.v / b.v
	if !a.finite() || !b.finite() {
		return ieee(v)
	}
	A, Bl := a.hi(), b.lo()
	if Bl <= b.k {
		return bounded32{v: v, k: math.Inf(1), o: math.Inf(1)}
	}
	d := a.k/(Bl-b.k) + A*b.k/(Bl*(Bl-b.k))
	o := a.o/Bl + A*b.o/(Bl*math.Abs(b.v)) + 2*U64*math.Abs(v) + 0x1p-1074
	return bounded32{v: v, k: d + u24*(A/Bl+d) + 0x1p-150, o: o}
}

// sqrt is √a for a ≥ 0, rounded once (sqrtf is correctly rounded):
// |√â − √a| ≤ min(√k_a, k_a/√a). Its result is never subnormal.
func (a bounded32) sqrt() bounded32 {
	v := math.Sqrt(a.v)
	if !a.finite() {
		return ieee(v)
	}
	spread := func(e float64) float64 {
		if l := a.lo(); l > 0 {
			return math.Min(math.Sqrt(e), e/math.Sqrt(l))
		}
		return math.Sqrt(e)
	}
	d := spread(a.k)
	o := spread(a.o) + 2*U64*v
	return bounded32{v: v, k: d + u24*(math.Sqrt(a.hi())+d), o: o}
}

// adamWConstants are the step's scalars, as the kernels take them: the
// parameters as given, and the ones the host computes in binary64.
type adamWConstants struct {
	scale, decay, beta1, keep1, beta2, keep2, stepSize, root2, eps bounded32
}

func newAdamWConstants(s op.Shape) adamWConstants {
	lr, wd, t := s.Value("lr"), s.Value("weight_decay"), s.Value("t")
	b1, b2 := s.Value("beta1"), s.Value("beta2")
	// 1 − β is exact for β ≥ ½ (Sterbenz), one rounding below.
	keep := func(b float64) bounded32 {
		if b >= 0.5 {
			return scalar32(1-b, 0)
		}
		return scalar32(1-b, U64)
	}
	correction1 := -math.Expm1(t * math.Log(b1))
	correction2 := -math.Expm1(t * math.Log(b2))
	return adamWConstants{
		scale:    scalar32(s.Value("grad_scale"), 0),
		decay:    scalar32(math.FMA(-lr, wd, 1), U64),
		beta1:    scalar32(b1, 0),
		keep1:    keep(b1),
		beta2:    scalar32(b2, 0),
		keep2:    keep(b2),
		stepSize: scalar32(lr/correction1, scalarRelative),
		root2:    scalar32(math.Sqrt(correction2), scalarRelative),
		eps:      scalar32(s.Value("eps"), 0),
	}
}

// step is one element's update: the new param, m and v.
func (c adamWConstants) step(param, grad, m, v float32) (p, m1, v1 bounded32) {
	g := exact32(grad).times(c.scale)
	p = exact32(param).times(c.decay)
	m1 = c.beta1.times(exact32(m)).plus(c.keep1.times(g))
	v1 = c.beta2.times(exact32(v)).plus(c.keep2.times(g.times(g)))
	denom := v1.sqrt().over(c.root2).plus(c.eps)
	p = p.minus(c.stepSize.times(m1.over(denom)))
	return p, m1, v1
}

// adamWCompute is the reference of adamw, torch.optim.AdamW's step in its
// order of operations:
//
//	g = grad·s;  p = p·(1 − lr·wd);  m = β1·m + (1 − β1)·g;  v = β2·v + (1 − β2)·g·g
//	p = p − η·(m / (√v / √c2 + eps)),  η = lr/c1,  cᵢ = 1 − βᵢᵗ;  p16 = f16(p).
//
// Bound, by running error analysis: each quantity x carries a bound k on a
// binary32 kernel's error in it (bounded32), propagated through each step,
// which rounds once (a fused multiply-add rounds less): for â = a + α,
// b̂ = b + β,
//
//	|âb̂ − ab| ≤ |a||β| + |b||α| + |αβ|,   |â/b̂ − a/b| ≤ (|α||b| + |a||β|)/(|b|(|b| − |β|)),
//	|√â − √a| ≤ min(√|α|, |α|/√a),
//
// plus u₂₄ of the result (2⁻¹⁵⁰ more for a product or quotient that lands
// among the subnormals), with |a|, |b| bounded by the oracle's values and
// errors. sqrtf and division are correctly rounded. The scalars are binary32
// roundings of binary64 values: s, β and eps as given, 1 − lr·wd by one fma,
// η and √c2 from cᵢ = −expm1(t·log βᵢ) (scalarRelative). The oracle's own
// binary64 error follows the same rules at u₆₄ and is added.
//
// IEEE specials follow the formula: a NaN or infinite gradient makes m, v and
// param NaN or infinite; an infinite v makes the update m/∞ = 0. Inputs for
// which a finite binary32 intermediate overflows are not claimed (NonClaims).
func adamWCompute(ctx context.Context, s op.Shape, in []Input, _ Arithmetic) ([]*Reference, error) {
	params, grads, ms, vs := in[0].F32, in[1].F32, in[2].F32, in[3].F32
	n := len(params)
	c := newAdamWConstants(s)
	p := &Reference{Value: make([]float64, n), Bound: make([]float64, n)}
	m := &Reference{Value: make([]float64, n), Bound: make([]float64, n)}
	v := &Reference{Value: make([]float64, n), Bound: make([]float64, n)}
	err := parallelRows(ctx, n, 64, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			pi, mi, vi := c.step(params[i], grads[i], ms[i], vs[i])
			p.Value[i], p.Bound[i] = pi.v, pi.k+pi.o
			m.Value[i], m.Bound[i] = mi.v, mi.k+mi.o
			v.Value[i], v.Bound[i] = vi.v, vi.k+vi.o
		}
	})
	if err != nil {
		return nil, err
	}
	// param16 is param rounded to f16: the same reference and bound before
	// the rounding.
	p16 := &Reference{Value: p.Value, Bound: p.Bound}
	return []*Reference{p, m, v, p16}, nil
}

// adamWGenerate draws param, grad and m from the distribution and v as the
// square of a draw (v ≥ 0, as the optimizer keeps it; zero often under
// Integer, so that the denominator is eps alone). Under Special it plants
// subnormals and zeros in every operand (one in 50 elements each), a NaN,
// a +Inf and a −Inf in grad, a NaN in m, a +Inf and a −Inf in param, a +Inf
// in v, and gradients of 10¹⁵ (over grad_scale where it is above 1), whose
// scaled squares stay in binary32's range.
func adamWGenerate(g *Gen) []Input {
	draw := g.Dist.Draw
	if g.Dist == Special {
		draw = Normal.Draw
	}
	square := func(r *rand.Rand) float64 { x := draw(r); return x * x }
	param, grad, m, v := g.F32(0, draw), g.F32(1, draw), g.F32(2, draw), g.F32(3, square)
	if g.Dist != Special {
		return []Input{{F32: param}, {F32: grad}, {F32: m}, {F32: v}}
	}
	r := g.Rand()
	n := len(param)
	at := func() int { return r.IntN(n) }
	for t := 0; t < max(1, n/50); t++ {
		for _, x := range [][]float32{param, grad, m} {
			x[at()] = randomSubnormal32(r)
			x[at()] = 0
		}
		v[at()] = float32(math.Abs(float64(randomSubnormal32(r))))
		v[at()] = 0
	}
	big := 1e15 / math.Max(1, g.Shape.Value("grad_scale"))
	for t := 0; t < max(1, n/1000); t++ {
		grad[at()] = float32(big * float64(1-2*r.IntN(2)))
	}
	inf := float32(math.Inf(1))
	grad[at()], grad[at()], grad[at()] = float32(math.NaN()), inf, -inf
	m[at()] = float32(math.NaN())
	param[at()], param[at()] = inf, -inf
	v[at()] = inf
	return []Input{{F32: param}, {F32: grad}, {F32: m}, {F32: v}}
}
