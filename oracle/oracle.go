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
// zero, or compute exp with more than a few ulps of error (see Softmax).
package oracle

import (
	"context"
	"fmt"
	"math"
	"runtime"
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
// patterns of an F16 operand, I32 the values of an I32 operand (labels). The
// other field is nil.
type Input struct {
	F16 []uint16
	I32 []int32
}

// Len is the operand's element count.
func (in Input) Len() int { return len(in.F16) + len(in.I32) }

// Compute runs the reference of o at shape s on inputs (in wire order) and
// returns one Reference per output of o, in wire order, with bounds for a
// backend whose kernels compute as arith says (the zero Arithmetic claims
// nothing). It uses every core and stops early when ctx is done.
func Compute(ctx context.Context, o *op.Op, s op.Shape, inputs []Input, arith Arithmetic) ([]*Reference, error) {
	if err := o.Validate(s); err != nil {
		return nil, err
	}
	if len(inputs) != len(o.Inputs) {
		return nil, fmt.Errorf("oracle: %s takes %d inputs, got %d", o.Name, len(o.Inputs), len(inputs))
	}
	lengths := make([]int64, 0, len(inputs)+len(o.Outputs))
	for i, in := range inputs {
		p := o.Inputs[i]
		if (p.DType == op.I32) != (in.I32 != nil) || (p.DType == op.F16) != (in.F16 != nil) {
			return nil, fmt.Errorf("oracle: %s input %s is %s; pass its elements in the Input field of that type", o.Name, p.Name, p.DType)
		}
		lengths = append(lengths, int64(in.Len()))
	}
	for _, p := range o.Outputs {
		lengths = append(lengths, s.Elements(p))
	}
	if err := o.CheckLengths(s, lengths); err != nil {
		return nil, fmt.Errorf("oracle: %w", err)
	}
	one := func(ref *Reference, err error) ([]*Reference, error) {
		if err != nil {
			return nil, err
		}
		return []*Reference{ref}, nil
	}
	switch o.ID {
	case op.Gemm, op.GemmGradA, op.GemmGradB:
		x, y := Factors(o, s, inputs)
		return one(MatMul(ctx, x, y, arith.Dot))
	case op.Softmax:
		return one(SoftmaxRows(ctx, inputs[0].F16, int(s.Dims[0]), int(s.Dims[1])))
	case op.SoftmaxGrad:
		return one(SoftmaxGradRows(ctx, inputs[0].F16, inputs[1].F16, int(s.Dims[0]), int(s.Dims[1])))
	case op.CrossEntropy:
		ignore, _ := s.Setting(op.IgnoreIndex)
		loss, grad, err := CrossEntropyRows(ctx, inputs[0].F16, inputs[1].I32, int(s.Dims[0]), int(s.Dims[1]), ignore)
		if err != nil {
			return nil, err
		}
		return []*Reference{loss, grad}, nil
	}
	return nil, fmt.Errorf("oracle: no reference for op %s", o.Name)
}

// Factors returns the two matrices whose product a GEMM op computes, as
// views of its inputs: C = A·B; dA = dC·Bᵀ (B stored K×N); dB = Aᵀ·dC (A
// stored M×K). o must be a MatMul op and inputs must fit s.
func Factors(o *op.Op, s op.Shape, inputs []Input) (x, y Matrix) {
	m, n, k := int(s.Dims[0]), int(s.Dims[1]), int(s.Dims[2])
	switch o.ID {
	case op.GemmGradA:
		return Matrix{inputs[0].F16, m, n, false}, Matrix{inputs[1].F16, n, k, true}
	case op.GemmGradB:
		return Matrix{inputs[0].F16, k, m, true}, Matrix{inputs[1].F16, m, n, false}
	}
	return Matrix{inputs[0].F16, m, k, false}, Matrix{inputs[1].F16, k, n, false}
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
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lo := range next {
				if ctx.Err() != nil {
					return
				}
				fn(lo, min(lo+chunk, rows))
			}
		}()
	}
	wg.Wait()
	return ctx.Err()
}
