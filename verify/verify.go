// Package verify runs an op's kernel on generated inputs and judges the
// result against package oracle's reference: bit for bit on exact cases, under
// the per-element bound on the others, with a statistical outlier test on
// zero-mean inputs and IEEE rules for special values.
//
// A case is op × shape × distribution × seed. Before every run the output
// buffer, and a guard region past its end, are filled with a poison pattern;
// after the run, an element still holding the poison was never written, a
// changed guard byte is a write past the end, and a changed input is a write
// into an input. Verdicts are an enum; the worst case decides the run; a run
// in which nothing was checked is not a pass.
//
// verify does not start servers or build kernels: it talks to a Device.
package verify

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
)

// GuardElements of poison follow every output buffer.
const GuardElements = 64

// Device runs one op on buffers it allocates for the call. buffers are the
// op's operands in wire order, as little-endian bytes; each output is
// followed by its guard region. The device uploads all of them, runs the op,
// and reads every buffer back into the same slices.
type Device interface {
	RunOp(ctx context.Context, o *op.Op, s op.Shape, buffers [][]byte) (kernelTime time.Duration, err error)
}

// Case is one check: an op at a shape on inputs drawn from Dist with Seed.
type Case struct {
	Op    *op.Op
	Shape op.Shape
	Dist  Dist
	Seed  uint64
}

func (c Case) String() string {
	return fmt.Sprintf("%s %s %s seed %d", c.Op.Name, c.Shape, c.Dist, c.Seed)
}

// Exact says whether the case is checked bit for bit.
func (c Case) Exact() bool { return c.Dist == Integer && c.Op.ExactOnIntegers }

// CaseResult is the outcome of a case.
type CaseResult struct {
	Case
	Verdict    Verdict
	Stats      Stats
	KernelTime time.Duration
	Reason     string // why it did not pass; empty when it passed
}

// Result is the outcome of a run.
type Result struct {
	Cases   []CaseResult
	Verdict Verdict
	Counts  map[Verdict]int
}

// Plan chooses the cases of a run.
type Plan struct {
	Ops    []*op.Op
	Shapes []op.Shape // each applies to the ops whose shape syntax it fits; nil: DefaultShapes
	Dists  []Dist     // nil: all
	Seed   uint64
	Trials int // seeds per (op, shape, dist): Seed, Seed+1, …
	Quick  bool
}

// DefaultShapes are the shapes checked when the user names none: the edge
// cases (a single element; dimensions that are prime and far from any tile
// size; a long thin reduction), plus one larger square, and a long-row
// softmax that does not fit any GPU block's registers. cross_entropy adds
// shapes with an ignore_index (negative, and a class index), rows either
// side of the on-chip limit, and the vocabulary of a GPT-2-sized model.
func DefaultShapes(o *op.Op, quick bool) []op.Shape {
	var specs []string
	switch {
	case o.Kind == op.MatMul && quick:
		specs = []string{"1x1x1", "17x31x129", "3x1000x5", "64x48x80"}
	case o.Kind == op.MatMul:
		specs = []string{"1x1x1", "17x31x129", "3x1000x5", "128x96x200", "256x256x256"}
	case o.ID == op.CrossEntropy && quick:
		specs = []string{"1x1", "7x4099", "64x1000:ignore_index=-100", "12x300:ignore_index=0"}
	case o.ID == op.CrossEntropy:
		// 65,536 is the longest row a GPU block holds on chip; 65,537
		// takes the two-read path, as do the 100,000-class rows. The
		// GPU-sized 8192x50304 is not a default: its float64 reference
		// needs about 11 GB on the host (bench/cuda-verify-all.sh names it).
		specs = []string{"1x1", "7x4099", "256x1024:ignore_index=-100", "12x300:ignore_index=0",
			"3x65536", "3x65537:ignore_index=-100", "64x100000"}
	case quick:
		specs = []string{"1x1", "7x4099", "64x1000"}
	default:
		specs = []string{"1x1", "7x4099", "64x100000", "256x1024"}
	}
	shapes := make([]op.Shape, len(specs))
	for i, spec := range specs {
		s, err := o.ParseShape(spec)
		if err != nil {
			panic(err) // the table above is wrong: a programming error, not user input
		}
		shapes[i] = s
	}
	return shapes
}

