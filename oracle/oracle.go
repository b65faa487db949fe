// Package oracle computes float64 references for every vkern op, together
// with a sound per-element bound on the error a correct kernel may make.
//
// A kernel is correct when each output element ĉ lies within Bound of the
// reference Value, before it is rounded to the output type; OutputBound adds
// the rounding to f16. Each op's bound is derived in the doc comment of its
// reference function, from two facts:
//
//   - f16·f16 products are exact in binary32 (11+11 significant bits ≤ 24,
//     exponents inside binary32's range, subnormals included), and
//   - each binary32 addition, multiplication or division is within a relative
//     u = 2⁻²³ of its exact result. Round-to-nearest only needs 2⁻²⁴; the
//     factor two covers accumulators that truncate (tensor cores).
//
// With γ(n) = n·u/(1 − n·u), a sum of n terms in any order is within γ(n−1)
// times the sum of the terms' magnitudes (Higham, "Accuracy and Stability of
// Numerical Algorithms", §3.1). Bounds also include the oracle's own float64
// error, so that Value need not be exact.
//
// The oracle does not judge: comparing a kernel's output against a
// Reference, including NaN and infinity rules, is package verify's job. It
// also claims nothing about kernels that use fast-math, flush subnormals to
// zero, or compute exp with more than a few ulps of error (see Softmax),
// except where an op's bound says otherwise: Gelu's and Attention's allow
// an exponential whose result is under 2⁻¹²⁶ to be flushed to zero, as the
// GPU's ex2.approx.ftz does.
package oracle

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"

	"github.com/vkern/vkern/op"
)

// Unit roundoff of the accumulating binary32 arithmetic the bounds allow for
// (see the package doc), and of the oracle's own float64 arithmetic.
const (
	U32 = 0x1p-23
	U64 = 0x1p-53
)

// ULP16 is the spacing of binary16 values at the magnitude of x: 2^(e−10)
// for |x| in [2^e, 2^(e+1)), e ≥ −14, and 2⁻²⁴ (the subnormal spacing)
// below 2⁻¹⁴. Round to nearest in binary16 errs by at most half of it.
func ULP16(x float64) float64 {
	_, e := math.Frexp(x) // |x| = f·2^e, f in [0.5, 1)
	return math.Ldexp(1, max(e-11, -24))
}

// Gamma is γ(n) = n·u/(1 − n·u), +Inf when n·u ≥ 1.
func Gamma(n int64, u float64) float64 {
	nu := float64(n) * u
	if nu >= 1 {
		return math.Inf(1)
	}
	return nu / (1 - nu)
}

// Reference is an op's float64 result with its error model.
type Reference struct {
	// Value is the exact result up to the oracle's own error, which Bound
	// already includes. NaN and ±Inf follow IEEE arithmetic on the formula.
	// A NaN with an infinite Bound marks a result the formula leaves
	// undetermined, which any value matches: an infinite factor times one
	// whose bound reaches zero, so that a correct kernel's product may be
	// +Inf, −Inf or NaN (gelu_grad's dy = ±Inf where gelu′(x) is within
	// its bound of 0).
	Value []float64
	// Bound is, per element, how far a correct kernel's binary32 result may
	// lie from Value before rounding to the output type.
	Bound []float64
	// Typical, when not nil, is a per-element typical-error scale: the
	// √n-growth model of DESIGN.md's statistical check. An error many times
	// Typical is an outlier even when it is under Bound.
	Typical []float64
	// Tightening, when not nil, compares Bound with the order-free bound
	// γ(L)·S (u = 2⁻²³) that every GEMM element had before bounds followed
	// the backend's summation (MatMul).
	Tightening *Tightening
}

// undetermined is the value and bound that mark a result the formula leaves
// undetermined (Reference.Value).
func undetermined() (value, bound float64) { return math.NaN(), math.Inf(1) }

// Tightening summarises, over the finite elements of a reference, how many
// times smaller than the order-free γ(L)·S its bounds are.
type Tightening struct {
	GeoMean  float64 `json:"geomean"`
	Least    float64 `json:"least"`
	Elements int64   `json:"elements"`
}

