package oracle

import (
	"context"
	"math"
	"math/rand/v2"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
)

// AttentionLayout is where one attention call keeps its heads: B sequences of
// T tokens, H heads of D = C/H channels; qkv rows hold q, k and v side by
// side (3C values), y and dy rows C values, head h at columns h·D of each.
type AttentionLayout struct {
	B, T, C, H, D int
	Alpha         float64 // the score scale 1/√D, in float64
}

// AttentionLayoutOf is the layout of an attention or attention_grad shape
// (BxTxCxH).
func AttentionLayoutOf(s op.Shape) AttentionLayout {
	b, t, c, h := int(s.Dims[0]), int(s.Dims[1]), int(s.Dims[2]), int(s.Dims[3])
	return AttentionLayout{B: b, T: t, C: c, H: h, D: c / h, Alpha: 1 / math.Sqrt(float64(c/h))}
}

// gather copies head h of sequence b out of a (B·T)×width f16 matrix whose
// part starts at column part·C (q 0, k 1, v 2; 0 for y and dy) into dst,
// T×D float64 row-major.
func (l AttentionLayout) gather(dst []float64, src []uint16, width, part, b, h int) {
	for t := 0; t < l.T; t++ {
		row := src[(b*l.T+t)*width+part*l.C+h*l.D:]
		for c := 0; c < l.D; c++ {
			dst[t*l.D+c] = f16.ToFloat64(row[c])
		}
	}
}

// dotMagnitude returns Σ a·b and Σ |a·b|.
func dotMagnitude(a, b []float64) (dot, magnitude float64) {
	for i := range a {
		p := a[i] * b[i]
		dot += p
		magnitude += math.Abs(p)
	}
	return dot, magnitude
}

// The allowances of attention's bounds for the online pass and for tensor
// cores (see AttentionForward):
//
//   - rescaleTile: a kernel may rescale its running sums once for every 16
//     keys of a row (online softmax over key tiles of at least 16).
//   - roundRelative, roundAbsolute: a weight P ∈ [0, 1] may enter its
//     products rounded to f16 (to nearest), which errs by at most 2⁻¹¹·P
//     where P is normal and by 2⁻²⁵ below 2⁻¹⁴ (half the subnormal
//     spacing). dS may be rounded the same way after scaling by a power of
//     two that puts its largest magnitude among the products of one tile row
//     in [2¹⁴, 2¹⁵): 2⁻¹¹·|dS| + 2⁻²⁵·2⁻¹⁴ (roundScaled) of that largest
//     magnitude, at most the largest |dS| of the element's row (for dq) or
//     column (for dk). This is what flash-style kernels do, and it is
//     what keeps their P·V and dS products single: the error it adds is
//     that of the f16 outputs' own rounding.
//   - flushExp: an exponential whose result is under 2⁻¹²⁶ may be flushed
//     to zero, an absolute error under flushExp; in the forward that moves
//     the normalised weights too (see AttentionForward).
const (
	rescaleTile   = 16
	roundRelative = 0x1p-11
	roundAbsolute = 0x1p-25
	roundScaled   = 0x1p-39
	flushExp      = 0x1p-126
)

