package verify

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
)

// Poison patterns fill every output buffer before a run. Both are negative
// NaNs with every payload bit set, which no backend produces for an IEEE
// result (x86 makes 0xfe00/0xffc00000, CUDA 0x7fff/0x7fffffff), so an element
// that still holds the pattern after the run was never written.
const (
	poisonF16 uint16 = 0xffff
	poisonF32 uint32 = 0xffffffff
)

// outlierFactor: an error more than this many times the typical-error scale
// is an outlier (see oracle.MatMul, "Typical").
const outlierFactor = 16

// f16Overflow is the smallest magnitude that rounds to infinity in f16.
const f16Overflow = 65520

// Poison fills an output buffer of dtype with the poison pattern.
func Poison(dtype op.DType, out []byte) {
	if dtype != op.F16 { // an i32 output's poison, −1, is no count or index
		for i := 0; i+4 <= len(out); i += 4 {
			binary.LittleEndian.PutUint32(out[i:], poisonF32)
		}
		return
	}
	for i := 0; i+2 <= len(out); i += 2 {
		binary.LittleEndian.PutUint16(out[i:], poisonF16)
	}
}

// Stats are the error figures of one case.
type Stats struct {
	Elements          int64
	Checked           int64 // elements compared (all of them, unless the run failed)
	Wrong             int64
	Unwritten         int64
	Outliers          int64
	MaxAbsError       float64 // over elements where both values are finite
	MaxErrorOverBound float64 // max |error| / bound; ≤ 1 passes
	RMSError          float64
	FirstWrong        string // a sentence about the first wrong element
	// Sample is set when the output was too large to check every element
	// and was checked by sampled rows, columns and projections instead.
	Sample *Sample
	// Determined counts, in bounded cases, the f16 output elements whose
	// bound leaves rounding to nearest a single possible result, which the
	// kernel had to match bit for bit.
	Determined int64
	// Rounded counts, in exact cases, the f16 output elements whose exact
	// value is not an f16 value, so that matching bit for bit checked their
	// rounding (round to nearest); Ties counts those exactly halfway
	// between two f16 values, which only ties-to-even gets right.
	Rounded, Ties int64
	// Rounding is the rounding-bias statistic of the f16 outputs, in
	// bounded cases; nil elsewhere.
	Rounding *RoundingStats
	// Tightening compares the GEMM bounds used with the order-free
	// γ(L)·S (oracle.Tightening); nil for other ops.
	Tightening *oracle.Tightening
}

// element reads output element i as float64, and whether it is the poison.
func element(dtype op.DType, out []byte, i int) (float64, bool) {
	switch dtype {
	case op.F32:
		b := binary.LittleEndian.Uint32(out[4*i:])
		return float64(math.Float32frombits(b)), b == poisonF32
	case op.I32:
		b := binary.LittleEndian.Uint32(out[4*i:])
		return float64(int32(b)), b == poisonF32
	}
	b := binary.LittleEndian.Uint16(out[2*i:])
	return f16.ToFloat64(b), b == poisonF16
}

// roundTo rounds a reference value to the output type, for exact checks.
func roundTo(dtype op.DType, v float64) float64 {
	switch dtype {
	case op.F32:
		return float64(float32(v))
	case op.I32:
		return v
	}
	return f16.ToFloat64(f16.FromFloat64(v))
}

// Compare checks outs, the outputs of o in wire order (little-endian
// elements of each output's type), against refs, one Reference per output.
// m.Exact demands bit-for-bit agreement with the reference rounded to the
// output type (±0 compare equal); otherwise each element must lie within its
// bound. In both modes: a NaN reference wants a NaN; an infinite reference
// wants the same infinity; an f16 result may be ±Inf only where the binary32
// result could have reached 65520; poison means unwritten. m.Typical
// applies the statistical outlier test, and m.Bias gathers the rounding-bias
// statistic (Stats.Rounding, judged by the caller). The figures cover every
// output; the first wrong element is named with its output.
func Compare(o *op.Op, s op.Shape, refs []*oracle.Reference, outs [][]byte, m Mode) Stats {
	var t tally
	var elements int64
	for k, p := range o.Outputs() {
		cols := int(s.Cols(p))
		t.add(compareElements(p, refs[k], outs[k], m, func(i int) (int, int) { return i / cols, i % cols }))
		elements += s.Elements(p)
	}
	st := t.stats()
	st.Elements = elements
	for _, ref := range refs {
		st.Tightening = st.Tightening.Merge(ref.Tightening)
	}
	return st
}

