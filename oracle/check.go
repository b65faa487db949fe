package oracle

import (
	"context"
	"fmt"
	"math"

	"github.com/vkern/vkern/op"
)

// CheckSpec tries spec, the reference of an op declared outside vkern,
// before anything trusts it. At o's first quick shape, seed 1, for every
// distribution verify would ask of it, Generate must draw o's inputs (the
// right count, types and element counts) and Compute must give one
// Reference per output with a value and a bound for every element, each
// bound of a finite value a number ≥ 0. On the uniform and normal inputs,
// where a sound bound is small, every finite value's bound must also be
// finite: an infinite one would pass any result. An op with neither a
// Generate nor a NoExactRounding is refused too: verify's rounding cases
// would hold its Gen.Default inputs to bit-exact results. A panic in
// Generate or Compute (on the calling goroutine) is returned as an error.
//
// o must be a checked contract (op.Check, or registered). The built-in
// references are held to more by their own tests.
func CheckSpec(ctx context.Context, o *op.Op, spec Spec) error {
	if spec.Compute == nil {
		return fmt.Errorf("oracle: %s's Spec has no Compute; give it the float64 reference", o.Name)
	}
	if len(o.Shapes.Quick) == 0 {
		return fmt.Errorf("oracle: %s has no quick shape to try its reference at", o.Name)
	}
	s, err := o.ParseShape(o.Shapes.Quick[0])
	if err != nil {
		return fmt.Errorf("oracle: %w", err)
	}
	if spec.Generate == nil && o.NoExactRounding == "" {
		return fmt.Errorf("oracle: %s has no Generate and no NoExactRounding, so verify's rounding cases would demand bit-exact results on inputs drawn for no such purpose; "+
			"set NoExactRounding in the contract to say why no input makes its results exact, or draw the Rounding distribution in a Generate", o.Name)
	}
	for _, d := range Dists() {
		if ok, _ := RoundingApplies(o, s); d == Rounding && !ok {
			continue
		}
		var inputs []Input
		err := protect(fmt.Sprintf("oracle: %s's Generate at %s %s", o.Name, s, d), func() (err error) {
			inputs, err = generate(o, spec, s, d, 1)
			return err
		})
		if err != nil {
			return err
		}
		var refs []*Reference
		what := fmt.Sprintf("oracle: %s's reference on the %s inputs at %s", o.Name, d, s)
		err = protect(what, func() (err error) {
			if refs, err = spec.Compute(ctx, s, inputs, Arithmetic{}); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := checkReferences(o, s, refs); err != nil {
			return fmt.Errorf("oracle: %s's reference on the %s inputs at %s: %w", o.Name, d, s, err)
		}
		if d != Uniform && d != Normal {
			continue
		}
		for k, ref := range refs {
			for i, b := range ref.Bound {
				if v := ref.Value[i]; math.IsInf(b, 0) && !math.IsNaN(v) && !math.IsInf(v, 0) {
					return fmt.Errorf("oracle: %s's reference on the %s inputs at %s: output %s's bound at element %d (value %v) is not finite; "+
						"a bound that passes any result checks nothing: derive a finite one", o.Name, d, s, o.Outputs()[k].Name, i, v)
				}
			}
		}
	}
	return nil
}

// protect runs fn and turns a panic on its goroutine into an error that
// says what panicked.
func protect(what string, fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s panicked: %v", what, r)
		}
	}()
	return fn()
}
