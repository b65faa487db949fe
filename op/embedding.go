package op

// tokenDomain is what a token id must be.
const tokenDomain = "a token id in [0, V)"

// Embedding is GPT-2's input: x[b·T + t] = wte[tokens[b, t]] + wpe[t]
// (f16), token and position embeddings summed once in f32.
var Embedding = builtinOp(&Op{
	ID: 12, Name: "embedding", Math: "x[b·T + t] = wte[tokens[b·T + t]] + wpe[t]", Dims: []Dim{
		{"B", "sequences"}, {"T", "positions per sequence"}, {"C", "channels"}, {"V", "vocabulary: rows of wte"}},
	Operands: []Operand{
		{Name: "tokens", DType: I32, Rows: X("B", "T"), Role: In, Domain: tokenDomain},
		{Name: "wte", DType: F16, Rows: X("V"), Cols: X("C"), Role: In},
		{Name: "wpe", DType: F16, Rows: X("T"), Cols: X("C"), Role: In},
		{Name: "x", DType: F16, Rows: X("B", "T"), Cols: X("C"), Role: Out},
	},
	Independent: "B", Flops: func(s Shape) float64 { return float64(s.Dims[0]) * float64(s.Dims[1]) * float64(s.Dims[2]) }, ExactOnIntegers: true,
	Anchor: "embedding",
	Shapes: Shapes{
		Quick:   []string{"1x1x1x1", "2x5x7x11", "4x64x64x256"},
		Default: []string{"1x1x1x1", "2x5x7x11", "4x64x64x256", "3x17x769x1000", "2x1024x768x50257"},
		Bench:   []string{"16x1024x768x50257"},
	},
	NonClaims: []string{"embedding is verified on valid token ids only; the refusal of an id outside [0, V) is shown by the test suite through the real server"},
})

// EmbeddingGrad is the backward of embedding: dwte[v] += Σ dx over the
// positions whose token is v, dwpe[t] += Σ_b dx[b·T + t] (f32, added
// into), the same bits on every run.
var EmbeddingGrad = builtinOp(&Op{
	ID: 13, Name: "embedding_grad", Math: "dwte[v] += Σ_{tokens = v} dx; dwpe[t] += Σ_b dx[b·T + t]; deterministic", Dims: []Dim{
		{"B", "sequences"}, {"T", "positions per sequence"}, {"C", "channels"}, {"V", "vocabulary: rows of dwte"}},
	Operands: []Operand{
		{Name: "dx", DType: F16, Rows: X("B", "T"), Cols: X("C"), Role: In},
		{Name: "tokens", DType: I32, Rows: X("B", "T"), Role: In, Domain: tokenDomain},
		{Name: "dwte", DType: F32, Rows: X("V"), Cols: X("C"), Role: InOut},
		{Name: "dwpe", DType: F32, Rows: X("T"), Cols: X("C"), Role: InOut},
	},
	Reduces: X("B", "T"), Flops: func(s Shape) float64 { return 2 * float64(s.Dims[0]) * float64(s.Dims[1]) * float64(s.Dims[2]) },
	ExactOnIntegers: true, Anchor: "embedding_backward",
	NoExactRounding: "its outputs are f32: whole-number sums below 2^24 need no rounding (the integer cases check its sums bit for bit)",
	Shapes: Shapes{
		Quick:   []string{"1x1x1x1", "2x5x7x11", "4x64x64x256"},
		Default: []string{"1x1x1x1", "2x5x7x11", "4x64x64x256", "3x17x769x1000", "8x512x64x3"},
		Bench:   []string{"16x1024x768x50257"},
	},
	NonClaims: []string{
		"embedding_grad's determinism (the same bits on every run) is shown by the test suite running it twice, not by vkern verify",
		"embedding_grad is verified on valid token ids only; the refusal of an id outside [0, V) is shown by the test suite through the real server",
	},
})
