package op

import "math"

// Fill sets every element of an f32 buffer to one value: how a training
// step clears its gradient accumulators before the backward adds into them.
var Fill = builtinOp(&Op{
	ID: 21, Name: "fill", Math: "y[i] = value", Dims: []Dim{{"N", "elements"}},
	Params: []Param{{Name: "value", Kind: Float, Min: -math.MaxFloat32, Max: math.MaxFloat32, Default: 0,
		Meaning: "the value, rounded to f32 (to nearest) once"}},
	Operands: []Operand{
		{Name: "y", DType: F32, Rows: X("N"), Role: Out},
	},
	Independent: "N", ExactOnIntegers: true,
	Shapes: Shapes{
		Quick:   []string{"1", "4099", "65536:value=-2.5"},
		Default: []string{"1", "7", "4099", "65536:value=-2.5", "1000003:value=0.1"},
		Bench:   []string{"124475904"}, // GPT-2 124M's gradients, in one buffer
	},
	NoExactRounding: "its output is f32 and holds the value rounded once; there is no arithmetic to round",
})
