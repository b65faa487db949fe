package verify

import (
	"fmt"
	"math"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/oracle"
)

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
