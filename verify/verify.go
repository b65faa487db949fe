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
	"slices"
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
	// Sampled checks a GEMM output by sampled rows, columns and
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
	case Integer:
		return c.Op.ExactOnIntegers
	case Rounding:
		ok, _ := roundingApplies(c.Op, c.Shape)
		return ok
	}
	return false
}

// sampled says whether the case is checked by sampling.
func (c Case) sampled() bool {
	if c.Op.Kind != op.MatMul {
		return false
	}
	return c.Sampled || float64(c.Shape.Dims[0])*float64(c.Shape.Dims[1])*float64(c.Shape.Dims[2]) > float64(fullCheckMACs)
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
	Ops    []*op.Op
	Shapes []op.Shape // each applies to the ops whose shape syntax it fits; nil: DefaultShapes
	Dists  []Dist     // nil: all
	Seed   uint64
	Trials int // seeds per (op, shape, dist): Seed, Seed+1, …
	Quick  bool
}

// DefaultShapes are the shapes checked when the user names none: the edge
// cases (a single element; dimensions that are prime and far from any tile
// size; a long thin reduction), plus one larger square, reductions of over
// 4096 terms, and a long-row softmax that does not fit any GPU block's
// registers. cross_entropy adds
// shapes with an ignore_index (negative, and a class index), rows either
// side of the on-chip limit, and the vocabulary of a GPT-2-sized model.
func DefaultShapes(o *op.Op, quick bool) []op.Shape {
	var specs []string
	switch {
	case o.Kind == op.MatMul && quick:
		specs = []string{"1x1x1", "17x31x129", "3x1000x5", "64x48x80", "24x24x4100"}
	case o.Kind == op.MatMul:
		// The last three are deep in each op's own reduction (gemm sums
		// over K, gemm_grad_a over N, gemm_grad_b over M) with small
		// outputs: K ≥ 4096 is where tensor-core kernels accumulate most.
		specs = []string{"1x1x1", "17x31x129", "3x1000x5", "128x96x200", "256x256x256",
			"40x40x4100", "40x4100x40", "4100x40x40"}
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
	dists, named := p.Dists, len(p.Dists) > 0
	if !named {
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
	var unrounded []string // cases the rounding distribution cannot serve
	rounding := 0
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
				if d == Rounding {
					// Skipped where it cannot give exact results; the
					// report says which ops have no rounding case and
					// why.
					if ok, why := roundingApplies(o, s); !ok {
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
	if named && rounding == 0 && slices.Contains(dists, Rounding) {
		return nil, fmt.Errorf("verify: --dist rounding gives no case here: %s; choose gemm, gemm_grad_a, gemm_grad_b or softmax_grad", strings.Join(unrounded, "; "))
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
	if c.sampled() {
		if r.Stats, err = checkSampled(ctx, c, inputs, outs[0], arith.Dot); err != nil {
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
	b := make([]byte, 2*len(in.F16))
	for i, x := range in.F16 {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}
