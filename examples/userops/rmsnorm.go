package main

import (
	"context"
	"math"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
)

// RMSNorm is the root-mean-square norm of LLaMA and T5 over the last
// dimension of x f16 R×C: y = x·rstd·w, rstd = 1/√(mean(x²) + eps), with
// each row's rstd kept (f32) for the backward.
var RMSNorm = &op.Op{
	Name: "rmsnorm", Math: "y[r] = x[r]·rstd·w, rstd = 1/√(mean(x[r]²) + eps)",
	Dims:   []op.Dim{{Name: "R", Meaning: "rows: tokens"}, {Name: "C", Meaning: "columns: channels, normalised together"}},
	Params: []op.Param{{Name: "eps", Kind: op.Float, Min: 1e-30, Max: 1, Default: 1e-5, Meaning: "added to the mean square inside the square root"}},
	Operands: []op.Operand{
		{Name: "x", DType: op.F16, Rows: op.X("R"), Cols: op.X("C"), Role: op.In},
		{Name: "w", DType: op.F16, Rows: op.X("C"), Role: op.In},
		{Name: "y", DType: op.F16, Rows: op.X("R"), Cols: op.X("C"), Role: op.Out},
		{Name: "rstd", DType: op.F32, Rows: op.X("R"), Role: op.Out},
	},
	Reduces: op.X("C"), Independent: "R",
	Flops:           func(s op.Shape) float64 { return 4 * float64(s.Dims[0]) * float64(s.Dims[1]) },
	NoExactRounding: "1/√(mean(x²) + eps) is not exact, so no input gives rmsnorm exact results to round; its rounding is checked by the bias statistic only",
	Shapes: op.Shapes{
		Quick:   []string{"1x1", "7x769", "64x1024:eps=1e-6"},
		Default: []string{"1x1", "1x2", "7x769", "64x1024:eps=1e-6", "256x4099", "3x65537:eps=1e-3"},
		Bench:   []string{"16384x4096"},
	},
	NonClaims: []string{"rmsnorm's rstd is checked as an f32 output under its own bound; how a kernel's rounding of it propagates through rmsnorm_grad is rmsnorm_grad's to show"},
}

// RMSNormGrad is the backward of rmsnorm: with x̂ = x·rstd and g = w ⊙ dy,
// dx = rstd·(g − x̂·mean(g ⊙ x̂)) per row (f16), and dw += Σ_rows dy ⊙ x̂
// (f32, added into).
var RMSNormGrad = &op.Op{
	Name: "rmsnorm_grad", Math: "dx = rstd·(g − x̂·mean(g⊙x̂)), g = w⊙dy, x̂ = x·rstd; dw += Σ dy⊙x̂",
	Dims: []op.Dim{{Name: "R", Meaning: "rows: tokens"}, {Name: "C", Meaning: "columns: channels"}},
	Operands: []op.Operand{
		{Name: "dy", DType: op.F16, Rows: op.X("R"), Cols: op.X("C"), Role: op.In},
		{Name: "x", DType: op.F16, Rows: op.X("R"), Cols: op.X("C"), Role: op.In},
		{Name: "w", DType: op.F16, Rows: op.X("C"), Role: op.In},
		{Name: "rstd", DType: op.F32, Rows: op.X("R"), Role: op.In},
		{Name: "dx", DType: op.F16, Rows: op.X("R"), Cols: op.X("C"), Role: op.Out},
		{Name: "dw", DType: op.F32, Rows: op.X("C"), Role: op.InOut},
	},
	Reduces:         op.X("C"),
	Flops:           func(s op.Shape) float64 { return 9 * float64(s.Dims[0]) * float64(s.Dims[1]) },
	NoExactRounding: "rstd and the row means are not exact in general, so no input gives rmsnorm_grad exact results to round; its rounding is checked by the bias statistic only",
	Shapes: op.Shapes{
		Quick:   []string{"1x1", "7x769", "64x1024"},
		Default: []string{"1x1", "1x2", "7x769", "64x1024", "256x4099", "3x65537"},
		Bench:   []string{"16384x4096"},
	},
	NonClaims: []string{"rmsnorm_grad is checked for the rstd it is given, which verify draws as the forward makes it (eps 1e-5); nothing is claimed for inconsistent ones"},
}

