package oracle

import (
	"context"
	"math"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
)

// layerNormGradEps is the eps of the forward whose statistics
// layernorm_grad's inputs are drawn as (nn.LayerNorm's and GPT-2's default).
const layerNormGradEps = 1e-5

// rsqrtRelative is how far a kernel's reciprocal square root of its binary32
// argument may lie from the exact one, relative: CUDA's rsqrtf is within 2
// ulps (the CUDA Math API's table), an ulp of a binary32 result is at most
// 2⁻²³ of it, and 1/sqrtf(z) with sqrtf correctly rounded (glibc, CUDA
// without -use_fast_math) is two roundings, within 2⁻²³.
const rsqrtRelative = 2 * 0x1p-23

// lnArith is the arithmetic a layernorm bound is derived for: the unit
// roundoff of each operation, and the relative error of the reciprocal
// square root on top of its argument's. The kernels' is binary32 rounded to
// nearest (no tensor cores: every operation is a plain binary32 one); the
// oracle's own is float64, whose structure is the two-pass kernel's.
type lnArith struct {
	u, rsqrt float64
}

var (
	lnKernel = lnArith{u: u24, rsqrt: rsqrtRelative}
	lnOracle = lnArith{u: U64, rsqrt: 2 * U64}
)

func (a lnArith) gamma(n int) float64 { return Gamma(int64(n), a.u) }

// lnSlack covers evaluating the kernels' bound at the oracle's float64
// sums of n terms rather than the exact ones: each magnitude the bound is
// made of is within γ₆₄(n + 4) of its exact value, relative, which moves
// the bound by about as much relative to itself (more only where δ_z nears
// 1, where the bound is already huge), so a factor 1 + γ₆₄(4n) holds it. The
// oracle's own error is counted twice for the same reason (the second copy
// covers the cross terms, such as u·|y| where y is known to γ₆₄ only).
func lnSlack(n int) float64 { return 1 + Gamma(int64(4*n+16), U64) }

// times is a·b where a zero factor wins over an infinite one: an error term
// that multiplies an exactly known zero is zero.
func times(a, b float64) float64 {
	if a == 0 || b == 0 {
		return 0
	}
	return a * b
}

// finiteBound is bound where value is finite, and 0 where it is NaN or
// ±Inf (verify wants those exactly); a NaN bound (∞·0 in its terms) is
// +Inf.
func finiteBound(value, bound float64) float64 {
	switch {
	case math.IsNaN(value) || math.IsInf(value, 0):
		return 0
	case math.IsNaN(bound):
		return math.Inf(1)
	}
	return bound
}

// rowStats are a row's statistics as the bound needs them.
type rowStats struct {
	c              int     // the row's length
	abs, squares   float64 // Σ|x| and Σx²
	mean, variance float64 // μ and the biased variance v
}

// statErrors are the errors of a kernel's mean μ̂, variance v̂ and
// ρ̂ = 1/√(v̂ + ε) for a row, with eps ε; see LayerNormRows.
func (a lnArith) statErrors(s rowStats, eps float64) (eMean, eVar, eRstd float64) {
	u, n := a.u, float64(s.c)
	eMean = a.gamma(s.c+1) * s.abs / n
	m := math.Abs(s.mean)
	twoPass := eMean*eMean + a.gamma(s.c+4)*(s.variance+eMean*eMean)
	onePass := (1+u)*(a.gamma(s.c+1)*s.squares/n+eMean*(2*m+eMean)+u*(m+eMean)*(m+eMean)) + u*s.variance
	eVar = math.Max(twoPass, onePass)
	z := s.variance + eps
	delta := ((eVar+u*eps)*(1+u) + u*z) / z
	if !(delta < 1) {
		return eMean, eVar, math.Inf(1)
	}
	return eMean, eVar, (1+a.rsqrt)/math.Sqrt(1-delta)/math.Sqrt(z) - 1/math.Sqrt(z)
}

// outputError is the error of a kernel's y = (x − μ̂)·ρ̂·w + b at one
// element, where d = x − μ, y is the exact output, and μ̂ and ρ̂ are within
// eMean and eRstd of μ and ρ; see LayerNormRows.
func (a lnArith) outputError(d, rstd, w, y, eMean, eRstd float64) float64 {
	u, ad := a.u, math.Abs(d)
	eD := eMean + u*(ad+eMean)
	eDR := eD*rstd + times(ad, eRstd) + times(eD, eRstd)
	eP := times(math.Abs(w), eDR+a.gamma(2)*(ad*rstd+eDR))
	return eP + u*(math.Abs(y)+eP)
}

