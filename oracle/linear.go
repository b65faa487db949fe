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

// BiasGradRowBlock is the number of rows whose column sums the bias_grad
// kernels (kernels/cpu/bias_grad.cc, kernels/cuda/bias_grad.cu) form
// before adding them to the running total; biasGradCompute's bound follows
// that structure, so a kernel that changes it must change this too.
const BiasGradRowBlock = 64

// biasGradCompute is the reference of bias_grad: for each column j of the
// M×N matrix dy, db'ⱼ = dbⱼ + Σᵢ dyᵢⱼ.
//
// Bound. The kernels add in binary32, rounded to nearest (no fused or
// truncating steps): each block of BiasGradRowBlock rows from row 0 from
// zero in ascending row order, the block sums in ascending order, then
// db'ⱼ = dbⱼ + total. The f16 values are exact in binary32, so only the n
// additions err (M of them, less the first of each block, which adds to
// zero, plus one per block after the first, plus the last), each by at most
// u₂₄ = 2⁻²⁴ of its result, which is its exact partial sum σ plus the
// error so far: with F = u₂₄·Σ|σ| over the additions,
//
//	|db̂'ⱼ − db'ⱼ| ≤ F/(1 − n·u₂₄),
//
// a running error bound that follows these inputs' partial sums (as
// Accumulation's RNBlocked). Any order of the M additions also gives
// γ₂₄(M)·Sⱼ, Sⱼ = |dbⱼ| + Σᵢ|dyᵢⱼ| (Higham, §4.2); the bound is the smaller.
// The oracle's float64 partial sums are each within γ₆₄(M)·Sⱼ of exact:
// F carries that for each of its n terms, and the value itself adds
// γ₆₄(M+1)·Sⱼ. Typical is √(M+1)·u·Sⱼ, as MatMul's. IEEE specials follow
// the sum: a NaN, or a +Inf and a −Inf, in a column (db included) make it
// NaN, an infinity alone makes it that infinity; sums of f16 values and a
// finite db cannot overflow binary32 for M < 2⁸⁸.
func biasGradCompute(ctx context.Context, s op.Shape, in []Input, _ Arithmetic) ([]*Reference, error) {
	rows, cols := int(s.Dims[0]), int(s.Dims[1])
	dy, db := in[0].F16, in[1].F32
	ref := &Reference{Value: make([]float64, cols), Bound: make([]float64, cols), Typical: make([]float64, cols)}
	// M − blocks in the blocks, blocks − 1 between them, one for db.
	additions := float64(rows)
	g64 := Gamma(int64(rows+1), U64)
	anyOrder := Gamma(int64(rows), u24) * (1 + 2*g64)
	typicalFactor := math.Sqrt(float64(rows+1)) * U32
	shrink := 1 - additions*u24
	// Strips of columns, each summed over every row: a worker reads its
	// strip of each row in order and keeps the strip's sums in cache.
	const strip = 256
	strips := (cols + strip - 1) / strip
	err := parallelRows(ctx, strips, rows*strip, func(lo, hi int) {
		var block, total, magnitude, f [strip]float64
		for p := lo; p < hi; p++ {
			j0, j1 := p*strip, min(cols, (p+1)*strip)
			w := j1 - j0
			clear(total[:w])
			clear(magnitude[:w])
			clear(f[:w])
			for b0 := 0; b0 < rows; b0 += BiasGradRowBlock {
				clear(block[:w])
				for i := b0; i < min(rows, b0+BiasGradRowBlock); i++ {
					row := dy[i*cols+j0 : i*cols+j1]
					for j, h := range row {
						v := f16.ToFloat64(h)
						block[j] += v
						magnitude[j] += math.Abs(v)
						if i > b0 {
							f[j] += math.Abs(block[j])
						}
					}
				}
				for j := 0; j < w; j++ {
					total[j] += block[j]
					if b0 > 0 {
						f[j] += math.Abs(total[j])
					}
				}
			}
			for j := 0; j < w; j++ {
				old := float64(db[j0+j])
				v := old + total[j]
				sj := magnitude[j] + math.Abs(old)
				fj := u24 * (f[j] + math.Abs(v) + 4*additions*g64*sj) * (1 + g64)
				structural := math.Inf(1)
				if shrink > 0 {
					structural = fj / shrink
				}
				ref.Value[j0+j] = v
				ref.Bound[j0+j] = min(structural, anyOrder*sj) + g64*(1+2*g64)*sj
				ref.Typical[j0+j] = typicalFactor * sj
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
