package kernels

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkern/vkern/op"
)

// isolateDeclared gives a test its own list of declared sources, restored
// when it ends, so that what it declares reaches no other test's build.
func isolateDeclared(t *testing.T) {
	t.Helper()
	declaredMu.Lock()
	saved := declared
	declared = nil
	declaredMu.Unlock()
	t.Cleanup(func() {
		declaredMu.Lock()
		declared = saved
		declaredMu.Unlock()
	})
}

const probeKernel = `#include "core/backend.h"
namespace vkern {
Result run_probe(const Call& c, uint64_t*) { return Result::OK(); }
}  // namespace vkern
`

func TestCheckDeclaredRefusesBadSourcesNamingTheFix(t *testing.T) {
	isolateDeclared(t)
	if err := Declare(Declared{Op: "other", Backend: "cpu", Files: map[string][]byte{
		"kernels/cpu/shared.h": []byte("// other's\n"), "kernels/cpu/other.cc": []byte("Result run_other(const Call&, uint64_t*);\n")}}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		d    Declared
		want string
	}{
		{"hip", Declared{Op: "probe", Backend: "hip", Files: map[string][]byte{"probe.cu": nil}}, "declare HIP kernels as cuda sources"},
		{"an unknown backend", Declared{Op: "probe", Backend: "tpu", Files: map[string][]byte{"probe.cc": nil}}, `backend "tpu"; declare them for cpu or cuda`},
		{"no files", Declared{Op: "probe", Backend: "cpu"}, "no cpu kernel files; give the files that define run_probe"},
		{"a path outside the folder", Declared{Op: "probe", Backend: "cpu", Files: map[string][]byte{"../probe.cc": []byte(probeKernel)}}, `path "../probe.cc": want a clean relative path`},
		{"an absolute path", Declared{Op: "probe", Backend: "cpu", Files: map[string][]byte{"/tmp/probe.cc": []byte(probeKernel)}}, "want a clean relative path"},
		{"a quote in a path", Declared{Op: "probe", Backend: "cpu", Files: map[string][]byte{`a"b.cc`: []byte(probeKernel)}}, "want a clean relative path"},
		{"nothing to compile", Declared{Op: "probe", Backend: "cpu", Files: map[string][]byte{"probe.cu": []byte(probeKernel)}}, "none of its cpu kernel files (probe.cu) ends in .cc"},
		{"no entry point", Declared{Op: "probe", Backend: "cpu", Files: map[string][]byte{"kernels/cpu/probe.cc": []byte("Result run_probes(const Call&, uint64_t*) {}\n")}},
			"no entry point: none of its cpu kernel files (kernels/cpu/probe.cc) defines run_probe; define\n\tResult run_probe(const Call& c, uint64_t* problem)"},
		{"a cuda entry point for cpu", Declared{Op: "probe", Backend: "cpu", Files: map[string][]byte{"probe.cc": []byte("cudaError_t run_probe(const Call&, unsigned long long*, cudaStream_t) {}\n")}}, "no entry point"},
		{"another op's file", Declared{Op: "probe", Backend: "cpu", Files: map[string][]byte{"kernels/cpu/probe.cc": []byte(probeKernel), "kernels/cpu/shared.h": []byte("// probe's\n")}},
			"other and probe both bring a cpu kernel file kernels/cpu/shared.h, with different contents"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckDeclared(tt.d)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("CheckDeclared: %v; want an error containing %q", err, tt.want)
			}
			if err := Declare(tt.d); err == nil {
				t.Fatalf("Declare accepted what CheckDeclared refused")
			}
		})
	}
	same := Declared{Op: "probe", Backend: "cpu", Files: map[string][]byte{"kernels/cpu/probe.cc": []byte(probeKernel), "kernels/cpu/shared.h": []byte("// other's\n")}}
	if err := CheckDeclared(same); err != nil {
		t.Errorf("a file shared with the same contents: %v", err)
	}
}

// TestDeclaredSourcesJoinTheBuild declares a cpu kernel with a mistake on
// its line 3 and compiles it, a unit of the server's: the compiler must
// name the declared path and line. The kernel list is checked for an op
// with a kernel and one without, and for the declaration of its entry.
func TestDeclaredSourcesJoinTheBuild(t *testing.T) {
	isolateDeclared(t)
	broken := strings.Replace(probeKernel, "return Result::OK();", "return Result::OK()", 1)
	if err := Declare(Declared{Op: "probe", Backend: "cpu", Files: map[string][]byte{"kernels/cpu/probe.cc": []byte(broken)}}); err != nil {
		t.Fatal(err)
	}
	files, units, err := Sources("cpu")
	if err != nil {
		t.Fatal(err)
	}
	unit := DeclaredPath("kernels/cpu/probe.cc")
	got := string(files[unit])
	prelude := "#include \"core/backend.h\"  // vkern's prelude for declared kernel files\n" +
		"#include \"core/f16.h\"  // vkern's prelude for declared kernel files\n" +
		"#include \"cpu/device.h\"  // vkern's prelude for declared kernel files\n"
	if !strings.HasPrefix(got, prelude+"#line 1 \"kernels/cpu/probe.cc\"\n") || !strings.HasSuffix(got, broken) {
		t.Errorf("the declared file among the sources:\n%s", got)
	}
	if len(units) == 0 || units[len(units)-1] != unit {
		t.Errorf("units %q do not end with the declared file %s", units, unit)
	}
	if cuda, _, _ := Sources("cuda"); cuda[DeclaredPath("kernels/cpu/probe.cc")] != nil {
		t.Errorf("a cpu file among the cuda sources")
	}
	if got := DeclaredBackends("probe"); len(got) != 1 || got[0] != "cpu" {
		t.Errorf("DeclaredBackends(probe) = %v, want [cpu]", got)
	}

	probe := &op.Op{Name: "probe", Dims: []op.Dim{{Name: "N"}}, Shapes: op.Shapes{Quick: []string{"4"}},
		Operands: []op.Operand{{Name: "y", DType: op.F32, Rows: op.X("N"), Role: op.Out}}}
	if err := op.Check(probe); err != nil {
		t.Fatal(err)
	}
	list := string(kernelList(files, []*op.Op{op.Softmax, probe}, "cpu", "cpu", ".cc"))
	if !strings.Contains(list, `{op_softmax::kId, "softmax", run_softmax},`) || !strings.Contains(list, `{op_probe::kId, "probe", run_probe},`) {
		t.Errorf("the kernel list lacks an entry:\n%s", list)
	}
	if !strings.Contains(list, "Result run_probe(const Call& c, uint64_t* problem);\n") {
		t.Errorf("the kernel list does not declare run_probe:\n%s", list)
	}
	list = string(kernelList(files, []*op.Op{op.Softmax, probe}, "cuda", "cuda", ".cu"))
	if !strings.Contains(list, "case op_probe::kId:\n      return \"probe was declared with cpu kernel sources only, none for cuda\";") {
		t.Errorf("the cuda kernel list does not say why probe has no kernel:\n%s", list)
	}

	cxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("no g++")
	}
	dir := t.TempDir()
	for p, data := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(cxx, "-std=c++17", "-fsyntax-only", "-I"+dir, filepath.Join(dir, unit)).CombinedOutput()
	if err == nil {
		t.Fatal("the broken kernel compiled")
	}
	if !strings.Contains(string(out), "kernels/cpu/probe.cc:3:") {
		t.Errorf("the compiler's message does not name kernels/cpu/probe.cc:3:\n%s", out)
	}
}
