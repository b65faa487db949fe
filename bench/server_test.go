package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vkern/vkern/cache"
	"github.com/vkern/vkern/kernels"
)

// buildServer compiles the cpu kernel server from ../kernels for the test.
func buildServer(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the C++ kernel server")
	}
	cxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("no g++ to build the kernel server with")
	}
	dir := t.TempDir()
	units, err := kernels.Write(filepath.Join(dir, "src"), "cpu")
	if err != nil {
		t.Fatal(err)
	}
	// The unit that defines the sources' hash, as the builder writes it.
	source := filepath.Join(dir, "src", cache.SourceUnit)
	if err := os.WriteFile(source, cache.SourceUnitText("bench-test"), 0o644); err != nil {
		t.Fatal(err)
	}
	units = append(units, source)
	bin := filepath.Join(dir, "server")
	// g++ compiles each unit on its own and links them, as the builder does.
	args := []string{"-std=c++17", "-O1", "-pthread", "-I" + filepath.Join(dir, "src"), "-o", bin}
	cmd := exec.Command(cxx, append(args, units...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, out)
	}
	return bin
}

func TestServerSuiteMeasuresEveryCase(t *testing.T) {
	bin := buildServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress strings.Builder
	results, err := ServerSuite(ctx, bin, "bench-test", ServerOptions{
		Calls: 20, Oneshots: 3, Sizes: []int64{1 << 20, 3 << 20}, TextBytes: 1 << 20, TextRuns: 1, Progress: &progress,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	byName := map[string]Result{}
	for _, r := range results {
		byName[r.Name] = r
		t.Logf("%-30s n=%-4d %12v %6.2f GB/s  %s %.3g", r.Name, r.N, time.Duration(r.MedianNs), r.GBps, r.Anchor, r.Ratio)
	}
	for _, name := range []string{"pipe_echo_blocking", "ping", "ping_pipes", "run_tiny", "run_tiny_untimed", "run_tiny_untimed_pipes", "run_batch100", "run_batch100_overhead_per_op",
		"oneshot_run_tiny", "write_1MiB", "read_1MiB", "write_3MiB", "read_3MiB", "text_write_1MiB", "text_read_1MiB"} {
		r, ok := byName[name]
		if !ok {
			t.Errorf("no %s result", name)
			continue
		}
		if r.N < 1 || r.MedianNs <= 0 {
			t.Errorf("%s: n = %d, median %v ns", name, r.N, r.MedianNs)
		}
		if strings.Contains(name, "write_") || strings.Contains(name, "read_") {
			if r.Bytes <= 0 || r.GBps <= 0 {
				t.Errorf("%s: bytes %d, %v GB/s", name, r.Bytes, r.GBps)
			}
		}
	}
	for name, anchor := range map[string]string{"ping": "ping_pipes", "ping_pipes": "pipe_echo_blocking",
		"run_tiny_untimed": "run_tiny_untimed_pipes", "run_tiny": "oneshot_run_tiny",
		"write_1MiB": "text_write_1MiB", "read_1MiB": "text_read_1MiB"} {
		if r := byName[name]; r.Anchor != anchor || r.Ratio <= 0 {
			t.Errorf("%s: anchor %q ratio %v, want %s", name, r.Anchor, r.Ratio, anchor)
		}
	}
}

func TestSizesThatDoNotFitAreLeftOut(t *testing.T) {
	fit, text, skipped := fitSizes([]int64{1 << 20, 1 << 60}, 1<<60)
	if len(fit) != 2 || fit[0] != 1<<20 || len(skipped) != 1 || skipped[0].bytes != 1<<60 || text >= 1<<60 || fit[1] != text {
		t.Errorf("fitSizes = %v, %d, %v", fit, text, skipped)
	}
	if got := sizeName(256 << 20); got != "256MiB" {
		t.Errorf("sizeName(256 MiB) = %q", got)
	}
	if got := sizeName(1 << 30); got != "1GiB" {
		t.Errorf("sizeName(1 GiB) = %q", got)
	}
}
