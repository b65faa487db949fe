package op

// Elementwise ops: every output element depends on the inputs' elements at
// the same place. Their shape is one dimension, the element count; a
// (B·T)×C activation is N = B·T·C elements.

var elementDims = []Dim{{"N", "elements"}}

// elementShapes: a single element, an odd count that ends no vector, one
// GPU wave and a bit, and GPT-2's (B·T)×C activations (16·1024·768) and
// MLP activations (×4).
var elementShapes = Shapes{
	Quick:   []string{"1", "4099", "65536"},
	Default: []string{"1", "7", "4099", "65536", "1000003"},
	Bench:   []string{"12582912", "50331648"},
}

func perElement(k float64) func(Shape) float64 {
	return func(s Shape) float64 { return k * float64(s.Dims[0]) }
}

// Add is y = a + b elementwise (f16), the residual stream; y may be a's
// buffer (in place).
var Add = builtinOp(&Op{
	ID: 7, Name: "add", Math: "y = a + b, elementwise, f32 sum rounded once to f16", Dims: elementDims,
	Operands: []Operand{
		{Name: "a", DType: F16, Rows: X("N"), Role: In},
		{Name: "b", DType: F16, Rows: X("N"), Role: In},
		{Name: "y", DType: F16, Rows: X("N"), Role: Out, MayAlias: "a"},
	},
	Independent: "N", Flops: perElement(1), Shapes: elementShapes, ExactOnIntegers: true,
	NonClaims: []string{"add in place (y sharing a's buffer) is checked by the conformance suite, not by vkern verify, which gives every operand its own buffer"},
})

// GELU is GPT-2's tanh approximation of GELU, elementwise (f16).
var GELU = builtinOp(&Op{
	ID: 8, Name: "gelu", Math: "y = x/2·(1 + tanh(√(2/π)·(x + 0.044715·x³))), elementwise", Dims: elementDims,
	Operands: []Operand{
		{Name: "x", DType: F16, Rows: X("N"), Role: In},
		{Name: "y", DType: F16, Rows: X("N"), Role: Out},
	},
	Independent: "N", Flops: perElement(10), Shapes: elementShapes, Anchor: "gelu_tanh",
	NoExactRounding: "tanh is not exact, so no input gives gelu exact results to round; its rounding is checked by the bias statistic only",
	NonClaims:       []string{"gelu is checked against either binary32 form: tanh computed within 4 ulps (glibc's tanhf claims 2; the cpu backend), or exp2 and division within 4 ulps each (the cuda backend's logistic form: its 2^z is ex2.approx.ftz.f32, the MUFU.EX2 that exp2f itself compiles to wherever 2^z is normal, which the CUDA Math API gives 2 ulps, its results below 2⁻¹²⁶ flushed to 0, which the bound covers; __fdividef claims 2); a kernel using a coarser approximation (tanh.approx, __expf) is outside its bound"},
})

// GELUGrad is dx = dy · gelu'(x), the backward of GELU (f16).
var GELUGrad = builtinOp(&Op{
	ID: 9, Name: "gelu_grad", Math: "dx = dy·(½(1 + T) + ½x(1 − T²)·√(2/π)(1 + 3·0.044715·x²)), T = tanh(√(2/π)(x + 0.044715x³))", Dims: elementDims,
	Operands: []Operand{
		{Name: "x", DType: F16, Rows: X("N"), Role: In},
		{Name: "dy", DType: F16, Rows: X("N"), Role: In},
		{Name: "dx", DType: F16, Rows: X("N"), Role: Out},
	},
	Independent: "N", Flops: perElement(18), Shapes: elementShapes, Anchor: "gelu_tanh_backward",
	NoExactRounding: "tanh is not exact, so no input gives gelu_grad exact results to round; its rounding is checked by the bias statistic only",
	NonClaims:       []string{"gelu_grad is checked against either binary32 form: tanh computed within 4 ulps (glibc's tanhf claims 2; the cpu backend), or exp2 and division within 4 ulps each (the cuda backend's logistic form: its 2^z is ex2.approx.ftz.f32, the MUFU.EX2 that exp2f itself compiles to wherever 2^z is normal, which the CUDA Math API gives 2 ulps, its results below 2⁻¹²⁶ flushed to 0, which the bound covers; __fdividef claims 2); a kernel using a coarser approximation (tanh.approx, __expf) is outside its bound"},
})
