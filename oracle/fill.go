package oracle

import (
	"context"

	"github.com/vkern/vkern/op"
)

func init() { mustRegister(op.Fill, Spec{Compute: fillCompute}) }

// fillCompute is the reference of fill: every element is the value rounded
// to f32, exactly (Bound 0). A value past f32's range is refused by the
// contract; NaN cannot be set (parameters are finite).
func fillCompute(ctx context.Context, s op.Shape, _ []Input, _ Arithmetic) ([]*Reference, error) {
	v := float64(float32(s.Value("value")))
	return elementwise(ctx, int(s.Int("N")), func(int) (float64, float64) { return v, 0 })
}