// Merge combines two summaries of disjoint sets of elements; either may be
// nil.
func (t *Tightening) Merge(u *Tightening) *Tightening {
	switch {
	case t == nil:
		return u
	case u == nil:
		return t
	}
	n := t.Elements + u.Elements
	logs := float64(t.Elements)*math.Log(t.GeoMean) + float64(u.Elements)*math.Log(u.GeoMean)
	return &Tightening{GeoMean: math.Exp(logs / float64(n)), Least: min(t.Least, u.Least), Elements: n}
}

// tighteningSums gathers a Tightening in parts.
type tighteningSums struct {
	logSum float64
	least  float64
	n      int64
}

func (t *tighteningSums) note(orderFree, bound float64) {
	if !(bound > 0) || math.IsInf(bound, 0) || !(orderFree > 0) || math.IsInf(orderFree, 0) {
		return
	}
	r := orderFree / bound
	if t.n == 0 || r < t.least {
		t.least = r
	}
	t.logSum += math.Log(r)
	t.n++
}

func (t *tighteningSums) add(u tighteningSums) {
	if u.n == 0 {
		return
	}
	if t.n == 0 || u.least < t.least {
		t.least = u.least
	}
	t.logSum += u.logSum
	t.n += u.n
}

func (t tighteningSums) summary() *Tightening {
	if t.n == 0 {
		return nil
	}
	return &Tightening{GeoMean: math.Exp(t.logSum / float64(t.n)), Least: t.least, Elements: t.n}
}

// OutputBound is the bound after rounding a binary32 result to dtype. The
// binary32 result ĉ lies within bound of value, so its magnitude is at most
// |value| + bound, and rounding it to nearest f16 errs by at most half an
// f16 ulp at that magnitude:
//
//	|fl16(ĉ) − c| ≤ bound + ½·ULP16(|c| + bound).
//
// That is exact to the half ulp the contract allows ("rounded once, to
// nearest"): a kernel that rounds toward zero errs by up to a whole ulp
// and is caught wherever its error passes the half.
func OutputBound(dtype op.DType, value, bound float64) float64 {
	if dtype != op.F16 {
		return bound
	}
	return bound + ULP16(math.Abs(value)+bound)/2
}

// Input is one input operand's elements in wire order: F16 holds the bit
// patterns of an f16 operand, F32 the values of an f32 one, I32 those of an
// i32 one (labels, token ids); the other fields are nil.
type Input struct {
	F16 []uint16
	F32 []float32
	I32 []int32
}

// Len is the operand's element count.
func (in Input) Len() int { return len(in.F16) + len(in.F32) + len(in.I32) }

// Spec is an op's reference and input domain: what package oracle knows
// about an op beyond its contract.
type Spec struct {
	// Compute returns one Reference per output of the op (op.Outputs(),
	// in order), from its inputs (op.Inputs(), in order; an InOut
	// operand's initial values among them), with bounds for a backend
	// whose kernels compute as the Arithmetic says. It may assume inputs
	// of the right types and lengths, and must stop when ctx is done.
	Compute func(ctx context.Context, s op.Shape, in []Input, a Arithmetic) ([]*Reference, error)
	// Generate draws a case's inputs (op.Inputs(), in order) from its
	// distribution, keeping every operand in its domain (labels in range,
	// a softmax output's rows, a positive variance). Nil: Gen.Default,
	// for ops whose inputs take any values. A distribution the op cannot
	// serve (Rounding, for an op whose results are never exact) is never
	// asked of it.
	Generate func(g *Gen) []Input
}

var (
	specsMu sync.RWMutex
	specs   = map[*op.Op]Spec{}
)

// Register gives o its reference and input domain. The built-in ops
// register theirs from this package; programs register their own ops'.
func Register(o *op.Op, spec Spec) error {
	if o == nil || spec.Compute == nil {
		return fmt.Errorf("oracle: Register needs an op and its Compute function")
	}
	specsMu.Lock()
	defer specsMu.Unlock()
	if _, dup := specs[o]; dup {
		return fmt.Errorf("oracle: %s has a reference already", o.Name)
	}
	specs[o] = spec
	return nil
}

func mustRegister(o *op.Op, spec Spec) {
	if err := Register(o, spec); err != nil {
		panic(err)
	}
}

