package op

import "math"

var optimizerShapes = Shapes{
	Quick:   []string{"1", "4099", "65536"},
	Default: []string{"1", "7", "4099", "65536", "1000003"},
	Bench:   []string{"124475904"}, // GPT-2 124M's parameters, in one buffer
}

// adamWShapes add settings to optimizerShapes': a late step of GPT-2's
// schedule with grad_scale = 2⁻¹⁵ (a loss scale of 2¹⁵ undone); a large eps
// beside small moments; β below ½ (1 − β rounds in binary64) with
// lr·weight_decay = 1 (the decay factor is 0); the last step t can take,
// with β2 at its largest; and a gradient scale of 2¹⁶.
var adamWShapes = Shapes{
	Quick: []string{"1", "4099", "4099:t=1000,weight_decay=0.1,lr=6e-4,grad_scale=3.0517578125e-05",
		"65536:eps=1e-3,beta1=0.5,beta2=0.95,t=3"},
	Default: []string{"1", "7", "4099", "65536", "1000003",
		"4099:t=1000,weight_decay=0.1,lr=6e-4,grad_scale=3.0517578125e-05",
		"65536:eps=1e-3,beta1=0.5,beta2=0.95,t=3",
		"4099:beta1=0,beta2=0.3,lr=1,weight_decay=1,t=2",
		"4099:t=2147483647,beta2=0.999999,grad_scale=65536"},
	Bench: optimizerShapes.Bench,
}

// GlobalNorm is the squared global norm of a gradient buffer, Σ g², summed
// in binary64 and rounded once to f32, with the count of its elements that
// are not finite (saturating at 2³¹ − 1): what gradient clipping and dynamic
// loss scaling read. Whole-number inputs give exact sums, checked bit for
// bit.
var GlobalNorm = builtinOp(&Op{
	ID: 19, Name: "global_norm", Math: "sumsq = f32(Σ g², in binary64); nonfinite = #{i : g[i] is ±Inf or NaN}", Dims: []Dim{{"N", "elements"}},
	Operands: []Operand{
		{Name: "g", DType: F32, Rows: X("N"), Role: In},
		{Name: "sumsq", DType: F32, Rows: X(), Role: Out},
		{Name: "nonfinite", DType: I32, Rows: X(), Role: Out},
	},
	Reduces: X("N"), Flops: perElement(2), Shapes: optimizerShapes, Anchor: "global_norm", ExactOnIntegers: true,
	NoExactRounding: "its outputs are f32 and i32: the rounding cases would check exact sums, which the binary64 sum gives for any input",
	NonClaims:       []string{"global_norm's sum of squares is nan or inf where a g[i] is; the count of non-finite elements is exact"},
})

// AdamW is torch.optim.AdamW's step (decoupled weight decay, bias
// correction, no amsgrad) on f32 parameters, with the gradient multiplied by
// grad_scale first (1/loss_scale × the clipping factor); it also writes the
// f16 working copy of the parameters the kernels read.
var AdamW = builtinOp(&Op{
	ID: 20, Name: "adamw",
	Math: "g = grad·s; p −= lr·wd·p; m = β1·m + (1−β1)·g; v = β2·v + (1−β2)·g²; p −= lr/(1−β1ᵗ)·m/(√v/√(1−β2ᵗ) + eps); p16 = f16(p)",
	Dims: []Dim{{"N", "parameters"}},
	Params: []Param{
		{Name: "lr", Kind: Float, Min: 0, Max: 10, Default: 1e-3, Meaning: "the learning rate"},
		{Name: "beta1", Kind: Float, Min: 0, Max: 0.999999, Default: 0.9, Meaning: "the first moment's decay"},
		{Name: "beta2", Kind: Float, Min: 0, Max: 0.999999, Default: 0.999, Meaning: "the second moment's decay"},
		{Name: "eps", Kind: Float, Min: 1e-30, Max: 1, Default: 1e-8, Meaning: "added to the corrected second moment's square root"},
		{Name: "weight_decay", Kind: Float, Min: 0, Max: 10, Default: 0.01, Meaning: "decoupled: p is multiplied by 1 − lr·weight_decay"},
		{Name: "t", Kind: Int, Min: 1, Max: math.MaxInt32, Default: 1, Meaning: "the step, from 1: the bias corrections 1 − β1ᵗ and 1 − β2ᵗ"},
		{Name: "grad_scale", Kind: Float, Min: 0, Max: math.MaxFloat32, Default: 1, Meaning: "the gradient's multiplier: 1/loss_scale times the clipping factor"},
	},
	Operands: []Operand{
		{Name: "param", DType: F32, Rows: X("N"), Role: InOut},
		{Name: "grad", DType: F32, Rows: X("N"), Role: In},
		{Name: "m", DType: F32, Rows: X("N"), Role: InOut},
		{Name: "v", DType: F32, Rows: X("N"), Role: InOut},
		{Name: "param16", DType: F16, Rows: X("N"), Role: Out},
	},
	Independent: "N", Flops: perElement(16), Shapes: adamWShapes, Anchor: "adamw",
	NoExactRounding: "the square root and the quotients are not exact in general, so no input gives adamw exact results to round",
	NonClaims: []string{
		"adamw is checked for v ≥ 0, as the optimizer keeps it; nothing is claimed for a negative second moment",
		"adamw is checked where no finite binary32 intermediate overflows (|grad·grad_scale| below about 1.8e19); where one does, a binary32 kernel gives ±Inf or NaN and the binary64 reference a finite value",
	},
})
