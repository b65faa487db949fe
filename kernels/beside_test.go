package kernels

import "testing"

// TestBesidePlanOrdersEveryConflict compiles testdata/beside_check.cc
// against cuda/beside.h, the plan by which the cuda server runs some of a
// batch's entries on a second stream, for the host and runs it: in every
// batch it draws, each pair of entries whose buffers conflict is ordered
// by the two streams' order, forks, waits and final join, and no entry
// waits without a conflict.
func TestBesidePlanOrdersEveryConflict(t *testing.T) {
	bin := buildHostCheck(t, "cuda", "cuda/beside.h", "beside_check.cc", "-O1")
	runHostCheck(t, bin)
}
