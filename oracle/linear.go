package oracle

import (
	"context"
	"math"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
)

// linear and linear_grad_w are members of the matrix-product family: their
// reference is matmulCompute's (MatMulWith: the product, then linear's bias
// or linear_grad_w's initial dW), their inputs matmulGenerate's. bias_grad
// has a reference of its own.
func init() {
	for _, o := range []*op.Op{op.Linear, op.LinearGradW} {
		mustRegister(o, Spec{Compute: matmulCompute, Generate: matmulGenerate})
	}
	mustRegister(op.BiasGrad, Spec{Compute: biasGradCompute, Generate: biasGradGenerate})
}

// biasGradCompute is the reference of bias_grad: for each column j of the
// M×N matrix dy, db'ⱼ = dbⱼ + Σᵢ dyᵢⱼ.
//
// Bound. The kernels add the M + 1 terms (the f16 values dyᵢⱼ, exact in
// binary32, and the old dbⱼ) in binary32 additions rounded to nearest, in
// an order of their own (per-block partial sums, then the partials and dbⱼ;
// nothing fused, no tensor cores). Any such order is a tree of M additions,
// through which each term passes at most M times, so with u₂₄ = 2⁻²⁴ and
// Sⱼ = |dbⱼ| + Σᵢ|dyᵢⱼ| (Higham, §4.2)
//
//	|db̂'ⱼ − db'ⱼ| ≤ γ₂₄(M)·Sⱼ.
//
// The oracle sums in float64, within γ₆₄(M)·Sⱼ; the bound adds that, and
// both are inflated by (1 + 2γ₆₄(M)) for the float64 evaluation of Sⱼ.
// Typical is √(M+1)·u·Sⱼ, as MatMul's. IEEE specials follow the sum: a NaN,
// or a +Inf and a −Inf, in a column (db included) make it NaN, an infinity
// alone makes it that infinity; sums of f16 values and a finite db cannot
// overflow binary32 for M < 2⁸⁸.
func biasGradCompute(ctx context.Context, s op.Shape, in []Input, _ Arithmetic) ([]*Reference, error) {
	rows, cols := int(s.Dims[0]), int(s.Dims[1])
	dy, db := in[0].F16, in[1].F32
	ref := &Reference{Value: make([]float64, cols), Bound: make([]float64, cols), Typical: make([]float64, cols)}
	g64 := Gamma(int64(rows), U64)
	factor := (Gamma(int64(rows), u24) + g64) * (1 + 2*g64)
	typicalFactor := math.Sqrt(float64(rows+1)) * U32
	// Strips of columns, each summed over every row: a worker reads its
	// strip of each row in order and keeps the strip's sums in cache.
	const strip = 256
	strips := (cols + strip - 1) / strip
	err := parallelRows(ctx, strips, rows*strip, func(lo, hi int) {
		var sum, magnitude [strip]float64
		for p := lo; p < hi; p++ {
			j0, j1 := p*strip, min(cols, (p+1)*strip)
			for j := j0; j < j1; j++ {
				sum[j-j0] = float64(db[j])
				magnitude[j-j0] = math.Abs(float64(db[j]))
			}
			for i := 0; i < rows; i++ {
				row := dy[i*cols+j0 : i*cols+j1]
				for j, h := range row {
					v := f16.ToFloat64(h)
					sum[j] += v
					magnitude[j] += math.Abs(v)
				}
			}
			for j := j0; j < j1; j++ {
				ref.Value[j] = sum[j-j0]
				ref.Bound[j] = factor * magnitude[j-j0]
				ref.Typical[j] = typicalFactor * magnitude[j-j0]
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return []*Reference{ref}, nil
}

// biasGradGenerate draws bias_grad's inputs by the distribution
// (Gen.Default: under Special, NaN, ±Inf and subnormals scattered in dy);
// under Special the old db also gets a NaN, a +Inf, a −Inf and subnormals
// (specialEpilogue), and under Rounding, which bias_grad is never asked
// for (its output is f32), Default's values serve.
func biasGradGenerate(g *Gen) []Input {
	inputs := g.Default()
	if g.Dist == Special {
		inputs[1] = specialEpilogue(g, 1)
	}
	return inputs
}
