package kernels

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vkern/vkern/cache"
)

func TestSourcesCPUHoldsTheCoreAndTheBackend(t *testing.T) {
	files, units, err := Sources("cpu")
	if err != nil {
		t.Fatal(err)
	}
	// The main file, then each op kernel file in name order.
	if len(units) < 3 || units[0] != "cpu/main.cc" || !slices.Contains(units, "cpu/gemm.cc") ||
		!slices.Contains(units, "cpu/softmax.cc") || !slices.IsSorted(units[1:]) || slices.Contains(units, "cpu/device.cc") {
		t.Errorf("units %q, want cpu/main.cc then the op kernel files (gemm.cc, softmax.cc, …) in name order, not the files main.cc includes", units)
	}
	for _, want := range []string{
		"core/protocol.h", "core/backend.h", "core/ops.h", "core/f16.h", "core/server.cc",
		"cpu/main.cc", "cpu/device.cc", "cpu/device.h", "cpu/convert.h", "cpu/gemm.cc", "cpu/softmax.cc",
	} {
		if len(files[want]) == 0 {
			t.Errorf("Sources(cpu) lacks %s", want)
		}
	}
	for path := range files {
		if filepath.IsAbs(path) || strings.Contains(path, "..") || strings.HasSuffix(path, ".go") {
			t.Errorf("unexpected source path %q", path)
		}
	}
}

func TestSourcesCUDAAndHIPShareOneSet(t *testing.T) {
	cuda, cudaUnits, err := Sources("cuda")
	if err != nil {
		t.Fatal(err)
	}
	hip, hipUnits, err := Sources("hip")
	if err != nil {
		t.Fatal(err)
	}
	if len(cudaUnits) == 0 || cudaUnits[0] != "cuda/main.cu" || !slices.Equal(hipUnits, cudaUnits) {
		t.Errorf("units %q and %q, want the same for both, cuda/main.cu first", cudaUnits, hipUnits)
	}
	for _, want := range []string{"core/server.cc", "cuda/main.cu", "cuda/device.cu", "cuda/compat.h", "cuda/ops.cuh", "cuda/gemm.cu", "cuda/softmax.cu"} {
		if len(cuda[want]) == 0 || string(cuda[want]) != string(hip[want]) {
			t.Errorf("Sources(cuda) and Sources(hip) disagree on or lack %s", want)
		}
	}
	for path := range cuda {
		if strings.HasPrefix(path, "cpu/") {
			t.Errorf("the cuda set holds the cpu file %s", path)
		}
	}
}

func TestSourcesRefusesOtherBackends(t *testing.T) {
	for _, backend := range []string{"tpu", ""} {
		if _, _, err := Sources(backend); err == nil {
			t.Errorf("Sources(%q) succeeded, want an error", backend)
		} else if !strings.Contains(err.Error(), "cpu") {
			t.Errorf("Sources(%q): %v; want the error to name the backends that have sources", backend, err)
		}
	}
}

// TestSourcesCompileWithoutWarnings builds the cpu server as the builder
// does, each unit on its own and then linked (g++ and clang++ do both in
// one call), plus -Wall -Wextra -Werror, with every C++ compiler found. It
// also compiles each op kernel file alone with -fsyntax-only (the build
// does so too: each is a unit of its own).
func TestSourcesCompileWithoutWarnings(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the kernel server")
	}
	dir := t.TempDir()
	units, err := Write(dir, "cpu")
	if err != nil {
		t.Fatal(err)
	}
	files, _, err := Sources("cpu")
	if err != nil {
		t.Fatal(err)
	}
	opFiles, _ := kernelFiles(files, "cpu/main.cc", "cpu", ".cc")
	// The unit that defines the sources' hash, as the builder writes it.
	source := filepath.Join(dir, cache.SourceUnit)
	if err := os.WriteFile(source, cache.SourceUnitText("test"), 0o644); err != nil {
		t.Fatal(err)
	}
	units = append(units, source)
	strict := []string{"-std=c++17", "-O3", "-march=native", "-pthread", "-I" + dir, "-Wall", "-Wextra", "-Werror"}
	found := 0
	for _, cxx := range []string{"g++", "clang++"} {
		path, err := exec.LookPath(cxx)
		if err != nil {
			continue
		}
		found++
		t.Run(cxx, func(t *testing.T) {
			cmd := exec.Command(path, append(append(strict, "-o", filepath.Join(dir, "server-"+cxx)), units...)...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
			}
		})
		if found > 1 {
			continue
		}
		t.Run(cxx+" compiles each op kernel file alone", func(t *testing.T) {
			for _, f := range opFiles {
				cmd := exec.Command(path, append(strict, "-fsyntax-only", filepath.Join(dir, filepath.FromSlash(f)))...)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
				}
			}
		})
	}
	if found == 0 {
		t.Skip("no C++ compiler (g++ or clang++) on PATH")
	}
}
