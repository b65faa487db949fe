package op

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// Shape is an op's problem: its dimensions, in the op's order, and the
// parameters the shape sets. A Shape comes from Op.ParseShape or Op.Shape,
// which check it against the contract; it answers for its op.
type Shape struct {
	Dims []int64
	// Settings are the parameters the shape sets, in the op's order; the
	// others take their defaults.
	Settings []Setting
	op       *Op
}

// Setting is a parameter set in a shape.
type Setting struct {
	Name  string
	Value float64
}

// Unset is the wire value of an Index parameter that is not set. It lies
// outside the 32-bit range every set index lies in.
const Unset int64 = math.MinInt64

// maxElements caps every operand at 2⁶² elements, so that element counts,
// byte counts (×4) and the index arithmetic of every backend stay inside
// int64.
const maxElements = int64(1) << 62

// Op is the op the shape belongs to.
func (s Shape) Op() *Op { return s.op }

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
		text += sep + set.Name + "=" + formatValue(set.Value)
	}
	return text
}

func formatValue(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// Setting returns the value of the parameter called name, and whether the
// shape sets it.
func (s Shape) Setting(name string) (float64, bool) {
	for _, set := range s.Settings {
		if set.Name == name {
			return set.Value, true
		}
	}
	return math.NaN(), false
}

// Value is the value of the dimension or parameter called name: a set
// parameter's value, else its default (NaN for an unset Index).
func (s Shape) Value(name string) float64 {
	i := s.op.ParamIndex(name)
	switch {
	case i < 0:
		return math.NaN()
	case i < len(s.Dims):
		return float64(s.Dims[i])
	}
	if v, ok := s.Setting(name); ok {
		return v
	}
	return s.op.Params[i-len(s.Dims)].Default
}

// Int is Value as a whole number (Unset for an unset Index).
func (s Shape) Int(name string) int64 {
	v := s.Value(name)
	if math.IsNaN(v) {
		return Unset
	}
	return int64(v)
}

// Dim returns dimension i.
func (s Shape) Dim(i int) int64 { return s.Dims[i] }

// extent evaluates e at s; ok is false on overflow past 2⁶².
func (s Shape) extent(e Extent) (int64, bool) {
	n := uint64(e.coef())
	for _, name := range e.Of {
		hi, lo := bits.Mul64(n, uint64(s.Int(name)))
		if hi != 0 || lo > uint64(maxElements) {
			return 0, false
		}
		n = lo
	}
	return int64(n), true
}

// Rows is the number of rows of operand p at s.
func (s Shape) Rows(p Operand) int64 { n, _ := s.extent(p.Rows); return n }

// Cols is the row length of operand p at s: 1 for a vector.
func (s Shape) Cols(p Operand) int64 { n, _ := s.extent(p.Cols); return n }

// Elements is the element count of operand p at s (s must be valid).
func (s Shape) Elements(p Operand) int64 { return s.Rows(p) * s.Cols(p) }

// Bytes is the byte size of operand p at s (s must be valid).
func (s Shape) Bytes(p Operand) int64 { return s.Elements(p) * int64(p.DType.Size()) }

// ShapeSyntax is how this op's shapes are written: "MxNxK",
// "RxV[:ignore_index=I,grad_scale=G]" (after one colon, any of the
// parameters, comma-separated).
func (o *Op) ShapeSyntax() string {
	names := make([]string, len(o.Dims))
	for i, d := range o.Dims {
		names[i] = d.Name
	}
	syntax := strings.Join(names, "x")
	if len(o.Params) == 0 {
		return syntax
	}
	params := make([]string, len(o.Params))
	for i, p := range o.Params {
		params[i] = p.Name + "=" + strings.ToUpper(p.Name[:1])
	}
	return syntax + "[:" + strings.Join(params, ",") + "]"
}

// Example is a shape of this op for messages and --help: the first quick
// shape that sets a parameter, else the second quick shape.
func (o *Op) Example() string {
	for _, s := range o.Shapes.Quick {
		if strings.Contains(s, ":") {
			return s
		}
	}
	if len(o.Shapes.Quick) > 1 {
		return o.Shapes.Quick[1]
	}
	if len(o.Shapes.Quick) == 1 {
		return o.Shapes.Quick[0]
	}
	return strings.Repeat("4x", len(o.Dims)-1) + "4"
}

// ParseShape reads text in this op's syntax and checks it with Validate.
// Settings may be written in any order; the shape holds them in the op's.
func (o *Op) ParseShape(text string) (Shape, error) {
	text = strings.TrimSpace(text)
	dimText, settingText, hasSettings := strings.Cut(text, ":")
	fields := strings.Split(dimText, "x")
	if len(fields) != len(o.Dims) {
		return Shape{}, fmt.Errorf("%s: shape %q has %d dimensions, want %d dimensions written %s (for example %s)",
			o.Name, text, len(fields), len(o.Dims), o.ShapeSyntax(), o.Example())
	}
	dims := make([]int64, len(fields))
	for i, f := range fields {
		d, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return Shape{}, fmt.Errorf("%s: shape %q: dimension %q is not a whole number; write %s (for example %s)",
				o.Name, text, f, o.ShapeSyntax(), o.Example())
		}
		dims[i] = d
	}
	var settings []Setting
	if hasSettings {
		given := map[string]float64{}
		for _, field := range strings.Split(settingText, ",") {
			name, value, ok := strings.Cut(strings.TrimSpace(field), "=")
			bad := func(want string) error {
				return fmt.Errorf("%s: shape %q: setting %q is not %s; write %s (for example %s)",
					o.Name, text, field, want, o.ShapeSyntax(), o.Example())
			}
			if !ok {
				return Shape{}, bad("NAME=VALUE")
			}
			p := o.param(name)
			if p == nil {
				return Shape{}, o.unknownSetting(text, name)
			}
			v, err := strconv.ParseFloat(value, 64)
			switch {
			case p.Kind == Float && (err != nil || math.IsNaN(v)):
				return Shape{}, bad("NAME=NUMBER")
			case p.Kind != Float && (err != nil || v != math.Trunc(v)):
				return Shape{}, bad("NAME=WHOLE_NUMBER")
			}
			if _, dup := given[name]; dup {
				return Shape{}, fmt.Errorf("%s: shape %q sets %s twice; set it once", o.Name, text, name)
			}
			given[name] = v
		}
		for _, p := range o.Params {
			if v, ok := given[p.Name]; ok {
				settings = append(settings, Setting{p.Name, v})
			}
		}
	}
	return o.Shape(dims, settings...)
}

