package op

// LayerNorm is nn.LayerNorm over the last dimension (biased variance, eps
// inside the square root) of x f16 R×C: y = (x − mean)·rstd·w + b, with
// the mean and rstd = 1/√(var + eps) of each row kept (f32) for the
// backward.
var LayerNorm = builtinOp(&Op{
	ID: 10, Name: "layernorm", Math: "y[r] = (x[r] − mean)·rstd·w + b, rstd = 1/√(var + eps), var the biased variance", Dims: []Dim{
		{"R", "rows: tokens"}, {"C", "columns: channels, normalised together"}},
	Params: []Param{{Name: "eps", Kind: Float, Min: 1e-30, Max: 1, Default: 1e-5, Meaning: "added to the variance inside the square root"}},
	Operands: []Operand{
		{Name: "x", DType: F16, Rows: X("R"), Cols: X("C"), Role: In},
		{Name: "w", DType: F16, Rows: X("C"), Role: In},
		{Name: "b", DType: F16, Rows: X("C"), Role: In},
		{Name: "y", DType: F16, Rows: X("R"), Cols: X("C"), Role: Out},
		{Name: "mean", DType: F32, Rows: X("R"), Role: Out},
		{Name: "rstd", DType: F32, Rows: X("R"), Role: Out},
	},
	Reduces: X("C"), Independent: "R", Flops: func(s Shape) float64 { return 8 * float64(s.Dims[0]) * float64(s.Dims[1]) }, Anchor: "layernorm",
	NoExactRounding: "1/√(var + eps) is not exact, so no input gives layernorm exact results to round; its rounding is checked by the bias statistic only",
	Shapes: Shapes{
		Quick:   []string{"1x1", "7x769", "64x768"},
		Default: []string{"1x1", "1x2", "7x769", "64x768", "256x4099", "3x65537:eps=1e-3"},
		Bench:   []string{"16384x768"},
	},
	NonClaims: []string{"layernorm's mean and rstd are checked as f32 outputs under their own bounds; how a kernel's rounding of them propagates through layernorm_grad is layernorm_grad's to show"},
})

// LayerNormGrad is the backward of layernorm: with x̂ = (x − mean)·rstd and
// g = w ⊙ dy, dx = rstd·(g − mean(g) − x̂·mean(g ⊙ x̂)) per row (f16), and
// dw += Σ_rows dy ⊙ x̂, db += Σ_rows dy (f32, added into). With residual 1
// it is a pre-LayerNorm block's branch gradient and the residual stream's
// in one pass: dx = r + that, r f16 R×C added in f32 and rounded once; r
// may be dx itself (GPT-2's backward adds each branch into the stream in
// place). With dx_sum 1 it also adds the column sums of dx, as computed in
// f32 before its rounding to f16, into dxs (f32 C): the bias gradient of
// the layer whose output gradient dx is (GPT-2's c_proj biases, whose
// output gradient is the stream's), without a bias_grad pass that reads dx
// again.
var LayerNormGrad = builtinOp(&Op{
	ID: 11, Name: "layernorm_grad", Math: "dx = r + rstd·(g − mean(g) − x̂·mean(g⊙x̂)), g = w⊙dy, x̂ = (x − mean)·rstd, r = 0 unless residual; dw += Σ dy⊙x̂; db += Σ dy; dxs += Σ dx (before rounding) with dx_sum", Dims: []Dim{
		{"R", "rows: tokens"}, {"C", "columns: channels"}},
	Params: []Param{{Name: "residual", Kind: Int, Min: 0, Max: 1, Default: 0, Meaning: "1: dx = r + the gradient, the residual stream r added in the same pass (r may be dx); 0: r is empty"},
		{Name: "dx_sum", Kind: Int, Min: 0, Max: 1, Default: 0, Meaning: "1: dxs += the column sums of dx, each element as computed in f32 before its rounding to f16 (the bias gradient of the layer whose output gradient dx is); 0: dxs is empty"}},
	Operands: []Operand{
		{Name: "dy", DType: F16, Rows: X("R"), Cols: X("C"), Role: In},
		{Name: "x", DType: F16, Rows: X("R"), Cols: X("C"), Role: In},
		{Name: "w", DType: F16, Rows: X("C"), Role: In},
		{Name: "mean", DType: F32, Rows: X("R"), Role: In},
		{Name: "rstd", DType: F32, Rows: X("R"), Role: In},
		{Name: "r", DType: F16, Rows: X("R", "residual"), Cols: X("C"), Role: In},
		{Name: "dx", DType: F16, Rows: X("R"), Cols: X("C"), Role: Out, MayAlias: "r"},
		{Name: "dw", DType: F32, Rows: X("C"), Role: InOut},
		{Name: "db", DType: F32, Rows: X("C"), Role: InOut},
		{Name: "dxs", DType: F32, Rows: X("C", "dx_sum"), Role: InOut},
	},
	Reduces: X("C"), Flops: func(s Shape) float64 { return 12 * float64(s.Dims[0]) * float64(s.Dims[1]) }, Anchor: "layernorm_backward",
	NoExactRounding: "rstd and the means are not exact in general, so no input gives layernorm_grad exact results to round; its rounding is checked by the bias statistic only",
	Shapes: Shapes{
		Quick: []string{"1x1", "7x769", "64x768", "64x768:residual=1", "64x768:residual=1,dx_sum=1"},
		Default: []string{"1x1", "1x2", "7x769", "64x768", "256x4099", "3x65537", "1x1:residual=1", "7x769:residual=1", "64x768:residual=1", "256x4099:residual=1", "3x65537:residual=1",
			"1x1:dx_sum=1", "7x769:dx_sum=1", "64x768:residual=1,dx_sum=1", "256x4099:residual=1,dx_sum=1", "3x65537:residual=1,dx_sum=1", "70x8200:dx_sum=1"},
		// GPT-2 124M at B·T = 16·1024: ln_f's (no residual: it starts the
		// stream's gradient) and the blocks' ln_1 and ln_2 (with it), each
		// with the next c_proj bias's gradient (dx_sum).
		Bench: []string{"16384x768", "16384x768:residual=1", "16384x768:dx_sum=1", "16384x768:residual=1,dx_sum=1"},
	},
	NonClaims: []string{"layernorm_grad is checked for the mean and rstd it is given, which verify draws as the forward would make them; nothing is claimed for inconsistent ones",
		"verify gives r and dx buffers of their own; the in-place form (r the same buffer as dx) is the one package gpt runs, checked there by its whole-step tests against the float64 model"},
})