func specOf(o *op.Op) (Spec, error) {
	specsMu.RLock()
	defer specsMu.RUnlock()
	spec, ok := specs[o]
	if !ok {
		return Spec{}, fmt.Errorf("oracle: %s has no reference; register one with oracle.Register", o.Name)
	}
	return spec, nil
}

// Generate draws the inputs of one case of o (op.Inputs(), in order).
func Generate(o *op.Op, s op.Shape, d Dist, seed uint64) ([]Input, error) {
	spec, err := specOf(o)
	if err != nil {
		return nil, err
	}
	return generate(o, spec, s, d, seed)
}

func generate(o *op.Op, spec Spec, s op.Shape, d Dist, seed uint64) ([]Input, error) {
	g := newGen(o, s, d, seed)
	if spec.Generate == nil {
		for _, p := range o.Inputs() {
			if p.DType == op.I32 {
				return nil, fmt.Errorf("oracle: %s's input %s is i32, and the op has no generator to keep it in its domain; give its Spec a Generate", o.Name, p.Name)
			}
		}
		return g.Default(), nil
	}
	var inputs []Input
	err := protect(fmt.Sprintf("oracle: %s's Generate at %s %s", o.Name, s, d), func() error {
		inputs = spec.Generate(g)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := checkInputs(o, s, inputs); err != nil {
		return nil, fmt.Errorf("oracle: %s's Generate at %s %s: %w", o.Name, s, d, err)
	}
	return inputs, nil
}

// checkInputs checks that inputs are o's inputs at s: one per input, each
// in the field of its type, with its element count.
func checkInputs(o *op.Op, s op.Shape, inputs []Input) error {
	ins := o.Inputs()
	if len(inputs) != len(ins) {
		return fmt.Errorf("%d inputs, want %d (%s)", len(inputs), len(ins), operandNames(ins))
	}
	for i, in := range inputs {
		p := ins[i]
		if (p.DType == op.I32) != (in.I32 != nil) || (p.DType == op.F16) != (in.F16 != nil) || (p.DType == op.F32) != (in.F32 != nil) {
			return fmt.Errorf("input %s is %s; pass its elements in the Input field of that type, and only there", p.Name, p.DType)
		}
		if want := s.Elements(p); int64(in.Len()) != want {
			return fmt.Errorf("%s has %d elements, want %s = %d at %s", p.Name, in.Len(), o.SizeText(p), want, s)
		}
	}
	return nil
}

func operandNames(ps []op.Operand) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// Compute runs the reference of o at shape s on inputs (op.Inputs(), in
// order) and returns one Reference per output (op.Outputs(), in order),
// with bounds for a backend whose kernels compute as arith says (the zero
// Arithmetic claims nothing). It uses every core and stops early when ctx
// is done.
func Compute(ctx context.Context, o *op.Op, s op.Shape, inputs []Input, arith Arithmetic) ([]*Reference, error) {
	if err := o.Validate(s); err != nil {
		return nil, err
	}
	s, _ = o.Shape(s.Dims, s.Settings...)
	spec, err := specOf(o)
	if err != nil {
		return nil, err
	}
	if err := checkInputs(o, s, inputs); err != nil {
		return nil, fmt.Errorf("oracle: %s: %w", o.Name, err)
	}
	var refs []*Reference
	err = protect(fmt.Sprintf("oracle: %s's reference at %s", o.Name, s), func() (err error) {
		refs, err = spec.Compute(ctx, s, inputs, arith)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := checkReferences(o, s, refs); err != nil {
		return nil, fmt.Errorf("oracle: %s's reference at %s: %w", o.Name, s, err)
	}
	return refs, nil
}

// checkReferences checks that refs can be compared with o's outputs at s:
// one per output, Value, Bound (and Typical, when set) each with the
// output's element count, and no finite value's bound NaN or negative,
// which no error could be compared with (a NaN or infinite value is
// matched exactly, whatever its bound).
func checkReferences(o *op.Op, s op.Shape, refs []*Reference) error {
	outs := o.Outputs()
	if len(refs) != len(outs) {
		return fmt.Errorf("%d outputs, want %d (%s)", len(refs), len(outs), operandNames(outs))
	}
	for k, ref := range refs {
		p := outs[k]
		n := s.Elements(p)
		switch {
		case ref == nil:
			return fmt.Errorf("output %s has a nil Reference", p.Name)
		case int64(len(ref.Value)) != n || int64(len(ref.Bound)) != n:
			return fmt.Errorf("output %s has %d values and %d bounds, want %d of each", p.Name, len(ref.Value), len(ref.Bound), n)
		case ref.Typical != nil && int64(len(ref.Typical)) != n:
			return fmt.Errorf("output %s has %d typical errors, want %d (or none)", p.Name, len(ref.Typical), n)
		}
		bad := make([]int, (len(ref.Bound)+ChunkSize-1)/ChunkSize)
		ForChunks(len(ref.Bound), func(c, lo, hi int) {
			bad[c] = -1
			for i := lo; i < hi; i++ {
				if v, b := ref.Value[i], ref.Bound[i]; !(b >= 0) && !math.IsNaN(v) && !math.IsInf(v, 0) {
					bad[c] = i
					return
				}
			}
		})
		for _, i := range bad {
			if i >= 0 {
				return fmt.Errorf("output %s's bound at element %d (value %v) is %v; the bound of a finite value must be a number ≥ 0", p.Name, i, ref.Value[i], ref.Bound[i])
			}
		}
	}
	return nil
}

// inputIndex is the position of the operand called name among o's inputs.
func inputIndex(o *op.Op, name string) int {
	for i, p := range o.Inputs() {
		if p.Name == name {
			return i
		}
	}
	panic(fmt.Sprintf("oracle: %s has no input %s", o.Name, name))
}

// Factors returns the two matrices whose product a matmul-family op
// computes, as views of its inputs: X rows × depth and Y depth × cols, each
// transposed where the op reads its operand so (op.MatmulSpec). o must be
// a matmul-family op and inputs must fit s.
func Factors(o *op.Op, s op.Shape, inputs []Input) (x, y Matrix) {
	m := o.Matmul
	rows, cols, depth := int(s.Int(m.Rows)), int(s.Int(m.Cols)), int(s.Int(m.Depth))
	return Matrix{inputs[inputIndex(o, m.L)].F16, rows, depth, m.TransL},
		Matrix{inputs[inputIndex(o, m.R)].F16, depth, cols, m.TransR}
}

// ParallelRows runs fn over [0, rows) in contiguous chunks on every core,
// costPerRow being about the operations a row takes, and returns ctx's
// error if it was done before every row was: the loop of a reference.
// Chunks are small enough to balance load and large enough to amortise the
// goroutine; fn must write only its own rows.
func ParallelRows(ctx context.Context, rows, costPerRow int, fn func(lo, hi int)) error {
	return parallelRows(ctx, rows, costPerRow, fn)
}

// parallelRows runs fn over [0, rows) in contiguous chunks on every core.
// Chunks are small enough to balance load and large enough to amortise the
// goroutine; fn must write only its own rows.
func parallelRows(ctx context.Context, rows, costPerRow int, fn func(lo, hi int)) error {
	workers := runtime.GOMAXPROCS(0)
	// Aim for ~4 chunks per worker, each worth at least ~64k operations.
	chunk := max(1, rows/(4*workers), 65536/max(1, costPerRow))
	chunk = min(chunk, max(1, (rows+workers-1)/workers))
	next := make(chan int, (rows+chunk-1)/chunk)
	for lo := 0; lo < rows; lo += chunk {
		next <- lo
	}
	close(next)
	var wg sync.WaitGroup
	var panicked sync.Once
	var failure error
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A panic in fn (a reference's bug, perhaps a program's
			// own) becomes the loop's error rather than the process's end.
			defer func() {
				if r := recover(); r != nil {
					panicked.Do(func() { failure = fmt.Errorf("a reference's loop panicked: %v", r) })
				}
			}()
			for lo := range next {
				if ctx.Err() != nil {
					return
				}
				fn(lo, min(lo+chunk, rows))
			}
		}()
	}
	wg.Wait()
	if failure != nil {
		return failure
	}
	return ctx.Err()
}
