package userop_test

import (
	"context"
	"fmt"
	"math"
	"testing/fstest"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
	"github.com/vkern/vkern/userop"
	"github.com/vkern/vkern/verify"
)

// scaleKernel is scale's cpu kernel: one file that defines run_scale. A
// program would keep it in a file of its own package and embed it.
const scaleKernel = `// scale on the CPU: y = alpha·x elementwise, x f16, y f32; alpha is
// rounded to binary32 once and each product once.
#include "core/backend.h"
#include "core/f16.h"

namespace vkern {

Result run_scale(const Call& c, uint64_t*) {
  using namespace op_scale;
  const size_t n = c.dim(param::N);
  const float alpha = static_cast<float>(c.real(param::alpha));
  const uint16_t* x = c.ptr<const uint16_t>(buf::x);
  float* y = c.ptr<float>(buf::y);
  for (size_t i = 0; i < n; ++i) y[i] = alpha * f16_to_f32(x[i]);
  return Result::OK();
}

}  // namespace vkern
`

// scale is y = alpha·x: its contract, reference and cpu kernel.
var scale = userop.Op{
	Contract: &op.Op{
		Name: "scale", Math: "y = alpha·x, elementwise",
		Dims:   []op.Dim{{Name: "N", Meaning: "elements"}},
		Params: []op.Param{{Name: "alpha", Kind: op.Float, Min: -1e4, Max: 1e4, Default: 1.5, Meaning: "the factor"}},
		Operands: []op.Operand{
			{Name: "x", DType: op.F16, Rows: op.X("N"), Role: op.In},
			{Name: "y", DType: op.F32, Rows: op.X("N"), Role: op.Out},
		},
		Independent:     "N",
		NoExactRounding: "its output is f32: there is no rounding to f16 to check",
		Shapes:          op.Shapes{Quick: []string{"1", "1000:alpha=-0.25"}},
	},
	Reference: oracle.Spec{Compute: scaleReference},
	CPU:       userop.Kernel{FS: fstest.MapFS{"scale.cc": {Data: []byte(scaleKernel)}}, Files: []string{"scale.cc"}},
}

// scaleReference is y = alpha·x in float64.
//
// Bound. A kernel rounds alpha to binary32 (relative error 2⁻²⁴) and the
// product once (2⁻²⁴); the float64 product here errs by 2⁻⁵³. So
// |ŷ − y| ≤ (2·2⁻²⁴ + 2⁻⁴⁸ + 2⁻⁵³)·|y| ≤ 3·2⁻²⁴·|y|, plus 2⁻¹⁴⁹ where the
// result is a binary32 subnormal. NaN and ±Inf follow IEEE arithmetic
// (Inf·0 is NaN), as a kernel's do.
func scaleReference(ctx context.Context, s op.Shape, in []oracle.Input, _ oracle.Arithmetic) ([]*oracle.Reference, error) {
	x, alpha := in[0].F16, s.Value("alpha")
	y := &oracle.Reference{Value: make([]float64, len(x)), Bound: make([]float64, len(x))}
	err := oracle.ParallelRows(ctx, len(x), 4, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			y.Value[i] = alpha * f16.ToFloat64(x[i])
			y.Bound[i] = 3*0x1p-24*math.Abs(y.Value[i]) + 0x1p-149
		}
	})
	return []*oracle.Reference{y}, err
}

// A program declares its op and then uses it as any of vkern's: here it
// verifies scale on the cpu backend at its quick shapes, every input
// distribution (integer, uniform, normal, wide, special).
func Example() {
	if err := userop.Declare(scale); err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	dev, err := vkern.Open(ctx, vkern.Options{Backend: "cpu"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	cases, err := verify.Plan{Ops: []*op.Op{scale.Contract}, Seed: 1, Quick: true}.Cases()
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := verify.Run(ctx, dev, cases, verify.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: %s, %d cases (wire id %d, derived from the name)\n", scale.Contract.Name, res.Verdict, len(res.Cases), scale.Contract.ID)
	// Output: scale: passed, 10 cases (wire id 2191006833, derived from the name)
}
