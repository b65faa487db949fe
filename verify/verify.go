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
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
)

// GuardElements of poison follow every output buffer.
const GuardElements = 64

// Device runs one op on buffers it allocates for the call. buffers are the
// op's operands in wire order, as little-endian bytes; each operand the op
// writes is followed by its guard region. The device uploads all of them,
// runs the op, and reads every buffer back into the same slices.
type Device interface {
	RunOp(ctx context.Context, o *op.Op, s op.Shape, buffers [][]byte) (kernelTime time.Duration, err error)
}

// Case is one check: an op at a shape on inputs drawn from Dist with Seed.
type Case struct {
	Op    *op.Op
	Shape op.Shape
	Dist  oracle.Dist
	Seed  uint64
	// Sampled checks a matmul-family output by sampled rows, columns and
	// projections instead of element by element. Run sets it where the
	// full reference would not fit in memory; products over fullCheckMACs
	// are sampled whatever it says.
	Sampled bool
}

func (c Case) String() string {
	return fmt.Sprintf("%s %s %s seed %d", c.Op.Name, c.Shape, c.Dist, c.Seed)
}

// Exact says whether the case is checked bit for bit.
func (c Case) Exact() bool {
	switch c.Dist {
	case oracle.Integer:
		// A product through GELU's tanh is not exact on whole numbers.
		return c.Op.ExactOnIntegers && (c.Op.Matmul == nil || c.Op.Matmul.Linear(c.Shape))
	case oracle.Rounding:
		ok, _ := oracle.RoundingApplies(c.Op, c.Shape)
		return ok
	}
	return false
}

// sampled says whether the case is checked by sampling.
func (c Case) sampled() bool {
	m := c.Op.Matmul
	if m == nil {
		return false
	}
	macs := float64(c.Shape.Int(m.Rows)) * float64(c.Shape.Int(m.Cols)) * float64(c.Shape.Int(m.Depth))
	return c.Sampled || macs > float64(fullCheckMACs)
}

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
	// Arithmetic is what the bounds assumed of the device's kernels
	// (Options.Arithmetic).
	Arithmetic oracle.Arithmetic
}

// Options describe the device to Run beyond what Device does.
type Options struct {
	// Arithmetic is what the device states about how its kernels compute
	// (vkern.Device.Arithmetic, from its server's handshake); GEMM bounds
	// follow it. The zero value claims nothing: bounds then hold for any
	// summation order.
	Arithmetic oracle.Arithmetic
	// DeviceMemory, when set, reports the device's free memory, and
	// whether its buffers are host memory (the cpu backend), so that Run
	// can refuse a case that cannot fit before allocating anything.
	DeviceMemory func(ctx context.Context) (free int64, host bool, err error)
	// Progress, when set, is called after each case.
	Progress func(done int, r CaseResult)
}

// Plan chooses the cases of a run.
type Plan struct {
	Ops []*op.Op
	// Shapes, written in the ops' syntax, each apply to the chosen ops it
	// fits; nil: each op's own (op.Shapes: Quick or Default).
	Shapes []string
	Dists  []oracle.Dist // nil: all
	Seed   uint64
	Trials int // seeds per (op, shape, dist): Seed, Seed+1, …
	Quick  bool
}

