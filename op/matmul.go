package op

// The matrix-product family: Out = L·R with f32 accumulation, each factor
// read from its operand as stored or transposed. One reference (package
// oracle) and one kernel machinery per backend serve every member.

// matmulShapes are the family's shapes: the edge cases (a single element;
// dimensions that are prime and far from any tile size; a long thin
// reduction), a larger square, and reductions of over 4096 terms (gemm sums
// over K, gemm_grad_a over N, gemm_grad_b over M), where tensor cores
// accumulate most; for benchmarks, the sizes of the GPU issues' bars.
var matmulShapes = Shapes{
	Quick:   []string{"1x1x1", "17x31x129", "3x1000x5", "64x48x80", "24x24x4100"},
	Default: []string{"1x1x1", "17x31x129", "3x1000x5", "128x96x200", "256x256x256", "40x40x4100", "40x4100x40", "4100x40x40"},
	Bench:   []string{"1024x1024x1024", "4096x4096x4096", "8192x8192x8192", "8192x4096x11008", "4097x4099x4101"},
}

var matmulDims = []Dim{
	{"M", "rows of A and of the product C"},
	{"N", "columns of B and of C"},
	{"K", "the reduction: columns of A, rows of B"},
}

func matmulFlops(s Shape) float64 {
	return 2 * float64(s.Dims[0]) * float64(s.Dims[1]) * float64(s.Dims[2])
}

// Gemm is C f32 M×N = A f16 M×K · B f16 K×N.
var Gemm = builtinOp(&Op{
	ID: 1, Name: "gemm", Math: "C = A·B, f32 accumulation, f32 output", Dims: matmulDims,
	Operands: []Operand{
		{Name: "A", DType: F16, Rows: X("M"), Cols: X("K"), Role: In},
		{Name: "B", DType: F16, Rows: X("K"), Cols: X("N"), Role: In},
		{Name: "C", DType: F32, Rows: X("M"), Cols: X("N"), Role: Out},
	},
	Reduces: X("K"), Independent: "M", Flops: matmulFlops, Shapes: matmulShapes, ExactOnIntegers: true,
	Matmul: &MatmulSpec{L: "A", R: "B", Rows: "M", Cols: "N", Depth: "K"},
})

// GemmGradA is dA f16 M×K = dC f16 M×N · Bᵀ, B f16 K×N.
var GemmGradA = builtinOp(&Op{
	ID: 2, Name: "gemm_grad_a", Math: "dA = dC·Bᵀ, f32 accumulation, one rounding to f16", Dims: matmulDims,
	Operands: []Operand{
		{Name: "dC", DType: F16, Rows: X("M"), Cols: X("N"), Role: In},
		{Name: "B", DType: F16, Rows: X("K"), Cols: X("N"), Role: In},
		{Name: "dA", DType: F16, Rows: X("M"), Cols: X("K"), Role: Out},
	},
	Reduces: X("N"), Independent: "M", Flops: matmulFlops, Shapes: matmulShapes, ExactOnIntegers: true,
	Matmul: &MatmulSpec{L: "dC", R: "B", TransR: true, Rows: "M", Cols: "K", Depth: "N"},
})

// GemmGradB is dB f16 K×N = Aᵀ · dC, A f16 M×K, dC f16 M×N.
var GemmGradB = builtinOp(&Op{
	ID: 3, Name: "gemm_grad_b", Math: "dB = Aᵀ·dC, f32 accumulation, one rounding to f16", Dims: matmulDims,
	Operands: []Operand{
		{Name: "A", DType: F16, Rows: X("M"), Cols: X("K"), Role: In},
		{Name: "dC", DType: F16, Rows: X("M"), Cols: X("N"), Role: In},
		{Name: "dB", DType: F16, Rows: X("K"), Cols: X("N"), Role: Out},
	},
	Reduces: X("M"), Flops: matmulFlops, Shapes: matmulShapes, ExactOnIntegers: true,
	Matmul: &MatmulSpec{L: "A", TransL: true, R: "dC", Rows: "K", Cols: "N", Depth: "M"},
})