// rmsNormGradEps is the eps of the forward whose rstd rmsnorm_grad's
// inputs are drawn with.
const rmsNormGradEps = 1e-5

// rmsArith is the arithmetic a bound is derived for: the unit roundoff of
// each operation and the relative error of a reciprocal square root. The
// kernels' is binary32 rounded to nearest, with rsqrtf within 2 ulps (the
// CUDA Math API's table) or 1/sqrtf (two roundings); the reference's own
// is float64.
type rmsArith struct{ u, rsqrt float64 }

var (
	rmsKernel = rmsArith{u: 0x1p-24, rsqrt: 2 * 0x1p-23}
	rmsOracle = rmsArith{u: 0x1p-53, rsqrt: 2 * 0x1p-53}
)

func (a rmsArith) gamma(n int) float64 { return oracle.Gamma(int64(n), a.u) }

// rstdError is the relative error of r̂ = 1/√(ẑ) for a row of c elements;
// see rmsNormCompute.
func (a rmsArith) rstdError(c int) float64 {
	dz := a.gamma(c + 2)
	if !(dz < 1) {
		return math.Inf(1)
	}
	return (1+a.rsqrt)/math.Sqrt(1-dz) - 1
}

// yError is the relative error of ŷ = x·r̂·w.
func (a rmsArith) yError(c int) float64 {
	return (1+a.rstdError(c))*(1+a.gamma(2)) - 1
}