// Mode says which checks Compare applies beyond the per-element bound and
// the IEEE rules.
type Mode struct {
	// Exact demands bit-for-bit agreement with the reference rounded to
	// the output type (round to nearest, ties to even).
	Exact bool
	// Typical applies the statistical outlier test where a reference has a
	// typical-error model.
	Typical bool
	// Bias gathers the rounding-bias statistic of f16 outputs.
	Bias bool
}

// modeOf is the checks a case gets.
func modeOf(c Case) Mode {
	return Mode{Exact: c.Exact(), Typical: c.Dist.Symmetric(), Bias: !c.Exact()}
}

// compareElements checks out[i], an element of output p, against ref at
// every i, in parallel chunks; at names element i's place in the whole
// output, for messages.
func compareElements(p op.Operand, ref *oracle.Reference, out []byte, m Mode, at func(i int) (row, col int)) tally {
	n := len(ref.Value)
	parts := make([]tally, (n+oracle.ChunkSize-1)/oracle.ChunkSize)
	oracle.ForChunks(n, func(c, lo, hi int) {
		parts[c] = comparePart(p, ref, out, m, at, lo, hi)
	})
	var t tally
	for _, part := range parts {
		t.add(part)
	}
	return t
}

// tally is a comparison in progress: the figures of Stats plus what their
// merging needs. Parts must be added in element order, so that the first
// wrong element reported is the first in the output.
type tally struct {
	Stats
	sumSquares   float64 // of the errors of finite elements
	finite       int64
	firstOutlier string
	rounding     roundingSums
}

// add folds in the tally of elements that come after t's.
func (t *tally) add(u tally) {
	t.Checked += u.Checked
	t.Wrong += u.Wrong
	t.Unwritten += u.Unwritten
	t.Outliers += u.Outliers
	t.MaxAbsError = max(t.MaxAbsError, u.MaxAbsError)
	t.MaxErrorOverBound = max(t.MaxErrorOverBound, u.MaxErrorOverBound)
	t.sumSquares += u.sumSquares
	t.finite += u.finite
	t.Rounded += u.Rounded
	t.Determined += u.Determined
	t.Ties += u.Ties
	t.rounding.add(u.rounding)
	if t.FirstWrong == "" {
		t.FirstWrong = u.FirstWrong
	}
	if t.firstOutlier == "" {
		t.firstOutlier = u.firstOutlier
	}
}

// stats finishes the tally: the RMS error, and an outlier as the first
// problem when no element was outright wrong.
func (t tally) stats() Stats {
	st := t.Stats
	if st.FirstWrong == "" {
		st.FirstWrong = t.firstOutlier
	}
	if t.finite > 0 {
		st.RMSError = math.Sqrt(t.sumSquares / float64(t.finite))
	}
	st.Rounding = t.rounding.stats()
	return st
}