// AttentionForward is the reference of attention on qkv f16 (B·T)×3C: for
// each sequence b, head h and query i, with n = i + 1 keys,
//
//	sⱼ = α·qᵢ·kⱼ (j < n, α = 1/√D),  m = max sⱼ,  eⱼ = exp(sⱼ − m),  S = Σ eⱼ,
//	wⱼ = eⱼ/S,  y = Σⱼ wⱼ·vⱼ,  lse = m + log S.
//
// Bound. The products of qᵢ·kⱼ are exact in binary32; the sum, in any order
// or fused steps, is within γ(2D)·Aⱼ, Aⱼ = Σ|q·k|. A kernel exponentiates
// tⱼ = ŝⱼ − m̂ (any shift m̂ common to the row cancels), so its weight is
// êⱼ = c·eⱼ·exp(εⱼ)(1 + ηⱼ) with |εⱼ| ≤ Eⱼ = 2αγ(2D)Aⱼ + 8u·|sⱼ − m| +
// 8u·αγ(2D)·A_max (the sum; rounding α or α·log₂e, the scale, the shift
// and the change to base 2; the online rescales exp(m_old − m_new), whose
// arguments add up to at most m − mₖ ≤ |sⱼ − m|) and |ηⱼ| ≤ H = (4 + 3R)u
// (exp or exp2 within 2 ulps, R = ⌈n/16⌉ rescales of 2 ulps and a
// multiplication each). The normalised weights ŵⱼ = êⱼ/Σê then lie in
// [wⱼ⁻, wⱼ⁺], wⱼ± = 1/(1 + Σ_{k≠j} e^{b∓ₖ}/e^{b±ⱼ}), b±ⱼ = log eⱼ ± (Eⱼ + log(1±H)),
// and since Σŵ = Σw = 1, |Σŵⱼvⱼ − y| ≤ Σⱼ Δwⱼ·|vⱼ − y|, Δwⱼ = max(wⱼ⁺ − wⱼ,
// wⱼ − wⱼ⁻). The weighted sum and the division add K·Σⱼ wⱼ⁺|vⱼ| with K =
// γ(2n + 2R + 9) + 2⁻¹¹ (products, any-order sums, rescaled accumulators, the
// denominator, the quotient, which a kernel may form as a reciprocal and a
// product, two roundings, and a weight rounded to f16 for tensor cores),
// and 2⁻²⁴·|vⱼ| per key for that rounding's absolute error and terms that
// underflow:
//
//	|ŷ − y| ≤ Σⱼ [Δwⱼ·|vⱼ − y| + (K·wⱼ⁺ + 2⁻³⁵)·|vⱼ|].
//
// lse: the scores themselves err by Eⱼ + 3u·|sⱼ|, so log Ŝ + m̂ lies within
// β = log Σⱼ wⱼ·e^{λⱼ} − log(1 − γ(n+R+2)) of lse (and symmetrically below),
// λⱼ = Eⱼ + 3u|sⱼ| + log(1+H); log or log2 within 2 ulps, the addition and
// a change back from base 2 add 6u·(|m| + log S + β).
//
// A kernel may also flush to zero an exponential whose result is under
// 2⁻¹²⁶ (the GPU's ex2.approx.ftz), where exp within 2 ulps would give a
// subnormal. The key of the row's largest computed score m̂ (base 2)
// enters with weight 2^t, |t| ≤ ½ulp(m̂) (its score less the running max
// it set, one fused multiply-add), and every later rescale is exactly 1
// (the max no longer rises); so Ŝ ≥ p = 2^(−½ulp(m̂)), which is at least
// 2^−½ while |m̂| < 2²⁴, and |m̂| ≤ α·A_max·log₂e (rounded up) bounds
// ulp(m̂). Each flushed key's normalised weight is then under 2⁻¹²⁶/p,
// and dropping up to n of them, δ ≤ n·2⁻¹²⁶/p of the weight, moves y by
// at most δ·max|vⱼ| (the dropped weights) plus δ/(1 − δ)·max|vⱼ| (the
// others' growth): 3δ·max|vⱼ| while δ ≤ ½, which the bound adds; and log
// Ŝ by at most −log(1 − δ) ≤ 2δ, which β adds. Where δ > ½ (scores of
// 2²⁴ and more in base 2, which leave a binary32 kernel nothing right to
// check anyway) both bounds are +Inf: no claim.
//
// The oracle's own float64 error (the sums of D and n terms, exp and log) is
// added as 2⁻⁴⁸ of the arguments and 2⁻⁴⁰ of the magnitudes.
//
// IEEE specials follow the formula: a NaN score, a +Inf score (m = +Inf) or
// a row of only −Inf scores makes the row's y and lse NaN; a −Inf score has
// weight 0, and 0·vⱼ is NaN where vⱼ is infinite; keys j > i take no part.
func AttentionForward(ctx context.Context, qkv []uint16, l AttentionLayout) (y, lse *Reference, err error) {
	return attentionForward(ctx, qkv, l, true)
}

