package op

import (
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
	s := Shape{Dims: []int64{2, 3, 5}}
	want := map[string]int64{"gemm": 2 * 3, "gemm_grad_a": 2 * 5, "gemm_grad_b": 5 * 3}
	for name, n := range want {
		o, _ := Lookup(name)
		if got := s.Elements(o.Output); got != n {
			t.Errorf("%s output has %d elements, want %d", name, got, n)
		}
	}
}
