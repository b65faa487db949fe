package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/cli"
	"github.com/vkern/vkern/kernels"
	"github.com/vkern/vkern/kerneltest"
	"github.com/vkern/vkern/toolchain"
	"github.com/vkern/vkern/userop"
	"github.com/vkern/vkern/verify"
)

// TestMain declares the ops, as main does, and gives the tests a cache of
// their own unless $VKERN_CACHE names one to share.
func TestMain(m *testing.M) {
	if err := userop.Declare(Ops()...); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	if os.Getenv("VKERN_CACHE") == "" {
		dir, err := os.MkdirTemp("", "userops-test-cache-")
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Setenv("VKERN_CACHE", dir)
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

var opNames = []string{"rmsnorm", "rmsnorm_grad", "swiglu"}

// extraShapes are shapes past the quick ones: rows longer than a warp's
// many strides, a single long row, many short rows.
var extraShapes = []string{"3x4099", "2x20000", "3000x64"}

// CPUDefects are mistakes planted in the cpu kernels; each must be caught.
var CPUDefects = []kerneltest.Mutation{
	{
		Name: "rmsnorm's eps outside the square root", File: "kernels/cpu/rmsnorm.cc",
		Old: "const float r = 1.0f / std::sqrt(q / static_cast<float>(cols) + eps);", New: "const float r = 1.0f / (std::sqrt(q / static_cast<float>(cols)) + eps);",
		Op: "rmsnorm", Shapes: []string{"7x769", "64x1024"},
	},
	{
		Name: "rmsnorm's mean square without the last column", File: "kernels/cpu/rmsnorm.cc",
		Old: "q += v * v;", New: "q += j + 1 < cols ? v * v : 0.0f;",
		Op: "rmsnorm", Shapes: []string{"7x769"},
	},
	{
		Name: "rmsnorm_grad's dx without the x̂·mean(g⊙x̂) term", File: "kernels/cpu/rmsnorm.cc",
		Old: "dx[j] = f32_to_f16((g - (f16_to_f32(x[j]) * r) * c) * r);", New: "dx[j] = f32_to_f16(g * r);",
		Op: "rmsnorm_grad", Shapes: []string{"7x769"},
	},
	{
		Name: "rmsnorm_grad's dw overwritten instead of added into", File: "kernels/cpu/rmsnorm.cc",
		Old: "std::copy(dw + first, dw + first + n, sum);", New: "std::fill(sum, sum + n, 0.0f);",
		Op: "rmsnorm_grad", Shapes: []string{"7x769"},
	},
	{
		Name: "swiglu with σ(a) where silu(a) = a·σ(a) belongs", File: "kernels/cpu/swiglu.cc",
		Old: "a / (1.0f + std::exp(-a))", New: "1.0f / (1.0f + std::exp(-a))",
		Op: "swiglu", Shapes: []string{"7x769"},
	},
	{
		Name: "swiglu reading rows C apart where 2C belongs", File: "kernels/cpu/swiglu.cc",
		Old: "const uint16_t* gate = x + r * 2 * C;", New: "const uint16_t* gate = x + r * C;",
		Op: "swiglu", Shapes: []string{"7x769"},
	},
}

// CUDADefects are mistakes planted in the cuda kernels; each must be
// caught on a GPU.
var CUDADefects = []kerneltest.Mutation{
	{
		Name: "rmsnorm's eps outside the square root", File: "kernels/cuda/rmsnorm.cu",
		Old: "const float s = 1.0f / sqrtf(q / static_cast<float>(C) + eps);", New: "const float s = 1.0f / (sqrtf(q / static_cast<float>(C)) + eps);",
		Op: "rmsnorm", Shapes: []string{"7x769", "64x1024"},
	},
	{
		Name: "a warp sum that stops one step short", File: "kernels/cuda/rmsnorm.cu",
		Old: "for (int mask = kWarp / 2; mask > 0; mask /= 2)", New: "for (int mask = kWarp / 2; mask > 1; mask /= 2)",
		Op: "rmsnorm", Shapes: []string{"7x769"},
	},
	{
		Name: "rmsnorm_grad's dx without the x̂·mean(g⊙x̂) term", File: "kernels/cuda/rmsnorm.cu",
		Old: "dx[r * C + j] = __float2half_rn((g - (__half2float(x[r * C + j]) * s) * c) * s);", New: "dx[r * C + j] = __float2half_rn(g * s);",
		Op: "rmsnorm_grad", Shapes: []string{"7x769"},
	},
	{
		Name: "rmsnorm_grad's dw overwritten instead of added into", File: "kernels/cuda/rmsnorm.cu",
		Old: "float sum = dw[j];", New: "float sum = 0.0f;",
		Op: "rmsnorm_grad", Shapes: []string{"7x769"},
	},
	{
		Name: "swiglu with σ(a) where silu(a) = a·σ(a) belongs", File: "kernels/cuda/swiglu.cu",
		Old: "a / (1.0f + expf(-a)) * b", New: "1.0f / (1.0f + expf(-a)) * b",
		Op: "swiglu", Shapes: []string{"7x769"},
	},
}

// open opens backend's device, built with edit applied to the sources, or
// skips where the backend cannot run.
func open(t *testing.T, backend string, edit func(map[string][]byte) error) verify.Device {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the kernel server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := toolchain.Detect(ctx, backend); err != nil {
		t.Skipf("the %s backend cannot be built or run here: %v", backend, err)
	}
	dev, err := vkern.Open(ctx, vkern.Options{Backend: backend, EditSources: edit, QuickBuild: edit != nil})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// run runs the command line, as the binary would.
func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = cli.Run(context.Background(), args, &out, &errOut, Ops()...)
	return code, out.String(), errOut.String()
}

func TestVerifyOnTheCPUBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the kernel server")
	}
	report := filepath.Join(t.TempDir(), "verify.json")
	code, stdout, stderr := run(t, "verify", "--backend", "cpu", "--quick", "--op", strings.Join(opNames, ","), "--json", report)
	if code != 0 || !strings.Contains(stdout, "PASSED: 45 passed") {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	t.Logf("\n%s", stdout)
}

func TestConformanceOnTheCPUBackend(t *testing.T) { conformance(t, "cpu") }

func TestConformanceOnTheCUDABackend(t *testing.T) { conformance(t, "cuda") }

func conformance(t *testing.T, backend string) {
	dev := open(t, backend, nil)
	for _, name := range opNames {
		t.Run(name, func(t *testing.T) { kerneltest.Op(t, dev, name, extraShapes...) })
	}
}

func TestPlantedDefectsInTheCPUKernelsAreIncorrect(t *testing.T) {
	kerneltest.Planted(t, func(t *testing.T, edit func(map[string][]byte) error) verify.Device {
		return open(t, "cpu", edit)
	}, CPUDefects)
}

func TestPlantedDefectsInTheCUDAKernelsAreIncorrect(t *testing.T) {
	kerneltest.Planted(t, func(t *testing.T, edit func(map[string][]byte) error) verify.Device {
		return open(t, "cuda", edit)
	}, CUDADefects)
}

// Every snippet matches its kernel exactly once, checked without a build,
// so that an edit that orphans one fails here and not only on a GPU.
func TestPlantedDefectSnippetsMatchTheSources(t *testing.T) {
	for backend, defects := range map[string][]kerneltest.Mutation{"cpu": CPUDefects, "cuda": CUDADefects} {
		for _, m := range defects {
			files, _, err := kernels.Sources(backend)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Plant()(files); err != nil {
				t.Errorf("%s: %v", backend, err)
			}
		}
	}
}

func TestDoctorListsTheDeclaredOps(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the kernel server")
	}
	code, stdout, stderr := run(t, "doctor")
	for _, name := range opNames {
		if !strings.Contains(stdout, "op "+name) || !strings.Contains(stdout, "kernels for cpu and cuda") {
			t.Errorf("doctor does not list %s with its backends:\n%s", name, stdout)
		}
	}
	if code != 0 {
		t.Errorf("exit %d\n%s\n%s", code, stdout, stderr)
	}
}
