package oracle

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
)

// CrossEntropyRows is the reference of cross_entropy on an R×V matrix x of
// f16 logits and R labels. For a row r whose label l is not ignore,
//
//	loss[r]     = log Σⱼ exp(xⱼ − m) + (m − x_l),   m = max x[r],
//	dLogits[r]ⱼ = c·(yⱼ − [j = l]),   yⱼ = exp(xⱼ − m) / Σ exp(x − m),   c = 1/n,
//
// (times gradScale, a loss scale; c = gradScale/n below), where n counts the
// rows whose label is not ignore; a row whose label is
// ignore has loss 0 and a zero gradient row, whatever its logits hold. ignore
// is a label value, or op.Unset when no row is ignored; every other label
// must lie in [0, V). The loss is per row and unscaled: the mean is Σ loss/n.
//
// Bound. Take eⱼ, S, hⱼ and H as in SoftmaxRows, and a = m − x_l ≥ 0,
// b = log S ≥ 0. A kernel's Ŝ/S lies in [(1−H)(1−γ(V)), (1+H)(1+γ(V))], so
// |log Ŝ − b| ≤ β = −log((1−H)(1−γ(V))). Rounding m − x_l costs u·a, log to
// within 4 ulps costs 4u·(b + β), and adding the two non-negative terms u
// times their sum:
//
//	|losŝ − loss| ≤ β + (2+u)·u·a + (5+4u)·u·(b+β).
//
// For the gradient, SoftmaxRows's bound with a third rounding (for c =
// fl(gradScale/n), or the quotient c/Ŝ) bounds c·ŷⱼ within c·Bⱼ of c·yⱼ, with
// Bⱼ = yⱼ·[(1+hⱼ)(1+u)³/((1−H)(1−γ(V))) − 1] + 2⁻¹²⁶. Subtracting c at
// j = l, as (ŷ − 1)·c or as ŷ·c − c, costs at most three more roundings of
// quantities below |tⱼ| + [j = l] + Bⱼ, tⱼ = yⱼ − [j = l]:
//
//	|ĝⱼ − gⱼ| ≤ c·[Bⱼ·(1+γ(3)) + γ(3)·(|tⱼ| + [j = l])] + 2⁻¹²⁶,
//
// to which the oracle adds its own float64 error: 2γ₆₄(V) + 2⁻⁵⁰ relative to
// S, hence absolute in b and relative in yⱼ.
//
// IEEE specials follow the formula, as in SoftmaxRows: a row (not ignored)
// holding a NaN or a +Inf, or only −Inf, has a NaN loss and an all-NaN
// gradient row; with m finite, a label whose logit is −Inf gives loss +Inf
// and a finite gradient (y_l = 0). When every row is ignored (n = 0) every
// loss and gradient element is 0.
func CrossEntropyRows(ctx context.Context, xs []uint16, labels []int32, rows, cols int, ignore int64, gradScale float64) (loss, grad *Reference, err error) {
	n := 0
	for r, l := range labels {
		if int64(l) == ignore {
			continue
		}
		if l < 0 || int64(l) >= int64(cols) {
			return nil, nil, fmt.Errorf("oracle: cross_entropy: labels[%d] = %d is outside [0, V) = [0, %d) and is not the ignore_index", r, l, cols)
		}
		n++
	}
	c := 0.0
	if n > 0 {
		c = gradScale / float64(n)
	}
	loss = &Reference{Value: make([]float64, rows), Bound: make([]float64, rows)}
	grad = &Reference{Value: make([]float64, rows*cols), Bound: make([]float64, rows*cols)}
	model := crossEntropyModel{
		c:      c,
		gamma:  Gamma(int64(cols), U32),
		gamma3: Gamma(3, U32),
		own:    2*Gamma(int64(cols), U64) + 0x1p-50,
	}
	err = parallelRows(ctx, rows, 8*cols, func(lo, hi int) {
		d := make([]float64, cols)
		for r := lo; r < hi; r++ {
			if int64(labels[r]) == ignore {
				continue // loss 0 and a zero row, exactly: the zero values and bounds stand
			}
			model.row(xs[r*cols:(r+1)*cols], int(labels[r]), d, &loss.Value[r], &loss.Bound[r],
				grad.Value[r*cols:(r+1)*cols], grad.Bound[r*cols:(r+1)*cols])
		}
	})
	if err != nil {
		return nil, nil, err
	}
	return loss, grad, nil
}

// crossEntropyModel holds the per-call constants of the bound.
type crossEntropyModel struct {
	c      float64 // 1/n
	gamma  float64 // γ(V) at u = 2⁻²³
	gamma3 float64 // γ(3)
	own    float64 // the oracle's relative error in S
}

