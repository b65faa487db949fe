package op

import (
	"math"
	"strings"
	"testing"
)

func TestParseShapeAcceptsAnyPositiveShape(t *testing.T) {
	tests := []struct {
		op, shape string
		want      []int64
	}{
		{"gemm", "1x1x1", []int64{1, 1, 1}},
		{"gemm_grad_a", "17x31x129", []int64{17, 31, 129}},
		{"gemm_grad_b", "3x1000x5", []int64{3, 1000, 5}},
		{"softmax", "64x100000", []int64{64, 100000}},
		{"softmax_grad", " 7x4099 ", []int64{7, 4099}},
		{"cross_entropy", "8192x50304", []int64{8192, 50304}},
		{"cross_entropy", "64x1000:ignore_index=-100", []int64{64, 1000}},
	}
	for _, tt := range tests {
		t.Run(tt.op+" "+tt.shape, func(t *testing.T) {
			o, err := Lookup(tt.op)
			if err != nil {
				t.Fatal(err)
			}
			s, err := o.ParseShape(tt.shape)
			if err != nil {
				t.Fatalf("ParseShape(%q): %v", tt.shape, err)
			}
			if s.String() != strings.TrimSpace(tt.shape) {
				t.Errorf("String() = %q, want %q", s.String(), strings.TrimSpace(tt.shape))
			}
			for i := range tt.want {
				if s.Dims[i] != tt.want[i] {
					t.Errorf("dim %d = %d, want %d", i, s.Dims[i], tt.want[i])
				}
			}
		})
	}
}

func TestParseShapeRejectsBadShapesNamingTheValue(t *testing.T) {
	tests := []struct {
		op, shape, wantInError string
	}{
		{"gemm", "0x4x4", "M = 0"},
		{"gemm", "4x-1x4", "N = -1"},
		{"gemm", "4x4", "want 3 dimensions"},
		{"gemm", "4x4xq", `"q" is not a whole number`},
		{"softmax", "4x4x4", "want 2 dimensions"},
		{"softmax", "", "want 2"},
		{"softmax", "3x0", "C = 0"},
		{"gemm", "4294967296x4294967296x1", "2^62"},
		{"softmax", "99999999999999999999x1", "not a whole number"},
		{"cross_entropy", "4x0", "V = 0"},
		{"softmax", "4x4:ignore_index=-100", "takes no parameters"},
		{"cross_entropy", "4x4:ignore=-100", "does not take (it takes ignore_index, grad_scale)"},
		{"cross_entropy", "4x4:ignore_index", "not NAME=VALUE"},
		{"cross_entropy", "4x4:ignore_index=1.5", "not NAME=WHOLE_NUMBER"},
		{"cross_entropy", "4x4:ignore_index=2147483648", "ignore_index = 2147483648"},
		{"cross_entropy", "4x4:ignore_index=1,ignore_index=2", "sets ignore_index twice"},
	}
	for _, tt := range tests {
		t.Run(tt.op+" "+tt.shape, func(t *testing.T) {
			o, _ := Lookup(tt.op)
			_, err := o.ParseShape(tt.shape)
			if err == nil {
				t.Fatalf("ParseShape(%q) accepted a bad shape", tt.shape)
			}
			if !strings.Contains(err.Error(), tt.wantInError) || !strings.HasPrefix(err.Error(), tt.op+":") {
				t.Errorf("error %q should start with %q and contain %q", err, tt.op+":", tt.wantInError)
			}
		})
	}
}

func TestLookupNamesTheChoicesForAnUnknownOp(t *testing.T) {
	_, err := Lookup("gemv")
	if err == nil || !strings.Contains(err.Error(), `"gemv"`) || !strings.Contains(err.Error(), "softmax_grad") {
		t.Fatalf("Lookup(gemv) error = %v", err)
	}
	if _, err := ByID(99); err == nil {
		t.Fatal("ByID(99) found an op")
	}
	for _, o := range All() {
		got, err := ByID(o.ID)
		if err != nil || got != o {
			t.Errorf("ByID(%d) = %v, %v", o.ID, got, err)
		}
	}
}

