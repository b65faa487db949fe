package op

// attentionDims: B sequences of T tokens, C channels in H heads of C/H.
var attentionDims = []Dim{
	{"B", "sequences"}, {"T", "tokens per sequence"}, {"C", "channels: H heads of C/H"}, {"H", "heads"}}

func attentionFlops(s Shape) float64 {
	b, t, c := float64(s.Dims[0]), float64(s.Dims[1]), float64(s.Dims[2])
	return 2 * b * t * (t + 1) * c // QKᵀ and PV over the causal half, 2 flops a multiply-add
}

// attentionShapes: 3x130x384x6 has 18 heads of 64 columns, more than a
// group of the Hopper kernels' order (kernels/cuda/attention.cu, tile_item)
// with a ragged last group, and a last tile of two rows.
var attentionShapes = Shapes{
	Quick:   []string{"1x1x1x1", "2x17x24x3", "1x64x64x4"},
	Default: []string{"1x1x1x1", "2x17x24x3", "1x64x64x4", "2x129x96x2", "1x300x128x2", "3x1024x64x1", "3x130x384x6"},
	Bench:   []string{"16x1024x768x12"},
}

// Attention is GPT-2's causal multi-head self-attention from the fused
// projection qkv f16 (B·T)×3C (q, k, v side by side, head h at columns
// h·C/H of each) to y f16 (B·T)×C: y_h = softmax(q_h·k_hᵀ/√(C/H), causal)·v_h.
// It keeps lse f32 (B·H·T), each row's log Σ exp of the scaled scores, for
// the backward.
var Attention = builtinOp(&Op{
	ID: 17, Name: "attention", Math: "y_h = softmax(q_h·k_hᵀ/√(C/H), j ≤ i)·v_h per sequence and head; lse = log Σ_j≤i exp(q·k/√(C/H))", Dims: attentionDims,
	Divides: [][2]string{{"H", "C"}},
	Operands: []Operand{
		{Name: "qkv", DType: F16, Rows: X("B", "T"), Cols: X("C").Times(3), Role: In},
		{Name: "y", DType: F16, Rows: X("B", "T"), Cols: X("C"), Role: Out},
		{Name: "lse", DType: F32, Rows: X("B", "H", "T"), Role: Out},
	},
	Reduces: X("T"), Independent: "B", Flops: attentionFlops, Shapes: attentionShapes, Anchor: "attention",
	NoExactRounding: "exp is not exact, so no input gives attention exact results to round; its rounding is checked by the bias statistic only",
})

// AttentionGrad is the backward of attention: dqkv f16 (B·T)×3C from dy f16
// (B·T)×C, the forward's qkv, y and lse.
var AttentionGrad = builtinOp(&Op{
	ID: 18, Name: "attention_grad", Math: "dq, dk, dv of attention, from dy, qkv, y and lse (D = rowsum(dy⊙y))", Dims: attentionDims,
	Divides: [][2]string{{"H", "C"}},
	Operands: []Operand{
		{Name: "dy", DType: F16, Rows: X("B", "T"), Cols: X("C"), Role: In},
		{Name: "qkv", DType: F16, Rows: X("B", "T"), Cols: X("C").Times(3), Role: In},
		{Name: "y", DType: F16, Rows: X("B", "T"), Cols: X("C"), Role: In},
		{Name: "lse", DType: F32, Rows: X("B", "H", "T"), Role: In},
		{Name: "dqkv", DType: F16, Rows: X("B", "T"), Cols: X("C").Times(3), Role: Out},
	},
	Reduces: X("T"), Independent: "B", Flops: func(s Shape) float64 { return 2.5 * attentionFlops(s) }, Shapes: attentionShapes, Anchor: "attention_backward",
	NoExactRounding: "exp is not exact, so no input gives attention_grad exact results to round; its rounding is checked by the bias statistic only",
	NonClaims:       []string{"attention_grad is checked for y and lse that are the forward's of its qkv (verify draws them so); nothing is claimed for inconsistent ones"},
})
