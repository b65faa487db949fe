package kernels

import "testing"

// TestStagedStoreWritesEveryElementOnce compiles
// testdata/staged_store_check.cc against cuda/staged_store.cuh, the Hopper
// GEMM's store of f16 rows that do not start 16-byte aligned, for the host
// and runs it: every element of a chunk written once with its staged value,
// nothing beside it, and every whole 16-byte unit in one aligned store, for
// row lengths of every remainder modulo 8.
func TestStagedStoreWritesEveryElementOnce(t *testing.T) {
	bin := buildHostCheck(t, "cuda", "cuda/staged_store.cuh", "staged_store_check.cc", "-O1")
	runHostCheck(t, bin)
}
