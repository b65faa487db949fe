package oracle

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
)

// Dist is an input distribution.
type Dist uint8

const (
	// Integer draws small whole numbers, so that every binary32
	// intermediate is exact and ops marked ExactOnIntegers must match bit
	// for bit.
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
	// ties to even, bit for bit. Only ops whose generator draws it take it.
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

// Symmetric says whether the distribution has zero mean and no dominant
// terms, where the √n typical-error model applies (see MatMul).
func (d Dist) Symmetric() bool { return d == Uniform || d == Normal }

// Gen draws the inputs of one case: op × shape × distribution × seed. The
// same case always gets the same inputs, whatever the number of cores: each
// chunk of ChunkSize elements draws from its own generator, seeded by the
// case, the operand and the chunk. An op's generator (Spec.Generate) uses
// it to draw each operand from the distribution or from the operand's own
// domain.
type Gen struct {
	Op    *op.Op
	Shape op.Shape
	Dist  Dist
	Seed  uint64

	stream uint64
	rng    *rand.Rand
}

func newGen(o *op.Op, s op.Shape, d Dist, seed uint64) *Gen {
	stream := uint64(o.ID)<<8 | uint64(d)
	return &Gen{Op: o, Shape: s, Dist: d, Seed: seed, stream: stream, rng: rand.New(rand.NewPCG(seed, stream))}
}

// Rand is the case's sequential generator, for small draws (labels, the
// places of special values).
func (g *Gen) Rand() *rand.Rand { return g.rng }

// Size is the rows and columns of input i (in Op.Inputs() order).
func (g *Gen) Size(i int) (rows, cols int) {
	p := g.Op.Inputs()[i]
	return int(g.Shape.Rows(p)), int(g.Shape.Cols(p))
}

// operandSeed separates the chunked streams of the inputs.
func (g *Gen) operandSeed(i int) uint64 { return g.Seed ^ uint64(i+1)*0x9e3779b97f4a7c15 }

// Draw is the value rule of a distribution: small whole numbers in [−4, 4]
// for Integer (every product and short sum exact), uniform, normal and wide
// reals, and normal values under Special (where an op plants the specials
// itself). Rounding has no rule of its own: its ops draw it themselves.
func (d Dist) Draw(r *rand.Rand) float64 {
	switch d {
	case Integer:
		return float64(r.IntN(9) - 4)
	case Uniform:
		return 2*r.Float64() - 1
	case Wide:
		return wide(r)
	}
	return r.NormFloat64()
}

// F16 draws input i as f16 values by draw.
func (g *Gen) F16(i int, draw func(*rand.Rand) float64) []uint16 {
	rows, cols := g.Size(i)
	out := make([]uint16, rows*cols)
	fill(out, g.operandSeed(i), g.stream, draw)
	return out
}

// F32 draws input i as f32 values by draw.
func (g *Gen) F32(i int, draw func(*rand.Rand) float64) []float32 {
	rows, cols := g.Size(i)
	out := make([]float32, rows*cols)
	ForChunks(len(out), func(c, lo, hi int) {
		r := rand.New(rand.NewPCG(g.operandSeed(i)+uint64(c), g.stream))
		for j := lo; j < hi; j++ {
			out[j] = float32(draw(r))
		}
	})
	return out
}

// Default draws every input by the distribution's rule (f16 or f32), and
// under Special scatters subnormals and one NaN, +Inf and −Inf into each
// f16 input. It suits ops whose inputs take any values; an op with i32
// inputs, or shaped special values, has a generator of its own.
func (g *Gen) Default() []Input {
	inputs := make([]Input, len(g.Op.Inputs()))
	for i, p := range g.Op.Inputs() {
		switch p.DType {
		case op.F16:
			inputs[i].F16 = g.F16(i, g.Dist.Draw)
			if g.Dist == Special {
				g.Scatter(inputs[i].F16)
			}
		case op.F32:
			inputs[i].F32 = g.F32(i, g.Dist.Draw)
		case op.I32:
			panic(fmt.Sprintf("oracle: %s's input %s is i32, whose domain the op's own generator must draw", g.Op.Name, p.Name))
		}
	}
	return inputs
}

// Scatter puts subnormals at random places of an f16 operand (one in 50
// elements), and a NaN, a +Inf and a −Inf.
func (g *Gen) Scatter(in []uint16) {
	for t := 0; t < max(1, len(in)/50); t++ {
		in[g.rng.IntN(len(in))] = g.Subnormal()
	}
	for _, v := range []uint16{f16.NaN, f16.PosInf, f16.NegInf} {
		in[g.rng.IntN(len(in))] = v
	}
}

// Subnormal is a random f16 subnormal of either sign.
func (g *Gen) Subnormal() uint16 { return uint16(1+g.rng.IntN(0x3ff)) | uint16(g.rng.IntN(2))<<15 }

// fill draws every element of dst, chunk by chunk on every core; chunk c
// draws from PCG(seed + c, stream), so the result does not depend on the
// number of cores.
func fill(dst []uint16, seed, stream uint64, draw func(*rand.Rand) float64) {
	ForChunks(len(dst), func(c, lo, hi int) {
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

// big is a value whose sums and products overflow f16.
var big = f16.FromFloat64(60000)