// rmsNormCompute is the reference of rmsnorm: per row, z = Σx²/C + ε,
// r = 1/√z, y = x·r·w; it returns y and r.
//
// Bound, with u = 2⁻²⁴ (binary32, round to nearest). Each x² is exact in
// binary32 (f16·f16), so the sum of C non-negative terms in any order, the
// division by C (or the product with fl(1/C)), fl(ε) and the addition give
// ẑ = z·(1 + θ) with |θ| ≤ δ_z = γ(C+2): every term is positive, so the
// relative errors compose. r̂ (rsqrtf within 2 ulps, or 1/sqrtf) is then
// within E_r = (1 + 2⁻²²)/√(1 − δ_z) − 1 of r, relative, and ŷ, two
// products more, within E_y = (1 + E_r)(1 + γ(2)) − 1 of y. The reference
// computes the same structure in float64, within the same expressions at
// u = 2⁻⁵³ (E_r⁶⁴, E_y⁶⁴), so a value v̂ of the kernel's lies within
// (E + E⁶⁴)/(1 − E⁶⁴)·|ṽ| of the reference's ṽ; 2⁻¹⁴⁸ more covers a
// product that lands among binary32's subnormals.
//
// IEEE specials follow the formula: a NaN in a row makes z, r and the
// whole row of y NaN; an infinity makes z infinite and r zero, so y is NaN
// at the infinity and ±0 elsewhere; a NaN weight makes its column NaN.
func rmsNormCompute(ctx context.Context, s op.Shape, in []oracle.Input, _ oracle.Arithmetic) ([]*oracle.Reference, error) {
	rows, cols, eps := int(s.Dims[0]), int(s.Dims[1]), s.Value("eps")
	xs, w := in[0].F16, f16Values(in[1].F16)
	y := newReference(rows * cols)
	rstd := newReference(rows)
	yRel := relative(rmsKernel.yError(cols), rmsOracle.yError(cols))
	rRel := relative(rmsKernel.rstdError(cols), rmsOracle.rstdError(cols))
	err := oracle.ParallelRows(ctx, rows, 6*cols, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			x := xs[r*cols : (r+1)*cols]
			var q float64
			for _, h := range x {
				v := f16.ToFloat64(h)
				q += v * v
			}
			rho := 1 / math.Sqrt(q/float64(cols)+eps)
			rstd.Value[r], rstd.Bound[r] = rho, finiteBound(rho, rRel*rho+0x1p-148)
			for j, h := range x {
				v := f16.ToFloat64(h) * rho * w[j]
				y.Value[r*cols+j], y.Bound[r*cols+j] = v, finiteBound(v, yRel*math.Abs(v)+0x1p-148)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return []*oracle.Reference{y, rstd}, nil
}

// relative is the bound, relative to the reference's value, of a kernel
// within k of the exact value when the reference is within o of it.
func relative(k, o float64) float64 { return (k + o) / (1 - o) }

// rmsNormGradCompute is the reference of rmsnorm_grad: for R×C f16
// upstream gradients dy and inputs x, the f16 weight w and each row's f32
// rstd r (taken as given), with x̂ = x·r and g = w⊙dy per row,
//
//	dx = r·(g − x̂·c),   c = Σ g⊙x̂ / C,   dw = dw₀ + Σ_rows dy⊙x̂.
//
// Bound, with u = 2⁻²⁴ (binary32, round to nearest). g is exact (f16·f16);
// x̂ takes one rounding, within e_x = u|x̂|. ĉ, whose terms take two
// roundings, a sum in any order and a division by C (or a product with
// fl(1/C)), is within E_c = γ(C+3)·H/C, H = Σ|g·x̂|. x̂·ĉ is then within
// E_xc = e_x|c| + |x̂|E_c + e_x·E_c before its own rounding, and that
// rounding, the subtraction from g and the product with r give
//
//	|dx̂ − dx| ≤ r·[E_xc·(1 + γ(3)) + γ(3)·(|g| + |x̂||c|)]
//
// (a fused multiply-add rounds once where this counts two). dw adds R + 1
// terms in any order, R of them products of two roundings: within
// γ(R+2)·(|dw₀| + Σ|dy·x̂|). The reference computes the same structure in
// float64, so its own error is the same bound at u = 2⁻⁵³. The kernel's
// bound is evaluated at the reference's float64 quantities rather than the
// exact ones, each within γ₆₄(C + 4) of its own, relative, which a factor
// 1 + γ₆₄(4C + 16) covers; the reference's error is counted twice, the
// second copy for the cross terms.
//
// IEEE specials follow the formula: a NaN or infinite g in a row makes c
// non-finite and the row of dx NaN or infinite (Inf·0 = NaN where x = 0);
// dw takes its columns' NaNs and infinities.
func rmsNormGradCompute(ctx context.Context, s op.Shape, in []oracle.Input, _ oracle.Arithmetic) ([]*oracle.Reference, error) {
	rows, cols := int(s.Dims[0]), int(s.Dims[1])
	dys, xs, w, rstds, dw0 := in[0].F16, in[1].F16, f16Values(in[2].F16), in[3].F32, in[4].F32
	dx := newReference(rows * cols)
	slack := 1 + oracle.Gamma(int64(4*cols+16), 0x1p-53)
	err := oracle.ParallelRows(ctx, rows, 10*cols, func(lo, hi int) {
		xh, g := make([]float64, cols), make([]float64, cols)
		for r := lo; r < hi; r++ {
			rho := float64(rstds[r])
			var c, h float64
			for j := range xh {
				xh[j] = f16.ToFloat64(xs[r*cols+j]) * rho
				g[j] = w[j] * f16.ToFloat64(dys[r*cols+j])
				c += g[j] * xh[j]
				h += math.Abs(g[j] * xh[j])
			}
			c /= float64(cols)
			for j := range xh {
				v := rho * (g[j] - xh[j]*c)
				bound := rmsKernel.dxError(cols, h, g[j], xh[j], c, rho)*slack + 2*rmsOracle.dxError(cols, h, g[j], xh[j], c, rho)
				dx.Value[r*cols+j], dx.Bound[r*cols+j] = v, finiteBound(v, bound)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	dw := newReference(cols)
	const block = 64
	rowSlack := 1 + oracle.Gamma(int64(4*rows+16), 0x1p-53)
	err = oracle.ParallelRows(ctx, (cols+block-1)/block, 4*block*rows, func(lo, hi int) {
		for j0 := lo * block; j0 < min(cols, hi*block); j0 += block {
			j1 := min(cols, j0+block)
			sum, abs := make([]float64, j1-j0), make([]float64, j1-j0)
			for j := j0; j < j1; j++ {
				sum[j-j0], abs[j-j0] = float64(dw0[j]), math.Abs(float64(dw0[j]))
			}
			for r := 0; r < rows; r++ {
				rho := float64(rstds[r])
				for j := j0; j < j1; j++ {
					t := f16.ToFloat64(dys[r*cols+j]) * (f16.ToFloat64(xs[r*cols+j]) * rho)
					sum[j-j0] += t
					abs[j-j0] += math.Abs(t)
				}
			}
			for j := j0; j < j1; j++ {
				k := j - j0
				bound := rmsKernel.gamma(rows+2)*abs[k]*rowSlack + 2*rmsOracle.gamma(rows+2)*abs[k]
				dw.Value[j], dw.Bound[j] = sum[k], finiteBound(sum[k], bound)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return []*oracle.Reference{dx, dw}, nil
}

// dxError is the error of a kernel's dx at one element; see
// rmsNormGradCompute.
func (a rmsArith) dxError(c int, h, g, xh, gxMean, rho float64) float64 {
	eC := a.gamma(c+3) * h / float64(c)
	ax, ac := math.Abs(xh), math.Abs(gxMean)
	eX := a.u * ax
	eXC := eX*ac + ax*eC + eX*eC
	g3 := a.gamma(3)
	return rho * (eXC*(1+g3) + g3*(math.Abs(g)+ax*ac))
}

// rmsNormGenerate draws rmsnorm's inputs by the distribution
// (oracle.Gen.Default: under special, NaN, ±Inf and subnormals scattered
// in), and under special also rows where eps matters: row 3 all zero (the
// mean square 0, rstd = 1/√eps), row 4 of values near 2⁻¹⁰ (a mean square
// below the default eps) and row 5 all subnormal, so that a kernel that
// adds eps in the wrong place shows.
func rmsNormGenerate(g *oracle.Gen) []oracle.Input {
	inputs := g.Default()
	if g.Dist != oracle.Special {
		return inputs
	}
	x := inputs[0].F16
	rows, cols := g.Size(0)
	for r := 3; r <= 5 && r < rows; r++ {
		for j := r * cols; j < (r+1)*cols; j++ {
			switch r {
			case 3:
				x[j] = 0
			case 4:
				x[j] = f16.FromFloat64(0x1p-10 * g.Rand().NormFloat64())
			case 5:
				x[j] = g.Subnormal()
			}
		}
	}
	return inputs
}

// rmsNormGradGenerate draws rmsnorm_grad's inputs: x by the distribution
// (finite under special: the forward's rstd of a row with a NaN or an
// infinity is not a positive number), rstd as the forward computes it from
// x with eps 1e-5 (in float64, rounded once to f32, as a kernel stores it),
// w and the initial dw by the distribution, and dy by it too, with NaN,
// ±Inf and subnormals scattered in under special.
func rmsNormGradGenerate(g *oracle.Gen) []oracle.Input {
	rows, cols := g.Size(1)
	x := g.F16(1, g.Dist.Draw) // under special, Draw is normal: the op plants its own specials
	rstd := make([]float32, rows)
	for r := range rstd {
		var q float64
		for _, h := range x[r*cols : (r+1)*cols] {
			v := f16.ToFloat64(h)
			q += v * v
		}
		rstd[r] = float32(1 / math.Sqrt(q/float64(cols)+rmsNormGradEps))
	}
	dy := g.F16(0, g.Dist.Draw)
	if g.Dist == oracle.Special {
		g.Scatter(dy)
	}
	return []oracle.Input{{F16: dy}, {F16: x}, {F16: g.F16(2, g.Dist.Draw)}, {F32: rstd}, {F32: g.F32(4, g.Dist.Draw)}}
}

// newReference makes a reference of n elements.
func newReference(n int) *oracle.Reference {
	return &oracle.Reference{Value: make([]float64, n), Bound: make([]float64, n)}
}

// finiteBound is bound where value is finite, and 0 where it is NaN or
// ±Inf (verify wants those exactly); a NaN bound (∞·0 among its terms) is
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

func f16Values(hs []uint16) []float64 {
	out := make([]float64, len(hs))
	for i, h := range hs {
		out[i] = f16.ToFloat64(h)
	}
	return out
}