// LayerNormRows is the reference of layernorm on an R×C matrix x of f16
// values with f16 weight w and bias b: per row, μ = Σx/C, v = Σ(x − μ)²/C,
// ρ = 1/√(v + ε), y = (x − μ)·ρ·w + b; it returns y, μ and ρ.
//
// Bound. With A = Σ|x|, Q = Σx² and u = 2⁻²⁴ (binary32, round to nearest):
// μ̂, a sum in any order then a division or a product with fl(1/C), is
// within E_μ = γ(C+1)·A/C. A two-pass kernel sums (x − μ̂)², whose exact sum
// is C·(v + δ²) with δ = μ̂ − μ (Σ(x − μ) = 0), with 3 roundings a term, so
// |v̂ − v| ≤ E_μ² + γ(C+4)·(v + E_μ²); a one-pass kernel takes Σx²/C − μ̂²
// (clamped at 0), within (1+u)·[γ(C+1)·Q/C + E_μ(2|μ| + E_μ) + u(|μ| + E_μ)²]
// + u·v. E_v is the larger. fl(v̂ + fl(ε)) is within a relative
// δ_z = ((E_v + uε)(1+u) + u·z)/z of z = v + ε, and ρ̂ (rsqrtf, 2 ulps, or
// 1/sqrtf) within E_ρ = ρ·[(1 + 2⁻²²)/√(1 − δ_z) − 1]. Then
// d̂ = fl(x − μ̂) is within E_d = E_μ + u(|d| + E_μ) of d = x − μ, the two
// products within E_p = |w|·(E_dρ + γ(2)(|d|ρ + E_dρ)), E_dρ = E_d·ρ + |d|E_ρ
// + E_d·E_ρ, and adding b costs u(|y| + E_p). Fused multiply-adds round
// less. Welford's updates, and kernels that expand (x − μ)·ρ as x·ρ − μ·ρ,
// are not covered. The oracle computes the two-pass structure in float64,
// so its own error is the same bound at u = 2⁻⁵³.
//
// IEEE specials follow the formula: a NaN in a row, or both infinities,
// makes μ NaN; one infinity makes μ that infinity and v NaN; either way ρ
// and the row of y are NaN. A NaN weight or bias makes its column NaN; an
// infinite bias makes its column that infinity in every finite row.
func LayerNormRows(ctx context.Context, xs, ws, bs []uint16, rows, cols int, eps float64) (y, mean, rstd *Reference, err error) {
	y = &Reference{Value: make([]float64, rows*cols), Bound: make([]float64, rows*cols)}
	mean = &Reference{Value: make([]float64, rows), Bound: make([]float64, rows)}
	rstd = &Reference{Value: make([]float64, rows), Bound: make([]float64, rows)}
	w, b := f16Values(ws), f16Values(bs)
	slack := lnSlack(cols)
	err = parallelRows(ctx, rows, 8*cols, func(lo, hi int) {
		x := make([]float64, cols)
		for r := lo; r < hi; r++ {
			for j, h := range xs[r*cols : (r+1)*cols] {
				x[j] = f16.ToFloat64(h)
			}
			s := layerNormStats(x)
			rho := 1 / math.Sqrt(s.variance+eps)
			kMean, _, kRstd := lnKernel.statErrors(s, eps)
			oMean, _, oRstd := lnOracle.statErrors(s, eps)
			mean.Value[r], mean.Bound[r] = s.mean, finiteBound(s.mean, kMean*slack+2*oMean)
			rstd.Value[r], rstd.Bound[r] = rho, finiteBound(rho, kRstd*slack+2*oRstd)
			value := y.Value[r*cols : (r+1)*cols]
			bound := y.Bound[r*cols : (r+1)*cols]
			for j := range x {
				d := x[j] - s.mean
				v := d*rho*w[j] + b[j]
				value[j] = v
				bound[j] = finiteBound(v, lnKernel.outputError(d, rho, w[j], v, kMean, kRstd)*slack+
					2*lnOracle.outputError(d, rho, w[j], v, oMean, oRstd))
			}
		}
	})
	if err != nil {
		return nil, nil, nil, err
	}
	return y, mean, rstd, nil
}

