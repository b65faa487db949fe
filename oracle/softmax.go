package oracle

import (
	"context"
	"math"
	"math/rand/v2"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
)

// SoftmaxRows is the reference of Y[r] = exp(X[r] − m)/Σ exp(X[r] − m),
// m = max X[r], for an R×C matrix of f16 values.
//
// Bound. Write dⱼ = xⱼ − m ≤ 0, eⱼ = exp(dⱼ), S = Σ eⱼ. A binary32 kernel
// computes each term as êⱼ = eⱼ(1 + ηⱼ) with
//
//	|ηⱼ| ≤ hⱼ = exp((4|dⱼ| + 16)·u) − 1,
//
// which allows the rounding of xⱼ − m (|dⱼ|·u), a change of base to 2 (a
// further 2|dⱼ|·u), and up to 16 ulps for the exponential itself and any
// rescaling by exp(m_old − m_new) of an online pass. Summing the C positive
// terms adds γ(C), so Ŝ/S lies within [(1−H)(1−γ(C)), (1+H)(1+γ(C))] with
// H = Σ eⱼhⱼ/S + C·2⁻¹²⁶ (a term under 2⁻¹²⁶ may be a binary32 subnormal or
// flushed to +0, as the CUDA row kernels of softmax and cross_entropy flush
// it, off by under 2⁻¹²⁶ either way, and S ≥ 1). The division, or a reciprocal and a
// multiplication, costs (1+u)². Hence
//
//	|ŷᵢ − yᵢ| ≤ yᵢ·[(1+hᵢ)(1+u)² / ((1−H)(1−γ(C))) − 1] + 2⁻¹²⁶,
//
// plus 2⁻⁴⁰·yᵢ for the oracle's own float64 exp and sum.
//
// IEEE specials follow the formula: a row holding a NaN is all NaN; a +Inf
// makes m = +Inf and the row NaN; −Inf entries give exactly 0; a row of
// only −Inf gives NaN (−Inf − (−Inf)).
func SoftmaxRows(ctx context.Context, xs []uint16, rows, cols int) (*Reference, error) {
	ref := &Reference{Value: make([]float64, rows*cols), Bound: make([]float64, rows*cols)}
	gamma := Gamma(int64(cols), U32)
	err := parallelRows(ctx, rows, 8*cols, func(lo, hi int) {
		d := make([]float64, cols)
		for r := lo; r < hi; r++ {
			x := xs[r*cols : (r+1)*cols]
			value := ref.Value[r*cols : (r+1)*cols]
			bound := ref.Bound[r*cols : (r+1)*cols]
			softmaxRow(x, d, value, bound, gamma)
		}
	})
	if err != nil {
		return nil, err
	}
	return ref, nil
}

// shiftedExpSum subtracts m from every dⱼ and returns S = Σ exp(dⱼ) and
// H = Σ eⱼ·hⱼ / S + V·2⁻¹²⁶, the weighted bound on a kernel's relative
// error in its exponentials (hⱼ = expError(dⱼ); the last term covers
// terms under 2⁻¹²⁶, subnormal or flushed to +0). xⱼ − m is exact in
// float64: both are multiples of 2⁻²⁴ below 2¹⁶. A term that is exactly 0
// (x = −Inf) carries no error.
func shiftedExpSum(d []float64, m float64) (sum, h float64) {
	var weighted float64
	for j := range d {
		d[j] -= m
		e := math.Exp(d[j])
		sum += e
		if e > 0 {
			weighted += e * expError(d[j])
		}
	}
	return sum, weighted/sum + float64(len(d))*0x1p-126
}

// expError is hⱼ, the bound on the relative error of a kernel's f32
// exp(dⱼ) computed as exp2f(dⱼ·log₂e): (4|dⱼ| + 16)·u, as a factor.
func expError(d float64) float64 { return math.Expm1((4*math.Abs(d) + 16) * U32) }

func softmaxRow(x []uint16, d, value, bound []float64, gamma float64) {
	m := math.Inf(-1)
	for j, h := range x {
		v := f16.ToFloat64(h)
		d[j] = v
		if math.IsNaN(v) {
			m = math.NaN()
			break
		}
		m = math.Max(m, v)
	}
	if math.IsNaN(m) {
		for j := range value {
			value[j], bound[j] = math.NaN(), 0
		}
		return
	}
	sum, h := shiftedExpSum(d, m)
	denominator := (1 - h) * (1 - gamma)
	for j := range d {
		y := math.Exp(d[j]) / sum
		value[j] = y
		if math.IsNaN(y) {
			bound[j] = 0
			continue
		}
		if y == 0 {
			bound[j] = 0x1p-126
			continue
		}
		if denominator <= 0 {
			bound[j] = math.Inf(1)
			continue
		}
		rel := (1+expError(d[j]))*(1+U32)*(1+U32)/denominator - 1
		bound[j] = y*(rel+0x1p-40) + 0x1p-126
	}
}

