package op

// Linear is GPT-2's Conv1D forward: y f16 M×N = x f16 M×K · W f16 K×N + b,
// the bias b (f16, N) added when bias is 1. With bias 0 it is the plain
// f16-output product A·B (the lm_head's backward, dlnf = dlogits · wte).
// With gelu 1 it is the MLP's c_fc and its GELU in one pass: pre f16 M×N =
// x·W + b, the pre-activation gelu_grad needs, and y = gelu(x·W + b) from
// the same f32 value (rounded once each), so nothing reads pre back to
// apply the GELU. With residual 1 it is a block's output projection and
// its residual connection in one pass: y = x·W + b + r, r f16 M×N the
// residual stream, added in f32 and rounded once (not with gelu).
var Linear = builtinOp(&Op{
	ID: 14, Name: "linear", Math: "y = x·W + b (or gelu of it, pre keeping x·W + b), f32 accumulation, one rounding to f16", Dims: []Dim{
		{"M", "rows of x and y: tokens"}, {"N", "columns of W and y: output features"}, {"K", "the reduction: input features"}},
	Params: []Param{
		{Name: "bias", Kind: Int, Min: 0, Max: 1, Default: 1, Meaning: "1: add b to every row; 0: no bias (b is empty)"},
		{Name: "gelu", Kind: Int, Min: 0, Max: 1, Default: 0, Meaning: "1: y = gelu(x·W + b) and pre = x·W + b; 0: y = x·W + b (pre is empty)"},
		{Name: "residual", Kind: Int, Min: 0, Max: 1, Default: 0, Meaning: "1: y = x·W + b + r, the residual stream r added in the same pass (not with gelu); 0: r is empty"},
	},
	Operands: []Operand{
		{Name: "x", DType: F16, Rows: X("M"), Cols: X("K"), Role: In},
		{Name: "W", DType: F16, Rows: X("K"), Cols: X("N"), Role: In},
		{Name: "b", DType: F16, Rows: X("bias"), Cols: X("N"), Role: In},
		{Name: "r", DType: F16, Rows: X("M", "residual"), Cols: X("N"), Role: In},
		{Name: "y", DType: F16, Rows: X("M"), Cols: X("N"), Role: Out},
		{Name: "pre", DType: F16, Rows: X("M", "gelu"), Cols: X("N"), Role: Out},
	},
	Reduces: X("K"), Independent: "M", Flops: matmulFlops, ExactOnIntegers: true, Anchor: "linear",
	Matmul: &MatmulSpec{L: "x", R: "W", Rows: "M", Cols: "N", Depth: "K", Bias: "b", GELU: "gelu", Pre: "pre", Residual: "residual", ResidualIn: "r"},
	Shapes: Shapes{
		Quick:   []string{"1x1x1", "17x31x129", "3x1000x5:bias=0", "64x48x80", "24x24x4100", "33x70x40:gelu=1", "33x70x40:residual=1"},
		Default: []string{"1x1x1", "17x31x129", "17x31x129:bias=0", "3x1000x5", "128x96x200", "40x40x4100", "40x4100x40:bias=0", "4100x40x40", "17x31x129:gelu=1", "128x96x200:gelu=1", "40x40x4100:gelu=1,bias=0", "17x31x129:residual=1", "128x96x200:residual=1", "40x4100x40:residual=1,bias=0"},
		// GPT-2 124M at B·T = 16·1024: c_attn, attn c_proj (with the
		// residual, as package gpt runs it, and without), mlp c_fc (with
		// its GELU, as package gpt runs it, and without), mlp c_proj (with
		// the residual and without), and the lm_head's backward dlnf =
		// dlogits·wte, over the padded vocabulary (package gpt) and the
		// real one.
		Bench: []string{"16384x2304x768", "16384x768x768:residual=1", "16384x768x768", "16384x3072x768:gelu=1", "16384x3072x768", "16384x768x3072:residual=1", "16384x768x3072", "16384x768x50304:bias=0", "16384x768x50257:bias=0"},
	},
})

