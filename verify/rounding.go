package verify

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
)

// exactSumLimit bounds every partial sum of a rounding case: below 2²⁴ every
// whole number (and, scaled, every multiple of 1/256 below 2¹⁶) is exact in
// binary32, in any summation order.
const exactSumLimit = 1 << 24

// roundingApplies says whether the rounding distribution gives exact results
// for o at s, and why not when it does not.
func roundingApplies(o *op.Op, s op.Shape) (bool, string) {
	if o.NoExactRounding != "" {
		return false, o.NoExactRounding
	}
	if o.Kind == op.MatMul {
		if l := o.ReductionLength(s); l >= exactSumLimit {
			return false, fmt.Sprintf("a reduction of %d terms can reach 2^24 even with inputs of ±1, where binary32 sums stop being exact", l)
		}
	}
	return true, ""
}

// roundingInputs makes the inputs of a rounding case (see Rounding).
func roundingInputs(o *op.Op, s op.Shape, seed, stream uint64) []oracle.Input {
	if o.Kind == op.MatMul {
		return roundingMatMul(o, s, seed, stream)
	}
	return roundingSoftmaxGrad(s, seed, stream)
}

// roundingMatMul fills the two factors of a GEMM op's product, X (rows × L)
// and Y (L × cols), through their views of the wire operands. Row i of X
// holds whole numbers uniform in [−Rᵢ, Rᵢ] and Y whole numbers in [−R, R],
// with R and Rᵢ chosen so that element (i, j) has a spread of about 2^tᵢ,
// tᵢ between 11 and 14.5 by row: most results land in the binades where f16
// has an ulp of 2 to 32, and odd products make a quarter to a half of them
// ties there. Every |xᵢₖ|, |yₖⱼ| ≤ 2048 is exact in f16, every product in
// binary32, and L·Rᵢ·R < 2²⁴ keeps every partial sum, in any order, below
// 2²⁴ and so exact.
func roundingMatMul(o *op.Op, s op.Shape, seed, stream uint64) []oracle.Input {
	inputs := make([]oracle.Input, len(o.Inputs))
	for i, p := range o.Inputs {
		inputs[i] = oracle.Input{F16: make([]uint16, s.Elements(p))}
	}
	x, y := oracle.Factors(o, s, inputs)
	rows, l, cols := x.Rows, x.Cols, y.Cols
	root := math.Sqrt(float64(l))
	// The spread of Σₖ xₖyₖ with x, y uniform on [−Rx, Rx], [−R, R] is about
	// √L·Rx·R/3; R puts the middle target 2^12.5 at Rx ≈ R.
	r := clampInt(int64(math.Round(math.Sqrt(3*math.Exp2(12.5)/root))), 1, min(2048, (exactSumLimit-1)/int64(l)))
	scale := make([]int64, rows)
	for i := range scale {
		t := 11 + 3.5*math.Mod(float64(i+1)*0.6180339887498949, 1)
		scale[i] = clampInt(int64(3*math.Exp2(t)/(root*float64(r))), 1, min(2048, (exactSumLimit-1)/(int64(l)*r)))
	}
	draw := func(rng *rand.Rand, limit int64) uint16 {
		return f16.FromFloat64(float64(rng.Int64N(2*limit+1) - limit))
	}
	forChunks(rows*l, func(c, lo, hi int) {
		rng := rand.New(rand.NewPCG(seed+uint64(c), stream^0x726f756e64))
		for e := lo; e < hi; e++ {
			x.Set(e/l, e%l, draw(rng, scale[e/l]))
		}
	})
	forChunks(l*cols, func(c, lo, hi int) {
		rng := rand.New(rand.NewPCG(seed+uint64(c), stream^0x726f756e65))
		for e := lo; e < hi; e++ {
			y.Set(e/cols, e%cols, draw(rng, r))
		}
	})
	return inputs
}

func clampInt(v, lo, hi int64) int64 { return max(lo, min(v, hi)) }

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
func roundingSoftmaxGrad(s op.Shape, seed, stream uint64) []oracle.Input {
	rows, cols := int(s.Dims[0]), int(s.Dims[1])
	dy, y := make([]uint16, rows*cols), make([]uint16, rows*cols)
	fill(dy, seed^0x9e3779b97f4a7c15, stream, func(r *rand.Rand) float64 { return float64(r.IntN(601) - 300) })
	rng := rand.New(rand.NewPCG(seed, stream^0x726f756e66))
	for r := 0; r < rows; r++ {
		for t := 0; t < min(64, cols); t++ {
			y[r*cols+rng.IntN(cols)] = f16.FromFloat64(math.Ldexp(1, rng.IntN(5)-4))
		}
	}
	return []oracle.Input{{F16: dy}, {F16: y}}
}

