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
// dw += Σ_rows dy ⊙ x̂, db += Σ_rows dy (f32, added into).
var LayerNormGrad = builtinOp(&Op{
	ID: 11, Name: "layernorm_grad", Math: "dx = rstd·(g − mean(g) − x̂·mean(g⊙x̂)), g = w⊙dy, x̂ = (x − mean)·rstd; dw += Σ dy⊙x̂; db += Σ dy", Dims: []Dim{
		{"R", "rows: tokens"}, {"C", "columns: channels"}},
	Operands: []Operand{
		{Name: "dy", DType: F16, Rows: X("R"), Cols: X("C"), Role: In},
		{Name: "x", DType: F16, Rows: X("R"), Cols: X("C"), Role: In},
		{Name: "w", DType: F16, Rows: X("C"), Role: In},
		{Name: "mean", DType: F32, Rows: X("R"), Role: In},
		{Name: "rstd", DType: F32, Rows: X("R"), Role: In},
		{Name: "dx", DType: F16, Rows: X("R"), Cols: X("C"), Role: Out},
		{Name: "dw", DType: F32, Rows: X("C"), Role: InOut},
		{Name: "db", DType: F32, Rows: X("C"), Role: InOut},
	},
	Reduces: X("C"), Flops: func(s Shape) float64 { return 12 * float64(s.Dims[0]) * float64(s.Dims[1]) }, Anchor: "layernorm_backward",
	NoExactRounding: "rstd and the means are not exact in general, so no input gives layernorm_grad exact results to round; its rounding is checked by the bias statistic only",
	Shapes: Shapes{
		Quick:   []string{"1x1", "7x769", "64x768"},
		Default: []string{"1x1", "1x2", "7x769", "64x768", "256x4099", "3x65537"},
		Bench:   []string{"16384x768"},
	},
	NonClaims: []string{"layernorm_grad is checked for the mean and rstd it is given, which verify draws as the forward would make them; nothing is claimed for inconsistent ones"},
})
