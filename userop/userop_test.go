package userop_test

import (
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/cache"
	"github.com/vkern/vkern/kerneltest"
	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
	"github.com/vkern/vkern/userop"
	"github.com/vkern/vkern/verify"
)

// TestMain gives the tests a cache of their own unless $VKERN_CACHE names
// one to share.
func TestMain(m *testing.M) {
	if os.Getenv("VKERN_CACHE") == "" {
		dir, err := os.MkdirTemp("", "vkern-userop-test-")
		if err != nil {
			panic(err)
		}
		os.Setenv("VKERN_CACHE", dir)
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// cudaOnly is an op with a CUDA kernel and none for the cpu.
var cudaOnly = userop.Op{
	Contract: &op.Op{
		Name: "cuda_only", Dims: []op.Dim{{Name: "N"}},
		Operands: []op.Operand{
			{Name: "x", DType: op.F16, Rows: op.X("N"), Role: op.In},
			{Name: "y", DType: op.F32, Rows: op.X("N"), Role: op.Out},
		},
		NoExactRounding: "f32 output", Shapes: op.Shapes{Quick: []string{"7"}},
	},
	Reference: oracle.Spec{Compute: func(ctx context.Context, s op.Shape, in []oracle.Input, a oracle.Arithmetic) ([]*oracle.Reference, error) {
		return scaleReference(ctx, s, in, a) // alpha reads as NaN: any value will do for a kernel that never runs
	}},
	CUDA: userop.Kernel{FS: fstest.MapFS{"cuda_only.cu": {Data: []byte(
		"cudaError_t run_cuda_only(const Call&, unsigned long long*, cudaStream_t) { return cudaSuccess; }\n")}}, Files: []string{"*.cu"}},
}

// declareAll declares the ops every test here builds with, so that they
// share one server.
func declareAll(t *testing.T) {
	t.Helper()
	if err := userop.Declare(scale, cudaOnly); err != nil {
		t.Fatal(err)
	}
}

func needCompiler(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the kernel server")
	}
	if _, err := exec.LookPath("g++"); err != nil {
		if _, err := exec.LookPath("clang++"); err != nil {
			t.Skip("no C++ compiler")
		}
	}
}

// bad returns a copy of scale with its own contract, changed by edit.
func bad(name string, edit func(o *userop.Op)) userop.Op {
	c := *scale.Contract
	c.Name = name
	c.Operands = append([]op.Operand(nil), c.Operands...)
	c.ID = 0
	o := scale
	o.Contract = &c
	o.CPU = userop.Kernel{FS: fstest.MapFS{name + ".cc": {Data: []byte(strings.ReplaceAll(scaleKernel, "scale", name))}}, Files: []string{name + ".cc"}}
	edit(&o)
	return o
}

func TestABadOpIsAClearErrorAtDeclaration(t *testing.T) {
	for _, tt := range []struct {
		name string
		ops  []userop.Op
		want string
	}{
		{"no contract", []userop.Op{{}}, "op 1 of 1 has no Contract"},
		{"an operand with no shape", []userop.Op{bad("shapeless", func(o *userop.Op) { o.Contract.Operands[1].Rows = op.Extent{} })},
			"shapeless: operand y has no shape; set its Rows"},
		{"a bound that is not finite", []userop.Op{bad("boundless", func(o *userop.Op) {
			o.Reference.Compute = func(ctx context.Context, s op.Shape, in []oracle.Input, a oracle.Arithmetic) ([]*oracle.Reference, error) {
				refs, err := scaleReference(ctx, s, in, a)
				for i := range refs[0].Bound {
					refs[0].Bound[i] = math.Inf(1)
				}
				return refs, err
			}
		})}, "boundless's reference on the uniform inputs at 1: output y's bound at element 0 (value"},
		{"a NaN bound", []userop.Op{bad("nanbound", func(o *userop.Op) {
			o.Reference.Compute = func(ctx context.Context, s op.Shape, in []oracle.Input, a oracle.Arithmetic) ([]*oracle.Reference, error) {
				refs, err := scaleReference(ctx, s, in, a)
				refs[0].Bound[0] = math.NaN()
				return refs, err
			}
		})}, "nanbound's reference on the integer inputs at 1: output y's bound at element 0 (value -6) is NaN"},
		{"no reference", []userop.Op{bad("unreferenced", func(o *userop.Op) { o.Reference = oracle.Spec{} })}, "unreferenced's Spec has no Compute"},
		{"a missing entry point", []userop.Op{bad("entryless", func(o *userop.Op) {
			o.CPU.FS = fstest.MapFS{"entryless.cc": {Data: []byte(scaleKernel)}}
		})}, "entryless: no entry point: none of its cpu kernel files (entryless.cc) defines run_entryless; define\n\tResult run_entryless(const Call& c, uint64_t* problem)"},
		{"a kernel file that is not there", []userop.Op{bad("fileless", func(o *userop.Op) { o.CPU.Files = []string{"fileles.cc"} })},
			"fileless's cpu kernel file fileles.cc does not exist in its FS (the files there: fileless.cc)"},
		{"a pattern that matches nothing", []userop.Op{bad("patterned", func(o *userop.Op) { o.CPU.Files = []string{"*.cu"} })}, `pattern "*.cu" matches no file`},
		{"files without an FS", []userop.Op{bad("nofs", func(o *userop.Op) { o.CPU.FS = nil })}, "nofs's cpu kernel lists files but has no FS"},
		{"no kernels", []userop.Op{bad("kernelless", func(o *userop.Op) { o.CPU = userop.Kernel{} })}, "kernelless has no kernels; give it CPU or CUDA kernel files"},
		{"a built-in op's name", []userop.Op{bad("gemm", func(*userop.Op) {})}, "gemm is the name of a built-in op; choose another name"},
		{"a dimension that is not a C++ name", []userop.Op{bad("dimmed", func(o *userop.Op) { o.Contract.Dims = []op.Dim{{Name: "N-1"}} })}, `dimension or parameter "N-1"`},
		{"two ops of one name", []userop.Op{bad("twin", func(*userop.Op) {}), bad("twin", func(*userop.Op) {})}, "twin is declared twice in one call"},
		{"two ops at one id", []userop.Op{bad("first", func(*userop.Op) {}), bad("second", func(o *userop.Op) { o.Contract.ID = op.UserID("first") })},
			"first and second collide at wire id"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := userop.Declare(tt.ops...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Declare: %v\nwant an error containing %q", err, tt.want)
			}
			for _, o := range tt.ops {
				if o.Contract != nil && o.Contract.Name != "gemm" {
					if _, lerr := op.Lookup(o.Contract.Name); lerr == nil {
						t.Errorf("%s was registered by a Declare that failed", o.Contract.Name)
					}
				}
			}
		})
	}
}

