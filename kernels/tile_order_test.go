package kernels

import "testing"

// TestAttentionTileOrderVisitsEveryItemOnce compiles
// testdata/tile_order_check.cc against cuda/tile_order.cuh, the Hopper
// attention kernels' order of items, for the host and runs it: every item
// of every grid it tries maps to one (head, tile rank), heaviest first
// within a group of heads, and no group is the order the kernels had
// before groups.
func TestAttentionTileOrderVisitsEveryItemOnce(t *testing.T) {
	bin := buildHostCheck(t, "cuda", "cuda/tile_order.cuh", "tile_order_check.cc", "-O1")
	runHostCheck(t, bin)
}
