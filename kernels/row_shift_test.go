package kernels

import "testing"

// TestRowShiftPutsEveryTileElementInPlace compiles
// testdata/row_shift_check.cc against cuda/row_shift.cuh, the Hopper GEMM's
// reading of an L whose rows do not start 16-byte aligned (TMA copies of its
// eight row classes, shifted into place in shared memory), for the host and
// runs it: every class a tensor TMA accepts, every raw box aligned and
// inside the operand, every stage unit written once, and the stage, read
// through TMA's swizzle, the operand's tile in both of L's layouts.
func TestRowShiftPutsEveryTileElementInPlace(t *testing.T) {
	bin := buildHostCheck(t, "cuda", "cuda/row_shift.cuh", "row_shift_check.cc", "-O1")
	runHostCheck(t, bin)
}
