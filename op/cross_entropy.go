package op

import "math"

// IgnoreIndex is cross_entropy's parameter: the label that marks a row to
// skip.
const IgnoreIndex = "ignore_index"

// CrossEntropy is PyTorch's F.cross_entropy(logits, labels,
// reduction='mean', ignore_index=…) and its backward, fused, the gradient
// multiplied by grad_scale (a loss scale). loss holds each row's loss
// unscaled; the mean is Σ loss / n. Rows whose label is the
// ignore_index get loss 0 and a zero gradient row, and their logits are not
// read; when every row is ignored (n = 0) the whole gradient is 0 (no NaN).
// A label outside [0, V) that is not the ignore_index is refused with
// INVALID_ARGUMENT naming the row (PROTOCOL.md).
var CrossEntropy = builtinOp(&Op{
	ID: 6, Name: "cross_entropy", Dims: []Dim{{"R", "rows: one prediction each"}, {"V", "classes"}},
	Math: "loss[r] = logsumexp(x[r]) − x[r, label[r]]; dLogits[r] = s·(softmax(x[r]) − onehot(label[r]))/n, n = rows not ignored",
	Params: []Param{
		{Name: IgnoreIndex, Kind: Index, Default: math.NaN(),
			Meaning: "rows whose label equals it are skipped: loss 0, gradient 0, not counted in n"},
		{Name: "grad_scale", Kind: Float, Min: 0, Max: math.MaxFloat32, Default: 1,
			Meaning: "s, the gradient's multiplier: a loss scale (PyTorch's GradScaler multiplies the loss by it before backward)"},
	},
	Operands: []Operand{
		{Name: "logits", DType: F16, Rows: X("R"), Cols: X("V"), Role: In},
		{Name: "labels", DType: I32, Rows: X("R"), Role: In, Domain: "a class index in [0, V), or the ignore_index (set ignore_index to the label that marks rows to skip)"},
		{Name: "loss", DType: F32, Rows: X("R"), Role: Out},
		{Name: "dLogits", DType: F16, Rows: X("R"), Cols: X("V"), Role: Out},
	},
	Reduces: X("V"),
	Anchor:  "cross_entropy_fwd_bwd", // F.cross_entropy forward and backward
	Shapes: Shapes{
		Quick: []string{"1x1", "7x4099", "64x1000:ignore_index=-100", "12x300:ignore_index=0,grad_scale=65536"},
		// 65,536 is the longest row a GPU block holds on chip; 65,537 takes
		// the two-read path, as do the 100,000-class rows. The GPU-sized
		// 8192x50304 is not a default: its float64 reference needs about
		// 11 GB on the host (bench/cuda-verify-all.sh names it).
		Default: []string{"1x1", "7x4099", "256x1024:ignore_index=-100", "12x300:ignore_index=0,grad_scale=65536",
			"3x65536", "3x65537:ignore_index=-100", "64x100000"},
		Bench: []string{"8192x32768", "8192x50304", "32768x1024", "1x1", "7x4099"},
	},
	NoExactRounding: "exp and log are not exact, so no input gives cross_entropy exact results to round; its rounding is checked by the bias statistic only",
	NonClaims: []string{
		"cross_entropy is never checked bit for bit: exp and log are not exact, so integer inputs are checked under the error bound like the others",
		"cross_entropy is verified on valid labels only; the error for a label outside [0, V) is shown by the test suite through the real server, not by vkern verify",
		"cross_entropy's labels follow one pattern (uniform, the first and last class at fixed rows, every 4th row ignored when an ignore_index is set); other patterns, such as every row ignored, are shown by the test suite, not by vkern verify",
		"cross_entropy's loss is checked per row; the mean PyTorch returns, Σ loss / n, is left to the caller",
	},
})