// The rounding-bias statistic. For an f16 output element whose exact value
// c needs rounding and whose pre-rounding bound is at most 1/16 of its ulp
// (so that rounding, not accumulation, decides its error; the choice looks
// at the reference only, never at the kernel's output), write r = (ĉ₁₆ − c)/ulp(c)·sign(c), the error in units
// of the element's own ulp, positive away from zero. A correct kernel rounds
// its binary32 result ĉ to nearest, an error ρ with |ρ| ≤ ½ that is
// uniform when ĉ falls anywhere within an ulp (continuous inputs), so
// E[ρ] = 0 and E[ρ²] = 1/12; its accumulation error a = (ĉ − c)/ulp obeys
// |a| ≤ αᵢ, the element's pre-rounding bound in ulps. Over n elements:
//
//	|E[r̄]| ≤ ᾱ,  E[r²] ≤ (√(1/12) + √mean(α²))²,
//
// and the sample means spread by at most σ₁/√n and σ₂/√n with
// σ₁ = √(1/12) + √mean(α²) and σ₂ = √(1/180) + √mean(α²) + √mean(α⁴)
// (the spread of ρ², of 2ρa and of a²). A kernel is judged biased when
// |r̄| > ᾱ + z·σ₁/√n or mean(r²) > (√(1/12) + √mean(α²))² + z·σ₂/√n, with
// z = 6. Rounding toward zero moves r̄ to −½ and mean(r²) to 1/3; an extra
// rounding to f16 on the way (double rounding) moves mean(r²) to about 1/6;
// truncating the accumulator before rounding moves r̄ too. With αᵢ ≤ 1/16
// the mean-square limit stays under 0.123 + 0.84/√n, so a double rounding
// is caught from a few hundred elements on.
const (
	biasZ             = 6
	minBiasElements   = 256
	maxBiasAccULP     = 1.0 / 16
	roundingVariance  = 1.0 / 12
	roundingSquareStd = 0.07453559924999299 // √(1/180), the spread of ρ² for uniform ρ
)

// RoundingStats is the rounding-bias statistic of a case's f16 outputs (see
// roundingBias).
type RoundingStats struct {
	Elements        int64   `json:"elements"`          // finite f16 outputs whose exact value needed rounding and whose accumulation bound is ≤ 1/16 ulp
	MeanULP         float64 `json:"mean_error_ulp"`    // mean signed error in ulps, positive away from zero
	MeanLimit       float64 `json:"mean_limit_ulp"`    // |MeanULP| above this is a bias
	MeanSquareULP   float64 `json:"mean_square_ulp"`   // mean squared error in ulps²
	MeanSquareLimit float64 `json:"mean_square_limit"` // MeanSquareULP above this is too large
	AccumulationULP float64 `json:"accumulation_ulp"`  // mean pre-rounding bound in ulps (part of both limits)
	Judged          bool    `json:"judged"`            // at least minBiasElements elements
	Biased          bool    `json:"biased"`
}

// roundingSums gathers the statistic over elements, in any order.
type roundingSums struct {
	n                               int64
	sumR, sumR2, sumA, sumA2, sumA4 float64
}

func (s *roundingSums) add(u roundingSums) {
	s.n += u.n
	s.sumR += u.sumR
	s.sumR2 += u.sumR2
	s.sumA += u.sumA
	s.sumA2 += u.sumA2
	s.sumA4 += u.sumA4
}

// note records an element with exact value want, f16 result got and
// pre-rounding bound preBound, if its value needs rounding and rounding
// decides its error.
func (s *roundingSums) note(want, got, preBound float64) {
	if want == 0 || math.Abs(want) > 65504 || math.IsInf(got, 0) || f16.ToFloat64(f16.FromFloat64(want)) == want {
		return
	}
	ulp := oracle.ULP16(want)
	a := preBound / ulp
	if a > maxBiasAccULP {
		return
	}
	r := (got - want) / ulp
	if want < 0 {
		r = -r
	}
	s.n++
	s.sumR += r
	s.sumR2 += r * r
	s.sumA += a
	s.sumA2 += a * a
	s.sumA4 += a * a * a * a
}

// stats judges the sums.
func (s roundingSums) stats() *RoundingStats {
	if s.n == 0 {
		return nil
	}
	n := float64(s.n)
	meanA, rmsA, rootA4 := s.sumA/n, math.Sqrt(s.sumA2/n), math.Sqrt(s.sumA4/n)
	sigma1 := math.Sqrt(roundingVariance) + rmsA
	sigma2 := roundingSquareStd + rmsA + rootA4
	st := &RoundingStats{
		Elements:        s.n,
		MeanULP:         s.sumR / n,
		MeanSquareULP:   s.sumR2 / n,
		AccumulationULP: meanA,
		MeanLimit:       meanA + biasZ*sigma1/math.Sqrt(n),
		MeanSquareLimit: sigma1*sigma1 + biasZ*sigma2/math.Sqrt(n),
		Judged:          s.n >= minBiasElements,
	}
	st.Biased = st.Judged && (math.Abs(st.MeanULP) > st.MeanLimit || st.MeanSquareULP > st.MeanSquareLimit)
	return st
}

// Problem words a biased statistic for a case's reason.
func (st *RoundingStats) Problem() string {
	if st == nil || !st.Biased {
		return ""
	}
	if math.Abs(st.MeanULP) > st.MeanLimit {
		return fmt.Sprintf("rounding bias: over %d f16 outputs that needed rounding, the mean signed error is %+.3g ulp (positive away from zero); correct rounding plus the accumulation model predicts |mean| ≤ %.3g (accumulation %.3g ulp, 0 expected from rounding, spread σ/√n = %.3g)",
			st.Elements, st.MeanULP, st.MeanLimit, st.AccumulationULP, (st.MeanLimit-st.AccumulationULP)/biasZ)
	}
	return fmt.Sprintf("rounding error too large: over %d f16 outputs that needed rounding, the mean squared error is %.3g ulp²; correct rounding plus the accumulation model predicts at most %.3g (1/12 = 0.0833 from rounding, accumulation %.3g ulp)",
		st.Elements, st.MeanSquareULP, st.MeanSquareLimit, st.AccumulationULP)
}