// Shape makes a shape of this op from its dimensions and the parameters
// it sets, and checks it with Validate.
func (o *Op) Shape(dims []int64, settings ...Setting) (Shape, error) {
	s := Shape{Dims: append([]int64(nil), dims...), Settings: append([]Setting(nil), settings...), op: o}
	if err := o.Validate(s); err != nil {
		return Shape{}, err
	}
	return s, nil
}

// MustShape is Shape for the op's own tables and tests, where a bad shape
// is a programming error.
func (o *Op) MustShape(text string) Shape {
	s, err := o.ParseShape(text)
	if err != nil {
		panic(err)
	}
	return s
}

func (o *Op) param(name string) *Param {
	for i := range o.Params {
		if o.Params[i].Name == name {
			return &o.Params[i]
		}
	}
	return nil
}

// unknownSetting is the error for a shape (written as text) that sets name,
// which o does not take.
func (o *Op) unknownSetting(text, name string) error {
	if len(o.Params) == 0 {
		return fmt.Errorf("%s: shape %s sets %s, but %s takes no parameters; write %s", o.Name, text, name, o.Name, o.ShapeSyntax())
	}
	names := make([]string, len(o.Params))
	for i, p := range o.Params {
		names[i] = p.Name
	}
	return fmt.Errorf("%s: shape %s sets %s, which %s does not take (it takes %s)", o.Name, text, name, o.Name, strings.Join(names, ", "))
}

// Validate checks s against the contract: the right number of dimensions,
// each ≥ 1; the divisibility the op needs; every setting one of the op's
// parameters, set once, of its kind and within its range; and every
// operand's element count (and byte count) representable in int64.
func (o *Op) Validate(s Shape) error {
	s.op = o // a shape written for another op is checked as one of o's
	if len(s.Dims) != len(o.Dims) {
		return fmt.Errorf("%s: shape %s has %d dimensions, want %d (%s)", o.Name, s, len(s.Dims), len(o.Dims), o.ShapeSyntax())
	}
	for i, d := range s.Dims {
		if d < 1 {
			return fmt.Errorf("%s: %s = %d in shape %s; every dimension must be at least 1", o.Name, o.Dims[i].Name, d, s)
		}
	}
	seen := map[string]bool{}
	for _, set := range s.Settings {
		p := o.param(set.Name)
		if p == nil {
			return o.unknownSetting(s.String(), set.Name)
		}
		if seen[set.Name] {
			return fmt.Errorf("%s: shape %s sets %s twice; set it once", o.Name, s, set.Name)
		}
		seen[set.Name] = true
		if err := p.check(o, s, set.Value); err != nil {
			return err
		}
	}
	if m := o.Matmul; m != nil && m.GELU != "" && m.Residual != "" && s.Int(m.GELU) == 1 && s.Int(m.Residual) == 1 {
		return fmt.Errorf("%s: shape %s sets both %s=1 and %s=1; the GELU would take the residual stream in its input: "+
			"add the residual in a product of its own, or set one of them to 0", o.Name, s, m.GELU, m.Residual)
	}
	for _, pair := range o.Divides {
		a, b := s.Int(pair[0]), s.Int(pair[1])
		if b%a != 0 {
			return fmt.Errorf("%s: %s = %d does not divide %s = %d in shape %s; choose %s a divisor of %s",
				o.Name, pair[0], a, pair[1], b, s, pair[0], pair[1])
		}
	}
	for _, p := range o.Operands {
		r, rok := s.extent(p.Rows)
		c, cok := s.extent(p.Cols)
		hi, lo := bits.Mul64(uint64(r), uint64(c))
		if !rok || !cok || hi != 0 || lo > uint64(maxElements) {
			return fmt.Errorf("%s: operand %s is %s×%s elements at shape %s, more than the 2^62 limit; use a smaller shape",
				o.Name, p.Name, p.Rows, p.Cols, s)
		}
	}
	return nil
}

