package verify

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
)

// TestAnF16OverflowIsJudgedOnItsOwnSide: an f16 result of ±Inf passes where
// the reference's bound reaches the overflow threshold on that side, even
// when the reference itself has the other sign (heavy cancellation), and
// fails where it does not. The first case is an element an H100 run met:
// linear at 16384x768x50257, wide inputs, reference 20727.96 within
// 1.61e6, result −Inf.
func TestAnF16OverflowIsJudgedOnItsOwnSide(t *testing.T) {
	const posInf, negInf = 0x7c00, 0xfc00
	s, err := op.GELU.ParseShape("1")
	if err != nil {
		t.Fatal(err)
	}
	if p := op.GELU.Outputs()[0]; p.DType != op.F16 {
		t.Fatalf("gelu's output is %v; the test needs an f16 output", p.DType)
	}
	for _, c := range []struct {
		want, bound float64
		got         uint16
		ok          bool
	}{
		{20727.96, 1.61e6, negInf, true},
		{20727.96, 1.61e6, posInf, true},
		{20727.96, 1000, posInf, false},
		{20727.96, 1000, negInf, false},
		{-65000, 600, negInf, true},
		{-65000, 400, negInf, false},
		{-65000, 600, posInf, false},
		{0, 65520, posInf, true},
		{0, 65519, negInf, false},
	} {
		ref := &oracle.Reference{Value: []float64{c.want}, Bound: []float64{c.bound}}
		out := make([]byte, 2)
		binary.LittleEndian.PutUint16(out, c.got)
		st := Compare(op.GELU, s, []*oracle.Reference{ref}, [][]byte{out}, Mode{})
		if got := st.Wrong == 0; got != c.ok {
			t.Errorf("result %#04x for reference %g ± %g: passed %v, want %v (%s)", c.got, c.want, c.bound, got, c.ok, st.FirstWrong)
		}
	}
}

// TestAnUndeterminedReferenceTakesAnyResult: a NaN reference with an
// infinite bound (oracle.Reference: a result the formula leaves open)
// passes +Inf, −Inf, NaN and a finite value; a NaN reference with a finite
// bound still wants NaN.
func TestAnUndeterminedReferenceTakesAnyResult(t *testing.T) {
	s, err := op.GELU.ParseShape("1")
	if err != nil {
		t.Fatal(err)
	}
	nan, inf := math.NaN(), math.Inf(1)
	for _, c := range []struct {
		bound float64
		got   uint16
		ok    bool
	}{
		{inf, 0x7c00, true}, {inf, 0xfc00, true}, {inf, 0x7e00, true}, {inf, 0x3c00, true},
		{0, 0x7e00, true}, {0, 0x7c00, false}, {0, 0x3c00, false},
	} {
		ref := &oracle.Reference{Value: []float64{nan}, Bound: []float64{c.bound}}
		out := make([]byte, 2)
		binary.LittleEndian.PutUint16(out, c.got)
		st := Compare(op.GELU, s, []*oracle.Reference{ref}, [][]byte{out}, Mode{})
		if got := st.Wrong == 0; got != c.ok {
			t.Errorf("result %#04x for NaN ± %g: passed %v, want %v (%s)", c.got, c.bound, got, c.ok, st.FirstWrong)
		}
	}
}
