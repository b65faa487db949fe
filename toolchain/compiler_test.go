package toolchain

import (
	"slices"
	"strings"
	"testing"
)

func TestFingerprint(t *testing.T) {
	basePath, baseText := "/usr/bin/x86_64-linux-gnu-g++-12", "g++ (Debian 12.2.0-14) 12.2.0\nCopyright (C) 2022"
	baseFlags := []string{"-std=c++17", "-O3", "-march=native", "-pthread"}
	base := fingerprint(basePath, baseText, baseFlags, nil)

	t.Run("the same inputs give the same fingerprint", func(t *testing.T) {
		if again := fingerprint(basePath, baseText, slices.Clone(baseFlags), nil); again != base {
			t.Errorf("fingerprint is not stable: %s then %s", base, again)
		}
		if len(base) != 64 || strings.Trim(base, "0123456789abcdef") != "" {
			t.Errorf("fingerprint %q is not 64 lowercase hex digits", base)
		}
	})

	changes := []struct {
		name        string
		path, text  string
		flags       []string
		description string
	}{
		{name: "another compiler binary changes the fingerprint", path: "/usr/bin/x86_64-linux-gnu-g++-13", text: baseText, flags: baseFlags},
		{name: "another version text changes the fingerprint", path: basePath, text: "g++ (Debian 12.2.0-15) 12.2.0\nCopyright (C) 2022", flags: baseFlags},
		{name: "another arch flag changes the fingerprint", path: basePath, text: baseText, flags: []string{"-std=c++17", "-O3", "-mcpu=native", "-pthread"}},
		{name: "a missing flag changes the fingerprint", path: basePath, text: baseText, flags: []string{"-std=c++17", "-O3", "-pthread"}},
		{name: "reordered flags change the fingerprint", path: basePath, text: baseText, flags: []string{"-O3", "-std=c++17", "-march=native", "-pthread"}},
		{name: "two flags joined into one change the fingerprint", path: basePath, text: baseText, flags: []string{"-std=c++17 -O3", "-march=native", "-pthread"}},
		{name: "text moved from the version into the path changes the fingerprint", path: basePath + "g", text: baseText[1:], flags: baseFlags},
	}
	for _, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			if got := fingerprint(c.path, c.text, c.flags, nil); got == base {
				t.Errorf("fingerprint(%q, %q, %q) = base fingerprint %s", c.path, c.text, c.flags, base)
			}
		})
	}

	t.Run("a compiler driver's variable changes the fingerprint; none keeps it", func(t *testing.T) {
		if got := fingerprint(basePath, baseText, baseFlags, []string{"NVCC_APPEND_FLAGS=-G"}); got == base {
			t.Errorf("NVCC_APPEND_FLAGS=-G left the fingerprint at %s", got)
		}
		if a, b := fingerprint(basePath, baseText, baseFlags, []string{"CPATH=/a"}), fingerprint(basePath, baseText, baseFlags, []string{"CPATH=/b"}); a == b {
			t.Errorf("CPATH=/a and CPATH=/b gave the same fingerprint %s", a)
		}
		if got := fingerprint(basePath, baseText, baseFlags, []string{}); got != base {
			t.Errorf("an empty environment gave %s, want the fingerprint without one, %s", got, base)
		}
	})
}

func TestDetectionRecordsTheDriversEnvironment(t *testing.T) {
	t.Setenv("CPATH", "/opt/include")
	t.Setenv("NVCC_APPEND_FLAGS", "-G")
	env := driverEnv()
	for _, want := range []string{"CPATH=/opt/include", "NVCC_APPEND_FLAGS=-G"} {
		if !slices.Contains(env, want) {
			t.Errorf("driverEnv() = %q, want %q among them", env, want)
		}
	}
	c, err := DetectCPU(t.Context())
	if err != nil {
		t.Skipf("no C++ compiler here: %v", err)
	}
	if !slices.Equal(c.Env, env) || c.Fingerprint != fingerprint(c.Path, c.VersionText, c.Flags, env) {
		t.Errorf("DetectCPU: Env %q and fingerprint %s; want %q and the fingerprint over it", c.Env, c.Fingerprint, env)
	}
}