// Cases expands the plan. Shapes given by the user must each fit at least
// one chosen op.
func (p Plan) Cases() ([]Case, error) {
	if len(p.Ops) == 0 {
		return nil, fmt.Errorf("verify: no ops chosen; name at least one with --op (%v)", op.Names())
	}
	trials := max(p.Trials, 1)
	dists := p.Dists
	if len(dists) == 0 {
		dists = Dists()
	}
	for _, s := range p.Shapes {
		fits := false
		for _, o := range p.Ops {
			fits = fits || o.Validate(s) == nil
		}
		if !fits {
			return nil, fmt.Errorf("verify: shape %s fits none of the chosen ops (gemm ops want MxNxK, softmax ops ROWSxCOLS, cross_entropy ROWSxCOLS[:ignore_index=N])", s)
		}
	}
	var cases []Case
	for _, o := range p.Ops {
		shapes := DefaultShapes(o, p.Quick)
		if p.Shapes != nil {
			shapes = nil
			for _, s := range p.Shapes {
				if o.Validate(s) == nil {
					shapes = append(shapes, s)
				}
			}
		}
		for _, s := range shapes {
			for _, d := range dists {
				for t := 0; t < trials; t++ {
					cases = append(cases, Case{Op: o, Shape: s, Dist: d, Seed: p.Seed + uint64(t)})
				}
			}
		}
	}
	return cases, nil
}

// Run checks every case on dev, calling progress after each. It stops early,
// marking the rest failed, only when ctx is done.
func Run(ctx context.Context, dev Device, cases []Case, progress func(done int, r CaseResult)) Result {
	res := Result{Counts: map[Verdict]int{}}
	for i, c := range cases {
		r := checkCase(ctx, dev, c)
		res.Cases = append(res.Cases, r)
		res.Counts[r.Verdict]++
		if progress != nil {
			progress(i+1, r)
		}
	}
	res.Verdict = Passed
	for _, r := range res.Cases {
		res.Verdict = Worse(res.Verdict, r.Verdict)
	}
	if len(res.Cases) == 0 {
		res.Verdict = Failed // nothing checked is not a pass
	}
	return res
}

func checkCase(ctx context.Context, dev Device, c Case) CaseResult {
	r := CaseResult{Case: c}
	fail := func(v Verdict, format string, args ...any) CaseResult {
		r.Verdict, r.Reason = v, fmt.Sprintf(format, args...)
		return r
	}
	if err := ctx.Err(); err != nil {
		return fail(Failed, "not run: %v", err)
	}
	o, s := c.Op, c.Shape
	inputs := Generate(o, s, c.Dist, c.Seed)
	buffers := make([][]byte, 0, len(inputs)+len(o.Outputs))
	for _, in := range inputs {
		buffers = append(buffers, inputBytes(in))
	}
	outs := make([][]byte, len(o.Outputs)) // each output without its guard region
	for k, p := range o.Outputs {
		n := s.Bytes(p)
		out := make([]byte, n+GuardElements*int64(p.DType.Size()))
		Poison(p.DType, out)
		buffers = append(buffers, out)
		outs[k] = out[:n]
	}

	kernelTime, err := dev.RunOp(ctx, o, s, buffers)
	if err != nil {
		return fail(Failed, "%v", err)
	}
	r.KernelTime = kernelTime
	if o.Kind == op.MatMul && float64(s.Dims[0])*float64(s.Dims[1])*float64(s.Dims[2]) > float64(fullCheckMACs) {
		if r.Stats, err = checkSampled(ctx, c, inputs, outs[0]); err != nil {
			return fail(Failed, "oracle: %v", err)
		}
	} else {
		refs, err := oracle.Compute(ctx, o, s, inputs)
		if err != nil {
			return fail(Failed, "oracle: %v", err)
		}
		r.Stats = Compare(o, s, refs, outs, c.Exact(), c.Dist.symmetric())
	}

	var problems []string
	for i, in := range inputs {
		if !bytes.Equal(buffers[i], inputBytes(in)) {
			problems = append(problems, fmt.Sprintf("input %s was changed by the kernel", o.Inputs[i].Name))
		}
	}
	for k, p := range o.Outputs {
		out := buffers[len(inputs)+k]
		guard := make([]byte, len(out)-len(outs[k]))
		Poison(p.DType, guard)
		if !bytes.Equal(out[len(outs[k]):], guard) {
			problems = append(problems, fmt.Sprintf("the kernel wrote past the end of %s (guard region changed)", p.Name))
		}
	}
	st := r.Stats
	if st.Wrong > 0 || st.Outliers > 0 {
		problems = append(problems, fmt.Sprintf("%d of %d elements wrong (%d never written), %d statistical outliers; first: %s",
			st.Wrong, st.Elements, st.Unwritten, st.Outliers, st.FirstWrong))
	}
	if st.Checked == 0 {
		return fail(Failed, "no element was checked")
	}
	if len(problems) > 0 {
		return fail(Incorrect, "%s", strings.Join(problems, "; "))
	}
	r.Verdict = Passed
	return r
}

// inputBytes encodes an input's elements as little-endian bytes, the wire
// form.
func inputBytes(in oracle.Input) []byte {
	if in.I32 != nil {
		b := make([]byte, 4*len(in.I32))
		for i, x := range in.I32 {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
		}
		return b
	}
	b := make([]byte, 2*len(in.F16))
	for i, x := range in.F16 {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}