// layerNormStats is the two-pass statistics of a row, in float64.
func layerNormStats(x []float64) rowStats {
	s := rowStats{c: len(x)}
	var sum float64
	for _, v := range x {
		sum += v
		s.abs += math.Abs(v)
		s.squares += v * v
	}
	s.mean = sum / float64(len(x))
	for _, v := range x {
		d := v - s.mean
		s.variance += d * d
	}
	s.variance /= float64(len(x))
	return s
}

func f16Values(hs []uint16) []float64 {
	out := make([]float64, len(hs))
	for i, h := range hs {
		out[i] = f16.ToFloat64(h)
	}
	return out
}

// LayerNormGradRows is the reference of layernorm_grad: for an R×C matrix
// of f16 upstream gradients dy and inputs x, the f16 weight w and each
// row's f32 mean μ and rstd ρ (taken as given), with x̂ = (x − μ)·ρ and
// g = w⊙dy per row,
//
//	dx = ρ·(g − a − x̂·c),   a = Σg/C,   c = Σ g⊙x̂ / C,
//	dw = dw₀ + Σ_rows dy⊙x̂,   db = db₀ + Σ_rows dy.
//
// Bound, with u = 2⁻²⁴ (binary32, round to nearest). g is exact (f16·f16);
// x̂ takes two roundings, within γ(2)|x̂|. â, a sum in any order and a
// division (or a product with fl(1/C)), is within E_a = γ(C+1)·G/C,
// G = Σ|g|; ĉ, whose terms take three roundings, within E_c = γ(C+4)·H/C,
// H = Σ|g·x̂|. x̂·ĉ is then within E_xc = e_x|c| + |x̂|E_c + e_x·E_c,
// e_x = γ(2)|x̂|, and the rest, at most six roundings of quantities below
// M = |g| + |a| + |x̂||c| plus the errors (two subtractions, the product with
// x̂, the product with ρ, and a rescaling such as a division by C done
// late), gives
//
//	|dx̂ − dx| ≤ ρ·[(E_a + E_xc)(1 + γ(6)) + γ(6)·M].
//
// dw adds R + 1 terms in any order, R of them products of three roundings:
// within γ(R+3)·(|dw₀| + Σ|dy·x̂|); db adds R + 1 exact terms: within
// γ(R)·(|db₀| + Σ|dy|). The oracle computes the same structure in float64,
// so its own error is the same bound at u = 2⁻⁵³.
//
// With a residual r (rs not nil, R×C f16), dx = r + ρ·(g − a − x̂·c): the
// kernel adds r to its f32 value, one more rounding, within u·(|r| + |d̂x|)
// with |d̂x| ≤ |dx| + its bound, before the one rounding to f16.
//
// With dxs0 (not nil: dx_sum 1), dxs = dxs₀ + Σ_rows dx, the kernel's
// dx values summed in f32 before their rounding to f16: R + 1 terms in any
// order, each within its dx bound e_rj, so
//
//	|d̂xs − dxs| ≤ Σ_r e_rj + γ(R)·(|dxs₀| + Σ_r (|dx_rj| + e_rj)).
//
// IEEE specials follow the formula: a NaN or infinite g in a row makes a or
// c non-finite and the whole row of dx NaN or infinite; dw and db take
// their columns' NaNs and infinities (Inf·0 = NaN where x = μ); a NaN or
// infinite r makes its element of dx so (+Inf + −Inf = NaN); dxs takes its
// column's.
func LayerNormGradRows(ctx context.Context, dys, xs, ws, rs []uint16, means, rstds, dw0, db0, dxs0 []float32, rows, cols int) (dx, dw, db, dxs *Reference, err error) {
	dx = &Reference{Value: make([]float64, rows*cols), Bound: make([]float64, rows*cols)}
	w := f16Values(ws)
	slack := lnSlack(cols)
	err = parallelRows(ctx, rows, 12*cols, func(lo, hi int) {
		xh := make([]float64, cols)
		g := make([]float64, cols)
		for r := lo; r < hi; r++ {
			mu, rho := float64(means[r]), float64(rstds[r])
			var a, c, gAbs, hAbs float64
			for j := range xh {
				xh[j] = (f16.ToFloat64(xs[r*cols+j]) - mu) * rho
				g[j] = w[j] * f16.ToFloat64(dys[r*cols+j])
				a += g[j]
				c += g[j] * xh[j]
				gAbs += math.Abs(g[j])
				hAbs += math.Abs(g[j] * xh[j])
			}
			n := float64(cols)
			a /= n
			c /= n
			for j := range xh {
				v := rho * (g[j] - a - xh[j]*c)
				bound := lnKernel.dxError(cols, gAbs, hAbs, g[j], a, xh[j], c, rho)*slack +
					2*lnOracle.dxError(cols, gAbs, hAbs, g[j], a, xh[j], c, rho)
				if rs != nil {
					res := f16.ToFloat64(rs[r*cols+j])
					bound += u24 * (math.Abs(res) + math.Abs(v) + bound) * (1 + 2*U64)
					v += res
				}
				dx.Value[r*cols+j] = v
				dx.Bound[r*cols+j] = finiteBound(v, bound)
			}
		}
	})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	dw = &Reference{Value: make([]float64, cols), Bound: make([]float64, cols)}
	db = &Reference{Value: make([]float64, cols), Bound: make([]float64, cols)}
	const block = 64
	rowSlack := lnSlack(rows)
	err = parallelRows(ctx, (cols+block-1)/block, 4*block*rows, func(lo, hi int) {
		for j0 := lo * block; j0 < min(cols, hi*block); j0 += block {
			j1 := min(cols, j0+block)
			sw, sb := make([]float64, j1-j0), make([]float64, j1-j0)
			mw, mb := make([]float64, j1-j0), make([]float64, j1-j0)
			for j := j0; j < j1; j++ {
				sw[j-j0], sb[j-j0] = float64(dw0[j]), float64(db0[j])
				mw[j-j0], mb[j-j0] = math.Abs(sw[j-j0]), math.Abs(sb[j-j0])
			}
			for r := 0; r < rows; r++ {
				mu, rho := float64(means[r]), float64(rstds[r])
				for j := j0; j < j1; j++ {
					d := f16.ToFloat64(dys[r*cols+j])
					t := d * ((f16.ToFloat64(xs[r*cols+j]) - mu) * rho)
					sw[j-j0] += t
					sb[j-j0] += d
					mw[j-j0] += math.Abs(t)
					mb[j-j0] += math.Abs(d)
				}
			}
			for j := j0; j < j1; j++ {
				k := j - j0
				dw.Value[j] = sw[k]
				dw.Bound[j] = finiteBound(sw[k], Gamma(int64(rows+3), u24)*mw[k]*rowSlack+2*Gamma(int64(rows+3), U64)*mw[k])
				db.Value[j] = sb[k]
				db.Bound[j] = finiteBound(sb[k], Gamma(int64(rows), u24)*mb[k]*rowSlack+2*Gamma(int64(rows), U64)*mb[k])
			}
		}
	})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if dxs0 != nil {
		dxs = columnSums(dx, dxs0, rows, cols)
	}
	return dx, dw, db, dxs, nil
}