func TestCheckLengthsExplainsTheExpectedCount(t *testing.T) {
	o, _ := Lookup("gemm")
	s, _ := o.ParseShape("4x3x4")
	if err := o.CheckLengths(s, []int64{16, 12, 12}); err != nil {
		t.Fatalf("correct lengths rejected: %v", err)
	}
	err := o.CheckLengths(s, []int64{12, 12, 12})
	want := "gemm: A has 12 elements, want M·K = 16 (M=4, K=4)"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %q", err, want)
	}
	if err := o.CheckLengths(s, []int64{16}); err == nil || !strings.Contains(err.Error(), "want 3") {
		t.Fatalf("wrong buffer count: error = %v", err)
	}
}

func TestOperandShapesFollowTheMath(t *testing.T) {
	// dA = dC·Bᵀ is M×K; dB = Aᵀ·dC is K×N; C = A·B is M×N.
	want := map[string]int64{"gemm": 2 * 3, "gemm_grad_a": 2 * 5, "gemm_grad_b": 5 * 3}
	for name, n := range want {
		o, _ := Lookup(name)
		s := o.MustShape("2x3x5")
		if got := s.Elements(o.Outputs()[0]); got != n {
			t.Errorf("%s output has %d elements, want %d", name, got, n)
		}
	}
}

func TestCrossEntropyOperandsAndWireParams(t *testing.T) {
	o, _ := Lookup("cross_entropy")
	s, err := o.ParseShape("3x5:ignore_index=-100")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := s.Setting(IgnoreIndex); !ok || v != -100 {
		t.Errorf("Setting(ignore_index) = %v, %v; want -100, true", v, ok)
	}
	want := map[string]int64{"logits": 15, "labels": 3, "loss": 3, "dLogits": 15}
	for _, p := range o.Operands {
		if got := s.Elements(p); got != want[p.Name] {
			t.Errorf("%s has %d elements, want %d", p.Name, got, want[p.Name])
		}
	}
	one := int64(math.Float64bits(1)) // grad_scale's default, as binary64 bits
	if got := o.WireParams(s); len(got) != 4 || got[0] != 3 || got[1] != 5 || got[2] != -100 || got[3] != one {
		t.Errorf("WireParams = %v, want [3 5 -100 %d]", got, one)
	}
	unset, _ := o.ParseShape("3x5:grad_scale=0.5")
	if got := o.WireParams(unset); len(got) != 4 || got[2] != Unset || got[3] != int64(math.Float64bits(0.5)) {
		t.Errorf("WireParams without ignore_index = %v, want the Unset marker, then 0.5's bits", got)
	}
	if got := o.MovedBytes(s); got != 15*2+3*4+3*4+15*2 {
		t.Errorf("MovedBytes = %d", got)
	}
	err = o.CheckLengths(s, []int64{15, 4, 3, 15})
	if want := "cross_entropy: labels has 4 elements, want R = 3"; err == nil || err.Error() != want {
		t.Errorf("CheckLengths error = %v, want %q", err, want)
	}
}

func TestIndependentMustSplitEveryOutput(t *testing.T) {
	mk := func(independent string, outRows Extent) *Op {
		return &Op{ID: 9001, Name: "independent_probe", Dims: []Dim{{"R", ""}, {"C", ""}}, Independent: independent, Shapes: Shapes{Quick: []string{"2x3"}},
			Operands: []Operand{
				{Name: "x", DType: F16, Rows: X("R"), Cols: X("C"), Role: In},
				{Name: "w", DType: F16, Rows: X("C"), Role: In},
				{Name: "y", DType: F16, Rows: outRows, Cols: X("C"), Role: Out},
			}}
	}
	if err := mk("R", X("R")).resolve(); err != nil {
		t.Fatalf("rows split along R: %v", err)
	}
	if err := mk("C", X("R")).resolve(); err == nil || !strings.Contains(err.Error(), "do not begin with it") {
		t.Errorf("an output whose rows do not begin with the dimension: %v", err)
	}
	if err := mk("Q", X("R")).resolve(); err == nil || !strings.Contains(err.Error(), "not a dimension") {
		t.Errorf("an unknown dimension: %v", err)
	}
}

