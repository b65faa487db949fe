package oracle

import (
	"context"
	"math"
	"math/rand/v2"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
)

// u24 is binary32's unit roundoff under round-to-nearest: every binary32
// addition, multiplication and division of the elementwise kernels is within
// u24 of its exact result (relative); a fused multiply-add rounds once
// where the two steps it replaces round twice, so the bounds below, which
// count both, hold for kernels that fuse too.

// tanhULPs is the error the elementwise bounds allow a kernel's binary32
// tanh: 4 ulps, twice what glibc's tanhf (its libm-test-ulps for x86_64) and
// CUDA's tanhf (the CUDA Math API's table) claim. An ulp of a result in
// (−1, 1) is at most 2⁻²³ times it, so tanhf's result is within a relative
// 2⁻²¹ of tanh of its argument.
const tanhRelative = 4 * 0x1p-23

// GELU's constants: c = √(2/π) and k = 0.044715 (GPT-2's, and PyTorch's
// approximate='tanh').
const (
	geluC = 0.7978845608028654
	geluK = 0.044715
)

func init() {
	mustRegister(op.Add, Spec{Compute: addCompute, Generate: addGenerate})
	mustRegister(op.GELU, Spec{Compute: geluCompute})
	mustRegister(op.GELUGrad, Spec{Compute: geluGradCompute})
}

// elementwise computes one output of n elements, element i by fn, on every
// core.
func elementwise(ctx context.Context, n int, fn func(i int) (value, bound float64)) ([]*Reference, error) {
	ref := &Reference{Value: make([]float64, n), Bound: make([]float64, n)}
	err := parallelRows(ctx, n, 16, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			ref.Value[i], ref.Bound[i] = fn(i)
		}
	})
	if err != nil {
		return nil, err
	}
	return []*Reference{ref}, nil
}

// addCompute is the reference of add: y = a + b.
//
// Bound. The sum of two f16 values is exact in float64 (their exponents
// differ by at most 40, and each has 11 significant bits), so Value is
// exact. A binary32 kernel rounds the sum once (|error| ≤ u₂₄·|a + b|)
// before rounding it to f16; one that adds in f16 rounds only once. Either
// way Bound = u₂₄·|a + b|. IEEE specials follow the formula: NaN and
// +Inf + −Inf give NaN; a sum of 65520 or more overflows f16 to Inf.
func addCompute(ctx context.Context, s op.Shape, in []Input, _ Arithmetic) ([]*Reference, error) {
	a, b := in[0].F16, in[1].F16
	return elementwise(ctx, len(a), func(i int) (float64, float64) {
		v := f16.ToFloat64(a[i]) + f16.ToFloat64(b[i])
		return v, u24 * math.Abs(v)
	})
}

// addGenerate draws add's inputs: under Rounding, whole numbers in
// [−2048, 2048], exact in f16, whose sums up to 4096 land where f16 must
// round (every odd sum past 2048 a tie); under Special, the scattered
// specials plus pairs of 60000 whose sum overflows f16; each distribution's
// values otherwise.
func addGenerate(g *Gen) []Input {
	switch g.Dist {
	case Rounding:
		draw := func(r *rand.Rand) float64 { return float64(r.IntN(4097) - 2048) }
		return []Input{{F16: g.F16(0, draw)}, {F16: g.F16(1, draw)}}
	case Special:
		in := g.Default()
		a, b := in[0].F16, in[1].F16
		for t := 0; t < max(1, len(a)/100); t++ {
			i := g.Rand().IntN(len(a))
			a[i], b[i] = big, big
		}
		return in
	}
	return g.Default()
}

// geluParts are the exact T = tanh(t), t = c·(x + k·x³), and how far a
// kernel's binary32 T̂ may lie from T, in either form a backend evaluates
// GELU in: the larger of the two bounds below.
//
// The tanh form (cpu/gelu.h): the kernel's t̂ takes at most 7 roundings
// (x², x³ or k·x², the product with k, the sum with x or with 1, the
// product with c or with x, and the rounding of c and k to binary32), on
// terms of one sign, so t̂ = t·(1 + θ), |θ| ≤ γ₂₄(8). By the mean value
// theorem, with sech² decreasing in |t|, |tanh(t̂) − tanh(t)| ≤
// sech²(|t|(1 − θ))·|t|·θ = Δ, and tanhf adds a relative 2⁻²¹
// (tanhRelative): |T̂ − T| ≤ Δ + 2⁻²¹·(|T| + Δ).
//
// The logistic form (cuda/gelu.cuh), whose T̂ is 2σ̂ − 1: geluLogistic.
func geluParts(x float64) (t, T, e float64) {
	t, T, e = geluTanhParts(x)
	return t, T, max(e, geluLogistic(x, t).eT)
}

