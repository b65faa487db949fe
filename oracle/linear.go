package oracle

import (
	"context"
	"math"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
)

// linear, linear_nt, linear_grad_w and linear_grad_x are members of the
// matrix-product family: their reference is matmulCompute's (MatMulWith of
// the factors as Factors views them, linear_nt's and linear_grad_x's W
// transposed; then the bias, or linear_grad_w's initial dW; then a GELU,
// geluOfInexact or geluGradOfInexact), their inputs matmulGenerate's, and
// their bound MatMulWith's. bias_grad has a reference of its own.
func init() {
	for _, o := range []*op.Op{op.Linear, op.LinearNT, op.LinearGradW, op.LinearGradX} {
		mustRegister(o, Spec{Compute: matmulCompute, Generate: matmulGenerate})
	}
	mustRegister(op.BiasGrad, Spec{Compute: biasGradCompute, Generate: biasGradGenerate})
}

// BiasGradRowBlock is the number of rows whose column sums the bias_grad
// kernels (kernels/cpu/bias_grad.cc, kernels/cuda/bias_grad.cu) form in
// order before those sums are combined; biasGradCompute's bound follows
// that structure, so a kernel that changes it must change this too.
const BiasGradRowBlock = 64

// biasGradCompute is the reference of bias_grad: for each column j of the
// M×N matrix dy, db'ⱼ = dbⱼ + Σᵢ dyᵢⱼ.
//
// Bound. The kernels add in binary32, rounded to nearest (no fused or
// truncating steps), in two levels: each block b of BiasGradRowBlock rows
// from row 0 is summed from zero in ascending row order, to p̂_b; then the
// block sums and dbⱼ are added in an order of the kernel's own. The f16
// values are exact in binary32. In block b each addition errs by at most
// u₂₄ = 2⁻²⁴ of its result, its exact partial sum σ plus the error so far,
// so with F_b = u₂₄·Σ|σ| over the block's additions,
// |p̂_b − p_b| ≤ e_b = F_b/(1 − 64·u₂₄) (a running error bound, as
// Accumulation's RNBlocked, that follows these inputs' partial sums). The
// nb + 1 terms of the second level, in any order, add γ₂₄(nb) times the sum
// of their magnitudes (Higham, §4.2):
//
//	|db̂'ⱼ − db'ⱼ| ≤ E + γ₂₄(nb)·(Σ_b|p_b| + E + |dbⱼ|),   E = Σ_b e_b.
//
// Any order of all M additions also gives γ₂₄(M)·Sⱼ,
// Sⱼ = |dbⱼ| + Σᵢ|dyᵢⱼ|; the bound is the smaller. The oracle's float64
// partial sums are each within γ₆₄(M)·Sⱼ of exact, which F and Σ|p_b|
// carry, and the value itself adds γ₆₄(M+1)·Sⱼ. Typical is √(M+1)·u·Sⱼ, as
// MatMul's. IEEE specials follow the sum: a NaN, or a +Inf and a −Inf, in a
// column (db included) make it NaN, an infinity alone makes it that
// infinity; sums of f16 values and a finite db cannot overflow binary32 for
// M < 2⁸⁸.
func biasGradCompute(ctx context.Context, s op.Shape, in []Input, _ Arithmetic) ([]*Reference, error) {
	ref, err := biasGradReference(ctx, in[0].F16, in[1].F32, int(s.Dims[0]), int(s.Dims[1]))
	if err != nil {
		return nil, err
	}
	return []*Reference{ref}, nil
}

// ColumnSums is the reference of a matmul-family op's column sums
// (op.MatmulSpec.ColumnSums: linear_grad_w's db with bias 1), bias_grad's
// reference and bound over the R factor and the output's initial values;
// nil when the op has none at s (the operand is empty).
func ColumnSums(ctx context.Context, o *op.Op, s op.Shape, in []Input) (*Reference, error) {
	m := o.Matmul
	if m == nil || m.ColumnSums == "" {
		return nil, nil
	}
	db := in[inputIndex(o, m.ColumnSums)].F32
	if len(db) == 0 {
		return nil, nil
	}
	return biasGradReference(ctx, in[inputIndex(o, m.R)].F16, db, int(s.Int(m.Depth)), int(s.Int(m.Cols)))
}

// biasGradReference is bias_grad's reference for dy rows × cols and db's initial
// values (biasGradCompute's doc comment derives the bound).
func biasGradReference(ctx context.Context, dy []uint16, db []float32, rows, cols int) (*Reference, error) {
	ref := &Reference{Value: make([]float64, cols), Bound: make([]float64, cols), Typical: make([]float64, cols)}
	blocks := (rows + BiasGradRowBlock - 1) / BiasGradRowBlock
	g64 := Gamma(int64(rows+1), U64)
	anyOrder := Gamma(int64(rows), u24)
	second := Gamma(int64(blocks), u24)
	shrink := 1 - BiasGradRowBlock*u24
	typicalFactor := math.Sqrt(float64(rows+1)) * U32
	// Strips of columns, each summed over every row: a worker reads its
	// strip of each row in order and keeps the strip's sums in cache.
	const strip = 256
	strips := (cols + strip - 1) / strip
	err := parallelRows(ctx, strips, rows*strip, func(lo, hi int) {
		var block, total, magnitude, f, p [strip]float64
		for q := lo; q < hi; q++ {
			j0, j1 := q*strip, min(cols, (q+1)*strip)
			w := j1 - j0
			clear(total[:w])
			clear(magnitude[:w])
			clear(f[:w])
			clear(p[:w])
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
					p[j] += math.Abs(block[j])
				}
			}
			for j := 0; j < w; j++ {
				old := float64(db[j0+j])
				sj := (magnitude[j] + math.Abs(old)) * (1 + g64)
				// Each of the M float64 partial sums in f, and each of the
				// nb in p, is within γ₆₄(M)·S of exact (4× for slack).
				e := u24 * (f[j]*(1+g64) + 4*float64(rows)*g64*sj) / shrink
				structural := e + second*((p[j]+4*float64(blocks)*g64*sj)*(1+g64)+e+math.Abs(old))
				ref.Value[j0+j] = old + total[j]
				ref.Bound[j0+j] = min(structural, anyOrder*sj) + g64*(1+2*g64)*sj
				ref.Typical[j0+j] = typicalFactor * sj
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return ref, nil
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
