package kernels

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestSourcesCPUHoldsTheCoreAndTheBackend(t *testing.T) {
	files, main, err := Sources("cpu")
	if err != nil {
		t.Fatal(err)
	}
	if main != "cpu/main.cc" {
		t.Errorf("main file %q, want cpu/main.cc", main)
	}
	for _, want := range []string{
		"core/protocol.h", "core/backend.h", "core/ops.h", "core/f16.h", "core/server.cc",
		"cpu/main.cc", "cpu/device.cc", "cpu/convert.cc", "cpu/gemm.cc", "cpu/softmax.cc",
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
	cuda, cudaMain, err := Sources("cuda")
	if err != nil {
		t.Fatal(err)
	}
	hip, hipMain, err := Sources("hip")
	if err != nil {
		t.Fatal(err)
	}
	if cudaMain != "cuda/main.cu" || hipMain != cudaMain {
		t.Errorf("main files %q and %q, want cuda/main.cu for both", cudaMain, hipMain)
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
// does, plus -Wall -Wextra -Werror, with every C++ compiler found.
func TestSourcesCompileWithoutWarnings(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the kernel server")
	}
	files, main, err := Sources("cpu")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for path, data := range files {
		full := filepath.Join(dir, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	found := 0
	for _, cxx := range []string{"g++", "clang++"} {
		path, err := exec.LookPath(cxx)
		if err != nil {
			continue
		}
		found++
		t.Run(cxx, func(t *testing.T) {
			cmd := exec.Command(path, "-std=c++17", "-O3", "-march=native", "-pthread", "-I"+dir,
				`-DVKERN_SOURCE_SHA256="test"`, "-Wall", "-Wextra", "-Werror",
				"-o", filepath.Join(dir, "server-"+cxx), filepath.Join(dir, main))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
			}
		})
	}
	if found == 0 {
		t.Skip("no C++ compiler (g++ or clang++) on PATH")
	}
}