// geluTanhParts are geluParts' t and T and the tanh form's bound alone.
func geluTanhParts(x float64) (t, T, e float64) {
	t = geluC * (x + geluK*x*x*x)
	T = math.Tanh(t)
	theta := Gamma(8, u24)
	at := math.Abs(t)
	sech := 1 / math.Cosh(at*(1-theta))
	delta := sech * sech * at * theta
	if math.IsInf(at, 0) || math.IsNaN(delta) {
		delta = 0 // tanh(±Inf) = ±1 exactly, as tanhf gives
	}
	return t, T, delta + tanhRelative*(math.Abs(T)+delta)
}

// expRelative and divRelative are the errors the GELU bounds allow the
// logistic form's 2^z and __fdividef: 4 ulps each, twice the 2 ulps the
// CUDA Math API's table gives exp2f and __fdividef (__fdividef's for
// divisors up to 2¹²⁶, past which it returns 0; geluLogistic keeps to that
// range). The cuda backend's 2^z is ex2.approx.ftz.f32, the MUFU.EX2 that
// exp2f compiles to wherever 2^z is normal (docs/gelu-ex2-ftz-h100), with
// results below 2⁻¹²⁶ flushed to 0.
const (
	expRelative = 4 * 0x1p-23
	divRelative = 4 * 0x1p-23
)

// logisticBounds are geluLogistic's: eT bounds |T̂ − T| for T̂ = 2σ̂ − 1,
// eg bounds |ĝ − g|, ĝ the kernel's gelu′(x).
type logisticBounds struct{ eT, eg float64 }

// geluLogistic bounds the logistic form of GELU (cuda/gelu.cuh) at an
// exact x, t = c·(x + k·x³):
//
//	σ̂ = fl÷(1, fl(1 + Ê)),   Ê = ex2(ẑ),   ẑ = fl(x·fl(b·fl(x²) + a)),
//	gelu:  fl÷(x, fl(1 + Ê)) = x·σ̂,
//	gelu′: ĝ = fl(σ̂·p̂), p̂ = fl(ŵ·q̂ + 1), q̂ = min(fl(Ê·σ̂), 1), ŵ = fl(x·fl(6ck·x² + 2c)),
//
// against σ = 1/(1 + E), E = 2^z, z = −2t·log₂e, q = 1 − σ = E·σ, w = 2x·c·(1 + 3k·x²),
// g = σ·(1 + w·q) = gelu′(x), fl÷ a division within divRelative.
//
// Where |z| ≤ 124: ẑ = z·(1 + θ), |θ| ≤ γ₂₄(5) (x², the fused
// multiply-add, the product with x, the roundings of a and b; the terms
// are of one sign), so Ê = E·φ with |φ − 1| ≤ Φ = e^(2|t|·γ₂₄(5))·(1 +
// expRelative) − 1, and Ê ≤ 2¹²⁵ keeps the divisor in __fdividef's range.
// fl(1 + Ê) = (1 + E·φ)(1 + δ) and (1 + E·φ)/(1 + E) = 1 + q·(φ − 1), so
// σ̂ = σ·(1 + ρ) with |ρ| ≤ R = (1 + divRelative)/((1 − q·Φ)(1 − u₂₄)) − 1,
// and |T̂ − T| = 2σ·|ρ| ≤ 2σ·R. Then fl(Ê·σ̂) = q·φ(1 + ρ)(1 + δ), within
// e_q = q·((1 + Φ)(1 + R)(1 + u₂₄) − 1) of q (the min with 1 only brings
// it closer); ŵ within γ₂₄(5)·|w| of w; p̂ within e_p = e_wq + u₂₄·(|p| +
// e_wq) of p, e_wq = |w|·(γ₂₄(5)·(q + e_q) + e_q) (one rounding: the fused
// multiply-add); and ĝ within σ(1 + R)·e_p + |p|·σ·R + u₂₄·σ(1 + R)·(|p| +
// e_p) of g.
//
// Where z < −124 (x ≫ 0): Ê ≤ 2⁻¹²³ (within exp2f's 2 ulps of a subnormal
// or not, or 0 where EX2 flushes it), fl(1 + Ê) = 1, so |σ̂ − σ| ≤ divRelative + 2⁻¹²⁴, within
// R = divRelative + 2⁻¹¹⁹ of σ relative (σ ≥ 1 − 2⁻¹²⁴); q̂ ≤ 2⁻¹²² and q < 2⁻¹²⁴,
// so e_q = 2⁻¹²¹ absolute; the steps from ŵ on are as above. Where
// z > 124 (x ≪ 0): σ < 2⁻¹²⁴ and σ̂ ≤ 2⁻¹²³ or 0, |T̂ − T| ≤ 2⁻¹²⁰, and
// |p̂| ≤ (1 + |w|)·(1 + 2⁻²⁰), so |ĝ − g| ≤ 2⁻¹²⁰·(1 + |w|). Infinite and
// NaN x give zero bounds: their results are specials (geluCompute).
func geluLogistic(x, t float64) logisticBounds {
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return logisticBounds{}
	}
	g5 := Gamma(5, u24)
	w := x * (2*geluC + 6*geluC*geluK*x*x)
	z := -2 * t * math.Log2E
	if z > 124 {
		return logisticBounds{eT: 0x1p-120, eg: 0x1p-120 * (1 + math.Abs(w))}
	}
	// σ and q = 1 − σ, each without cancellation.
	sigma, q := 1/(1+math.Exp(-2*t)), 1/(1+math.Exp(2*t))
	var r, eq float64
	if z < -124 {
		r, eq = divRelative+0x1p-119, 0x1p-121
	} else {
		phi := math.Exp(2*math.Abs(t)*g5)*(1+expRelative) - 1
		r = (1+divRelative)/((1-q*phi)*(1-u24)) - 1
		eq = q * ((1+phi)*(1+r)*(1+u24) - 1)
	}
	aw := math.Abs(w)
	p := math.Abs(1 + w*q)
	ewq := aw * (g5*(q+eq) + eq)
	ep := ewq + u24*(p+ewq)
	return logisticBounds{
		eT: 2 * sigma * r,
		eg: sigma*(1+r)*ep + p*sigma*r + u24*sigma*(1+r)*(p+ep),
	}
}