// LinearGradX is the input gradient of linear: dx f16 M×K = dy f16 M×N ·
// Wᵀ, W f16 K×N as linear stores it (gemm_grad_a's product). With gelu 1 it
// is the gradient through linear's GELU too: dx = (dy·Wᵀ) ⊙ gelu′(pre),
// pre the forward's pre-activations, from the product's f32 value, so the
// product is rounded once and never read back.
var LinearGradX = builtinOp(&Op{
	ID: 23, Name: "linear_grad_x", Math: "dx = dy·Wᵀ (times gelu′(pre) with gelu), f32 accumulation, one rounding to f16", Dims: []Dim{
		{"M", "rows of dy and dx: tokens"}, {"N", "the reduction: columns of dy and W"}, {"K", "rows of W, columns of dx"}},
	Params: []Param{{Name: "gelu", Kind: Int, Min: 0, Max: 1, Default: 0, Meaning: "1: multiply by gelu′(pre), the gradient through linear's GELU; 0: no GELU (pre is empty)"}},
	Operands: []Operand{
		{Name: "dy", DType: F16, Rows: X("M"), Cols: X("N"), Role: In},
		{Name: "W", DType: F16, Rows: X("K"), Cols: X("N"), Role: In},
		{Name: "pre", DType: F16, Rows: X("M", "gelu"), Cols: X("K"), Role: In},
		{Name: "dx", DType: F16, Rows: X("M"), Cols: X("K"), Role: Out},
	},
	Reduces: X("N"), Independent: "M", Flops: matmulFlops, ExactOnIntegers: true,
	Matmul: &MatmulSpec{L: "dy", R: "W", TransR: true, Rows: "M", Cols: "K", Depth: "N", GELU: "gelu", Pre: "pre"},
	Shapes: Shapes{
		Quick:   []string{"1x1x1", "17x31x129", "3x1000x5:gelu=1", "64x48x80:gelu=1"},
		Default: []string{"1x1x1", "17x31x129", "17x31x129:gelu=1", "3x1000x5:gelu=1", "128x96x200:gelu=1", "40x4100x40:gelu=1", "4100x40x40:gelu=1"},
		// GPT-2 124M at B·T = 16·1024: the MLP's c_proj input gradient
		// through the GELU, and the attention's c_proj without.
		Bench: []string{"16384x768x3072:gelu=1", "16384x768x768"},
	},
})

// LinearNT is linear with its weight stored as torch.nn.functional.linear
// stores it, N×K: y f16 M×N = x f16 M×K · Wᵀ + b, the bias b (f16, N) added
// when bias is 1. It is gemm_grad_a's product (dC·Bᵀ) with linear's bias:
// GPT-2's head, logits = ln_f(x)·wteᵀ, with wte's padded rows masked by a
// bias of −Inf (package gpt).
var LinearNT = builtinOp(&Op{
	ID: 22, Name: "linear_nt", Math: "y = x·Wᵀ + b, f32 accumulation, one rounding to f16", Dims: []Dim{
		{"M", "rows of x and y: tokens"}, {"N", "rows of W, columns of y: output features"}, {"K", "the reduction: columns of x and of W"}},
	Params: []Param{{Name: "bias", Kind: Int, Min: 0, Max: 1, Default: 1, Meaning: "1: add b to every row; 0: no bias (b is empty)"}},
	Operands: []Operand{
		{Name: "x", DType: F16, Rows: X("M"), Cols: X("K"), Role: In},
		{Name: "W", DType: F16, Rows: X("N"), Cols: X("K"), Role: In},
		{Name: "b", DType: F16, Rows: X("bias"), Cols: X("N"), Role: In},
		{Name: "y", DType: F16, Rows: X("M"), Cols: X("N"), Role: Out},
	},
	Reduces: X("K"), Independent: "M", Flops: matmulFlops, ExactOnIntegers: true, Anchor: "linear_nt",
	Matmul: &MatmulSpec{L: "x", R: "W", TransR: true, Rows: "M", Cols: "N", Depth: "K", Bias: "b"},
	Shapes: Shapes{
		Quick: []string{"1x1x1", "17x31x129", "3x1000x5:bias=0", "64x48x80", "24x24x4100"},
		// A head's shape: a vocabulary of 250 padded to 256 over C = 64.
		Default: []string{"1x1x1", "17x31x129", "17x31x129:bias=0", "3x1000x5", "128x96x200", "128x256x64", "40x40x4100", "40x4100x40:bias=0", "4100x40x40"},
		// GPT-2 124M's head at B·T = 16·1024: the vocabulary padded to a
		// multiple of 64, and as it is (rows of 50257 halves are not
		// 16-byte aligned).
		Bench: []string{"16384x50304x768", "16384x50257x768"},
	},
})