// columnSums is dxs of LayerNormGradRows: s₀ plus the column sums of the
// f32 values ref bounds (before their rounding to the output type), and
// the bound of a sum of R + 1 such terms in any order. The oracle's own
// float64 sum errs by γ₆₄(R) of the magnitudes, counted twice.
func columnSums(ref *Reference, s0 []float32, rows, cols int) *Reference {
	// Row by row, as ref is laid out: the sum, the magnitudes and the
	// errors of every column at once.
	sum, mag, errs := make([]float64, cols), make([]float64, cols), make([]float64, cols)
	for j, v := range s0 {
		sum[j], mag[j] = float64(v), math.Abs(float64(v))
	}
	for r := 0; r < rows; r++ {
		for j := range cols {
			v, e := ref.Value[r*cols+j], ref.Bound[r*cols+j]
			sum[j] += v
			mag[j] += math.Abs(v) + e
			errs[j] += e
		}
	}
	out := &Reference{Value: sum, Bound: make([]float64, cols)}
	for j := range cols {
		out.Bound[j] = finiteBound(sum[j], errs[j]+Gamma(int64(rows), u24)*mag[j]+2*Gamma(int64(rows), U64)*mag[j])
	}
	return out
}

// dxError is the error of a kernel's dx at one element; see
// LayerNormGradRows.
func (a lnArith) dxError(c int, gAbs, hAbs, g, gMean, xh, gxMean, rho float64) float64 {
	eA := a.gamma(c+1) * gAbs / float64(c)
	eC := a.gamma(c+4) * hAbs / float64(c)
	ax, ac := math.Abs(xh), math.Abs(gxMean)
	eX := a.gamma(2) * ax
	eXC := eX*ac + ax*eC + eX*eC
	g6 := a.gamma(6)
	return rho * ((eA+eXC)*(1+g6) + g6*(math.Abs(g)+math.Abs(gMean)+ax*ac))
}

