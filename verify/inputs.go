package verify

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
)

// Dist is an input distribution.
type Dist uint8

const (
	// Integer draws small whole numbers, so that every f32 intermediate is
	// exact and ops marked ExactOnIntegers must match bit for bit.
	Integer Dist = iota + 1
	// Uniform draws from [−1, 1).
	Uniform
	// Normal draws from N(0, 1).
	Normal
	// Wide draws magnitudes 2⁻¹⁴…2¹⁴ with random signs.
	Wide
	// Special mixes in NaN, ±Inf, −Inf-masked rows, subnormals and values
	// whose results overflow f16.
	Special
	// Rounding draws whole numbers (and, for softmax_grad, sixteenths)
	// whose results are exact in binary32 but land where binary16 must
	// round: magnitudes 2¹¹…2¹⁶ with many odd values, so that ties occur.
	// An f16 output must then equal the exact result rounded to nearest,
	// ties to even, bit for bit. Only ops with Op.ExactRounding take it.
	Rounding
)

var distNames = map[Dist]string{Integer: "integer", Uniform: "uniform", Normal: "normal", Wide: "wide", Special: "special", Rounding: "rounding"}

// Dists lists every distribution, in report order.
func Dists() []Dist { return []Dist{Integer, Uniform, Normal, Wide, Special, Rounding} }

func (d Dist) String() string {
	if n, ok := distNames[d]; ok {
		return n
	}
	return fmt.Sprintf("dist(%d)", d)
}

// MarshalText writes the distribution's name.
func (d Dist) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// ParseDist reads a distribution's name.
func ParseDist(s string) (Dist, error) {
	for _, d := range Dists() {
		if distNames[d] == s {
			return d, nil
		}
	}
	names := make([]string, 0, len(distNames))
	for _, d := range Dists() {
		names = append(names, distNames[d])
	}
	return 0, fmt.Errorf("unknown distribution %q: want one of %s", s, strings.Join(names, ", "))
}

// symmetric says whether the distribution has zero mean and no dominant
// terms, where the √n typical-error model applies (see oracle.MatMul).
func (d Dist) symmetric() bool { return d == Uniform || d == Normal }

