package kernels

import (
	"encoding/json"
	"os/exec"
	"testing"
)

// TestAttentionTileOrderVisitsEveryItemOnce compiles
// testdata/tile_order_check.cc against cuda/tile_order.cuh, the Hopper
// attention kernels' order of items, for the host and runs it: every item
// of every grid it tries maps to one (head, tile rank), heaviest first
// within a group of heads, and no group is the order the kernels had
// before groups.
func TestAttentionTileOrderVisitsEveryItemOnce(t *testing.T) {
	bin := buildHostCheck(t, "cuda", "cuda/tile_order.cuh", "tile_order_check.cc", "-O1")
	cmd := exec.Command(bin)
	out, err := cmd.Output()
	var got struct {
		Checked int64 `json:"checked"`
		Bad     int64 `json:"bad"`
	}
	if jerr := json.Unmarshal(out, &got); jerr != nil {
		t.Fatalf("tile_order_check printed %q (%v): %v", out, err, jerr)
	}
	if err != nil || got.Bad != 0 || got.Checked == 0 {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Errorf("tile_order_check: %d of %d items wrong (exit %v)\n%s", got.Bad, got.Checked, err, stderr)
	}
}