// attentionRow is one worker's room for a query row: per key its score,
// magnitude Aⱼ, shifted score, weight and bound terms.
type attentionRow struct {
	s, a, d, w, e, lo, hi, wmax, dw []float64
}

func newAttentionRow(t int) *attentionRow {
	r := &attentionRow{}
	for _, p := range []*[]float64{&r.s, &r.a, &r.d, &r.w, &r.e, &r.lo, &r.hi, &r.wmax, &r.dw} {
		*p = make([]float64, t)
	}
	return r
}

// attentionForward computes y and lse, with their bounds when bounds is
// set (the generator of attention_grad needs the values only).
func attentionForward(ctx context.Context, qkv []uint16, l AttentionLayout, bounds bool) (y, lse *Reference, err error) {
	y = &Reference{Value: make([]float64, l.B*l.T*l.C), Bound: make([]float64, l.B*l.T*l.C)}
	lse = &Reference{Value: make([]float64, l.B*l.H*l.T), Bound: make([]float64, l.B*l.H*l.T)}
	err = parallelRows(ctx, l.B*l.H, l.T*l.T*l.D, func(lo, hi int) {
		q, k, v := make([]float64, l.T*l.D), make([]float64, l.T*l.D), make([]float64, l.T*l.D)
		row := newAttentionRow(l.T)
		for unit := lo; unit < hi; unit++ {
			b, h := unit/l.H, unit%l.H
			l.gather(q, qkv, 3*l.C, 0, b, h)
			l.gather(k, qkv, 3*l.C, 1, b, h)
			l.gather(v, qkv, 3*l.C, 2, b, h)
			for i := 0; i < l.T; i++ {
				yRow := (b*l.T + i) * l.C
				at := (b*l.H+h)*l.T + i
				row.forward(l, q[i*l.D:(i+1)*l.D], k, v, i+1, bounds,
					y.Value[yRow+h*l.D:yRow+(h+1)*l.D], y.Bound[yRow+h*l.D:yRow+(h+1)*l.D], &lse.Value[at], &lse.Bound[at])
			}
		}
	})
	if err != nil {
		return nil, nil, err
	}
	return y, lse, nil
}

// forward computes one query row over its n keys: y's D values and lse.
func (r *attentionRow) forward(l AttentionLayout, q, k, v []float64, n int, bounds bool, y, yBound []float64, lse, lseBound *float64) {
	m, aMax := math.Inf(-1), 0.0
	bad := false
	for j := 0; j < n; j++ {
		x, a := dotMagnitude(q, k[j*l.D:(j+1)*l.D])
		s := l.Alpha * x
		r.s[j], r.a[j] = s, a
		switch {
		case math.IsNaN(s) || math.IsInf(s, 1):
			bad = true
		case !math.IsInf(s, -1):
			m = math.Max(m, s)
			aMax = math.Max(aMax, a)
		}
	}
	if bad || math.IsInf(m, -1) {
		for c := range y {
			y[c], yBound[c] = math.NaN(), 0
		}
		*lse, *lseBound = math.NaN(), 0
		return
	}
	var sum float64
	for j := 0; j < n; j++ {
		r.d[j] = r.s[j] - m // −Inf for a −Inf score
		r.e[j] = math.Exp(r.d[j])
		sum += r.e[j]
	}
	logS := math.Log(sum)
	*lse = m + logS
	for j := 0; j < n; j++ {
		r.w[j] = r.e[j] / sum
	}
	for c := range y {
		var acc float64
		for j := 0; j < n; j++ {
			acc += r.w[j] * v[j*l.D+c]
		}
		y[c] = acc
	}
	if !bounds {
		return
	}

	rescales := (n + rescaleTile - 1) / rescaleTile
	g2d := Gamma(int64(2*l.D), U32)
	hExp := float64(4+3*rescales)*U32 + 0x1p-48
	logHi, logLo := math.Log1p(hExp), math.Log1p(-hExp)
	// E is kept in r.a (Aⱼ is not needed after it).
	for j := 0; j < n; j++ {
		if math.IsInf(r.d[j], -1) {
			r.lo[j], r.hi[j] = math.Inf(-1), math.Inf(-1)
			continue
		}
		ad := math.Abs(r.d[j])
		e := 2*l.Alpha*g2d*r.a[j] + 8*U32*ad + 8*U32*l.Alpha*g2d*aMax + 0x1p-48*(l.Alpha*(r.a[j]+aMax)+ad)
		r.a[j] = e
		r.lo[j], r.hi[j] = r.d[j]-e+logLo, r.d[j]+e+logHi
	}
	r.weightRanges(n)

	k1 := Gamma(int64(2*n+2*rescales+9), U32) + roundRelative + 0x1p-40
	flushY, flushLse := flushShift(n, l.Alpha*aMax)
	for c := range y {
		if math.IsNaN(y[c]) || math.IsInf(y[c], 0) {
			yBound[c] = 0
			continue
		}
		var bound, vMax float64
		for j := 0; j < n; j++ {
			if math.IsInf(r.d[j], -1) {
				continue // weight 0 exactly, in every kernel
			}
			vj := v[j*l.D+c]
			bound += r.dw[j]*math.Abs(vj-y[c]) + (k1*r.wmax[j]+2*roundAbsolute)*math.Abs(vj)
			vMax = math.Max(vMax, math.Abs(vj))
		}
		yBound[c] = boundOrInf(bound + flushY*vMax)
	}

	// lse: λⱼ = Eⱼ + 3u|sⱼ| + log(1+H), weighted by wⱼ in log space.
	up, down := math.Inf(-1), math.Inf(-1)
	for j := 0; j < n; j++ {
		if math.IsInf(r.d[j], -1) {
			continue
		}
		lambda := r.a[j] + 3*U32*math.Abs(r.s[j]) + logHi
		up = logAddExp(up, r.d[j]-logS+lambda)
		down = logAddExp(down, r.d[j]-logS-lambda)
	}
	beta := math.Max(up, -down) - math.Log1p(-Gamma(int64(n+rescales+2), U32)) + flushLse
	scale := math.Abs(m) + logS
	*lseBound = boundOrInf(beta + 6*U32*(scale+beta) + 0x1p-48*scale)
}

