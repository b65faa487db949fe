package kernels

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestAttentionTileOrderVisitsEveryItemOnce compiles
// testdata/tile_order_check.cc against cuda/tile_order.cuh, the Hopper
// attention kernels' order of items, for the host and runs it: every item
// of every grid it tries maps to one (head, tile rank), heaviest first
// within a group of heads, and no group is the order the kernels had
// before groups.
func TestAttentionTileOrderVisitsEveryItemOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles and runs a C++ program")
	}
	cxx, err := exec.LookPath("g++")
	if err != nil {
		if cxx, err = exec.LookPath("clang++"); err != nil {
			t.Skip("no C++ compiler (g++ or clang++) on PATH")
		}
	}
	files, _, err := Sources("cuda")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "cuda"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cuda", "tile_order.cuh"), files["cuda/tile_order.cuh"], 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "tile_order_check")
	build := exec.Command(cxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-I"+dir, "-o", bin,
		filepath.Join("testdata", "tile_order_check.cc"))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, out)
	}
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
