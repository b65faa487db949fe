package kernels

import "testing"

// TestAttentionRowScaleMatchesLdexp compiles testdata/row_scale_check.cc
// against cuda/row_scale.cuh, the powers of two of attention_grad's dS
// scaling, for the host and runs it: a multiplication by pow2(n) gives
// ldexp's bits for every n the Hopper kernels' fast path can take, and
// shift_for's shifts stay in the range that path assumes.
func TestAttentionRowScaleMatchesLdexp(t *testing.T) {
	bin := buildHostCheck(t, "cuda", "cuda/row_scale.cuh", "row_scale_check.cc", "-O1")
	runHostCheck(t, bin)
}
