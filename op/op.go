// Package op is the registry of vkern's operations: each op's name, wire id,
// shape contract, operands and element types, and the things vkern does not
// claim about it.
//
// It holds no arithmetic: the references and their error bounds live in
// package oracle, the kernels in kernels/. Everything here is about whether a
// call is well formed, and every error names the op, the values and what was
// wanted, so a caller can fix the call without reading this code.
package op

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// ID is an op's number on the kernel-server wire (PROTOCOL.md, "RUN").
type ID uint32

// The five ops of the seed system. The numbering is part of the protocol.
const (
	Gemm        ID = 1 // C f32 M×N = A f16 M×K · B f16 K×N
	GemmGradA   ID = 2 // dA f16 M×K = dC f16 M×N · Bᵀ (B f16 K×N)
	GemmGradB   ID = 3 // dB f16 K×N = Aᵀ (A f16 M×K) · dC f16 M×N
	Softmax     ID = 4 // Y f16 R×C, row-wise softmax of X f16 R×C
	SoftmaxGrad ID = 5 // dX f16 R×C = Y ⊙ (dY − Σ dY⊙Y) per row
)

// DType is an element type.
type DType uint8

const (
	F16 DType = iota + 1 // IEEE binary16
	F32                  // IEEE binary32
)

// Size is the element size in bytes.
func (d DType) Size() int {
	if d == F32 {
		return 4
	}
	return 2
}

func (d DType) String() string {
	switch d {
	case F16:
		return "f16"
	case F32:
		return "f32"
	}
	return "dtype(" + strconv.Itoa(int(d)) + ")"
}

// Kind says how an op's shape is written and how many dimensions it has.
type Kind uint8

const (
	// MatMul shapes are written MxNxK: the product is M×N with reduction K.
	MatMul Kind = iota + 1
	// RowWise shapes are written ROWSxCOLS: the op works on each row alone.
	RowWise
)

// Operand names one buffer of an op and the dimensions of its matrix, as
// indices into Shape.Dims.
type Operand struct {
	Name  string
	DType DType
	Rows  int // index into Shape.Dims
	Cols  int // index into Shape.Dims
}

// Op describes one operation.
type Op struct {
	ID      ID
	Name    string
	Kind    Kind
	Math    string    // one line a person reads
	Inputs  []Operand // in wire order
	Output  Operand
	Reduces int // index into Shape.Dims of the reduction length; -1 for none
	// ExactOnIntegers says that on small integer inputs every f32
	// intermediate is exact, so the output must match the reference bit for
	// bit (the "integer" distribution is then an exact check, not a bounded
	// one).
	ExactOnIntegers bool
	// NonClaims are what verifying this op does not show.
	NonClaims []string
}

// Dimension indices for MatMul and RowWise shapes.
const (
	dimM, dimN, dimK = 0, 1, 2
	dimR, dimC       = 0, 1
)