// geluEMax bounds geluParts' e over every argument. The tanh form's is
// at most 0.448·γ₂₄(8) + 2⁻²¹·(1 + 0.448·γ₂₄(8)) (max s·sech²(s) < 0.448).
// The logistic form's 2σR is, to first order, 2σ·(divRelative + u₂₄) +
// 2σq·Φ, and 2σq·Φ ≤ ½sech²(t)·(2|t|·γ₂₄(5) + expRelative)·(1 + 10⁻⁴)
// ≤ 0.448·γ₂₄(5) + ½·expRelative, with a hundredth over for the second
// order; TestGELUEMax checks geluParts against it on a fine grid.
var geluEMax = max(
	0.448*Gamma(8, u24)+tanhRelative*(1+0.448*Gamma(8, u24)),
	1.01*(2*(divRelative+u24)+0.448*Gamma(5, u24)+0.5*expRelative))

// own is the oracle's float64 error on a result of magnitude v: math.Tanh
// and math.Cosh are within an ulp, and the few float64 operations around
// them add a few more; 2⁻⁴⁸ relative covers them with room.
func own(v float64) float64 { return 0x1p-48 * math.Abs(v) }

// geluCompute is the reference of gelu: y = ½x·(1 + T), T as geluParts.
//
// Bound. From |T̂ − T| ≤ E (geluParts), the kernel's 1 + T̂ is within
// E_S = E + u·(|1 + T| + E) of 1 + T (one rounding), and ŷ = fl(½x·Ŝ) (½x
// exact) within ½|x|·E_S + u·½|x|·(|1 + T| + E_S) of y. The logistic
// form's ŷ = x·σ̂ = ½x·(1 + T̂) exactly (its division's error is in σ̂),
// within ½|x|·E of y, which the same bound covers. Near x → −∞,
// 1 + T cancels: the bound is then absolute, ½|x|·E, as it must be.
// IEEE specials follow the formula: NaN gives NaN, +Inf gives +Inf, −Inf
// gives NaN (½·(−Inf)·(1 − 1)).
func geluCompute(ctx context.Context, s op.Shape, in []Input, _ Arithmetic) ([]*Reference, error) {
	xs := in[0].F16
	return elementwise(ctx, len(xs), func(i int) (float64, float64) {
		return geluValue(f16.ToFloat64(xs[i]))
	})
}