// probeOp is a small valid contract that the declaration tests break one
// field at a time.
func probeOp() *Op {
	return &Op{Name: "probe", Dims: []Dim{{"R", "rows"}, {"C", "columns"}},
		Params: []Param{{Name: "eps", Kind: Float, Min: 0, Max: 1, Default: 1e-5}},
		Operands: []Operand{
			{Name: "x", DType: F16, Rows: X("R"), Cols: X("C"), Role: In},
			{Name: "y", DType: F16, Rows: X("R"), Cols: X("C"), Role: Out},
		},
		Shapes: Shapes{Quick: []string{"1x1", "3x5"}}}
}

func TestCheckRefusesABadContractNamingTheOpTheFieldAndTheFix(t *testing.T) {
	for _, tt := range []struct {
		name  string
		spoil func(o *Op)
		want  string
	}{
		{"an operand with no shape", func(o *Op) { o.Operands[1].Rows = Extent{} }, "operand y has no shape; set its Rows"},
		{"a dimension that is not a C++ name", func(o *Op) { o.Dims[1].Name = "C-1" }, `dimension or parameter "C-1": want a name of letters`},
		{"a dimension that is a keyword", func(o *Op) { o.Dims[1].Name = "int" }, "int is a C++ keyword"},
		{"a parameter named as a dimension", func(o *Op) { o.Params[0].Name = "R" }, "R is named twice"},
		{"an operand named twice", func(o *Op) { o.Operands[1].Name = "x" }, `operand "x" is unnamed or named twice`},
		{"an operand that is not a C++ name", func(o *Op) { o.Operands[1].Name = "y.out" }, `operand "y.out": want a name`},
		{"a shape naming an unknown dimension", func(o *Op) { o.Operands[1].Cols = X("D") }, `names "D", which is neither a dimension nor a parameter`},
		{"an extent past the server's limit", func(o *Op) { o.Operands[1].Cols = X("R", "C", "R", "C", "R") }, "has 5 names; the kernel server takes at most 4"},
		{"no quick shapes", func(o *Op) { o.Shapes.Quick = nil }, `probe has no quick shapes; list at least one in Shapes.Quick, such as "4x4"`},
		{"a quick shape of another op", func(o *Op) { o.Shapes.Quick = []string{"4x4x4"} }, `Shapes.Quick[0] = "4x4x4" does not parse: probe: shape "4x4x4" has 3 dimensions, want 2`},
		{"a default outside a parameter's range", func(o *Op) { o.Params[0].Default = 2 }, "eps defaults to 2, outside its range [0, 1]"},
		{"a NaN parameter range", func(o *Op) { o.Params[0].Max = math.NaN() }, "want Min ≤ Max"},
		{"an infinite whole-number range", func(o *Op) { o.Params[0].Kind, o.Params[0].Max, o.Params[0].Default = Int, math.Inf(1), 0 }, "must be finite"},
		{"a domain on an f16 operand", func(o *Op) { o.Operands[0].Domain = "positive" }, "only an i32 input's values are checked"},
		{"an id in the built-in range", func(o *Op) { o.ID = 7 }, "in the built-in ops' range"},
		{"the name of a built-in op", func(o *Op) { o.Name = "softmax" }, "softmax is the name of a built-in op; choose another name"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := probeOp()
			tt.spoil(o)
			err := Check(o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Check: %v; want an error containing %q", err, tt.want)
			}
			if !strings.Contains(err.Error(), o.Name) {
				t.Errorf("the error %q does not name the op", err)
			}
		})
	}
	if err := Check(probeOp()); err != nil {
		t.Fatalf("the valid probe: %v", err)
	}
}

