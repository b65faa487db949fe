package verify

import (
	"context"
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
)

// correctOutputs are the reference values rounded to each output's type:
// what a correct kernel may return.
func correctOutputs(t *testing.T, o *op.Op, s op.Shape, inputs []oracle.Input) [][]byte {
	t.Helper()
	refs, err := oracle.Compute(context.Background(), o, s, inputs, oracle.Arithmetic{})
	if err != nil {
		t.Fatal(err)
	}
	var outs [][]byte
	for k, p := range o.Outputs() {
		b := make([]byte, s.Bytes(p))
		for i, v := range refs[k].Value {
			switch p.DType {
			case op.F16:
				binary.LittleEndian.PutUint16(b[2*i:], f16.FromFloat64(v))
			case op.F32:
				binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
			default:
				binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(v)))
			}
		}
		outs = append(outs, b)
	}
	return outs
}

// spoil makes f16 element i of out twice what it was, plus one.
func spoil(out []byte, i int) {
	v := f16.ToFloat64(binary.LittleEndian.Uint16(out[2*i:]))
	binary.LittleEndian.PutUint16(out[2*i:], f16.FromFloat64(2*v+1))
}

func TestCheckWholeSlicedAndProjected(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		o      *op.Op
		shape  string
		budget float64
		sample string // what the sample sentence must say; "" for a whole check
	}{
		{"whole", op.Gemm, "17x31x129", 0, ""},
		{"slices of an independent dimension", op.Softmax, "64x300", 1, "slices along R"},
		{"rows, columns and projections of a product", op.GemmGradB, "96x40x80", 1, "Freivalds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.o.MustShape(tc.shape)
			inputs, err := oracle.Generate(tc.o, s, oracle.Normal, 3)
			if err != nil {
				t.Fatal(err)
			}
			outs := correctOutputs(t, tc.o, s, inputs)
			opts := CheckOptions{Budget: tc.budget, Seed: 1}
			got, err := Check(ctx, tc.o, s, inputs, outs, oracle.Arithmetic{}, opts)
			if err != nil {
				t.Fatal(err)
			}
			if got.Stats.Wrong != 0 || got.Stats.Checked == 0 || !strings.Contains(got.Sample, tc.sample) || (tc.sample == "") != (got.Sample == "") {
				t.Fatalf("correct outputs: %d wrong of %d checked, sample %q", got.Stats.Wrong, got.Stats.Checked, got.Sample)
			}
			// The last element is in every sample: the last slice, or the
			// last row, and every projection.
			last := int(s.Elements(tc.o.Outputs()[0])) - 1
			if tc.o.Outputs()[0].DType == op.F32 {
				b := outs[0][4*last:]
				binary.LittleEndian.PutUint32(b, math.Float32bits(2*math.Float32frombits(binary.LittleEndian.Uint32(b))+1))
			} else {
				spoil(outs[0], last)
			}
			got, err = Check(ctx, tc.o, s, inputs, outs, oracle.Arithmetic{}, opts)
			if err != nil {
				t.Fatal(err)
			}
			if got.Stats.Wrong == 0 || got.Stats.FirstWrong == "" {
				t.Fatalf("a wrong last element went unnoticed (%d checked, sample %q)", got.Stats.Checked, got.Sample)
			}
		})
	}
}