func TestDeclaringTwiceIsHarmlessAndIdsComeFromTheName(t *testing.T) {
	declareAll(t)
	declareAll(t)
	if scale.Contract.ID != op.UserID("scale") || scale.Contract.ID < op.FirstUserID {
		t.Errorf("scale's id %d, want UserID(scale) = %d", scale.Contract.ID, op.UserID("scale"))
	}
	if o, err := op.Lookup("scale"); err != nil || o != scale.Contract {
		t.Errorf("Lookup(scale) = %v, %v", o, err)
	}
}

// A compile error in a declared kernel names the file as it was declared,
// and the line.
func TestACompileErrorNamesTheDeclaredFileAndLine(t *testing.T) {
	needCompiler(t)
	declareAll(t)
	typo := kerneltest.Mutation{Name: "a typo", File: "scale.cc", Old: "y[i] = alpha * f16_to_f32(x[i]);", New: "y[i] = alpha * f16_to_f32(x[i]) +;"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, err := vkern.Build(ctx, vkern.Options{Backend: "cpu", EditSources: typo.Plant(), QuickBuild: true})
	var be *cache.BuildError
	if !errors.As(err, &be) {
		t.Fatalf("Build: %v; want a build error", err)
	}
	if !strings.Contains(be.FirstError, "scale.cc:14:") || !strings.Contains(err.Error(), "first error: scale.cc:14:") {
		t.Errorf("the error does not name scale.cc:14 first:\n%v", err)
	}
}

// An op with no kernel for a backend is not_supported there, with the
// reason.
func TestAnOpWithoutAKernelForTheBackendIsNotSupported(t *testing.T) {
	needCompiler(t)
	declareAll(t)
	dev := open(t, nil)
	cases, err := verify.Plan{Ops: []*op.Op{cudaOnly.Contract}, Seed: 1, Quick: true, Dists: []oracle.Dist{oracle.Normal}}.Cases()
	if err != nil {
		t.Fatal(err)
	}
	res, err := verify.Run(context.Background(), dev, cases, verify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict != verify.NotSupported || !strings.Contains(res.Cases[0].Reason, "cuda_only was declared with cuda kernel sources only, none for cpu") {
		t.Errorf("verdict %s: %s; want not_supported with the reason", res.Verdict, res.Cases[0].Reason)
	}
	kerneltest.Op(t, dev, "scale", "65537:alpha=3")
}

// A defect planted in a declared kernel is caught, as in a built-in one.
func TestAPlantedDefectInADeclaredKernelIsIncorrect(t *testing.T) {
	needCompiler(t)
	declareAll(t)
	kerneltest.Planted(t, open, []kerneltest.Mutation{
		{Name: "alpha rounded to f16", File: "scale.cc", Old: "const float alpha = static_cast<float>(c.real(param::alpha));",
			New: "const float alpha = f16_to_f32(f32_to_f16(static_cast<float>(c.real(param::alpha))));", Op: "scale", Shapes: []string{"100:alpha=0.1"}},
		{Name: "the last element left unwritten", File: "scale.cc", Old: "i < n;", New: "i + 1 < n;", Op: "scale", Shapes: []string{"100"}},
	})
}

// open opens a cpu device built with edit applied to its sources.
func open(t *testing.T, edit func(map[string][]byte) error) verify.Device {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dev, err := vkern.Open(ctx, vkern.Options{Backend: "cpu", EditSources: edit, QuickBuild: edit != nil})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}