// check checks a set value of p.
func (p *Param) check(o *Op, s Shape, v float64) error {
	switch p.Kind {
	case Index:
		if v != math.Trunc(v) || v < math.MinInt32 || v > math.MaxInt32 {
			return fmt.Errorf("%s: %s = %s in shape %s; want a 32-bit label value in [%d, %d]", o.Name, p.Name, formatValue(v), s, math.MinInt32, math.MaxInt32)
		}
	case Int:
		if v != math.Trunc(v) || v < p.Min || v > p.Max {
			return fmt.Errorf("%s: %s = %s in shape %s; want a whole number in [%s, %s]", o.Name, p.Name, formatValue(v), s, formatValue(p.Min), formatValue(p.Max))
		}
	case Float:
		if !(v >= p.Min && v <= p.Max) {
			return fmt.Errorf("%s: %s = %s in shape %s; want a number in [%s, %s]", o.Name, p.Name, formatValue(v), s, formatValue(p.Min), formatValue(p.Max))
		}
	}
	return nil
}

// WireParams are the RUN parameters of s: the dimensions, then each of the
// op's parameters in order, its value or default: a whole number as is, a
// real number as its binary64 bits, an unset index as Unset.
func (o *Op) WireParams(s Shape) []int64 {
	params := append([]int64(nil), s.Dims...)
	for _, p := range o.Params {
		v := s.Value(p.Name)
		switch {
		case p.Kind == Float:
			params = append(params, int64(math.Float64bits(v)))
		case math.IsNaN(v):
			params = append(params, Unset)
		default:
			params = append(params, int64(v))
		}
	}
	return params
}

// ReductionLength is the length of each sum an output element is made of
// (1 when the op sums nothing).
func (o *Op) ReductionLength(s Shape) int64 {
	n, _ := s.extent(o.Reduces)
	return n
}

// MovedBytes is the minimum traffic of a call: every operand read or
// written once, an InOut operand both.
func (o *Op) MovedBytes(s Shape) int64 {
	var n int64
	for _, p := range o.Operands {
		n += s.Bytes(p)
		if p.Role == InOut {
			n += s.Bytes(p)
		}
	}
	return n
}

// FlopsAt is the op's conventional flop count at s, 0 when it declares
// none.
func (o *Op) FlopsAt(s Shape) float64 {
	if o.Flops == nil {
		return 0
	}
	return o.Flops(s)
}

// CheckLengths checks that each operand has the element count the shape
// requires. lengths are in wire order.
func (o *Op) CheckLengths(s Shape, lengths []int64) error {
	if len(lengths) != len(o.Operands) {
		return fmt.Errorf("%s: got %d buffers, want %d (%s)", o.Name, len(lengths), len(o.Operands), o.operandList())
	}
	for i, p := range o.Operands {
		if want := s.Elements(p); lengths[i] != want {
			text := o.extentText(p)
			if o.ParamIndex(text) >= 0 { // a single name: its value is the count
				return fmt.Errorf("%s: %s has %d elements, want %s = %d", o.Name, p.Name, lengths[i], text, want)
			}
			return fmt.Errorf("%s: %s has %d elements, want %s = %d (%s)", o.Name, p.Name, lengths[i], text, want, o.extentValues(s, p))
		}
	}
	return nil
}

// extentText writes an operand's size: "M·K", "R", "3·C·B·T".
func (o *Op) extentText(p Operand) string {
	rows, cols := p.Rows.String(), p.Cols.String()
	switch {
	case cols == "1":
		return rows
	case rows == "1":
		return cols
	}
	return rows + "·" + cols
}

// extentValues writes the values of the names in an operand's size.
func (o *Op) extentValues(s Shape, p Operand) string {
	var parts []string
	seen := map[string]bool{}
	for _, n := range append(append([]string(nil), p.Rows.Of...), p.Cols.Of...) {
		if !seen[n] {
			seen[n] = true
			parts = append(parts, fmt.Sprintf("%s=%d", n, s.Int(n)))
		}
	}
	return strings.Join(parts, ", ")
}

func (o *Op) operandList() string {
	parts := make([]string, len(o.Operands))
	for i, p := range o.Operands {
		parts[i] = fmt.Sprintf("%s %s %s", p.Name, p.DType, o.SizeText(p))
	}
	return strings.Join(parts, ", ")
}

// SizeText writes an operand's symbolic size: "M×K", or "R" for a vector.
func (o *Op) SizeText(p Operand) string {
	if p.Cols.String() == "1" {
		return p.Rows.String()
	}
	return p.Rows.String() + "×" + p.Cols.String()
}
