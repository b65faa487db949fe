// Package op is the registry of vkern's operations: each op's contract, from
// which everything else follows. A contract names the op's dimensions, its
// parameters (whole numbers, labels and real numbers, each with its range),
// its operands (element type, a symbolic shape over the dimensions, and
// whether the op reads, writes or adds into it), the shapes it is checked
// and timed at, and what verifying it does not show.
//
// The shape syntax, the kernel server's table and checks (kernels.OpTable
// generates them from the contracts), the verifier, the benchmarks and the
// reports all read the contract; none of them names an op.
//
// # Adding an op
//
// An op is one file per layer. add, gelu and gelu_grad are a worked example
// (op/elementwise.go, oracle/elementwise.go, kernels/cpu/elementwise.cc,
// kernels/cuda/elementwise.cu); an op may have a file of its own or share
// one with its family.
//
//  1. The contract, here: a package-level var built with builtinOp(&Op{…})
//     (programs outside vkern call Register). Choose an unused ID (it is
//     the wire id; never reuse one), name the dimensions in shape order,
//     give each parameter its Kind, range and default, and each operand its
//     DType, Rows × Cols as products of dimensions (X("B", "T"),
//     X("C").Times(3)) and its Role: In, Out, or InOut for one the op adds
//     into. An i32 input whose values must lie in a range gets a Domain;
//     the kernels check it while they run. List Shapes: Quick (the
//     conformance suite and --quick), Default (edge cases, deep
//     reductions) and Bench (the sizes of a real model). Say in NonClaims
//     what verifying the op does not show.
//  2. The reference, in package oracle: oracle.Register(op, Spec{Compute,
//     Generate}) in an init function. Compute returns one float64
//     Reference per output (Out and InOut operands, in order) with a
//     per-element Bound on the error of a correct binary32 kernel before
//     its output is rounded to f16; derive the bound in Compute's doc
//     comment, three to ten lines, naming the library calls it allows for
//     (tanhf within so many ulps) and the oracle's own float64 error.
//     Generate draws each distribution's inputs (Gen.Default does so for
//     inputs that take any values) and keeps every operand in its domain:
//     labels in range, a positive variance, statistics consistent with the
//     forward's. Set ExactOnIntegers in the contract where whole-number
//     inputs make every binary32 intermediate exact, and draw Rounding
//     cases where exact results can land between f16 values; otherwise
//     say why not in NoExactRounding.
//  3. The kernels: kernels/cpu/<name>.cc and kernels/cuda/<name>.cu, each
//     defining run_<name>(const Call&, …), reading parameters and buffers
//     by the names the generated table gives them (op_<name>::param::C,
//     op_<name>::buf::x). A file starts with its launch shape and the facts
//     it relies on. The unity files include every kernel file themselves
//     (kernels/<backend>/op_files.inc is generated).
//  4. One line per backend: the entry in kernels/cpu/kernels.cc and
//     kernels/cuda/kernels.cu. A backend without it answers NOT_SUPPORTED
//     for the op, and verify reports not_supported.
//  5. Tests: kerneltest.All holds every registered op to its quick shapes
//     on every backend, with nothing to add; plant at least two defects in
//     each backend's kernel (planted_test.go, cuda_test.go) and see each
//     reported incorrect.
//
// This package holds no arithmetic (references and bounds are in package
// oracle, kernels in kernels/). Everything here is about whether a call is
// well formed, and every error names the op, the values and what was
// wanted, so a caller can fix the call without reading this code.
package op

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// ErrNotSupported is wrapped by the error of a call to an op the backend
// has no kernel for (the server's NOT_SUPPORTED status): verify's
// not_supported verdict, not a failure.
var ErrNotSupported = errors.New("the backend has no kernel for this op")

// ID is an op's number on the kernel-server wire (PROTOCOL.md, "RUN").
type ID uint32

// DType is an element type.
type DType uint8