func TestCompileCommand(t *testing.T) {
	c := &Compiler{
		Path:   "/usr/lib/llvm-15/bin/clang",
		Invoke: "/usr/bin/clang++",
		Flags:  []string{"-std=c++17", "-O3", "-march=native", "-pthread"},
	}
	tests := []struct {
		name string
		c    *Compiler
		main string // "" means cpu/main.cc
		want []string
	}{
		{
			name: "the flags, the include path, -c and -o, then the unit",
			c:    c,
			want: []string{"/usr/bin/clang++", "-std=c++17", "-O3", "-march=native", "-pthread",
				"-I", "src", "-c", "-o", "main.o", "src/cpu/main.cc"},
		},
		{
			name: "a compiler without Invoke is run by its Path",
			c:    &Compiler{Path: "/opt/fake/cc", Flags: []string{"-O2"}},
			want: []string{"/opt/fake/cc", "-O2", "-I", "src", "-c", "-o", "main.o", "src/cpu/main.cc"},
		},
		{
			name: "nvcc gets its flags, -c, and -x cu before the .cu file",
			c: &Compiler{Backend: BackendCUDA, Path: "/usr/local/cuda-13.0/bin/nvcc", Invoke: "/usr/local/cuda/bin/nvcc",
				Flags: []string{"-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xcompiler=-pthread"}},
			main: "cuda/main.cu",
			want: []string{"/usr/local/cuda/bin/nvcc", "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xcompiler=-pthread",
				"-I", "src", "-c", "-o", "main.o", "-x", "cu", "src/cuda/main.cu"},
		},
		{
			name: "hipcc gets one --offload-arch per architecture, -c, and -x hip before the .cu file",
			c: &Compiler{Backend: BackendHIP, Path: "/usr/bin/hipcc",
				Flags: []string{"-std=c++17", "-O3", "--offload-arch=gfx1030", "--offload-arch=gfx90a", "-pthread"}},
			main: "cuda/main.cu",
			want: []string{"/usr/bin/hipcc", "-std=c++17", "-O3", "--offload-arch=gfx1030", "--offload-arch=gfx90a", "-pthread",
				"-I", "src", "-c", "-o", "main.o", "-x", "hip", "src/cuda/main.cu"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			main := tt.main
			if main == "" {
				main = "cpu/main.cc"
			}
			got := tt.c.CompileCommand("src", main, "main.o")
			if !slices.Equal(got, tt.want) {
				t.Errorf("CompileCommand =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestLinkCommand(t *testing.T) {
	for _, tt := range []struct {
		name string
		c    *Compiler
		want []string
	}{
		{"g++ links with its flags and the objects in order",
			&Compiler{Backend: BackendCPU, Path: "/usr/bin/x86_64-linux-gnu-g++-12", Invoke: "/usr/bin/g++",
				Flags: []string{"-std=c++17", "-O3", "-march=native", "-pthread"}},
			[]string{"/usr/bin/g++", "-std=c++17", "-O3", "-march=native", "-pthread", "-o", "server", "obj/b.o", "obj/a.o"}},
		{"nvcc links without -x cu, which would make the objects sources",
			&Compiler{Backend: BackendCUDA, Path: "/usr/local/cuda/bin/nvcc",
				Flags: []string{"-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xcompiler=-pthread"}},
			[]string{"/usr/local/cuda/bin/nvcc", "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-Xcompiler=-pthread",
				"-o", "server", "obj/b.o", "obj/a.o"}},
		{"hipcc links without -x hip",
			&Compiler{Backend: BackendHIP, Path: "/usr/bin/hipcc", Flags: []string{"-O3", "--offload-arch=gfx90a", "-pthread"}},
			[]string{"/usr/bin/hipcc", "-O3", "--offload-arch=gfx90a", "-pthread", "-o", "server", "obj/b.o", "obj/a.o"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.LinkCommand([]string{"obj/b.o", "obj/a.o"}, "server"); !slices.Equal(got, tt.want) {
				t.Errorf("LinkCommand =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

const x86CPUInfo = `processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 25
model		: 1
model name	: AMD EPYC 7B13
flags		: fpu vme de pse avx avx2 fma
bogomips	: 4899.99

processor	: 1
vendor_id	: AuthenticAMD
cpu family	: 25
model		: 1
model name	: AMD EPYC 7B13 (second socket, ignored)
flags		: fpu vme de pse avx avx2 fma avx512f
`

const armCPUInfo = `processor	: 0
BogoMIPS	: 50.00
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics
CPU implementer	: 0x41
CPU architecture: 8
CPU variant	: 0x3
CPU part	: 0xd0c
CPU revision	: 1
`

func TestTargetFromCPUInfo(t *testing.T) {
	x86 := targetFromCPUInfo("amd64", []byte(x86CPUInfo))
	tests := []struct {
		name    string
		goarch  string
		cpuinfo string
		prefix  string // what the target must start with
		differs string // a target this one must differ from ("" for none)
	}{
		{name: "an x86 CPU is named by model, family and model number", goarch: "amd64", cpuinfo: x86CPUInfo,
			prefix: "amd64 AMD EPYC 7B13 family 25 model 1 (features sha256:"},
		{name: "only the first processor is read", goarch: "amd64", cpuinfo: x86CPUInfo + "processor : 2\nflags : sse\n",
			prefix: x86},
		{name: "the same model with other features is another target", goarch: "amd64",
			cpuinfo: strings.Replace(x86CPUInfo, "avx2 fma\n", "avx2 fma avx512f\n", 1),
			prefix:  "amd64 AMD EPYC 7B13 family 25 model 1 (features sha256:", differs: x86},
		{name: "an Arm CPU is named by implementer, part and variant", goarch: "arm64", cpuinfo: armCPUInfo,
			prefix: "arm64 implementer 0x41 part 0xd0c variant 0x3 (features sha256:"},
		{name: "an empty cpuinfo still gives a target", goarch: "amd64", cpuinfo: "",
			prefix: "amd64 unknown model (features none)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := targetFromCPUInfo(tt.goarch, []byte(tt.cpuinfo))
			if !strings.HasPrefix(got, tt.prefix) {
				t.Errorf("target = %q, want prefix %q", got, tt.prefix)
			}
			if tt.differs != "" && got == tt.differs {
				t.Errorf("target = %q, same as %q", got, tt.differs)
			}
		})
	}
}