// flushShift is what flushed exponentials may add to a forward row's
// bounds (see AttentionForward), for n keys whose largest score magnitude
// is at most scoreMax (α·A_max): a multiple of max|vⱼ| for y, and an
// addition to β for lse; +Inf for both where the flushed share δ could
// exceed ½.
func flushShift(n int, scoreMax float64) (y, lse float64) {
	_, e := math.Frexp(scoreMax * math.Log2E * (1 + 0x1p-20)) // |m̂| < 2^e, so ulp(m̂) ≤ 2^(e−24)
	p := math.Exp2(-math.Ldexp(0.5, e-24))
	delta := float64(n) * flushExp / p
	if !(delta <= 0.5) {
		return math.Inf(1), math.Inf(1)
	}
	return 3 * delta, 2 * delta
}

// weightRanges sets wmax[j] = wⱼ⁺ and dw[j] = Δwⱼ from lo and hi (see
// AttentionForward), for the n keys of a row whose weights are r.w. Keys of
// weight exactly 0 (lo = hi = −Inf) get 0. Each sum over the other keys is
// the sum over all keys less key j, which keeps at least the largest term,
// except for the key of that largest term, whose sum is taken directly.
func (r *attentionRow) weightRanges(n int) {
	zl, zh := math.Inf(-1), math.Inf(-1)
	kl, kh := -1, -1
	for j := 0; j < n; j++ {
		if r.lo[j] > zl {
			zl, kl = r.lo[j], j
		}
		if r.hi[j] > zh {
			zh, kh = r.hi[j], j
		}
	}
	var sumLo, sumHi, othersLo, othersHi float64
	for j := 0; j < n; j++ {
		el, eh := math.Exp(r.lo[j]-zl), math.Exp(r.hi[j]-zh)
		sumLo += el
		sumHi += eh
		if j != kl {
			othersLo += el
		}
		if j != kh {
			othersHi += eh
		}
	}
	for j := 0; j < n; j++ {
		if math.IsInf(r.lo[j], -1) {
			r.wmax[j], r.dw[j] = 0, 0
			continue
		}
		oLo, oHi := othersLo, othersHi
		if j != kl {
			oLo = sumLo - math.Exp(r.lo[j]-zl)
		}
		if j != kh {
			oHi = sumHi - math.Exp(r.hi[j]-zh)
		}
		wMax := 1 / (1 + math.Exp(math.Log(oLo)+zl-r.hi[j]))
		wMin := 1 / (1 + math.Exp(math.Log(oHi)+zh-r.lo[j]))
		r.wmax[j] = wMax
		r.dw[j] = math.Max(0, math.Max(wMax-r.w[j], r.w[j]-wMin)) + 0x1p-48*wMax
	}
}