// comparePart compares elements [lo, hi) of output p. The sentence about a
// wrong element is only made for the first one: formatting every element's
// would cost more than comparing it.
func comparePart(p op.Operand, ref *oracle.Reference, out []byte, m Mode, at func(i int) (row, col int), lo, hi int) tally {
	dtype := p.DType
	var t tally
	for i := lo; i < hi; i++ {
		t.Checked++
		want := ref.Value[i]
		got, unwritten := element(dtype, out, i)
		preBound := ref.Bound[i]
		bound := oracle.OutputBound(dtype, want, preBound)
		var ok bool
		var why func() string
		switch {
		case unwritten:
			t.Unwritten++
			why = func() string { return "was never written (still holds the poison pattern)" }
		case math.IsNaN(want):
			// An infinite bound beside a NaN reference leaves the result
			// undetermined (oracle.Reference): anything is correct.
			ok = math.IsNaN(got) || math.IsInf(preBound, 1)
			why = func() string { return "should be NaN" }
		case math.IsInf(want, 0):
			ok = got == want
			why = func() string { return fmt.Sprintf("should be %v", want) }
		case math.IsNaN(got):
			why = func() string { return "is NaN where the reference is finite" }
		case math.IsInf(got, 0):
			// An f16 result overflows to ±Inf where the bound lets the
			// value before rounding reach the threshold on that side: with
			// heavy cancellation that can be the side opposite the
			// reference's sign.
			ok = dtype == op.F16 && (got > 0 && want+preBound >= f16Overflow || got < 0 && want-preBound <= -f16Overflow)
			why = func() string {
				if dtype != op.F16 {
					return "is infinite where the reference is finite"
				}
				return "is infinite where the result cannot reach the f16 overflow threshold 65520 on that side"
			}
		case m.Exact:
			rounded := roundTo(dtype, want)
			ok = got == rounded
			tie := false
			if dtype == op.F16 && rounded != want {
				t.Rounded++
				if tie = math.Abs(want-rounded) == oracle.ULP16(want)/2; tie {
					t.Ties++
				}
			}
			why = func() string {
				switch {
				case tie:
					return fmt.Sprintf("differs from the exact result %g, a tie rounded to even as %g", want, rounded)
				case rounded != want:
					return fmt.Sprintf("differs from the exact result %g rounded to nearest, %g", want, rounded)
				}
				return fmt.Sprintf("differs from the exact result %g", rounded)
			}
			bound = 0
			t.note(math.Abs(got-rounded), 0)
		default:
			e := math.Abs(got - want)
			if dtype == op.F16 {
				// Rounded once, to nearest: the result must be what that
				// rounding gives for some binary32 value within the
				// bound, which is often a single f16 value.
				lo, hi := roundedInterval(want, preBound)
				ok = lo <= got && got <= hi
				if lo == hi {
					t.Determined++
				}
				why = func() string {
					if lo == hi {
						return fmt.Sprintf("is not %g, the one f16 value that rounding to nearest gives for every binary32 result within the bound %.3g of the reference", lo, preBound)
					}
					return fmt.Sprintf("lies outside [%g, %g], what rounding to nearest gives for the binary32 results within the bound %.3g of the reference", lo, hi, preBound)
				}
				if m.Bias {
					t.rounding.note(want, got, lo, hi)
				}
			} else {
				ok = e <= bound
				why = func() string { return "is outside the error bound" }
			}
			t.note(e, bound)
			// Rounding to the output type is not part of the typical
			// model: allow it in full on top.
			if !m.Typical || ref.Typical == nil || !ok {
				break
			}
			if limit := outlierFactor*ref.Typical[i] + oracle.OutputBound(dtype, want, 0); e > limit {
				t.Outliers++
				if t.firstOutlier == "" {
					t.firstOutlier = fmt.Sprintf("%s = %g, reference %g: error %.3g is over %d× the typical error %.3g plus output rounding (limit %.3g), though under the bound %.3g",
						place(p, at, i), got, want, e, outlierFactor, ref.Typical[i], limit, bound)
				}
			}
		}
		if !ok {
			t.Wrong++
			if t.FirstWrong == "" {
				t.FirstWrong = fmt.Sprintf("%s = %s %s: reference %g, bound %.3g",
					place(p, at, i), formatValue(dtype, out, i), why(), want, bound)
			}
		}
	}
	return t
}

// place names element i of output p: "Y[3,7]", or "loss[3]" for a vector.
func place(p op.Operand, at func(i int) (row, col int), i int) string {
	r, c := at(i)
	if p.Cols.String() == "1" {
		return fmt.Sprintf("%s[%d]", p.Name, r)
	}
	return fmt.Sprintf("%s[%d,%d]", p.Name, r, c)
}

func (t *tally) note(e, bound float64) {
	t.MaxAbsError = max(t.MaxAbsError, e)
	switch {
	case e == 0:
	case bound > 0:
		t.MaxErrorOverBound = max(t.MaxErrorOverBound, e/bound)
	default:
		t.MaxErrorOverBound = math.Inf(1)
	}
	t.sumSquares += e * e
	t.finite++
}

func formatValue(dtype op.DType, out []byte, i int) string {
	switch dtype {
	case op.F32:
		b := binary.LittleEndian.Uint32(out[4*i:])
		return fmt.Sprintf("%g (0x%08x)", math.Float32frombits(b), b)
	case op.I32:
		return fmt.Sprintf("%d", int32(binary.LittleEndian.Uint32(out[4*i:])))
	}
	b := binary.LittleEndian.Uint16(out[2*i:])
	return fmt.Sprintf("%g (0x%04x)", f16.ToFloat64(b), b)
}