// row computes one row that is not ignored; d is scratch for cols values.
func (k crossEntropyModel) row(x []uint16, label int, d []float64, loss, lossBound *float64, value, bound []float64) {
	m := math.Inf(-1)
	nan := false
	for j, h := range x {
		v := f16.ToFloat64(h)
		d[j] = v
		nan = nan || math.IsNaN(v)
		m = math.Max(m, v)
	}
	if nan || math.IsInf(m, 0) { // a NaN, a +Inf (Inf − Inf), or only −Inf (−Inf − (−Inf))
		*loss, *lossBound = math.NaN(), 0
		for j := range value {
			value[j], bound[j] = math.NaN(), 0
		}
		return
	}
	// m − x_l and xⱼ − m are exact in float64: f16 values are multiples of
	// 2⁻²⁴ below 2¹⁶. a is +Inf when x_l = −Inf.
	a := m - d[label]
	sum, h := shiftedExpSum(d, m)
	denominator := (1 - h) * (1 - k.gamma)
	b := math.Log(sum)
	*loss = b + a
	switch {
	case math.IsInf(a, 1):
		*lossBound = 0 // the reference is +Inf, which the kernel must match exactly
	case denominator <= 0:
		*lossBound = math.Inf(1)
	default:
		beta := -math.Log(denominator)
		*lossBound = beta + (2+U32)*U32*a + (5+4*U32)*U32*(b+beta) + k.own + 0x1p-52*(a+b)
	}
	for j := range d {
		y := math.Exp(d[j]) / sum
		t, onehot := y, 0.0
		if j == label {
			t, onehot = y-1, 1
		}
		value[j] = k.c * t
		if denominator <= 0 {
			bound[j] = math.Inf(1)
			continue
		}
		bj := 0x1p-126 // y = 0 (x = −Inf, or an exp below float64's range) carries no relative error
		if y > 0 {
			bj += y * ((1+expError(d[j]))*(1+U32)*(1+U32)*(1+U32)/denominator - 1)
		}
		bound[j] = k.c*(bj*(1+k.gamma3)+k.gamma3*(math.Abs(t)+onehot)) + 0x1p-126 +
			k.c*(y*k.own+0x1p-53*(math.Abs(t)+onehot))
	}
}

func init() {
	mustRegister(op.CrossEntropy, Spec{
		Compute: func(ctx context.Context, s op.Shape, in []Input, _ Arithmetic) ([]*Reference, error) {
			loss, grad, err := CrossEntropyRows(ctx, in[0].F16, in[1].I32, int(s.Dims[0]), int(s.Dims[1]), s.Int(op.IgnoreIndex), s.Value("grad_scale"))
			if err != nil {
				return nil, err
			}
			return []*Reference{loss, grad}, nil
		},
		Generate: crossEntropyGenerate,
	})
}

// crossEntropyGenerate draws the logits as softmax's X (whole numbers in
// [−8, 8] under Integer, the row specials under Special, where column 0 of
// row 0, row 0's class, is −Inf too, so that row's loss is +Inf), then the
// labels (drawLabels), the same for every distribution.
func crossEntropyGenerate(g *Gen) []Input {
	rows, cols := g.Size(0)
	var x []uint16
	switch g.Dist {
	case Integer:
		x = g.F16(0, func(r *rand.Rand) float64 { return float64(r.IntN(17) - 8) })
	case Special:
		x = g.F16(0, Normal.Draw)
		plantRowSpecials(g, x, rows, cols, true)
	default:
		x = g.F16(0, g.Dist.Draw)
	}
	return []Input{{F16: x}, {I32: drawLabels(g.Shape, g.Rand())}}
}

// drawLabels makes cross_entropy's R labels for V classes (s is R×V), the
// same for every distribution: uniform in [0, V), except that row 0 and
// every 8th row from row 3 hold class 0, and the last row and every 8th row
// from row 5 hold class V−1 (the first and last columns, where an
// off-by-one would read or write outside the row); when the shape sets an
// ignore_index, every 4th row from row 2 holds it instead.
func drawLabels(s op.Shape, rng *rand.Rand) []int32 {
	rows, classes := int(s.Dims[0]), int(s.Dims[1])
	ignore, ignoring := s.Setting(op.IgnoreIndex)
	labels := make([]int32, rows)
	for r := range labels {
		switch {
		case ignoring && r%4 == 2:
			labels[r] = int32(ignore)
		case r == 0 || r%8 == 3:
			labels[r] = 0
		case r == rows-1 || r%8 == 5:
			labels[r] = int32(classes - 1)
		default:
			labels[r] = int32(rng.IntN(classes))
		}
	}
	return labels
}