func init() {
	mustRegister(op.LayerNorm, Spec{
		Compute: func(ctx context.Context, s op.Shape, in []Input, _ Arithmetic) ([]*Reference, error) {
			y, mean, rstd, err := LayerNormRows(ctx, in[0].F16, in[1].F16, in[2].F16, int(s.Dims[0]), int(s.Dims[1]), s.Value("eps"))
			if err != nil {
				return nil, err
			}
			return []*Reference{y, mean, rstd}, nil
		},
		Generate: layerNormGenerate,
	})
	mustRegister(op.LayerNormGrad, Spec{
		Compute: func(ctx context.Context, s op.Shape, in []Input, _ Arithmetic) ([]*Reference, error) {
			var rs []uint16
			if s.Int("residual") == 1 {
				rs = in[5].F16
			}
			var dxs0 []float32
			if s.Int("dx_sum") == 1 {
				dxs0 = in[8].F32
			}
			dx, dw, db, dxs, err := LayerNormGradRows(ctx, in[0].F16, in[1].F16, in[2].F16, rs, in[3].F32, in[4].F32, in[6].F32, in[7].F32,
				dxs0, int(s.Dims[0]), int(s.Dims[1]))
			if err != nil {
				return nil, err
			}
			if dxs == nil {
				dxs = &Reference{Value: []float64{}, Bound: []float64{}}
			}
			return []*Reference{dx, dw, db, dxs}, nil
		},
		Generate: layerNormGradGenerate,
	})
}

// layerNormX draws layernorm's input rows (input i): each distribution's
// values plus a per-row offset (whole numbers in [−3, 3] under Integer,
// uniform in [−1, 1) under Uniform, N(0, 1) under Normal and Special, none
// under Wide), since a residual stream's rows do not have mean 0 and a
// kernel that forgets to subtract the mean must show. Under Special, the
// rows of plantLayerNormRows, with NaN and infinities only when special.
func layerNormX(g *Gen, i int, special bool) []uint16 {
	rows, cols := g.Size(i)
	draw := g.Dist.Draw
	if g.Dist == Special {
		draw = Normal.Draw
	}
	x := g.F16(i, draw)
	if g.Dist != Wide {
		for r := 0; r < rows; r++ {
			var offset float64
			switch g.Dist {
			case Integer:
				offset = float64(g.Rand().IntN(7) - 3)
			case Uniform:
				offset = 2*g.Rand().Float64() - 1
			default:
				offset = g.Rand().NormFloat64()
			}
			for j := r * cols; j < (r+1)*cols; j++ {
				x[j] = f16.FromFloat64(f16.ToFloat64(x[j]) + offset)
			}
		}
	}
	if g.Dist == Special {
		plantLayerNormRows(g, x, rows, cols, special)
	}
	return x
}

// plantLayerNormRows puts special rows into x: subnormals at random (one
// element in 50), row 3 constant (variance 0: ρ = 1/√ε), row 4 far from 0
// (4096 + 64·N(0, 1): the mean 64 standard deviations out), row 5 all
// subnormal (ε dominates the variance); and when nonFinite, a NaN in row 0,
// a +Inf in row 1 and both infinities in row 2.
func plantLayerNormRows(g *Gen, x []uint16, rows, cols int, nonFinite bool) {
	set := func(r, c int, v uint16) {
		if r < rows && c < cols {
			x[r*cols+c] = v
		}
	}
	for t := 0; t < max(1, len(x)/50); t++ {
		x[g.Rand().IntN(len(x))] = g.Subnormal()
	}
	for c := 0; c < cols; c++ {
		set(3, c, f16.FromFloat64(1.5))
		set(4, c, f16.FromFloat64(4096+64*g.Rand().NormFloat64()))
		set(5, c, g.Subnormal())
	}
	if nonFinite {
		set(0, g.Rand().IntN(cols), f16.NaN)
		set(1, g.Rand().IntN(cols), f16.PosInf)
		set(2, 0, f16.NegInf)
		set(2, cols-1, f16.PosInf)
	}
}