var all = []*Op{
	{
		ID: Gemm, Name: "gemm", Kind: MatMul, Math: "C = A·B, f32 accumulation, f32 output",
		Inputs:          []Operand{{"A", F16, dimM, dimK}, {"B", F16, dimK, dimN}},
		Output:          Operand{"C", F32, dimM, dimN},
		Reduces:         dimK,
		ExactOnIntegers: true,
	},
	{
		ID: GemmGradA, Name: "gemm_grad_a", Kind: MatMul, Math: "dA = dC·Bᵀ, f32 accumulation, one rounding to f16",
		Inputs:          []Operand{{"dC", F16, dimM, dimN}, {"B", F16, dimK, dimN}},
		Output:          Operand{"dA", F16, dimM, dimK},
		Reduces:         dimN,
		ExactOnIntegers: true,
	},
	{
		ID: GemmGradB, Name: "gemm_grad_b", Kind: MatMul, Math: "dB = Aᵀ·dC, f32 accumulation, one rounding to f16",
		Inputs:          []Operand{{"A", F16, dimM, dimK}, {"dC", F16, dimM, dimN}},
		Output:          Operand{"dB", F16, dimK, dimN},
		Reduces:         dimM,
		ExactOnIntegers: true,
	},
	{
		ID: Softmax, Name: "softmax", Kind: RowWise, Math: "Y[r] = exp(X[r] − max X[r]) / Σ exp(X[r] − max X[r])",
		Inputs:  []Operand{{"X", F16, dimR, dimC}},
		Output:  Operand{"Y", F16, dimR, dimC},
		Reduces: dimC,
		NonClaims: []string{
			"softmax is never checked bit for bit: exp is not exact, so integer inputs are checked under the error bound like the others",
		},
	},
	{
		ID: SoftmaxGrad, Name: "softmax_grad", Kind: RowWise, Math: "dX[r] = Y[r] ⊙ (dY[r] − Σ dY[r]⊙Y[r])",
		Inputs:          []Operand{{"dY", F16, dimR, dimC}, {"Y", F16, dimR, dimC}},
		Output:          Operand{"dX", F16, dimR, dimC},
		Reduces:         dimC,
		ExactOnIntegers: true,
		NonClaims: []string{
			"softmax_grad is checked for any Y, not only for rows that are softmax outputs: nothing is claimed about how errors in Y itself propagate",
		},
	},
}

// All returns the ops in wire-id order.
func All() []*Op { return append([]*Op(nil), all...) }

// Names returns the op names in wire-id order.
func Names() []string {
	names := make([]string, len(all))
	for i, o := range all {
		names[i] = o.Name
	}
	return names
}

// Lookup finds an op by name.
func Lookup(name string) (*Op, error) {
	for _, o := range all {
		if o.Name == name {
			return o, nil
		}
	}
	return nil, fmt.Errorf("unknown op %q: want one of %s", name, strings.Join(Names(), ", "))
}

// ByID finds an op by wire id.
func ByID(id ID) (*Op, error) {
	for _, o := range all {
		if o.ID == id {
			return o, nil
		}
	}
	return nil, fmt.Errorf("unknown op id %d: want 1..%d", id, len(all))
}

func (o *Op) String() string { return o.Name }

// ShapeSyntax is how this op's shapes are written.
func (o *Op) ShapeSyntax() string {
	if o.Kind == MatMul {
		return "MxNxK"
	}
	return "ROWSxCOLS"
}

func (o *Op) rank() int {
	if o.Kind == MatMul {
		return 3
	}
	return 2
}

// Shape is an op's problem size: (M, N, K) for MatMul ops, (R, C) for RowWise.
type Shape struct {
	Dims []int64
}

// String writes the shape in the CLI's syntax, "17x31x129".
func (s Shape) String() string {
	parts := make([]string, len(s.Dims))
	for i, d := range s.Dims {
		parts[i] = strconv.FormatInt(d, 10)
	}
	return strings.Join(parts, "x")
}

// maxElements caps every operand at 2⁶² elements, so that element counts,
// byte counts (×4) and the index arithmetic of every backend stay inside int64.
const maxElements = int64(1) << 62

// ParseShape reads S in this op's syntax and checks it with Validate.
func (o *Op) ParseShape(s string) (Shape, error) {
	fields := strings.Split(strings.TrimSpace(s), "x")
	if len(fields) != o.rank() {
		return Shape{}, fmt.Errorf("%s: shape %q has %d dimensions, want %d dimensions written %s (for example %s)",
			o.Name, s, len(fields), o.rank(), o.ShapeSyntax(), o.exampleShape())
	}
	dims := make([]int64, len(fields))
	for i, f := range fields {
		d, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return Shape{}, fmt.Errorf("%s: shape %q: dimension %q is not a whole number; write %s (for example %s)",
				o.Name, s, f, o.ShapeSyntax(), o.exampleShape())
		}
		dims[i] = d
	}
	sh := Shape{Dims: dims}
	if err := o.Validate(sh); err != nil {
		return Shape{}, err
	}
	return sh, nil
}

func (o *Op) exampleShape() string {
	if o.Kind == MatMul {
		return "17x31x129"
	}
	return "7x4099"
}

