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
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// ID is an op's number on the kernel-server wire (PROTOCOL.md, "RUN").
type ID uint32

// The ops. The numbering is part of the protocol.
const (
	Gemm         ID = 1 // C f32 M×N = A f16 M×K · B f16 K×N
	GemmGradA    ID = 2 // dA f16 M×K = dC f16 M×N · Bᵀ (B f16 K×N)
	GemmGradB    ID = 3 // dB f16 K×N = Aᵀ (A f16 M×K) · dC f16 M×N
	Softmax      ID = 4 // Y f16 R×C, row-wise softmax of X f16 R×C
	SoftmaxGrad  ID = 5 // dX f16 R×C = Y ⊙ (dY − Σ dY⊙Y) per row
	CrossEntropy ID = 6 // loss f32 R and dLogits f16 R×V from logits f16 R×V and labels i32 R
)

// DType is an element type.
type DType uint8

const (
	F16 DType = iota + 1 // IEEE binary16
	F32                  // IEEE binary32
	I32                  // two's-complement 32-bit integer (class labels)
)

// Size is the element size in bytes.
func (d DType) Size() int {
	if d == F16 {
		return 2
	}
	return 4
}

func (d DType) String() string {
	switch d {
	case F16:
		return "f16"
	case F32:
		return "f32"
	case I32:
		return "i32"
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
// indices into Shape.Dims, or One.
type Operand struct {
	Name  string
	DType DType
	Rows  int // index into Shape.Dims
	Cols  int // index into Shape.Dims, or One for a vector of Rows elements
}

// One, as an Operand's Cols, is a dimension of size 1: the operand is a
// vector with one element per row.
const One = -1

// Value describes a RUN parameter that is not a dimension: it follows the
// dimensions on the wire, may be negative, and may be left unset. A shape
// sets it by name after a colon: "8192x50304:ignore_index=-100".
type Value struct {
	Name     string // as written in a shape
	Min, Max int64  // the range a set value must lie in
	Meaning  string // one line a person reads
}

// Unset is the wire value of a Value parameter that the shape does not set.
// It lies outside every Value's range.
const Unset int64 = math.MinInt64

// Op describes one operation.
type Op struct {
	ID      ID
	Name    string
	Kind    Kind
	Math    string   // one line a person reads
	Dims    []string // the dimensions' names, in shape and wire order
	Values  []Value  // value parameters, after the dimensions on the wire
	Inputs  []Operand
	Outputs []Operand // in wire order, after the inputs
	Reduces int       // index into Shape.Dims of the reduction length; -1 for none
	// ExactOnIntegers says that on small integer inputs every f32
	// intermediate is exact, so the output must match the reference bit for
	// bit (the "integer" distribution is then an exact check, not a bounded
	// one).
	ExactOnIntegers bool
	// NoExactRounding, when set, says why no input makes this op's results
	// exact values that its f16 outputs must round (verify's "rounding"
	// distribution), so that the report can say so; empty when such inputs
	// exist.
	NoExactRounding string
	// NonClaims are what verifying this op does not show.
	NonClaims []string
}

// Dimension indices for MatMul and RowWise shapes.
const (
	dimM, dimN, dimK = 0, 1, 2
	dimR, dimC       = 0, 1
)

var (
	matMulDims  = []string{"M", "N", "K"}
	rowWiseDims = []string{"R", "C"}
)

// IgnoreIndex is cross_entropy's value parameter: the label that marks a row
// to skip. Labels are 32-bit, so a set value is a 32-bit integer.
const IgnoreIndex = "ignore_index"

var all = []*Op{
	{
		ID: Gemm, Name: "gemm", Kind: MatMul, Math: "C = A·B, f32 accumulation, f32 output", Dims: matMulDims,
		Inputs:          []Operand{{"A", F16, dimM, dimK}, {"B", F16, dimK, dimN}},
		Outputs:         []Operand{{"C", F32, dimM, dimN}},
		Reduces:         dimK,
		ExactOnIntegers: true,
	},
	{
		ID: GemmGradA, Name: "gemm_grad_a", Kind: MatMul, Math: "dA = dC·Bᵀ, f32 accumulation, one rounding to f16", Dims: matMulDims,
		Inputs:          []Operand{{"dC", F16, dimM, dimN}, {"B", F16, dimK, dimN}},
		Outputs:         []Operand{{"dA", F16, dimM, dimK}},
		Reduces:         dimN,
		ExactOnIntegers: true,
	},
	{
		ID: GemmGradB, Name: "gemm_grad_b", Kind: MatMul, Math: "dB = Aᵀ·dC, f32 accumulation, one rounding to f16", Dims: matMulDims,
		Inputs:          []Operand{{"A", F16, dimM, dimK}, {"dC", F16, dimM, dimN}},
		Outputs:         []Operand{{"dB", F16, dimK, dimN}},
		Reduces:         dimM,
		ExactOnIntegers: true,
	},
	{
		ID: Softmax, Name: "softmax", Kind: RowWise, Math: "Y[r] = exp(X[r] − max X[r]) / Σ exp(X[r] − max X[r])", Dims: rowWiseDims,
		Inputs:          []Operand{{"X", F16, dimR, dimC}},
		Outputs:         []Operand{{"Y", F16, dimR, dimC}},
		Reduces:         dimC,
		NoExactRounding: "exp is not exact, so no input gives softmax exact results to round; its rounding is checked by the bias statistic only",
		NonClaims: []string{
			"softmax is never checked bit for bit: exp is not exact, so integer inputs are checked under the error bound like the others",
		},
	},
	{
		ID: SoftmaxGrad, Name: "softmax_grad", Kind: RowWise, Math: "dX[r] = Y[r] ⊙ (dY[r] − Σ dY[r]⊙Y[r])", Dims: rowWiseDims,
		Inputs:          []Operand{{"dY", F16, dimR, dimC}, {"Y", F16, dimR, dimC}},
		Outputs:         []Operand{{"dX", F16, dimR, dimC}},
		Reduces:         dimC,
		ExactOnIntegers: true,
		NonClaims: []string{
			"softmax_grad is checked for any Y, not only for rows that are softmax outputs: nothing is claimed about how errors in Y itself propagate",
		},
	},
	{
		// PyTorch's F.cross_entropy(logits, labels, reduction='mean',
		// ignore_index=…) and its backward, fused. loss holds each row's
		// loss unscaled; the mean is Σ loss / n. Rows whose label is the
		// ignore_index get loss 0 and a zero gradient row, and their logits
		// are not read; when every row is ignored (n = 0) the whole gradient
		// is 0 (no NaN). A label outside [0, V) that is not the ignore_index
		// is an INVALID_ARGUMENT error naming the row (PROTOCOL.md).
		ID: CrossEntropy, Name: "cross_entropy", Kind: RowWise, Dims: []string{"R", "V"},
		Math: "loss[r] = logsumexp(x[r]) − x[r, label[r]]; dLogits[r] = (softmax(x[r]) − onehot(label[r]))/n, n = rows not ignored",
		Values: []Value{{Name: IgnoreIndex, Min: math.MinInt32, Max: math.MaxInt32,
			Meaning: "rows whose label equals it are skipped: loss 0, gradient 0, not counted in n"}},
		Inputs:          []Operand{{"logits", F16, dimR, dimC}, {"labels", I32, dimR, One}},
		Outputs:         []Operand{{"loss", F32, dimR, One}, {"dLogits", F16, dimR, dimC}},
		Reduces:         dimC,
		NoExactRounding: "exp and log are not exact, so no input gives cross_entropy exact results to round; its rounding is checked by the bias statistic only",
		NonClaims: []string{
			"cross_entropy is never checked bit for bit: exp and log are not exact, so integer inputs are checked under the error bound like the others",
			"cross_entropy is verified on valid labels only; the error for a label outside [0, V) is shown by the test suite through the real server, not by vkern verify",
			"cross_entropy's labels follow one pattern (uniform, the first and last class at fixed rows, every 4th row ignored when an ignore_index is set); other patterns, such as every row ignored, are shown by the test suite, not by vkern verify",
			"cross_entropy's loss is checked per row; the mean PyTorch returns, Σ loss / n, is left to the caller",
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
	syntax := "ROWSxCOLS"
	if o.Kind == MatMul {
		syntax = "MxNxK"
	}
	for _, v := range o.Values {
		syntax += "[:" + v.Name + "=N]"
	}
	return syntax
}

func (o *Op) rank() int { return len(o.Dims) }

// Shape is an op's problem: its dimensions, (M, N, K) for MatMul ops and
// (R, C) for RowWise ones, and the value parameters it sets.
type Shape struct {
	Dims []int64
	// Settings are the op's value parameters (Op.Values) that are set, in
	// the op's order; the others are Unset.
	Settings []Setting
}

// Setting is a value parameter set in a shape.
type Setting struct {
	Name  string
	Value int64
}

// String writes the shape in the CLI's syntax: "17x31x129", or
// "8192x50304:ignore_index=-100" with settings.
func (s Shape) String() string {
	parts := make([]string, len(s.Dims))
	for i, d := range s.Dims {
		parts[i] = strconv.FormatInt(d, 10)
	}
	text := strings.Join(parts, "x")
	for i, set := range s.Settings {
		sep := ","
		if i == 0 {
			sep = ":"
		}
		text += sep + set.Name + "=" + strconv.FormatInt(set.Value, 10)
	}
	return text
}

// Setting returns the value of the parameter called name, and whether the
// shape sets it.
func (s Shape) Setting(name string) (int64, bool) {
	for _, set := range s.Settings {
		if set.Name == name {
			return set.Value, true
		}
	}
	return Unset, false
}

// maxElements caps every operand at 2⁶² elements, so that element counts,
// byte counts (×4) and the index arithmetic of every backend stay inside int64.
const maxElements = int64(1) << 62

// ParseShape reads S in this op's syntax and checks it with Validate.
// Settings may be written in any order; the shape holds them in the op's.
func (o *Op) ParseShape(s string) (Shape, error) {
	dimText, settingText, hasSettings := strings.Cut(strings.TrimSpace(s), ":")
	fields := strings.Split(dimText, "x")
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
	if hasSettings {
		given := map[string]int64{}
		for _, field := range strings.Split(settingText, ",") {
			name, text, ok := strings.Cut(strings.TrimSpace(field), "=")
			v, err := strconv.ParseInt(text, 10, 64)
			if !ok || err != nil {
				return Shape{}, fmt.Errorf("%s: shape %q: setting %q is not NAME=WHOLE_NUMBER; write %s (for example %s)",
					o.Name, s, field, o.ShapeSyntax(), o.exampleShape())
			}
			if _, dup := given[name]; dup {
				return Shape{}, fmt.Errorf("%s: shape %q sets %s twice; set it once", o.Name, s, name)
			}
			given[name] = v
			if o.value(name) == nil {
				return Shape{}, o.unknownSetting(strings.TrimSpace(s), name)
			}
		}
		for _, v := range o.Values {
			if value, ok := given[v.Name]; ok {
				sh.Settings = append(sh.Settings, Setting{v.Name, value})
			}
		}
	}
	if err := o.Validate(sh); err != nil {
		return Shape{}, err
	}
	return sh, nil
}

func (o *Op) value(name string) *Value {
	for i := range o.Values {
		if o.Values[i].Name == name {
			return &o.Values[i]
		}
	}
	return nil
}

// unknownSetting is the error for a shape (written as text) that sets name,
// which o does not take.
func (o *Op) unknownSetting(text, name string) error {
	if len(o.Values) == 0 {
		return fmt.Errorf("%s: shape %s sets %s, but %s takes no value parameters; write %s", o.Name, text, name, o.Name, o.ShapeSyntax())
	}
	names := make([]string, len(o.Values))
	for i, v := range o.Values {
		names[i] = v.Name
	}
	return fmt.Errorf("%s: shape %s sets %s, which %s does not take (it takes %s)", o.Name, text, name, o.Name, strings.Join(names, ", "))
}

func (o *Op) exampleShape() string {
	switch {
	case o.Kind == MatMul:
		return "17x31x129"
	case len(o.Values) > 0:
		return "7x4099:" + o.Values[0].Name + "=-100"
	}
	return "7x4099"
}

// dimName names dimension i of o's shapes, or "1" for One.
func (o *Op) dimName(i int) string {
	if i == One {
		return "1"
	}
	return o.Dims[i]
}

// Validate checks the contract: the right number of dimensions, each ≥ 1,
// every operand's element count (and byte count) representable in int64,
// and every setting one of the op's value parameters, within its range.
func (o *Op) Validate(s Shape) error {
	if len(s.Dims) != o.rank() {
		return fmt.Errorf("%s: shape %s has %d dimensions, want %d (%s)", o.Name, s, len(s.Dims), o.rank(), o.ShapeSyntax())
	}
	for i, d := range s.Dims {
		if d < 1 {
			return fmt.Errorf("%s: %s = %d in shape %s; every dimension must be at least 1", o.Name, o.Dims[i], d, s)
		}
	}
	for _, operand := range o.Operands() {
		r, c := s.Dims[operand.Rows], s.dim(operand.Cols)
		hi, lo := bits.Mul64(uint64(r), uint64(c))
		if hi != 0 || lo > uint64(maxElements) {
			return fmt.Errorf("%s: operand %s is %s×%s = %d×%d elements, more than the 2^62 limit; use a smaller shape",
				o.Name, operand.Name, o.dimName(operand.Rows), o.dimName(operand.Cols), r, c)
		}
	}
	seen := map[string]bool{}
	for _, set := range s.Settings {
		v := o.value(set.Name)
		if v == nil {
			return o.unknownSetting(s.String(), set.Name)
		}
		if seen[set.Name] {
			return fmt.Errorf("%s: shape %s sets %s twice; set it once", o.Name, s, set.Name)
		}
		seen[set.Name] = true
		if set.Value < v.Min || set.Value > v.Max {
			return fmt.Errorf("%s: %s = %d in shape %s; want a value in [%d, %d]", o.Name, set.Name, set.Value, s, v.Min, v.Max)
		}
	}
	return nil
}

// Operands returns the inputs then the outputs, in wire order.
func (o *Op) Operands() []Operand {
	return append(append([]Operand(nil), o.Inputs...), o.Outputs...)
}

// dim is dimension i, or 1 for One.
func (s Shape) dim(i int) int64 {
	if i == One {
		return 1
	}
	return s.Dims[i]
}

// Elements is the element count of operand p at shape s (s must be valid).
func (s Shape) Elements(p Operand) int64 { return s.Dims[p.Rows] * s.dim(p.Cols) }

// Cols is the row length of operand p at shape s: 1 for a vector.
func (s Shape) Cols(p Operand) int64 { return s.dim(p.Cols) }

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

// MovedBytes is the minimum traffic: every input read once, every output
// written once.
func (o *Op) MovedBytes(s Shape) int64 {
	var n int64
	for _, p := range o.Operands() {
		n += s.Bytes(p)
	}
	return n
}

// CheckLengths checks that each buffer has the element count the shape
// requires. lengths are in wire order (inputs, then outputs).
func (o *Op) CheckLengths(s Shape, lengths []int64) error {
	ops := o.Operands()
	if len(lengths) != len(ops) {
		return fmt.Errorf("%s: got %d buffers, want %d (%s)", o.Name, len(lengths), len(ops), o.operandList())
	}
	for i, p := range ops {
		if want := s.Elements(p); lengths[i] != want {
			if p.Cols == One {
				return fmt.Errorf("%s: %s has %d elements, want %s = %d", o.Name, p.Name, lengths[i], o.Dims[p.Rows], want)
			}
			return fmt.Errorf("%s: %s has %d elements, want %s·%s = %d (%s=%d, %s=%d)",
				o.Name, p.Name, lengths[i], o.Dims[p.Rows], o.Dims[p.Cols], want,
				o.Dims[p.Rows], s.Dims[p.Rows], o.Dims[p.Cols], s.Dims[p.Cols])
		}
	}
	return nil
}

func (o *Op) operandList() string {
	var parts []string
	for _, p := range o.Operands() {
		if p.Cols == One {
			parts = append(parts, fmt.Sprintf("%s %s %s", p.Name, p.DType, o.Dims[p.Rows]))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s %s×%s", p.Name, p.DType, o.Dims[p.Rows], o.Dims[p.Cols]))
	}
	return strings.Join(parts, ", ")
}

// Params are the RUN parameters of s on the wire: the dimensions, then each
// of the op's value parameters, Unset where s does not set it.
func (o *Op) Params(s Shape) []int64 {
	params := append([]int64(nil), s.Dims...)
	for _, v := range o.Values {
		value, _ := s.Setting(v.Name)
		params = append(params, value)
	}
	return params
}