// DefaultShapes are the shapes o is checked at when the user names none:
// its contract's quick or default shapes.
func DefaultShapes(o *op.Op, quick bool) []op.Shape {
	specs := o.Shapes.Default
	if quick || len(specs) == 0 {
		specs = o.Shapes.Quick
	}
	shapes := make([]op.Shape, len(specs))
	for i, spec := range specs {
		shapes[i] = o.MustShape(spec) // the contract's own table
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
	dists, named := p.Dists, len(p.Dists) > 0
	if !named {
		dists = oracle.Dists()
	}
	for _, text := range p.Shapes {
		var errs []string
		for _, o := range p.Ops {
			if _, err := o.ParseShape(text); err != nil {
				errs = append(errs, err.Error())
			}
		}
		if len(errs) == len(p.Ops) {
			return nil, fmt.Errorf("verify: shape %s fits none of the chosen ops: %s", text, strings.Join(errs, "; "))
		}
	}
	var cases []Case
	var unrounded []string // cases the rounding distribution cannot serve
	rounding := 0
	for _, o := range p.Ops {
		shapes := DefaultShapes(o, p.Quick)
		if p.Shapes != nil {
			shapes = nil
			for _, text := range p.Shapes {
				if s, err := o.ParseShape(text); err == nil {
					shapes = append(shapes, s)
				}
			}
		}
		for _, s := range shapes {
			for _, d := range dists {
				if d == oracle.Rounding {
					// Skipped where it cannot give exact results; the
					// report says which ops have no rounding case and
					// why.
					if ok, why := oracle.RoundingApplies(o, s); !ok {
						unrounded = append(unrounded, fmt.Sprintf("%s %s: %s", o.Name, s, why))
						continue
					}
					rounding++
				}
				for t := 0; t < trials; t++ {
					cases = append(cases, Case{Op: o, Shape: s, Dist: d, Seed: p.Seed + uint64(t)})
				}
			}
		}
	}
	if named && rounding == 0 && slices.Contains(dists, oracle.Rounding) {
		return nil, fmt.Errorf("verify: --dist rounding gives no case here: %s; choose ops whose results can be exact (gemm, softmax_grad, …)", strings.Join(unrounded, "; "))
	}
	return cases, nil
}

// Run checks every case on dev. Before anything runs it checks that each
// case fits in the host's memory and, when opts.DeviceMemory is set, the
// device's: a case that does not is an error (a *TooLargeError), and a GEMM
// case whose full reference does not fit but whose sampled check does is
// sampled instead (its Case.Sampled is set in the result). Once running, it
// stops early, marking the rest failed, only when ctx is done.
func Run(ctx context.Context, dev Device, cases []Case, opts Options) (Result, error) {
	cases, err := Fit(ctx, cases, opts.DeviceMemory)
	if err != nil {
		return Result{}, err
	}
	res := Result{Counts: map[Verdict]int{}, Arithmetic: opts.Arithmetic}
	for i, c := range cases {
		r := checkCase(ctx, dev, c, opts.Arithmetic)
		res.Cases = append(res.Cases, r)
		res.Counts[r.Verdict]++
		if opts.Progress != nil {
			opts.Progress(i+1, r)
		}
	}
	res.Verdict = Passed
	for _, r := range res.Cases {
		res.Verdict = Worse(res.Verdict, r.Verdict)
	}
	if len(res.Cases) == 0 {
		res.Verdict = Failed // nothing checked is not a pass
	}
	return res, nil
}

func checkCase(ctx context.Context, dev Device, c Case, arith oracle.Arithmetic) CaseResult {
	r := CaseResult{Case: c}
	fail := func(v Verdict, format string, args ...any) CaseResult {
		r.Verdict, r.Reason = v, fmt.Sprintf(format, args...)
		return r
	}
	if err := ctx.Err(); err != nil {
		return fail(Failed, "not run: %v", err)
	}
	o, s := c.Op, c.Shape
	inputs, err := oracle.Generate(o, s, c.Dist, c.Seed)
	if err != nil {
		return fail(Failed, "%v", err)
	}
	// The buffers in wire order: inputs as generated, outputs poisoned, an
	// operand the op adds into holding its initial values; everything the
	// op writes is followed by a poisoned guard region.
	buffers := make([][]byte, len(o.Operands))
	var outs [][]byte // each written operand without its guard, in o.Outputs() order
	in := 0
	for k, p := range o.Operands {
		var data []byte
		if p.Reads() {
			data = inputBytes(inputs[in])
			in++
		}
		if p.Writes() {
			n := s.Bytes(p)
			buf := make([]byte, n+GuardElements*int64(p.DType.Size()))
			Poison(p.DType, buf)
			copy(buf, data)
			outs = append(outs, buf[:n])
			data = buf
		}
		buffers[k] = data
	}

	kernelTime, err := dev.RunOp(ctx, o, s, buffers)
	if err != nil {
		if errors.Is(err, op.ErrNotSupported) {
			return fail(NotSupported, "%v", err)
		}
		return fail(Failed, "%v", err)
	}
	r.KernelTime = kernelTime
	if c.sampled() && !o.Matmul.Linear(s) {
		// Freivalds' projections need an affine output: a GELU product is
		// checked on a few whole slices of its rows instead.
		checked, err := checkSlices(ctx, o, s, inputs, outs, arith, CheckOptions{Seed: c.Seed})
		if err != nil {
			return fail(Failed, "oracle: %v", err)
		}
		r.Stats = checked.Stats
	} else if c.sampled() {
		if r.Stats, err = checkSampled(ctx, c, inputs, outs, arith.Dot); err != nil {
			return fail(Failed, "oracle: %v", err)
		}
	} else {
		refs, err := oracle.Compute(ctx, o, s, inputs, arith)
		if err != nil {
			return fail(Failed, "oracle: %v", err)
		}
		r.Stats = Compare(o, s, refs, outs, modeOf(c))
	}

	var problems []string
	in = 0
	for k, p := range o.Operands {
		if p.Role == op.In {
			if !bytes.Equal(buffers[k], inputBytes(inputs[in])) {
				problems = append(problems, fmt.Sprintf("input %s was changed by the kernel", p.Name))
			}
		}
		if p.Reads() {
			in++
		}
		if p.Writes() {
			n := s.Bytes(p)
			guard := make([]byte, len(buffers[k])-int(n))
			Poison(p.DType, guard)
			if !bytes.Equal(buffers[k][n:], guard) {
				problems = append(problems, fmt.Sprintf("the kernel wrote past the end of %s (guard region changed)", p.Name))
			}
		}
	}
	st := r.Stats
	if st.Wrong > 0 || st.Outliers > 0 {
		problems = append(problems, fmt.Sprintf("%d of %d elements wrong (%d never written), %d statistical outliers; first: %s",
			st.Wrong, st.Elements, st.Unwritten, st.Outliers, st.FirstWrong))
	}
	if bias := st.Rounding.Problem(); bias != "" {
		problems = append(problems, bias)
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
	if in.F32 != nil {
		b := make([]byte, 4*len(in.F32))
		for i, x := range in.F32 {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		return b
	}
	b := make([]byte, 2*len(in.F16))
	for i, x := range in.F16 {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}
