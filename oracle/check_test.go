package oracle

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
)

// scaleProbe is a declared-style op, y = 2x (f32 out), checked but not
// registered.
func scaleProbe(t *testing.T) *op.Op {
	t.Helper()
	o := &op.Op{Name: "scale_probe", Dims: []op.Dim{{Name: "N"}},
		Operands: []op.Operand{
			{Name: "x", DType: op.F16, Rows: op.X("N"), Role: op.In},
			{Name: "y", DType: op.F32, Rows: op.X("N"), Role: op.Out},
		},
		NoExactRounding: "its output is f32", Shapes: op.Shapes{Quick: []string{"5"}}}
	if err := op.Check(o); err != nil {
		t.Fatal(err)
	}
	return o
}

func scaleCompute(_ context.Context, s op.Shape, in []Input, _ Arithmetic) ([]*Reference, error) {
	ref := &Reference{Value: make([]float64, len(in[0].F16)), Bound: make([]float64, len(in[0].F16))}
	for i, h := range in[0].F16 {
		ref.Value[i] = 2 * f16.ToFloat64(h)
	}
	return []*Reference{ref}, nil
}

func TestCheckSpecRefusesAReferenceThatCannotBeTrusted(t *testing.T) {
	o := scaleProbe(t)
	with := func(edit func(r *Reference)) func(context.Context, op.Shape, []Input, Arithmetic) ([]*Reference, error) {
		return func(ctx context.Context, s op.Shape, in []Input, a Arithmetic) ([]*Reference, error) {
			refs, _ := scaleCompute(ctx, s, in, a)
			edit(refs[0])
			return refs, nil
		}
	}
	for _, tt := range []struct {
		name string
		spec Spec
		want string
	}{
		{"no Compute", Spec{}, "scale_probe's Spec has no Compute"},
		{"two outputs", Spec{Compute: func(ctx context.Context, s op.Shape, in []Input, a Arithmetic) ([]*Reference, error) {
			refs, _ := scaleCompute(ctx, s, in, a)
			return append(refs, refs[0]), nil
		}}, "2 outputs, want 1 (y)"},
		{"a short bound", Spec{Compute: with(func(r *Reference) { r.Bound = r.Bound[1:] })}, "output y has 5 values and 4 bounds, want 5 of each"},
		{"a NaN bound", Spec{Compute: with(func(r *Reference) { r.Bound[2] = math.NaN() })}, "output y's bound at element 2"},
		{"a negative bound", Spec{Compute: with(func(r *Reference) { r.Bound[0] = -1 })}, "is -1; the bound of a finite value must be a number ≥ 0"},
		{"an infinite bound", Spec{Compute: with(func(r *Reference) { r.Bound[3] = math.Inf(1) })}, "output y's bound at element 3 (value"},
		{"a panic", Spec{Compute: func(context.Context, op.Shape, []Input, Arithmetic) ([]*Reference, error) {
			var r []*Reference
			return []*Reference{r[1]}, nil
		}}, "panicked: runtime error: index out of range"},
		{"a panic in a worker", Spec{Compute: func(ctx context.Context, s op.Shape, in []Input, a Arithmetic) ([]*Reference, error) {
			err := ParallelRows(ctx, 5, 1, func(lo, hi int) { panic("row " + string(rune('0'+lo))) })
			return nil, err
		}}, "a reference's loop panicked: row"},
		{"inputs of the wrong length", Spec{Compute: scaleCompute, Generate: func(g *Gen) []Input {
			return []Input{{F16: make([]uint16, 4)}}
		}}, "Generate at 5 integer: x has 4 elements, want N = 5 at 5"},
		{"inputs of the wrong type", Spec{Compute: scaleCompute, Generate: func(g *Gen) []Input {
			return []Input{{F32: make([]float32, 5)}}
		}}, "input x is f16; pass its elements in the Input field of that type"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckSpec(context.Background(), o, tt.spec)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "scale_probe") {
				t.Fatalf("CheckSpec: %v; want an error naming scale_probe and containing %q", err, tt.want)
			}
		})
	}
	if err := CheckSpec(context.Background(), o, Spec{Compute: scaleCompute}); err != nil {
		t.Fatalf("a sound reference: %v", err)
	}
	o.NoExactRounding = ""
	if err := CheckSpec(context.Background(), o, Spec{Compute: scaleCompute}); err == nil || !strings.Contains(err.Error(), "set NoExactRounding") {
		t.Errorf("no Generate and no NoExactRounding: %v", err)
	}
}

// The built-in references pass the check asked of declared ones.
func TestTheBuiltInReferencesPassCheckSpec(t *testing.T) {
	for _, o := range op.All() {
		spec, err := specOf(o)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckSpec(context.Background(), o, spec); err != nil {
			t.Errorf("%v", err)
		}
	}
}