func TestUserIDsLieAboveTheBuiltInsAndDependOnlyOnTheName(t *testing.T) {
	for _, o := range All() {
		if o.ID >= FirstUserID {
			t.Errorf("built-in %s has id %d, in the user range", o.Name, o.ID)
		}
	}
	if a, b := UserID("rmsnorm"), UserID("rmsnorm"); a != b || a < FirstUserID {
		t.Errorf("UserID(rmsnorm) = %d then %d; want one id from %d up", a, b, FirstUserID)
	}
	if UserID("rmsnorm") == UserID("swiglu") {
		t.Errorf("rmsnorm and swiglu share an id")
	}
	o := probeOp()
	o.Name = "probe_collides"
	o.ID = UserID("probe_first")
	first := probeOp()
	first.Name = "probe_first"
	if err := Register(first); err != nil {
		t.Fatal(err)
	}
	err := Register(o)
	if err == nil || !strings.Contains(err.Error(), "probe_collides") || !strings.Contains(err.Error(), "probe_first") {
		t.Errorf("two ops at one id: %v; want an error naming both", err)
	}
	if err := Register(first); err == nil || !strings.Contains(err.Error(), "registered already") {
		t.Errorf("registering an op twice: %v", err)
	}
	second := probeOp()
	second.Name = "probe_first"
	if err := Register(second); err == nil || !strings.Contains(err.Error(), "declared twice") {
		t.Errorf("two contracts with one name: %v", err)
	}
}

// A product's column sums (MatmulSpec.ColumnSums, linear_grad_w's db) are
// an f32 InOut operand of the product's columns, its last output, of the
// R factor as stored: a contract that breaks any of these is refused by
// name. Each case spoils a user op built like linear_grad_w.
func TestColumnSumsContractsAreChecked(t *testing.T) {
	grad := func() *Op {
		m := *LinearGradW.Matmul
		return &Op{Name: "dwprobe", Dims: append([]Dim(nil), LinearGradW.Dims...),
			Params:   append([]Param(nil), LinearGradW.Params...),
			Operands: append([]Operand(nil), LinearGradW.Operands...),
			Reduces:  X("M"), Matmul: &m, Shapes: Shapes{Quick: []string{"4x5x6:bias=1"}}}
	}
	if err := Check(grad()); err != nil {
		t.Fatalf("linear_grad_w's contract as a user op: %v", err)
	}
	for _, tt := range []struct {
		name  string
		spoil func(o *Op)
		want  string
	}{
		{"f16 sums", func(o *Op) { o.Operands[3].DType = F16 }, `column sums "db" are not an f32 InOut operand of N columns`},
		{"sums of the wrong width", func(o *Op) { o.Operands[3].Cols = X("K") }, `column sums "db" are not an f32 InOut operand of N columns`},
		{"sums that are only written", func(o *Op) { o.Operands[3].Role = Out }, `column sums "db" are not an f32 InOut operand`},
		{"sums of a transposed R", func(o *Op) { o.Matmul.TransR = true }, `column sums "db" are its last output, of R as stored`},
		{"sums that are not the last output", func(o *Op) {
			o.Matmul.Accumulate = "" // else the accumulating output's check refuses it first
			o.Operands[2], o.Operands[3] = o.Operands[3], o.Operands[2]
		}, `column sums "db" are its last output`},
		{"an independent dimension", func(o *Op) {
			o.Independent = "K"
			o.Operands[3].Rows = X("K", "bias") // every output's rows begin with it, as Independent asks
		}, "no Independent dimension"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := grad()
			tt.spoil(o)
			err := Check(o)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "dwprobe") {
				t.Fatalf("Check: %v; want an error naming dwprobe and containing %q", err, tt.want)
			}
		})
	}
}