const (
	F16 DType = iota + 1 // IEEE binary16
	F32                  // IEEE binary32
	I32                  // two's-complement 32-bit integer (labels, token ids)
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

// Dim is a dimension of an op's shapes: a whole number ≥ 1, written in
// order in the shape ("MxNxK") and sent first among the RUN parameters.
type Dim struct {
	Name    string
	Meaning string // one line a person reads
}

// Kind is what a parameter holds.
type Kind uint8

const (
	// Int is a whole number in [Min, Max].
	Int Kind = iota + 1
	// Index is a 32-bit label value compared with an i32 operand's
	// elements (cross_entropy's ignore_index), or unset: no element equals
	// an unset index.
	Index
	// Float is a real number in [Min, Max] (binary64 on the wire).
	Float
)

func (k Kind) String() string {
	switch k {
	case Int:
		return "whole number"
	case Index:
		return "32-bit label value"
	case Float:
		return "real number"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Param is a RUN parameter that is not a dimension. A shape sets it by name
// after a colon ("8192x50304:ignore_index=-100", "8x768:eps=1e-5"); one it
// does not set takes its Default.
type Param struct {
	Name     string
	Kind     Kind
	Min, Max float64 // the range a value must lie in, inclusive
	// Default is the value of a parameter the shape does not set; NaN for
	// an Index means unset, which no label equals.
	Default float64
	Meaning string // one line a person reads
}

// Role says what an op does with an operand.
type Role uint8

const (
	// In is read only.
	In Role = iota + 1
	// Out is written only: every element, whatever it held before.
	Out
	// InOut is read and then written: the op adds into it (a gradient
	// accumulated with +=) or updates it in place (an optimizer's state).
	InOut
)

func (r Role) String() string {
	switch r {
	case In:
		return "input"
	case Out:
		return "output"
	case InOut:
		return "input and output"
	}
	return "role(" + strconv.Itoa(int(r)) + ")"
}

// Extent is the length of one side of an operand: Coef times the product of
// the named dimensions and Int parameters (an Int parameter of 0 makes the
// operand empty: a bias that is switched off needs no buffer). The zero
// Extent is 1.
type Extent struct {
	Coef int64    // 0 means 1
	Of   []string // dimension or Int parameter names
}

// X is the product of the named dimensions or Int parameters; X() is 1,
// the extent of a single element.
func X(names ...string) Extent { return Extent{Coef: 1, Of: names} }

// unset says whether e is the zero Extent, which an operand's Rows must
// not be: an operand always states its shape, X() for a single element.
func (e Extent) unset() bool { return e.Coef == 0 && len(e.Of) == 0 }

// Times multiplies e by k.
func (e Extent) Times(k int64) Extent { return Extent{Coef: e.coef() * k, Of: e.Of} }

func (e Extent) coef() int64 {
	if e.Coef == 0 {
		return 1
	}
	return e.Coef
}

// String writes the extent as in "3·C", "B·T", "1".
func (e Extent) String() string {
	parts := append([]string(nil), e.Of...)
	if c := e.coef(); c != 1 || len(parts) == 0 {
		parts = append([]string{strconv.FormatInt(c, 10)}, parts...)
	}
	return strings.Join(parts, "·")
}

// Operand is one buffer of an op: a Rows × Cols row-major matrix (a vector
// when Cols is 1) of DType elements.
type Operand struct {
	Name       string
	DType      DType
	Rows, Cols Extent
	Role       Role
	// MayAlias names an In operand this Out operand may share its buffer
	// with (an op that works in place); empty for none.
	MayAlias string
	// Domain says what values an input must hold, where not every value is
	// valid ("a class index in [0, V), or ignore_index"); the kernels
	// check it while they run and refuse a call that breaks it.
	Domain string
}

// Reads says whether the op reads the operand.
func (p Operand) Reads() bool { return p.Role == In || p.Role == InOut }

// Writes says whether the op writes the operand.
func (p Operand) Writes() bool { return p.Role == Out || p.Role == InOut }

// Shapes are the shapes an op is checked and timed at by default, written
// in its shape syntax.
type Shapes struct {
	Quick   []string // vkern verify --quick and the conformance suite
	Default []string // vkern verify: edge cases and deep reductions
	Bench   []string // vkern bench --suite ops: sizes that fill a GPU
}

// MatmulSpec describes a member of the matrix-product family:
// Out (rows × cols) = L (rows × depth) · R (depth × cols), each factor read
// from an operand as stored or transposed, with an optional bias and an
// optional accumulation into the output. Package oracle computes every
// member with one reference; verify checks large members by sampling.
type MatmulSpec struct {
	L, R              string // the operands that hold the factors
	TransL, TransR    bool   // the operand holds the factor's transpose
	Rows, Cols, Depth string // the dimensions of the product
	Bias              string // an f16 vector of Cols added to every row; empty for none
	// Accumulate names an Int parameter: when it is 1 the output is
	// added into (β = 1), when 0 overwritten. Empty: always overwritten.
	Accumulate string
}

// Op is an operation's contract.
type Op struct {
	ID       ID
	Name     string
	Math     string // one line a person reads
	Dims     []Dim
	Params   []Param
	Operands []Operand // in wire order
	// Divides lists pairs {a, b} of dimensions where a must divide b
	// (attention's heads divide its channels).
	Divides [][2]string
	// Reduces is the length of the sums each output element is made of,
	// for error bounds and reports; the zero Extent when none.
	Reduces Extent
	// Independent, when set, names a dimension along which the op is a
	// batch of independent problems: every operand whose rows begin with
	// it splits into that many equal consecutive slices, every output is
	// such an operand, and output slice i depends only on slice i of the
	// split inputs and on the whole of the others (layernorm's rows,
	// attention's sequences; weights are the others). A check may then
	// compute the reference of a few slices instead of all (verify.Check).
	Independent string
	// Flops is the conventional floating-point operation count at a shape
	// (2·M·N·K for a product); nil for none worth counting.
	Flops  func(s Shape) float64
	Matmul *MatmulSpec // set for the matrix-product family
	Shapes Shapes
	// Anchor is the name under which the PyTorch anchors (bench/,
	// ../shared/bench/anchors.py) report the op's PyTorch equivalent;
	// empty: the op's name.
	Anchor string
	// ExactOnIntegers says that on small whole-number inputs every binary32
	// intermediate is exact, so the output must match the reference bit
	// for bit (the "integer" distribution is then an exact check).
	ExactOnIntegers bool
	// NoExactRounding, when set, says why no input makes this op's results
	// exact values that its f16 outputs must round (verify's "rounding"
	// distribution), so that the report can say so; empty when such inputs
	// exist.
	NoExactRounding string
	// NonClaims are what verifying this op does not show.
	NonClaims []string

	// Resolved at registration: each extent's names as indices into the
	// RUN parameters (dims first, then Params), and each name's index.
	index map[string]int
}

var (
	mu     sync.RWMutex
	all    []*Op
	byName = map[string]*Op{}
	byID   = map[ID]*Op{}
)

// Wire ids. The built-in ops have ids below FirstUserID; an op a program
// declares (package userop) has one from FirstUserID up, by default
// UserID(name), which depends on nothing but the name, so that a
// program's ids, and with them its server's sources and cache key, do not
// depend on the order in which its ops were declared.
const FirstUserID ID = 1 << 16

// UserID is the wire id of a declared op called name whose contract leaves
// ID 0: FirstUserID plus the name's 32-bit FNV-1a hash, reduced into
// [FirstUserID, 2³²). Two names that meet at one id are refused when the
// second is registered, with both names in the error.
func UserID(name string) ID {
	h := fnv.New32a()
	h.Write([]byte(name))
	span := uint64(math.MaxUint32) - uint64(FirstUserID) + 1
	return FirstUserID + ID(uint64(h.Sum32())%span)
}

// The kernel server's limits on one op (kernels/core/ops.h): its
// dimensions and parameters together, its operands, the names in one
// extent, and its divisibility rules.
const (
	MaxParams      = 16
	MaxOperands    = 16
	MaxExtentTerms = 4
	MaxDivides     = 2
)

// Register adds o, an op a program declares, to the registry after
// checking that its contract is complete and consistent (Check); the
// error says what is wrong. An ID of 0 becomes UserID(o.Name); an ID
// given must be FirstUserID or more. Package userop declares an op's
// contract, reference and kernels together, and is the usual way in.
func Register(o *Op) error {
	if o == nil {
		return errors.New("op: Register(nil); pass the op's contract")
	}
	if o.ID == 0 {
		o.ID = UserID(o.Name)
	}
	return register(o, false)
}

// Check checks o as Register would, without registering it: the contract
// on its own, and its name and id against the ops registered already. It
// resolves o's names as Register does; an ID of 0 is checked as the
// UserID(o.Name) Register would give it, and left 0.
func Check(o *Op) error {
	if o == nil {
		return errors.New("op: Check(nil); pass the op's contract")
	}
	probe := o.ID
	if probe == 0 {
		probe = UserID(o.Name)
	}
	if err := o.check(probe, false); err != nil {
		return err
	}
	mu.RLock()
	defer mu.RUnlock()
	return conflicts(o, probe)
}

// builtinOp registers a built-in op at package initialisation; a contract
// that does not resolve is a programming error in this package.
func builtinOp(o *Op) *Op {
	if err := register(o, true); err != nil {
		panic(err)
	}
	return o
}

func register(o *Op, builtin bool) error {
	if err := o.check(o.ID, builtin); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	if err := conflicts(o, o.ID); err != nil {
		return err
	}
	all = append(all, o)
	sort.Slice(all, func(i, j int) bool { return all[i].ID < all[j].ID })
	byName[o.Name] = o
	byID[o.ID] = o
	return nil
}

// check is resolve plus the id's range: id is the one o will have.
func (o *Op) check(id ID, builtin bool) error {
	switch {
	case id == 0:
		return fmt.Errorf("op: %s has no id; give it a number unused by other ops", o.Name)
	case builtin && id >= FirstUserID:
		return fmt.Errorf("op: built-in op %s has id %d; built-in ids lie below %d", o.Name, id, FirstUserID)
	case !builtin && id < FirstUserID:
		return fmt.Errorf("op: %s asks for id %d, in the built-in ops' range 1–%d; leave ID 0 for one derived from the name, or choose one from %d up",
			o.Name, id, FirstUserID-1, FirstUserID)
	}
	return o.resolve()
}

// conflicts names the registered op that has o's name, or the id o would
// have; the caller holds mu.
func conflicts(o *Op, id ID) error {
	if other, dup := byName[o.Name]; dup {
		if other == o {
			return fmt.Errorf("op: %s is registered already", o.Name)
		}
		if other.ID < FirstUserID {
			return fmt.Errorf("op: %s is the name of a built-in op; choose another name", o.Name)
		}
		return fmt.Errorf("op: %s is declared twice, by two different contracts; give one of them another name", o.Name)
	}
	if other, dup := byID[id]; dup {
		how := "which it asks for"
		if o.ID == 0 || o.ID == UserID(o.Name) {
			how = "derived from its name"
		}
		return fmt.Errorf("op: %s's wire id %d (%s) is %s's already; rename one of them or give one an explicit ID from %d up",
			o.Name, id, how, other.Name, FirstUserID)
	}
	return nil
}

// resolve checks the contract and indexes its names.
func (o *Op) resolve() error {
	if o.Name == "" {
		return fmt.Errorf("op: an op needs a name")
	}
	for _, r := range o.Name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return fmt.Errorf("op: name %q: use lower-case letters, digits and _", o.Name)
		}
	}
	if len(o.Dims) == 0 {
		return fmt.Errorf("op: %s has no dimensions; every op's shape has at least one", o.Name)
	}
	o.index = map[string]int{}
	for i, d := range o.Dims {
		if err := o.name(d.Name, i); err != nil {
			return err
		}
	}
	for i, p := range o.Params {
		if err := o.name(p.Name, len(o.Dims)+i); err != nil {
			return err
		}
		switch p.Kind {
		case Int, Float:
			if math.IsNaN(p.Min) || math.IsNaN(p.Max) || p.Min > p.Max {
				return fmt.Errorf("op: %s: parameter %s has the range [%v, %v]; want Min ≤ Max", o.Name, p.Name, p.Min, p.Max)
			}
			if !(p.Default >= p.Min && p.Default <= p.Max) {
				return fmt.Errorf("op: %s: parameter %s defaults to %v, outside its range [%v, %v]", o.Name, p.Name, p.Default, p.Min, p.Max)
			}
			if p.Kind == Int && (p.Min != math.Trunc(p.Min) || p.Max != math.Trunc(p.Max) || p.Default != math.Trunc(p.Default)) {
				return fmt.Errorf("op: %s: whole-number parameter %s has a range or default that is not whole", o.Name, p.Name)
			}
			if p.Kind == Int && (p.Min < -maxIntParam || p.Max > maxIntParam) {
				return fmt.Errorf("op: %s: whole-number parameter %s has the range [%v, %v]; its bounds must be finite and within ±2^53", o.Name, p.Name, p.Min, p.Max)
			}
		case Index:
		default:
			return fmt.Errorf("op: %s: parameter %s has no kind (Int, Index or Float)", o.Name, p.Name)
		}
	}
	if len(o.Operands) == 0 {
		return fmt.Errorf("op: %s has no operands", o.Name)
	}
	if n := len(o.Dims) + len(o.Params); n > MaxParams {
		return fmt.Errorf("op: %s has %d dimensions and parameters; the kernel server takes at most %d", o.Name, n, MaxParams)
	}
	if len(o.Operands) > MaxOperands {
		return fmt.Errorf("op: %s has %d operands; the kernel server takes at most %d", o.Name, len(o.Operands), MaxOperands)
	}
	if len(o.Divides) > MaxDivides {
		return fmt.Errorf("op: %s has %d divisibility rules; the kernel server takes at most %d", o.Name, len(o.Divides), MaxDivides)
	}
	seen := map[string]bool{}
	writes := false
	domain := ""
	for _, p := range o.Operands {
		if p.Name == "" || seen[p.Name] {
			return fmt.Errorf("op: %s: operand %q is unnamed or named twice", o.Name, p.Name)
		}
		if err := identifier(p.Name); err != nil {
			return fmt.Errorf("op: %s: operand %q: %v (the kernels name it op_%s::buf::%s)", o.Name, p.Name, err, o.Name, p.Name)
		}
		seen[p.Name] = true
		if p.Rows.unset() {
			return fmt.Errorf("op: %s: operand %s has no shape; set its Rows (and Cols, for a matrix) to products of dimensions, as Rows: op.X(\"R\"), Cols: op.X(\"C\"), or Rows: op.X() for a single element", o.Name, p.Name)
		}
		if p.Domain != "" {
			switch {
			case p.DType != I32 || p.Role != In:
				return fmt.Errorf("op: %s: operand %s has a Domain, but only an i32 input's values are checked by the kernels; drop it or make %s an i32 input", o.Name, p.Name, p.Name)
			case domain != "":
				return fmt.Errorf("op: %s: operands %s and %s both have a Domain; the kernels check one i32 input per op", o.Name, domain, p.Name)
			}
			domain = p.Name
		}
		if p.DType < F16 || p.DType > I32 {
			return fmt.Errorf("op: %s: operand %s has no element type (F16, F32 or I32)", o.Name, p.Name)
		}
		if p.Role < In || p.Role > InOut {
			return fmt.Errorf("op: %s: operand %s has no role (In, Out or InOut)", o.Name, p.Name)
		}
		writes = writes || p.Writes()
		for _, e := range []Extent{p.Rows, p.Cols} {
			if len(e.Of) > MaxExtentTerms {
				return fmt.Errorf("op: %s: operand %s's extent %s has %d names; the kernel server takes at most %d", o.Name, p.Name, e, len(e.Of), MaxExtentTerms)
			}
			if e.coef() < 1 {
				return fmt.Errorf("op: %s: operand %s has a coefficient %d; want at least 1", o.Name, p.Name, e.Coef)
			}
			for _, n := range e.Of {
				i, ok := o.index[n]
				if !ok {
					return fmt.Errorf("op: %s: operand %s's shape names %q, which is neither a dimension nor a parameter of %s", o.Name, p.Name, n, o.Name)
				}
				if i >= len(o.Dims) && o.Params[i-len(o.Dims)].Kind != Int {
					return fmt.Errorf("op: %s: operand %s's shape names %s, which is not a dimension or whole-number parameter", o.Name, p.Name, n)
				}
			}
		}
		if p.MayAlias != "" {
			q := o.operand(p.MayAlias)
			if q == nil || q.Role != In || p.Role != Out || q.DType != p.DType {
				return fmt.Errorf("op: %s: operand %s may alias %q, which is not an input of the same type", o.Name, p.Name, p.MayAlias)
			}
		}
	}
	if !writes {
		return fmt.Errorf("op: %s writes no operand; give one the role Out or InOut", o.Name)
	}
	for _, pair := range o.Divides {
		for _, n := range pair {
			if i, ok := o.index[n]; !ok || i >= len(o.Dims) {
				return fmt.Errorf("op: %s: Divides names %q, which is not a dimension", o.Name, n)
			}
		}
	}
	for _, n := range o.Reduces.Of {
		if _, ok := o.index[n]; !ok {
			return fmt.Errorf("op: %s: Reduces names %q, which is not a dimension", o.Name, n)
		}
	}
	if d := o.Independent; d != "" {
		if i, ok := o.index[d]; !ok || i >= len(o.Dims) {
			return fmt.Errorf("op: %s: Independent names %q, which is not a dimension", o.Name, d)
		}
		for _, p := range o.Operands {
			if p.Writes() && (len(p.Rows.Of) == 0 || p.Rows.Of[0] != d) {
				return fmt.Errorf("op: %s: Independent is %s, but output %s's rows (%s) do not begin with it", o.Name, d, p.Name, p.Rows)
			}
		}
	}
	if m := o.Matmul; m != nil {
		for _, n := range []string{m.L, m.R} {
			if p := o.operand(n); p == nil || p.Role != In {
				return fmt.Errorf("op: %s: the product's factor %q is not an input", o.Name, n)
			}
		}
		for _, n := range []string{m.Rows, m.Cols, m.Depth} {
			if i, ok := o.index[n]; !ok || i >= len(o.Dims) {
				return fmt.Errorf("op: %s: the product's dimension %q is not a dimension", o.Name, n)
			}
		}
		if m.Bias != "" {
			if p := o.operand(m.Bias); p == nil || p.Role != In || p.DType != F16 {
				return fmt.Errorf("op: %s: the product's bias %q is not an f16 input", o.Name, m.Bias)
			}
		}
		if m.Accumulate != "" {
			if i, ok := o.index[m.Accumulate]; !ok || i < len(o.Dims) || o.Params[i-len(o.Dims)].Kind != Int {
				return fmt.Errorf("op: %s: the product's accumulate switch %q is not a whole-number parameter", o.Name, m.Accumulate)
			}
			if outs := o.Outputs(); len(outs) != 1 || outs[0].Role != InOut || outs[0].DType != F32 {
				return fmt.Errorf("op: %s: a product that accumulates (%s) needs one output, f32, with the role InOut", o.Name, m.Accumulate)
			}
		}
	}
	return o.checkShapes()
}

// checkShapes checks that the op has quick shapes and that every shape it
// lists is one of its own.
func (o *Op) checkShapes() error {
	if len(o.Shapes.Quick) == 0 {
		return fmt.Errorf("op: %s has no quick shapes; list at least one in Shapes.Quick, such as %q (vkern verify --quick and the conformance suite check the op there)",
			o.Name, strings.Repeat("4x", len(o.Dims)-1)+"4")
	}
	for _, list := range []struct {
		name   string
		shapes []string
	}{{"Quick", o.Shapes.Quick}, {"Default", o.Shapes.Default}, {"Bench", o.Shapes.Bench}} {
		for i, text := range list.shapes {
			if _, err := o.ParseShape(text); err != nil {
				return fmt.Errorf("op: %s: Shapes.%s[%d] = %q does not parse: %w", o.Name, list.name, i, text, err)
			}
		}
	}
	return nil
}

// maxIntParam bounds a whole-number parameter's range: every whole number
// up to 2⁵³ is exact in the binary64 a shape holds it in.
const maxIntParam = 1 << 53

// identifier checks that name can be a C++ identifier: the server's
// sources name every dimension, parameter and operand
// (op_layernorm::param::eps, op_layernorm::buf::x).
func identifier(name string) error {
	for i, r := range name {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return fmt.Errorf("want a name of letters, digits and _, not starting with a digit")
		}
	}
	switch {
	case name == "":
		return fmt.Errorf("want a name")
	case strings.HasPrefix(name, "_") || strings.Contains(name, "__"):
		return fmt.Errorf("names that start with _ or hold __ are reserved in C++; choose another")
	case cppKeywords[name]:
		return fmt.Errorf("%s is a C++ keyword; choose another name", name)
	}
	return nil
}

