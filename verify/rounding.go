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

// roundedInterval is what rounding to nearest f16 can give for a binary32
// result within bound of the exact value c: every f16 value from
// fl16(c − bound) to fl16(c + bound), rounding being monotone. The float64
// c ± bound is stepped one float64 ulp outward so that its own rounding
// cannot move an end across a rounding midpoint.
func roundedInterval(c, bound float64) (lo, hi float64) {
	lo = f16.ToFloat64(f16.FromFloat64(math.Nextafter(c-bound, math.Inf(-1))))
	hi = f16.ToFloat64(f16.FromFloat64(math.Nextafter(c+bound, math.Inf(1))))
	return lo, hi
}

// The rounding-bias statistic. For an f16 output element whose exact value
// c needs rounding, write r = (ĉ₁₆ − c)/ulp(c)·sign(c): the error in units
// of the element's own ulp, positive away from zero. A correct kernel's
// binary32 result lies within the element's pre-rounding bound B of c, so
// its correctly rounded result lies in roundedInterval(c, B), and r between
// the r of the interval's two ends. Over the elements whose interval holds
// at most two f16 values (B small next to an ulp; most elements of most
// cases), correct rounding plus the accumulation model therefore predicts
//
//	mean(r) ∈ [mean(r_lo), mean(r_hi)],   mean(r²) ∈ [mean(min r²), mean(max r²)],
//
// exactly, from the reference alone: no assumption on how the values fall
// within their ulps, so outputs that repeat one value (a row of equal
// probabilities) cannot raise a false alarm. Rounding toward zero moves
// mean(r) by about −½, ties away from zero by the share of ties, a double
// rounding through an f16 intermediate raises mean(r²). A kernel outside
// the prediction has elements outside their intervals too, which the
// per-element check names one by one; the statistic says whether those
// errors lean one way, and by how much.
//
// roundingTolerance absorbs the float64 error of the sums.
const roundingTolerance = 1e-9

// RoundingStats is the rounding-bias statistic of a case's f16 outputs.
type RoundingStats struct {
	Elements       int64   `json:"elements"`         // finite f16 outputs that needed rounding, with at most two correctly rounded results
	MeanULP        float64 `json:"mean_error_ulp"`   // mean signed error in ulps, positive away from zero
	MeanLow        float64 `json:"mean_low_ulp"`     // the least mean correct rounding gives
	MeanHigh       float64 `json:"mean_high_ulp"`    // the largest
	MeanSquareULP  float64 `json:"mean_square_ulp"`  // mean squared error in ulps²
	MeanSquareLow  float64 `json:"mean_square_low"`  // the least correct rounding gives
	MeanSquareHigh float64 `json:"mean_square_high"` // the largest
	Ambiguous      int64   `json:"ambiguous"`        // elements whose bound reaches a rounding midpoint (two possible results)
	Biased         bool    `json:"biased"`
}

// roundingSums gathers the statistic over elements, in any order.
type roundingSums struct {
	n, ambiguous                                int64
	sumR, sumLo, sumHi, sumR2, sumR2Lo, sumR2Hi float64
}

func (s *roundingSums) add(u roundingSums) {
	s.n += u.n
	s.ambiguous += u.ambiguous
	s.sumR += u.sumR
	s.sumLo += u.sumLo
	s.sumHi += u.sumHi
	s.sumR2 += u.sumR2
	s.sumR2Lo += u.sumR2Lo
	s.sumR2Hi += u.sumR2Hi
}

// note records an element with exact value c, f16 result got and rounded
// interval [lo, hi] (roundedInterval), if c needs rounding and the interval
// holds at most two f16 values.
func (s *roundingSums) note(c, got, lo, hi float64) {
	if c == 0 || math.IsInf(lo, 0) || math.IsInf(hi, 0) || math.IsInf(got, 0) || f16.ToFloat64(f16.FromFloat64(c)) == c {
		return
	}
	ulp := oracle.ULP16(c)
	if hi-lo > math.Max(oracle.ULP16(lo), oracle.ULP16(hi)) {
		return
	}
	away := func(v float64) float64 { return math.Copysign(1, c) * (v - c) / ulp }
	r, a, b := away(got), away(lo), away(hi)
	a, b = min(a, b), max(a, b)
	s.n++
	if lo != hi {
		s.ambiguous++
	}
	s.sumR += r
	s.sumLo += a
	s.sumHi += b
	s.sumR2 += r * r
	if a <= 0 && b >= 0 {
		s.sumR2Lo += 0
	} else {
		s.sumR2Lo += min(a*a, b*b)
	}
	s.sumR2Hi += max(a*a, b*b)
}

// stats judges the sums.
func (s roundingSums) stats() *RoundingStats {
	if s.n == 0 {
		return nil
	}
	n := float64(s.n)
	st := &RoundingStats{
		Elements: s.n, Ambiguous: s.ambiguous,
		MeanULP: s.sumR / n, MeanLow: s.sumLo / n, MeanHigh: s.sumHi / n,
		MeanSquareULP: s.sumR2 / n, MeanSquareLow: s.sumR2Lo / n, MeanSquareHigh: s.sumR2Hi / n,
	}
	st.Biased = st.MeanULP < st.MeanLow-roundingTolerance || st.MeanULP > st.MeanHigh+roundingTolerance ||
		st.MeanSquareULP < st.MeanSquareLow-roundingTolerance || st.MeanSquareULP > st.MeanSquareHigh+roundingTolerance
	return st
}

// Problem words a biased statistic for a case's reason.
func (st *RoundingStats) Problem() string {
	if st == nil || !st.Biased {
		return ""
	}
	mid := func(lo, hi float64) string {
		return fmt.Sprintf("%.4g ± %.2g", (lo+hi)/2, (hi-lo)/2)
	}
	if st.MeanULP < st.MeanLow-roundingTolerance || st.MeanULP > st.MeanHigh+roundingTolerance {
		return fmt.Sprintf("rounding bias: over %d f16 outputs that needed rounding, the mean signed error is %+.4g ulp (positive away from zero); rounding to nearest within each element's accumulation bound gives %s (the spread from the %d elements whose bound reaches a rounding midpoint)",
			st.Elements, st.MeanULP, mid(st.MeanLow, st.MeanHigh), st.Ambiguous)
	}
	return fmt.Sprintf("rounding error too large: over %d f16 outputs that needed rounding, the mean squared error is %.4g ulp²; rounding to nearest within each element's accumulation bound gives %s (the spread from the %d elements whose bound reaches a rounding midpoint)",
		st.Elements, st.MeanSquareULP, mid(st.MeanSquareLow, st.MeanSquareHigh), st.Ambiguous)
}