// Generate makes the inputs of one case, in wire order. The same (op,
// shape, dist, seed) always gives the same inputs, whatever the number of
// cores: each chunk of chunkSize elements draws from its own generator,
// seeded by the case, the operand and the chunk.
func Generate(o *op.Op, s op.Shape, d Dist, seed uint64) []oracle.Input {
	stream := uint64(o.ID)<<8 | uint64(d)
	rng := rand.New(rand.NewPCG(seed, stream))
	inputs := make([]oracle.Input, len(o.Inputs))
	if d == Rounding {
		return roundingInputs(o, s, seed, stream)
	}
	for i, p := range o.Inputs {
		if p.DType == op.I32 {
			inputs[i] = oracle.Input{I32: drawLabels(s, rng)}
			continue
		}
		n := s.Elements(p)
		rows, cols := int(s.Dims[p.Rows]), int(s.Cols(p))
		in := make([]uint16, n)
		operand := seed ^ uint64(i+1)*0x9e3779b97f4a7c15
		switch {
		case d == Integer && (o.ID == op.Softmax || o.ID == op.CrossEntropy):
			fill(in, operand, stream, func(r *rand.Rand) float64 { return float64(r.IntN(17) - 8) })
		case d == Integer && o.ID == op.SoftmaxGrad && p.Name == "Y":
			sparseSixteenths(in, rng, rows, cols)
		case d == Integer:
			fill(in, operand, stream, func(r *rand.Rand) float64 { return float64(r.IntN(9) - 4) })
		case d == Uniform:
			fill(in, operand, stream, func(r *rand.Rand) float64 { return 2*r.Float64() - 1 })
		case d == Normal:
			fill(in, operand, stream, func(r *rand.Rand) float64 { return r.NormFloat64() })
		case d == Wide:
			fill(in, operand, stream, wide)
		case d == Special:
			fill(in, operand, stream, func(r *rand.Rand) float64 { return r.NormFloat64() })
			plantSpecials(o, p.Name, in, rng, rows, cols)
		}
		inputs[i] = oracle.Input{F16: in}
	}
	return inputs
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

// fill draws every element of dst, chunk by chunk on every core; chunk c
// draws from PCG(seed + c, stream), so the result does not depend on the
// number of cores.
func fill(dst []uint16, seed, stream uint64, draw func(*rand.Rand) float64) {
	forChunks(len(dst), func(c, lo, hi int) {
		r := rand.New(rand.NewPCG(seed+uint64(c), stream))
		for i := lo; i < hi; i++ {
			dst[i] = f16.FromFloat64(draw(r))
		}
	})
}

func wide(r *rand.Rand) float64 {
	v := math.Exp2(28*r.Float64() - 14)
	if r.IntN(2) == 0 {
		return -v
	}
	return v
}

// sparseSixteenths fills each row with at most 16 nonzero multiples of 1/16
// in (0, 1], a peaked distribution like a softmax output. With integer dY in
// [−4, 4], every product, the row sum D (|D| ≤ 64) and dY − D are multiples
// of 1/16 below 2¹⁰, and Y·(dY − D) a multiple of 1/256 below 2⁷: all exact
// in f32, so softmax_grad's integer case is a bit-for-bit check.
func sparseSixteenths(dst []uint16, rng *rand.Rand, rows, cols int) {
	zero := f16.FromFloat64(0)
	for i := range dst {
		dst[i] = zero
	}
	for r := 0; r < rows; r++ {
		for t := 0; t < min(16, cols); t++ {
			dst[r*cols+rng.IntN(cols)] = f16.FromFloat64(float64(1+rng.IntN(16)) / 16)
		}
	}
}

// plantSpecials puts IEEE special values at known places. Rows (of matrices
// whose rows feed output rows) and columns are chosen so that most outputs
// stay finite and each special kind reaches some output:
//
//   - gemm ops: a NaN, a +Inf and a −Inf in the first three rows of the first
//     operand and the last column of the second; subnormals everywhere at
//     random; and a block of ±60000 that pushes f16 outputs past 65520.
//   - softmax and cross_entropy's logits: a row masked at random with −Inf,
//     a fully −Inf row, a row with a NaN, a row with +Inf, subnormals, and a
//     row of large equal values; cross_entropy also masks column 0 of row
//     0, the class of row 0's label, so that row's loss is +Inf.
//   - softmax_grad: a NaN in dY, an Inf in dY where Y > 0, an Inf in dY where
//     Y = 0 (0·Inf = NaN), subnormal Y, and dY near the f16 maximum.
func plantSpecials(o *op.Op, operand string, in []uint16, rng *rand.Rand, rows, cols int) {
	set := func(r, c int, v uint16) {
		if r >= 0 && r < rows && c >= 0 && c < cols {
			in[r*cols+c] = v
		}
	}
	subnormal := func() uint16 { return uint16(1+rng.IntN(0x3ff)) | uint16(rng.IntN(2))<<15 }
	for t := 0; t < max(1, len(in)/50); t++ {
		in[rng.IntN(len(in))] = subnormal()
	}
	big := f16.FromFloat64(60000)
	switch o.Kind {
	case op.MatMul:
		first := operand == o.Inputs[0].Name
		specials := []uint16{f16.NaN, f16.PosInf, f16.NegInf}
		for i, v := range specials {
			if first {
				set(i, rng.IntN(cols), v)
			} else {
				set(rng.IntN(rows), cols-1-i, v)
			}
		}
		// Large values in the middle rows/columns make some dot products
		// exceed the f16 range (the f16-output ops must give ±Inf there).
		for r := rows / 2; r < min(rows, rows/2+2); r++ {
			for c := 0; c < cols; c++ {
				if first || c == cols/2 {
					v := big
					if rng.IntN(4) == 0 {
						v |= 0x8000
					}
					set(r, c, v)
				}
			}
		}
	case op.RowWise:
		switch {
		case o.ID == op.Softmax || o.ID == op.CrossEntropy:
			if o.ID == op.CrossEntropy {
				set(0, 0, f16.NegInf)
			}
			for c := 0; c < cols; c++ {
				if rng.IntN(3) == 0 {
					set(0, c, f16.NegInf)
				}
				set(1, c, f16.NegInf)
				set(4, c, big)
			}
			set(2, rng.IntN(cols), f16.NaN)
			set(3, rng.IntN(cols), f16.PosInf)
		case operand == "dY":
			set(0, rng.IntN(cols), f16.NaN)
			set(1, 0, f16.PosInf)
			set(2, 0, f16.NegInf)
			for c := 0; c < cols; c++ {
				set(3, c, f16.FromFloat64(65504*(2*rng.Float64()-1)))
			}
		case operand == "Y":
			set(1, 0, f16.FromFloat64(0.5)) // Inf·0.5 = Inf: D = Inf
			set(2, 0, 0)                    // −Inf·0 = NaN: row NaN
			for c := 0; c < cols; c += 3 {
				set(5, c, subnormal()&0x7fff)
			}
		}
	}
}