// geluValue is gelu(x) for an exact x and its bound (geluCompute's).
func geluValue(x float64) (y, bound float64) {
	_, T, e := geluParts(x)
	y = 0.5 * x * (1 + T)
	one := math.Abs(1 + T)
	eS := e + u24*(one+e)
	return y, 0.5*math.Abs(x)*(eS+u24*(one+eS)) + own(y)
}

// geluGradCompute is the reference of gelu_grad: dx = dy·g,
// g = ½(1 + T) + ½x·s·i, s = 1 − T², i = c·(1 + 3k·x²).
//
// Bound. For the tanh form (cpu/gelu.h), with |T̂ − T| ≤ E (geluParts):
//   - ŝ = fl(1 − fl(T̂²)) is within e_s = (2|T| + E)·E + u·(|T| + E)² +
//     u·(|s| + (2|T| + E)·E + u·(|T| + E)²) of s (two roundings);
//   - î is within γ₂₄(6)·i of i (x², the product with 3k, the sum with 1,
//     the product with c, and the rounding of 3k and c);
//   - the second term, two products, within
//     e₂ = ½|x|·(e_s·i + |s|·e_i + e_s·e_i + γ₂₄(2)·(|s| + e_s)·(i + e_i));
//   - the first, ½(1 + T̂), within e₁ = ½·(E + u·(|1 + T| + E));
//   - their sum within e_g = e₁ + e₂ + u·(|g| + e₁ + e₂);
//   - dx = fl(dy·ĝ) within |dy|·e_g + u·|dy|·(|g| + e_g).
//
// For the logistic form (cuda/gelu.cuh), e_g is geluLogistic's, and dx as
// above; geluGradFactor takes the larger e_g.
//
// IEEE specials follow the formula: NaN anywhere gives NaN; x = ±Inf gives
// ½·Inf·0·i = NaN; a finite x with dy = ±Inf gives ±Inf·g, or is left
// undetermined (Reference) where |g| ≤ e_g: a kernel's ĝ may then be 0 or
// of either sign (for x ≪ 0, where the float64 tanh is −1 and g is 0 here
// while the kernels' ĝ is not, or the reverse).
func geluGradCompute(ctx context.Context, s op.Shape, in []Input, _ Arithmetic) ([]*Reference, error) {
	xs, dys := in[0].F16, in[1].F16
	return elementwise(ctx, len(xs), func(k int) (float64, float64) {
		x, dy := f16.ToFloat64(xs[k]), f16.ToFloat64(dys[k])
		g, eg, second := geluGradFactor(x)
		if infTimesNearZero(dy, g, eg) {
			return undetermined()
		}
		v := dy * g
		ad := math.Abs(dy)
		return v, ad*eg + u24*ad*(math.Abs(g)+eg) + own(v) + own(ad*second)
	})
}

// geluGradFactor is gelu′(x) = g for an exact x, e_g, how far a binary32
// kernel's ĝ may lie from it (geluGradCompute's derivation for the tanh
// form, geluLogistic's for the logistic form, the larger), and the
// magnitude ½|x|·|s|·i of g's second term, whose float64 error (own) a
// caller adds for the product it forms with g.
func geluGradFactor(x float64) (g, eg, second float64) {
	g6, g2 := Gamma(6, u24), Gamma(2, u24)
	t, T, e := geluTanhParts(x)
	l := geluLogistic(x, t) // once: geluParts would derive it again
	e = max(e, l.eT)
	sv := 1 - T*T
	iv := geluC * (1 + 3*geluK*x*x)
	g = 0.5*(1+T) + 0.5*x*sv*iv
	aT, as := math.Abs(T), math.Abs(sv)
	es := (2*aT+e)*e + u24*(aT+e)*(aT+e)
	es += u24 * (as + es)
	ei := g6 * iv
	e2 := 0.5 * math.Abs(x) * (es*iv + as*ei + es*ei + g2*(as+es)*(iv+ei))
	e1 := 0.5 * (e + u24*(math.Abs(1+T)+e))
	eg = max(e1+e2+u24*(math.Abs(g)+e1+e2), l.eg)
	return g, eg, 0.5 * math.Abs(x) * as * iv
}

// infTimesNearZero is whether v·g is ±Inf times a factor whose kernel
// value, within eg of g, may be 0 or of either sign: gelu_grad's result
// there is undetermined.
func infTimesNearZero(v, g, eg float64) bool { return math.IsInf(v, 0) && math.Abs(g) <= eg }