// layerNormGenerate draws layernorm's x (layerNormX), and w and b by the
// distribution; under Special, w holds a NaN (a NaN column of y) and 60000
// (outputs past the f16 range) and b both infinities (infinite columns),
// at distinct columns where C allows, and subnormals.
func layerNormGenerate(g *Gen) []Input {
	x := layerNormX(g, 0, true)
	if g.Dist != Special {
		return []Input{{F16: x}, {F16: g.F16(1, g.Dist.Draw)}, {F16: g.F16(2, g.Dist.Draw)}}
	}
	w, b := g.F16(1, Normal.Draw), g.F16(2, Normal.Draw)
	cols := len(w)
	for t := 0; t < max(1, cols/50); t++ {
		w[g.Rand().IntN(cols)] = g.Subnormal()
		b[g.Rand().IntN(cols)] = g.Subnormal()
	}
	at := g.Rand().Perm(cols)
	pick := func(k int) int { return at[k%cols] }
	w[pick(0)] = f16.NaN
	w[pick(1)] = big
	b[pick(2)] = f16.PosInf
	b[pick(3)] = f16.NegInf
	return []Input{{F16: x}, {F16: w}, {F16: b}}
}

// layerNormGradGenerate draws layernorm_grad's inputs: x as layernorm's
// (finite: the forward's statistics of a row with a NaN or infinity are
// not a positive rstd), mean and rstd as the forward computes them from x
// with eps 1e-5 (in float64, rounded once to f32, as a kernel stores them),
// dy and w by the distribution, and the initial dw and db by it too. Under
// Special, dy holds a NaN (row 0), +Inf (row 1, column 0), −Inf (row 2,
// column 0), +Inf where w = 0 (row 7, column 1: Inf·0 = NaN), values near
// the f16 maximum (row 6) and subnormals; the initial dw a NaN and db a
// +Inf.
func layerNormGradGenerate(g *Gen) []Input {
	rows, cols := g.Size(1)
	x := layerNormX(g, 1, false)
	means, rstds := make([]float32, rows), make([]float32, rows)
	row := make([]float64, cols)
	for r := range means {
		for j := range row {
			row[j] = f16.ToFloat64(x[r*cols+j])
		}
		s := layerNormStats(row)
		means[r] = float32(s.mean)
		rstds[r] = float32(1 / math.Sqrt(s.variance+layerNormGradEps))
	}
	draw := g.Dist.Draw
	if g.Dist == Special {
		draw = Normal.Draw
	}
	dy, w, res := g.F16(0, draw), g.F16(2, draw), g.F16(5, draw)  // res: empty unless residual
	dw, db, dxs := g.F32(6, draw), g.F32(7, draw), g.F32(8, draw) // dxs: empty unless dx_sum
	if g.Dist == Special {
		plantLayerNormGrad(g, dy, w, res, dw, db, rows, cols)
		if len(dxs) > 0 {
			dxs[cols/3] = float32(math.Inf(-1))
		}
	}
	return []Input{{F16: dy}, {F16: x}, {F16: w}, {F32: means}, {F32: rstds}, {F16: res}, {F32: dw}, {F32: db}, {F32: dxs}}
}

// plantLayerNormGrad puts layernorm_grad's special values in place (see
// layerNormGradGenerate).
func plantLayerNormGrad(g *Gen, dy, w, res []uint16, dw, db []float32, rows, cols int) {
	set := func(m []uint16, r, c int, v uint16) {
		if r < rows && c < cols {
			m[r*cols+c] = v
		}
	}
	for t := 0; t < max(1, len(dy)/50); t++ {
		dy[g.Rand().IntN(len(dy))] = g.Subnormal()
	}
	for t := 0; t < max(1, cols/50); t++ {
		w[g.Rand().IntN(cols)] = g.Subnormal()
	}
	set(dy, 0, g.Rand().IntN(cols), f16.NaN)
	set(dy, 1, 0, f16.PosInf)
	set(dy, 2, 0, f16.NegInf)
	for c := 0; c < cols; c++ {
		set(dy, 6, c, f16.FromFloat64(65504*(2*g.Rand().Float64()-1)))
	}
	if cols > 1 {
		w[1] = 0
		set(dy, 7, 1, f16.PosInf)
	}
	dw[cols-1] = float32(math.NaN())
	db[cols/2] = float32(math.Inf(1))
	if len(res) > 0 {
		// The residual's specials, in rows whose gradient is finite; and one
		// that meets an infinite gradient of the other sign (NaN).
		res[g.Rand().IntN(len(res))] = f16.NaN
		res[g.Rand().IntN(len(res))] = f16.PosInf
		res[g.Rand().IntN(len(res))] = g.Subnormal()
		set(res, 2, 0, f16.PosInf) // dy's row 2 starts −Inf
	}
}