// cppKeywords are C++17's keywords and alternative tokens.
var cppKeywords = map[string]bool{}

func init() {
	for _, k := range strings.Fields(`alignas alignof and and_eq asm auto bitand bitor bool break case catch char
		char16_t char32_t class compl const constexpr const_cast continue decltype default delete do double
		dynamic_cast else enum explicit export extern false float for friend goto if inline int long mutable
		namespace new noexcept not not_eq nullptr operator or or_eq private protected public register
		reinterpret_cast return short signed sizeof static static_assert static_cast struct switch template
		this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile
		wchar_t while xor xor_eq`) {
		cppKeywords[k] = true
	}
}

func (o *Op) name(n string, i int) error {
	if err := identifier(n); err != nil {
		return fmt.Errorf("op: %s: dimension or parameter %q: %v (the kernels name it op_%s::param::%s)", o.Name, n, err, o.Name, n)
	}
	if _, dup := o.index[n]; dup {
		return fmt.Errorf("op: %s: %s is named twice among the dimensions and parameters", o.Name, n)
	}
	o.index[n] = i
	return nil
}

func (o *Op) operand(name string) *Operand {
	for i := range o.Operands {
		if o.Operands[i].Name == name {
			return &o.Operands[i]
		}
	}
	return nil
}

// Operand returns the operand called name.
func (o *Op) Operand(name string) (Operand, bool) {
	if p := o.operand(name); p != nil {
		return *p, true
	}
	return Operand{}, false
}

