package op

// softmaxShapes: a single element, an odd row length, rows too long for a
// GPU block's registers, and a batch of short rows.
var softmaxShapes = Shapes{
	Quick:   []string{"1x1", "7x4099", "64x1000"},
	Default: []string{"1x1", "7x4099", "64x100000", "256x1024"},
	Bench:   []string{"8192x32768", "8192x50304", "32768x1024", "1x1", "7x4099"},
}

var rowDims = []Dim{{"R", "rows"}, {"C", "columns: the length of each row"}}

// Softmax is Y f16 R×C, the row-wise softmax of X f16 R×C.
var Softmax = builtinOp(&Op{
	ID: 4, Name: "softmax", Math: "Y[r] = exp(X[r] − max X[r]) / Σ exp(X[r] − max X[r])", Dims: rowDims,
	Operands: []Operand{
		{Name: "X", DType: F16, Rows: X("R"), Cols: X("C"), Role: In},
		{Name: "Y", DType: F16, Rows: X("R"), Cols: X("C"), Role: Out},
	},
	Reduces: X("C"), Independent: "R", Shapes: softmaxShapes,
	NoExactRounding: "exp is not exact, so no input gives softmax exact results to round; its rounding is checked by the bias statistic only",
	NonClaims: []string{
		"softmax is never checked bit for bit: exp is not exact, so integer inputs are checked under the error bound like the others",
	},
})

// SoftmaxGrad is dX f16 R×C = Y ⊙ (dY − Σ dY⊙Y) per row.
var SoftmaxGrad = builtinOp(&Op{
	ID: 5, Name: "softmax_grad", Math: "dX[r] = Y[r] ⊙ (dY[r] − Σ dY[r]⊙Y[r])", Dims: rowDims,
	Operands: []Operand{
		{Name: "dY", DType: F16, Rows: X("R"), Cols: X("C"), Role: In},
		{Name: "Y", DType: F16, Rows: X("R"), Cols: X("C"), Role: In},
		{Name: "dX", DType: F16, Rows: X("R"), Cols: X("C"), Role: Out},
	},
	Reduces: X("C"), Independent: "R", Shapes: softmaxShapes, ExactOnIntegers: true,
	NonClaims: []string{
		"softmax_grad is checked for any Y, not only for rows that are softmax outputs: nothing is claimed about how errors in Y itself propagate",
	},
})
