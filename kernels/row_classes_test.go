package kernels

import "testing"

// TestRowClassesReadEveryTileElement compiles testdata/row_classes_check.cc
// against cuda/row_classes.cuh, the Hopper GEMM's reading of an L whose rows
// do not start 16-byte aligned in eight row classes, for the host and runs
// it: every class a tensor TMA accepts, every tile element read from the
// operand's right element (zero past its edges, nothing outside it), and
// each accumulator row stored to the row its shared-memory row holds.
func TestRowClassesReadEveryTileElement(t *testing.T) {
	bin := buildHostCheck(t, "cuda", "cuda/row_classes.cuh", "row_classes_check.cc", "-O1")
	runHostCheck(t, bin)
}