// All returns the registered ops in wire-id order.
func All() []*Op {
	mu.RLock()
	defer mu.RUnlock()
	return append([]*Op(nil), all...)
}

// Names returns the op names in wire-id order.
func Names() []string {
	ops := All()
	names := make([]string, len(ops))
	for i, o := range ops {
		names[i] = o.Name
	}
	return names
}

// Lookup finds an op by name.
func Lookup(name string) (*Op, error) {
	mu.RLock()
	o, ok := byName[name]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("unknown op %q: want one of %s", name, strings.Join(Names(), ", "))
	}
	return o, nil
}

// ByID finds an op by wire id.
func ByID(id ID) (*Op, error) {
	mu.RLock()
	o, ok := byID[id]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("unknown op id %d", id)
	}
	return o, nil
}

func (o *Op) String() string { return o.Name }

// Inputs are the operands the op reads (In and InOut), in wire order.
func (o *Op) Inputs() []Operand { return o.filter(Operand.Reads) }

// Outputs are the operands the op writes (Out and InOut), in wire order.
func (o *Op) Outputs() []Operand { return o.filter(Operand.Writes) }

func (o *Op) filter(keep func(Operand) bool) []Operand {
	var ps []Operand
	for _, p := range o.Operands {
		if keep(p) {
			ps = append(ps, p)
		}
	}
	return ps
}

// ParamIndex is the position of the dimension or parameter called name
// among the RUN parameters (dimensions first), or -1.
func (o *Op) ParamIndex(name string) int {
	if i, ok := o.index[name]; ok {
		return i
	}
	return -1
}