// logAddExp is log(eᵃ + eᵇ) without overflow.
func logAddExp(a, b float64) float64 {
	if a < b {
		a, b = b, a
	}
	if math.IsInf(a, -1) {
		return a
	}
	return a + math.Log1p(math.Exp(b-a))
}

// boundOrInf turns a bound that came out NaN (an Inf·0 among its terms,
// though the value is finite) into +Inf, which is sound.
func boundOrInf(b float64) float64 {
	if math.IsNaN(b) {
		return math.Inf(1)
	}
	return b
}

// AttentionBackward is the reference of attention_grad: dqkv (B·T)×3C from
// dy (B·T)×C, qkv, the forward's y and lse (B·H·T). Per sequence and head,
// for j ≤ i,
//
//	Pᵢⱼ = exp(α·qᵢ·kⱼ − lseᵢ),  Gᵢⱼ = dyᵢ·vⱼ − Dᵢ,  Dᵢ = dyᵢ·yᵢ,  dSᵢⱼ = Pᵢⱼ·Gᵢⱼ,
//	dvⱼ = Σᵢ Pᵢⱼ·dyᵢ,  dqᵢ = α·Σⱼ dSᵢⱼ·kⱼ,  dkⱼ = α·Σᵢ dSᵢⱼ·qᵢ.
//
// Bound. The score carries the forward's error, now against the absolute
// lse: the argument of exp errs by E = 2αγ(2D)A + 3u|s| + 3u|lse| +
// 4u|s − lse|, so P̂ = P(1 + π), |π| ≤ Π = (1+2u)e^E − 1 (exp within 2
// ulps), plus 2⁻¹²⁶ where it underflows (a subnormal, or 0 where a kernel
// flushes results under 2⁻¹²⁶). The dot products dyᵢ·vⱼ and Dᵢ,
// of exact products, err by γ(2D) of their magnitudes M_P and M_D, and the
// subtraction (or P·dP − P·D, distributed) by 2u·(|dP| + |D|): e_G. So
// |dŜ − dS| ≤ ε_S = P_err·(|G| + e_G) + P·e_G + u·P̂·(|G| + e_G), with
// P_err = P·Π + 2⁻¹²⁶, and |dŜ| ≤ M_S = |dS| + ε_S. Each output sums its
// products (one rounding each), scaled by α (rounded, 3u):
//
//	|dv̂ⱼ − dvⱼ| ≤ Σᵢ (P_err + 2⁻¹¹P̂ + 2⁻²⁵)|dyᵢ| + γ(2m+8)·Σᵢ P̂|dyᵢ|,
//	|dq̂ᵢ − dqᵢ| ≤ α·[(1+4u)Σⱼ (ε_S + 2⁻¹¹M_S)|kⱼ| + 2⁻³⁹·max_j M_S·Σⱼ|kⱼ| + γ(2n+8)·Σⱼ M_S|kⱼ|],
//
// and dk as dq over the column, with m = T − j terms; the 2⁻¹¹ and 2⁻²⁵ (P)
// and 2⁻³⁹ (dS) terms allow P and scaled dS rounded to f16 for tensor
// cores. The oracle's float64 error adds 2⁻⁴⁸ of the
// arguments and 2⁻⁴⁰ of the magnitudes.
//
// IEEE specials follow the formula: NaN and infinities propagate through
// P, G and dS; 0·Inf is NaN; pairs with j > i take no part.
func AttentionBackward(ctx context.Context, dy, qkv, y []uint16, lse []float32, l AttentionLayout) (*Reference, error) {
	n := l.B * l.T * 3 * l.C
	ref := &Reference{Value: make([]float64, n), Bound: make([]float64, n)}
	g2d := Gamma(int64(2*l.D), U32)
	err := parallelRows(ctx, l.B*l.H, 2*l.T*l.T*l.D, func(lo, hi int) {
		size := l.T * l.D
		q, k, v, g, yv := make([]float64, size), make([]float64, size), make([]float64, size), make([]float64, size), make([]float64, size)
		// Per key j: dk and dv's values, error sums and magnitudes, and
		// Σᵢ|qᵢ|; per query row: dq's.
		dk, dkErr, dkMag, absQ := make([]float64, size), make([]float64, size), make([]float64, size), make([]float64, size)
		dv, dvErr, dvMag := make([]float64, size), make([]float64, size), make([]float64, size)
		mCol := make([]float64, l.T)
		dq, dqErr, dqMag, absK := make([]float64, l.D), make([]float64, l.D), make([]float64, l.D), make([]float64, l.D)
		dS, errS, magS := make([]float64, l.T), make([]float64, l.T), make([]float64, l.T)
		for unit := lo; unit < hi; unit++ {
			b, h := unit/l.H, unit%l.H
			l.gather(q, qkv, 3*l.C, 0, b, h)
			l.gather(k, qkv, 3*l.C, 1, b, h)
			l.gather(v, qkv, 3*l.C, 2, b, h)
			l.gather(g, dy, l.C, 0, b, h)
			l.gather(yv, y, l.C, 0, b, h)
			for _, a := range [][]float64{dk, dkErr, dkMag, absQ, dv, dvErr, dvMag, mCol} {
				clear(a)
			}
			for i := 0; i < l.T; i++ {
				qi, gi := q[i*l.D:(i+1)*l.D], g[i*l.D:(i+1)*l.D]
				dRow, mD := dotMagnitude(gi, yv[i*l.D:(i+1)*l.D])
				lseI := float64(lse[(b*l.H+h)*l.T+i])
				for _, a := range [][]float64{dq, dqErr, dqMag, absK} {
					clear(a)
				}
				mRow := 0.0
				for j := 0; j <= i; j++ {
					kj, vj := k[j*l.D:(j+1)*l.D], v[j*l.D:(j+1)*l.D]
					x, a := dotMagnitude(qi, kj)
					s := l.Alpha * x
					p := math.Exp(s - lseI)
					dp, mP := dotMagnitude(gi, vj)
					gij := dp - dRow
					dS[j] = p * gij

					arg := 2*l.Alpha*g2d*a + 3*U32*(math.Abs(s)+math.Abs(lseI)) + 4*U32*math.Abs(s-lseI) +
						0x1p-48*(l.Alpha*a+math.Abs(s)+math.Abs(lseI))
					pi := (1+2*U32)*math.Expm1(arg) + 2*U32
					pMag := p*(1+pi) + flushExp
					pErr := p*pi + flushExp
					eG := (1+2*U32)*g2d*(mP+mD) + 2*U32*(math.Abs(dp)+math.Abs(dRow)) + 0x1p-48*(mP+mD)
					gMag := math.Abs(gij) + eG
					errS[j] = pErr*gMag + p*eG + U32*pMag*gMag
					magS[j] = math.Abs(dS[j]) + errS[j]
					mRow = math.Max(mRow, magS[j])
					mCol[j] = math.Max(mCol[j], magS[j])

					pErrV := pErr + roundRelative*pMag + roundAbsolute
					row := j * l.D
					for c := 0; c < l.D; c++ {
						ag := math.Abs(gi[c])
						dv[row+c] += p * gi[c]
						dvErr[row+c] += pErrV * ag
						dvMag[row+c] += pMag * ag
					}
				}
				for j := 0; j <= i; j++ {
					kj := k[j*l.D : (j+1)*l.D]
					termErr := errS[j] + roundRelative*magS[j]
					row := j * l.D
					for c := 0; c < l.D; c++ {
						aq, ak := math.Abs(qi[c]), math.Abs(kj[c])
						dq[c] += dS[j] * kj[c]
						dqErr[c] += termErr * ak
						dqMag[c] += magS[j] * ak
						absK[c] += ak
						dk[row+c] += dS[j] * qi[c]
						dkErr[row+c] += termErr * aq
						dkMag[row+c] += magS[j] * aq
						absQ[row+c] += aq
					}
				}
				sumFactor := Gamma(int64(2*(i+1)+8), U32) + 0x1p-40
				out := (b*l.T+i)*3*l.C + h*l.D
				for c := 0; c < l.D; c++ {
					ref.Value[out+c] = l.Alpha * dq[c]
					ref.Bound[out+c] = outputBound(ref.Value[out+c],
						l.Alpha*((1+4*U32)*dqErr[c]+roundScaled*mRow*absK[c]+sumFactor*dqMag[c]))
				}
			}
			for j := 0; j < l.T; j++ {
				sumFactor := Gamma(int64(2*(l.T-j)+8), U32) + 0x1p-40
				out := (b*l.T+j)*3*l.C + h*l.D
				for c := 0; c < l.D; c++ {
					at := j*l.D + c
					ref.Value[out+l.C+c] = l.Alpha * dk[at]
					ref.Bound[out+l.C+c] = outputBound(ref.Value[out+l.C+c],
						l.Alpha*((1+4*U32)*dkErr[at]+roundScaled*mCol[j]*absQ[at]+sumFactor*dkMag[at]))
					ref.Value[out+2*l.C+c] = dv[at]
					ref.Bound[out+2*l.C+c] = outputBound(dv[at], dvErr[at]+sumFactor*dvMag[at])
				}
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return ref, nil
}

// outputBound is bound for a finite value, 0 for NaN or an infinity (which
// must be matched exactly), and +Inf where the bound came out NaN.
func outputBound(value, bound float64) float64 {
	if math.IsNaN(value) || math.IsInf(value, 0) {
		return 0
	}
	return boundOrInf(bound)
}

func init() {
	mustRegister(op.Attention, Spec{
		Compute: func(ctx context.Context, s op.Shape, in []Input, _ Arithmetic) ([]*Reference, error) {
			y, lse, err := AttentionForward(ctx, in[0].F16, AttentionLayoutOf(s))
			if err != nil {
				return nil, err
			}
			return []*Reference{y, lse}, nil
		},
		Generate: attentionGenerate,
	})
	mustRegister(op.AttentionGrad, Spec{
		Compute: func(ctx context.Context, s op.Shape, in []Input, _ Arithmetic) ([]*Reference, error) {
			return one(AttentionBackward(ctx, in[0].F16, in[1].F16, in[2].F16, in[3].F32, AttentionLayoutOf(s)))
		},
		Generate: attentionGradGenerate,
	})
}

// attentionGenerate draws attention's qkv (attentionQKV).
func attentionGenerate(g *Gen) []Input {
	return []Input{{F16: attentionQKV(g, 0, true)}}
}

// attentionGradGenerate draws dy and qkv, then y and lse as the forward
// kernel stores them: the float64 forward of qkv, y rounded to f16 and lse
// to f32. dy is drawn as v is (under Wide, the full 2⁻¹⁴…2¹⁴); under Special
// it holds subnormals, a NaN in row 0 (whose gradient reaches only key 0:
// a kernel that lets later rows see it leaks NaN), a +Inf in the middle row,
// and a ±60000 in the row after the first quarter.
func attentionGradGenerate(g *Gen) []Input {
	l := AttentionLayoutOf(g.Shape)
	draw := g.Dist.Draw
	switch g.Dist {
	case Special:
		draw = Normal.Draw
	case Wide:
		draw = wide
	}
	dy := g.F16(0, draw)
	qkv := attentionQKV(g, 1, false)
	if g.Dist == Special {
		set := func(t, col int, v uint16) { dy[((l.B-1)*l.T+t)*l.C+col] = v }
		for t := 0; t < max(1, len(dy)/50); t++ {
			dy[g.Rand().IntN(len(dy))] = g.Subnormal()
		}
		set(0, (l.H-1)*l.D, f16.NaN)
		if l.T >= 4 {
			set(l.T/2, l.C-1, f16.PosInf)
			set(l.T/4+1, g.Rand().IntN(l.C), big|uint16(g.Rand().IntN(2))<<15)
		}
	}
	y, lse, _ := attentionForward(context.Background(), qkv, l, false)
	y16 := make([]uint16, len(y.Value))
	for i, v := range y.Value {
		y16[i] = f16.FromFloat64(v)
	}
	lse32 := make([]float32, len(lse.Value))
	for i, v := range lse.Value {
		lse32[i] = float32(v)
	}
	return []Input{{F16: dy}, {F16: qkv}, {F16: y16}, {F32: lse32}}
}

// attentionQKV draws qkv, input i of its op. Each distribution draws every
// value by its rule, except Wide, which keeps q and k to magnitudes
// 2⁻¹⁴…2¹ (v takes the full 2⁻¹⁴…2¹⁴): wider scores, up to 2³⁰·D/√D,
// would leave a binary32 kernel nothing right to check (its scores alone
// err by more than 1), and the bound would say so. Under Special, values
// are normal with subnormals scattered, and the last sequence gets, where
// T ≥ 4: a q of 60000 in row T/4 (head 0), whose scores make the row
// one-hot; a −60000 in v. With forwardSpecials (attention only, where they
// cost the gradient nothing of interest): a NaN in k at key T − 1 − T/8
// (head 0: later rows NaN, earlier ones, which must not see it, finite), a
// +Inf in v at key T/2 and a −Inf in k at key T/2 + 1 (head H − 1: the
// scores of that key are ±Inf, which makes a row NaN or gives the key
// weight 0), and, at any T, a NaN in v at the last key, which only the last
// row may see.
func attentionQKV(g *Gen, i int, forwardSpecials bool) []uint16 {
	l := AttentionLayoutOf(g.Shape)
	var qkv []uint16
	switch g.Dist {
	case Wide:
		qkv = g.columns(i, 3*l.C, 2*l.C, scoreWide, wide)
	case Special:
		qkv = g.F16(i, Normal.Draw)
	default:
		qkv = g.F16(i, g.Dist.Draw)
	}
	if g.Dist != Special {
		return qkv
	}
	for t := 0; t < max(1, len(qkv)/50); t++ {
		qkv[g.Rand().IntN(len(qkv))] = g.Subnormal()
	}
	last := l.B - 1
	set := func(t, part, h, c int, v uint16) { qkv[(last*l.T+t)*3*l.C+part*l.C+h*l.D+c] = v }
	if l.T >= 4 {
		set(l.T/4, 0, 0, 0, big)
		set(l.T/2-1, 2, 0, (l.D-1)/2, big|0x8000)
	}
	if !forwardSpecials {
		return qkv
	}
	if l.T >= 4 {
		set(l.T-1-l.T/8, 1, 0, l.D-1, f16.NaN)
		set(l.T/2, 2, l.H-1, 0, f16.PosInf)
		set(l.T/2+1, 1, l.H-1, 0, f16.NegInf)
	}
	set(l.T-1, 2, l.H-1, l.D-1, f16.NaN)
	return qkv
}

// scoreWide draws magnitudes 2⁻¹⁴…2¹ with random signs: Wide for q and k.
func scoreWide(r *rand.Rand) float64 {
	v := math.Exp2(15*r.Float64() - 14)
	if r.IntN(2) == 0 {
		return -v
	}
	return v
}

// columns draws input i, a matrix whose rows are width values, as fill
// does (chunk by chunk, the same for any number of cores), with columns
// [0, split) drawn by left and the rest by right.
func (g *Gen) columns(i, width, split int, left, right func(*rand.Rand) float64) []uint16 {
	rows, cols := g.Size(i)
	out := make([]uint16, rows*cols)
	ForChunks(len(out), func(c, lo, hi int) {
		r := rand.New(rand.NewPCG(g.operandSeed(i)+uint64(c), g.stream))
		for e := lo; e < hi; e++ {
			draw := right
			if e%width < split {
				draw = left
			}
			out[e] = f16.FromFloat64(draw(r))
		}
	})
	return out
}
