package verify

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
)

// CheckOptions tune Check.
type CheckOptions struct {
	// Budget is the reference work (the op's Flops at the shape, else its
	// elements) above which Check samples instead of checking every
	// element; 0 means DefaultBudget.
	Budget float64
	// Slices is how many slices of an Independent dimension a sampled
	// check takes; 0 means 4.
	Slices int
	// Seed picks the sample.
	Seed uint64
}

// DefaultBudget: a reference of up to 2³¹ operations is computed whole.
const DefaultBudget = 1 << 31

// Checked says how much of a call Check looked at.
type Checked struct {
	Stats Stats
	// Sample is "" when every output element was checked, else a sentence
	// saying which were.
	Sample string
}

// Check compares the outputs of one call of o at s (outs, in o.Outputs()
// order, little-endian) with the reference of its inputs (in o.Inputs()
// order), every element under its bound (no bit-for-bit, outlier or bias
// test: the inputs are whatever the caller's program made). A call whose
// reference costs more than the budget is sampled: for an op with an
// Independent dimension, a few of its slices, whole; for a product, full
// rows and columns and Freivalds projections; any other op is checked
// whole whatever it costs. It is how a training run re-checks its own
// calls (package gpt).
func Check(ctx context.Context, o *op.Op, s op.Shape, inputs []oracle.Input, outs [][]byte, arith oracle.Arithmetic, opts CheckOptions) (Checked, error) {
	budget := opts.Budget
	if budget == 0 {
		budget = DefaultBudget
	}
	work := o.FlopsAt(s)
	if work == 0 {
		for _, p := range o.Outputs() {
			work += float64(s.Elements(p))
		}
	}
	if work > budget {
		if o.Independent != "" {
			return checkSlices(ctx, o, s, inputs, outs, arith, opts)
		}
		if m := o.Matmul; m != nil && m.Linear(s) && (len(o.Outputs()) == 1 || len(o.Outputs()) == 2 && m.ColumnSums == o.Outputs()[1].Name) {
			c := Case{Op: o, Shape: s, Seed: opts.Seed, Sampled: true}
			st, err := sampledCheck(ctx, c, Mode{}, inputs, outs, arith.Dot)
			if err != nil {
				return Checked{}, err
			}
			return Checked{Stats: st, Sample: st.Sample.String()}, nil
		}
	}
	refs, err := oracle.Compute(ctx, o, s, inputs, arith)
	if err != nil {
		return Checked{}, err
	}
	return Checked{Stats: Compare(o, s, refs, outs, Mode{})}, nil
}

// checkSlices checks a few slices of o's Independent dimension: the first,
// the last and random others, each a whole problem of its own.
func checkSlices(ctx context.Context, o *op.Op, s op.Shape, inputs []oracle.Input, outs [][]byte, arith oracle.Arithmetic, opts CheckOptions) (Checked, error) {
	d := o.Independent
	di := o.ParamIndex(d)
	n := int(s.Dims[di])
	k := opts.Slices
	if k == 0 {
		k = 4
	}
	pick := picks(rand.New(rand.NewPCG(opts.Seed, 0x51ce)), n, k)
	dims := append([]int64(nil), s.Dims...)
	dims[di] = int64(len(pick))
	sub, err := o.Shape(dims, s.Settings...)
	if err != nil {
		return Checked{}, fmt.Errorf("verify: %s: a sample of %d of %d %s: %w", o.Name, len(pick), n, d, err)
	}
	split := func(p op.Operand) bool { return len(p.Rows.Of) > 0 && p.Rows.Of[0] == d }
	var subIn []oracle.Input
	in := 0
	for _, p := range o.Operands {
		if !p.Reads() {
			continue
		}
		x := inputs[in]
		in++
		if !split(p) {
			subIn = append(subIn, x)
			continue
		}
		per := s.Elements(p) / int64(n)
		var g oracle.Input
		for _, i := range pick {
			lo, hi := int64(i)*per, int64(i+1)*per
			switch {
			case x.F16 != nil:
				g.F16 = append(g.F16, x.F16[lo:hi]...)
			case x.F32 != nil:
				g.F32 = append(g.F32, x.F32[lo:hi]...)
			default:
				g.I32 = append(g.I32, x.I32[lo:hi]...)
			}
		}
		if g.F16 == nil && g.F32 == nil && g.I32 == nil {
			g = emptyLike(x)
		}
		subIn = append(subIn, g)
	}
	refs, err := oracle.Compute(ctx, o, sub, subIn, arith)
	if err != nil {
		return Checked{}, err
	}
	var subOut [][]byte
	for k, p := range o.Outputs() {
		per := s.Bytes(p) / int64(n)
		var g []byte
		for _, i := range pick {
			g = append(g, outs[k][int64(i)*per:int64(i+1)*per]...)
		}
		subOut = append(subOut, g)
	}
	st := Compare(o, sub, refs, subOut, Mode{})
	return Checked{Stats: st, Sample: fmt.Sprintf("%d of %d slices along %s (%v), every element of each", len(pick), n, d, pick)}, nil
}

func emptyLike(x oracle.Input) oracle.Input {
	switch {
	case x.F32 != nil:
		return oracle.Input{F32: []float32{}}
	case x.I32 != nil:
		return oracle.Input{I32: []int32{}}
	}
	return oracle.Input{F16: []uint16{}}
}