func (o *Op) dimNames() []string {
	if o.Kind == MatMul {
		return []string{"M", "N", "K"}
	}
	return []string{"R", "C"}
}

// Validate checks the contract: the right number of dimensions, each ≥ 1, and
// every operand's element count (and byte count) representable in int64.
func (o *Op) Validate(s Shape) error {
	if len(s.Dims) != o.rank() {
		return fmt.Errorf("%s: shape %s has %d dimensions, want %d (%s)", o.Name, s, len(s.Dims), o.rank(), o.ShapeSyntax())
	}
	names := o.dimNames()
	for i, d := range s.Dims {
		if d < 1 {
			return fmt.Errorf("%s: %s = %d in shape %s; every dimension must be at least 1", o.Name, names[i], d, s)
		}
	}
	for _, operand := range o.Operands() {
		r, c := s.Dims[operand.Rows], s.Dims[operand.Cols]
		hi, lo := bits.Mul64(uint64(r), uint64(c))
		if hi != 0 || lo > uint64(maxElements) {
			return fmt.Errorf("%s: operand %s is %s×%s = %d×%d elements, more than the 2^62 limit; use a smaller shape",
				o.Name, operand.Name, names[operand.Rows], names[operand.Cols], r, c)
		}
	}
	return nil
}

// Operands returns the inputs then the output, in wire order.
func (o *Op) Operands() []Operand {
	return append(append([]Operand(nil), o.Inputs...), o.Output)
}

// Elements is the element count of operand p at shape s (s must be valid).
func (s Shape) Elements(p Operand) int64 { return s.Dims[p.Rows] * s.Dims[p.Cols] }

// Bytes is the byte size of operand p at shape s (s must be valid).
func (s Shape) Bytes(p Operand) int64 { return s.Elements(p) * int64(p.DType.Size()) }

// Dim returns dimension i.
func (s Shape) Dim(i int) int64 { return s.Dims[i] }

// ReductionLength is the length of each dot product or row sum.
func (o *Op) ReductionLength(s Shape) int64 { return s.Dims[o.Reduces] }

// Flops is the conventional floating-point operation count: 2·M·N·K for the
// GEMMs, and a nominal 5 per element for the row ops (used only for labels).
func (o *Op) Flops(s Shape) float64 {
	if o.Kind == MatMul {
		return 2 * float64(s.Dims[0]) * float64(s.Dims[1]) * float64(s.Dims[2])
	}
	return 5 * float64(s.Dims[0]) * float64(s.Dims[1])
}

// MovedBytes is the minimum traffic: every input read once, the output
// written once.
func (o *Op) MovedBytes(s Shape) int64 {
	var n int64
	for _, p := range o.Operands() {
		n += s.Bytes(p)
	}
	return n
}

// CheckLengths checks that each buffer has the element count the shape
// requires. lengths are in wire order (inputs, then output).
func (o *Op) CheckLengths(s Shape, lengths []int64) error {
	ops := o.Operands()
	if len(lengths) != len(ops) {
		return fmt.Errorf("%s: got %d buffers, want %d (%s)", o.Name, len(lengths), len(ops), o.operandList())
	}
	names := o.dimNames()
	for i, p := range ops {
		if want := s.Elements(p); lengths[i] != want {
			return fmt.Errorf("%s: %s has %d elements, want %s·%s = %d (%s=%d, %s=%d)",
				o.Name, p.Name, lengths[i], names[p.Rows], names[p.Cols], want,
				names[p.Rows], s.Dims[p.Rows], names[p.Cols], s.Dims[p.Cols])
		}
	}
	return nil
}

func (o *Op) operandList() string {
	var parts []string
	names := o.dimNames()
	for _, p := range o.Operands() {
		parts = append(parts, fmt.Sprintf("%s %s %s×%s", p.Name, p.DType, names[p.Rows], names[p.Cols]))
	}
	return strings.Join(parts, ", ")
}

// Params are the RUN parameters on the wire: the shape's dimensions.
func (s Shape) Params() []int64 { return append([]int64(nil), s.Dims...) }
