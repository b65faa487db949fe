package main

import (
	"context"
	"math"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
)

// SwiGLU is the gated unit of LLaMA's MLP, fused: x f16 R×2C holds each
// row's gate a (its first C columns) and its value b (the last C), as one
// linear layer of width 2C writes them, and y f16 R×C = silu(a) ⊙ b, where
// silu(a) = a·σ(a) = a / (1 + e^(−a)).
var SwiGLU = &op.Op{
	Name: "swiglu", Math: "y = silu(a)⊙b, silu(a) = a/(1 + exp(−a)), [a | b] = x's two halves",
	Dims: []op.Dim{{Name: "R", Meaning: "rows: tokens"}, {Name: "C", Meaning: "columns of y: hidden units (x has 2C)"}},
	Operands: []op.Operand{
		{Name: "x", DType: op.F16, Rows: op.X("R"), Cols: op.X("C").Times(2), Role: op.In},
		{Name: "y", DType: op.F16, Rows: op.X("R"), Cols: op.X("C"), Role: op.Out},
	},
	Independent:     "R",
	Flops:           func(s op.Shape) float64 { return 5 * float64(s.Dims[0]) * float64(s.Dims[1]) },
	NoExactRounding: "exp is not exact, so no input gives swiglu exact results to round; its rounding is checked by the bias statistic only",
	Shapes: op.Shapes{
		Quick:   []string{"1x1", "7x769", "64x1024"},
		Default: []string{"1x1", "1x2", "7x769", "64x1024", "3x65537"},
		Bench:   []string{"16384x4096"},
	},
	NonClaims: []string{"swiglu is checked against exp computed within 4 ulps in binary32 (glibc's expf claims 1, CUDA's expf 2); a kernel using __expf or -use_fast_math is outside its bound"},
}

// expRelative is the error swiglu's bound allows a kernel's binary32 exp:
// 4 ulps, relative 4·2⁻²³ = 2⁻²¹ of the result, twice what CUDA's expf
// claims and four times glibc's. Below binary32's normal range, where
// ulps are absolute, 2⁻¹⁴⁸ more covers it.
const expRelative = 0x1p-21

// swiGLUCompute is the reference of swiglu: per element, with a and b the
// gate and the value, y = a/(1 + e^(−a))·b.
//
// Bound, with u = 2⁻²⁴ (binary32, round to nearest). A kernel's
// ê = exp(−a) is within 2⁻²¹·e + 2⁻¹⁴⁸ of e = e^(−a); 1 + ê takes one
// rounding, so d̂ = fl(1 + ê) is within a relative
// δ_d = 2⁻²¹ + 2⁻¹⁴⁸ + u·(1 + 2⁻²¹) of d = 1 + e (both terms are
// positive). The quotient and the product with b take one rounding each:
// |ŷ − y| ≤ E·|y| with E = (1 + u)²/(1 − δ_d) − 1. A kernel that forms
// a·σ(a) with σ = 1/(1 + ê) rounds once more: E allows (1 + u)³. Where
// e^(−a) passes binary32's range (a < −88.7) ê is +Inf and the kernel's y
// is ±0, where y itself is below 2⁻¹²² of |b|; a quotient or product among
// binary32's subnormals errs by 2⁻¹⁵⁰ more, scaled by at most |b|. So
//
//	|ŷ − y| ≤ E·|y| + 2⁻¹⁴⁹·(1 + |b|) + [a < −87]·|y|.
//
// The reference computes in float64, whose own error, at most 4·2⁻⁵³·|y|,
// is added. IEEE specials follow the formula: a NaN gives NaN; a = +Inf
// gives +Inf·b; a = −Inf gives −Inf/Inf = NaN.
func swiGLUCompute(ctx context.Context, s op.Shape, in []oracle.Input, _ oracle.Arithmetic) ([]*oracle.Reference, error) {
	rows, cols := int(s.Dims[0]), int(s.Dims[1])
	xs := in[0].F16
	y := newReference(rows * cols)
	const u = 0x1p-24
	deltaD := expRelative + 0x1p-148 + u*(1+expRelative)
	e := (1+u)*(1+u)*(1+u)/(1-deltaD) - 1 + 4*0x1p-53
	err := oracle.ParallelRows(ctx, rows, 8*cols, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row := xs[r*2*cols : (r+1)*2*cols]
			for j := 0; j < cols; j++ {
				a, b := f16.ToFloat64(row[j]), f16.ToFloat64(row[cols+j])
				v := a / (1 + math.Exp(-a)) * b
				bound := e*math.Abs(v) + 0x1p-149*(1+math.Abs(b))
				if a < -87 {
					bound += math.Abs(v)
				}
				y.Value[r*cols+j], y.Bound[r*cols+j] = v, finiteBound(v, bound)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return []*oracle.Reference{y}, nil
}