// SoftmaxGradRows is the reference of dX[r] = Y[r] ⊙ (dY[r] − D),
// D = Σⱼ dY[r,j]·Y[r,j], for R×C matrices of f16 values.
//
// Bound. The products pⱼ = gⱼ·yⱼ are exact in binary32, so D̂ is within
// γ(C)·P of D, P = Σ|pⱼ|. A kernel may then evaluate yᵢ·(gᵢ − D̂), two
// roundings, or yᵢ·gᵢ − yᵢ·D̂, whose rounding of yᵢ·D̂ can be large next to
// the result when gᵢ ≈ D. Both stay within
//
//	|d̂ᵢ − dᵢ| ≤ |yᵢ|·[(1+u)²·γ(C)·P + 3u·(|gᵢ| + |D|)],
//
// to which the oracle adds its own float64 error, 2·|yᵢ|·γ₆₄(C)·P.
//
// IEEE specials follow the formula: a NaN product (0·Inf, or a NaN input)
// makes the whole row NaN; infinities propagate through D.
func SoftmaxGradRows(ctx context.Context, dys, ys []uint16, rows, cols int) (*Reference, error) {
	ref := &Reference{Value: make([]float64, rows*cols), Bound: make([]float64, rows*cols)}
	gamma := Gamma(int64(cols), U32)
	gamma64 := Gamma(int64(cols), U64)
	err := parallelRows(ctx, rows, 4*cols, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			g, y := dys[r*cols:(r+1)*cols], ys[r*cols:(r+1)*cols]
			var dot, mag float64
			for j := range g {
				p := f16.ToFloat64(g[j]) * f16.ToFloat64(y[j])
				dot += p
				mag += math.Abs(p)
			}
			for j := range g {
				gj, yj := f16.ToFloat64(g[j]), f16.ToFloat64(y[j])
				v := yj * (gj - dot)
				ref.Value[r*cols+j] = v
				if math.IsNaN(v) || math.IsInf(v, 0) {
					continue
				}
				ay := math.Abs(yj)
				ref.Bound[r*cols+j] = ay*((1+U32)*(1+U32)*gamma*mag+3*U32*(math.Abs(gj)+math.Abs(dot))) +
					2*ay*gamma64*mag
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return ref, nil
}

func init() {
	mustRegister(op.Softmax, Spec{
		Compute: func(ctx context.Context, s op.Shape, in []Input, _ Arithmetic) ([]*Reference, error) {
			return one(SoftmaxRows(ctx, in[0].F16, int(s.Dims[0]), int(s.Dims[1])))
		},
		Generate: softmaxGenerate,
	})
	mustRegister(op.SoftmaxGrad, Spec{
		Compute: func(ctx context.Context, s op.Shape, in []Input, _ Arithmetic) ([]*Reference, error) {
			return one(SoftmaxGradRows(ctx, in[0].F16, in[1].F16, int(s.Dims[0]), int(s.Dims[1])))
		},
		Generate: softmaxGradGenerate,
	})
}

// one wraps a single Reference as an op's outputs.
func one(ref *Reference, err error) ([]*Reference, error) {
	if err != nil {
		return nil, err
	}
	return []*Reference{ref}, nil
}

// softmaxGenerate draws softmax's X: whole numbers in [−8, 8] under
// Integer (many equal values in a row), each distribution's values
// otherwise, and under Special the row specials of plantRowSpecials.
func softmaxGenerate(g *Gen) []Input {
	switch g.Dist {
	case Integer:
		return []Input{{F16: g.F16(0, func(r *rand.Rand) float64 { return float64(r.IntN(17) - 8) })}}
	case Special:
		x := g.F16(0, Normal.Draw)
		rows, cols := g.Size(0)
		plantRowSpecials(g, x, rows, cols, false)
		return []Input{{F16: x}}
	}
	return g.Default()
}

// plantRowSpecials puts IEEE specials into a matrix of logits whose rows
// are each normalised: subnormals at random, row 0 masked at random with
// −Inf (and at column 0 for certain when maskFirst), row 1 all −Inf, a NaN
// in row 2, a +Inf in row 3, and row 4 all equal values of 60000.
func plantRowSpecials(g *Gen, x []uint16, rows, cols int, maskFirst bool) {
	set := func(r, c int, v uint16) {
		if r < rows && c < cols {
			x[r*cols+c] = v
		}
	}
	for t := 0; t < max(1, len(x)/50); t++ {
		x[g.Rand().IntN(len(x))] = g.Subnormal()
	}
	if maskFirst {
		set(0, 0, f16.NegInf)
	}
	for c := 0; c < cols; c++ {
		if g.Rand().IntN(3) == 0 {
			set(0, c, f16.NegInf)
		}
		set(1, c, f16.NegInf)
		set(4, c, big)
	}
	set(2, g.Rand().IntN(cols), f16.NaN)
	set(3, g.Rand().IntN(cols), f16.PosInf)
}

// softmaxGradGenerate draws softmax_grad's dY and Y: under Integer, dY in
// [−4, 4] and Y sparse sixteenths (sparseSixteenths: exact results); under
// Rounding, roundingSoftmaxGrad; under Special, a NaN in dY, an Inf in dY
// where Y > 0 and where Y = 0 (0·Inf = NaN), subnormal Y, and dY near the
// f16 maximum; each distribution's values otherwise.
func softmaxGradGenerate(g *Gen) []Input {
	rows, cols := g.Size(0)
	switch g.Dist {
	case Integer:
		dy := g.F16(0, Integer.Draw)
		y := make([]uint16, rows*cols)
		sparseSixteenths(y, g.Rand(), rows, cols)
		return []Input{{F16: dy}, {F16: y}}
	case Rounding:
		return roundingSoftmaxGrad(g)
	case Special:
		dy, y := g.F16(0, Normal.Draw), g.F16(1, Normal.Draw)
		set := func(m []uint16, r, c int, v uint16) {
			if r < rows && c < cols {
				m[r*cols+c] = v
			}
		}
		for t := 0; t < max(1, len(dy)/50); t++ {
			dy[g.Rand().IntN(len(dy))] = g.Subnormal()
		}
		set(dy, 0, g.Rand().IntN(cols), f16.NaN)
		set(dy, 1, 0, f16.PosInf)
		set(dy, 2, 0, f16.NegInf)
		for c := 0; c < cols; c++ {
			set(dy, 3, c, f16.FromFloat64(65504*(2*g.Rand().Float64()-1)))
		}
		for t := 0; t < max(1, len(y)/50); t++ {
			y[g.Rand().IntN(len(y))] = g.Subnormal()
		}
		set(y, 1, 0, f16.FromFloat64(0.5)) // Inf·0.5 = Inf: D = Inf
		set(y, 2, 0, 0)                    // −Inf·0 = NaN: row NaN
		for c := 0; c < cols; c += 3 {
			set(y, 5, c, g.Subnormal()&0x7fff)
		}
		return []Input{{F16: dy}, {F16: y}}
	}
	return g.Default()
}

// sparseSixteenths fills each row with at most 16 nonzero multiples of 1/16
// in (0, 1], a peaked distribution like a softmax output. With integer dY in
// [−4, 4], every product, the row sum D (|D| ≤ 64) and dY − D are multiples
// of 1/16 below 2¹⁰, and Y·(dY − D) a multiple of 1/256 below 2⁷: all exact
// in f32, so softmax_grad's integer case is a bit-for-bit check.
func sparseSixteenths(dst []uint16, rng *rand.Rand, rows, cols int) {
	for r := 0; r < rows; r++ {
		for t := 0; t < min(16, cols); t++ {
			dst[r*cols+rng.IntN(cols)] = f16.FromFloat64(float64(1+rng.IntN(16)) / 16)
		}
	}
}

// roundingSoftmaxGrad makes softmax_grad inputs whose results are exact in
// binary32 but need rounding in f16: dY whole numbers in [−300, 300], and
// each row of Y zero but for up to 64 entries that are powers of two from
// 1/16 to 1. Every product dY·Y is a multiple of 1/16 of magnitude ≤ 300,
// so D = Σ dY·Y and every partial sum of it are multiples of 1/16 below
// 64·300 = 19200 (exact: 19200·16 < 2²⁴), dY − D is exact, and Y·(dY − D),
// a power of two times it, is exact, as are Y·dY and Y·D should a kernel
// distribute (multiples of 1/256 below 2¹⁶). The results reach 19500 with
// up to 17 significant bits: most need rounding to f16's 11, and many are
// ties.
func roundingSoftmaxGrad(g *Gen) []Input {
	rows, cols := g.Size(0)
	dy := g.F16(0, func(r *rand.Rand) float64 { return float64(r.IntN(601) - 300) })
	y := make([]uint16, rows*cols)
	for r := 0; r < rows; r++ {
		for t := 0; t < min(64, cols); t++ {
			y[r*cols+g.Rand().IntN(cols)] = f16.FromFloat64(math.Ldexp(1, g.Rand().IntN(5)-4))
		}
	}
	return []Input{{F16: dy}, {F16: y}}
}