// LinearGradW is the weight gradient of linear: dW f32 K×N += xᵀ·dy (or =,
// with accumulate 0), x f16 M×K, dy f16 M×N. With bias 1 it is linear's
// bias gradient too, from the same dy: db f32 N += the column sums of dy,
// summed as bias_grad sums them (oracle.BiasGradRowBlock), so a backward
// pass reads dy for both in one call.
var LinearGradW = builtinOp(&Op{
	ID: 15, Name: "linear_grad_w", Math: "dW (+)= xᵀ·dy, f32 accumulation and output (and db += Σ_rows dy with bias)", Dims: []Dim{
		{"M", "the reduction: rows of x and dy (tokens)"}, {"N", "columns of dy and dW"}, {"K", "columns of x, rows of dW"}},
	Params: []Param{
		{Name: "accumulate", Kind: Int, Min: 0, Max: 1, Default: 1, Meaning: "1: add into dW (β = 1); 0: overwrite it"},
		{Name: "bias", Kind: Int, Min: 0, Max: 1, Default: 0, Meaning: "1: also db += the column sums of dy (linear's bias gradient; always added into); 0: db is empty"},
	},
	Operands: []Operand{
		{Name: "x", DType: F16, Rows: X("M"), Cols: X("K"), Role: In},
		{Name: "dy", DType: F16, Rows: X("M"), Cols: X("N"), Role: In},
		{Name: "dW", DType: F32, Rows: X("K"), Cols: X("N"), Role: InOut},
		{Name: "db", DType: F32, Rows: X("bias"), Cols: X("N"), Role: InOut},
	},
	Reduces: X("M"), Flops: matmulFlops, ExactOnIntegers: true, Anchor: "linear_grad_w",
	Matmul:          &MatmulSpec{L: "x", TransL: true, R: "dy", Rows: "K", Cols: "N", Depth: "M", Accumulate: "accumulate", ColumnSums: "db"},
	NoExactRounding: "its outputs are f32: whole-number results below 2^24 need no rounding (the rounding cases still check its exact sums)",
	Shapes: Shapes{
		Quick:   []string{"1x1x1", "17x31x129", "3x1000x5:accumulate=0", "64x48x80", "4100x24x24", "70x33x40:bias=1"},
		Default: []string{"1x1x1", "17x31x129", "17x31x129:accumulate=0", "3x1000x5", "128x96x200", "4100x40x40", "40x4100x40", "40x40x4100:accumulate=0", "1x1x1:bias=1", "17x31x129:bias=1", "4100x40x40:bias=1,accumulate=0", "130x96x200:bias=1", "2100x1000x40:bias=1"},
		// GPT-2 124M at B·T = 16·1024: the four Conv1D weights' gradients,
		// and the lm_head's dwte += dlogitsᵀ·lnf (K = V, padded and not).
		Bench: []string{"16384x2304x768", "16384x768x768", "16384x3072x768", "16384x768x3072", "16384x768x50304", "16384x768x50257"},
	},
})

// BiasGrad is the bias gradient of linear: db f32 N += the column sums of
// dy f16 M×N.
var BiasGrad = builtinOp(&Op{
	ID: 16, Name: "bias_grad", Math: "db += Σ_rows dy, f32", Dims: []Dim{{"M", "rows of dy: tokens"}, {"N", "columns: features"}},
	Operands: []Operand{
		{Name: "dy", DType: F16, Rows: X("M"), Cols: X("N"), Role: In},
		{Name: "db", DType: F32, Rows: X("N"), Role: InOut},
	},
	Reduces: X("M"), Flops: func(s Shape) float64 { return float64(s.Dims[0]) * float64(s.Dims[1]) }, ExactOnIntegers: true,
	NoExactRounding: "its output is f32: whole-number results below 2^24 need no rounding (the rounding cases still check its exact sums)",
	Shapes: Shapes{
		Quick:   []string{"1x1", "7x4099", "1000x64"},
		Default: []string{"1x1", "7x4099", "1000x64", "4100x40", "64x100000", "2100x1000"},
		Bench:   []string{"16384x768", "16384x2304", "16384x3072"},
	},
})
