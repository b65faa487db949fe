package oracle

import (
	"context"
	"math"

	"github.com/vkern/vkern/f16"
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
// H = Σ eⱼhⱼ/S + C·2⁻¹⁴⁹ (terms that underflow to binary32 subnormals are
// off by at most 2⁻¹⁴⁹ each, and S ≥ 1). The division, or a reciprocal and a
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
// H = Σ eⱼ·hⱼ / S + V·2⁻¹⁴⁹, the weighted bound on a kernel's relative
// error in its exponentials (hⱼ = expError(dⱼ); the last term covers
// subnormal terms). xⱼ − m is exact in float64: both are multiples of 2⁻²⁴
// below 2¹⁶. A term that is exactly 0 (x = −Inf) carries no error.
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
	return sum, weighted/sum + float64(len(d))*0x1p-149
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
