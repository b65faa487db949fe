package toolchain

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// fakeCompiler describes a shell script that stands in for a C++ compiler.
type fakeCompiler struct {
	version string   // printed by --version; "" makes --version fail
	rejects []string // arguments it refuses with an error
	log     string   // when set, every invocation's arguments are appended here
}

// write puts the script at dir/name and returns its path.
func (f fakeCompiler) write(t *testing.T, dir, name string) string {
	t.Helper()
	var s strings.Builder
	s.WriteString("#!/bin/sh\nPATH=/usr/bin:/bin\n")
	if f.log != "" {
		fmt.Fprintf(&s, "echo \"$*\" >> '%s'\n", f.log)
	}
	s.WriteString("for a in \"$@\"; do\n  case \"$a\" in\n")
	if f.version == "" {
		s.WriteString("    --version) echo 'fakecc: cannot tell' >&2; exit 3;;\n")
	} else {
		fmt.Fprintf(&s, "    --version) printf '%%s\\n' '%s'; exit 0;;\n", strings.ReplaceAll(f.version, "\n", "' '"))
	}
	for _, r := range f.rejects {
		fmt.Fprintf(&s, "    '%s') echo \"fakecc: error: unrecognized command-line option '$a'\" >&2; exit 1;;\n", r)
	}
	s.WriteString("  esac\ndone\nexit 0\n")
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(s.String()), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDetectCPUHonoursCXX(t *testing.T) {
	tests := []struct {
		name    string
		fake    *fakeCompiler // written as <tmp>/bin/fakecc when set
		cxx     string        // "$FAKE" is replaced by the fake's path, "$TMP" by the temp dir
		wantErr []string      // substrings of the error; nil means success
		flags   []string
		arch    string
	}{
		{
			name:    "a missing path in CXX is reported with its value and the fix",
			cxx:     "/nonexistent/vkern/g++",
			wantErr: []string{`CXX="/nonexistent/vkern/g++"`, "no such file", "unset CXX"},
		},
		{
			name:    "a name in CXX that is not on PATH is reported",
			cxx:     "vkern-no-such-compiler",
			wantErr: []string{`CXX="vkern-no-such-compiler"`, "not found on PATH", "set CXX to"},
		},
		{
			name:    "a directory in CXX is reported",
			cxx:     "$TMP",
			wantErr: []string{"CXX=", "is a directory"},
		},
		{
			name:    "a compiler in CXX whose --version fails is reported with its output",
			fake:    &fakeCompiler{},
			cxx:     "$FAKE",
			wantErr: []string{"--version failed", "fakecc: cannot tell"},
		},
		{
			name:    "a compiler in CXX that cannot build a program is reported with its output",
			fake:    &fakeCompiler{version: "fakecc 1.0", rejects: []string{"-std=c++17"}},
			cxx:     "$FAKE",
			wantErr: []string{"cannot build a C++ program", "unrecognized command-line option '-std=c++17'"},
		},
		{
			name:  "a working compiler in CXX is used with -march=native",
			fake:  &fakeCompiler{version: "fakecc 1.0\nCopyright nobody"},
			cxx:   "$FAKE",
			flags: []string{"-std=c++17", "-O3", "-march=native", "-pthread"},
			arch:  "-march=native",
		},
		{
			name:  "a compiler that refuses -march=native falls back to -mcpu=native",
			fake:  &fakeCompiler{version: "fakecc 2.0", rejects: []string{"-march=native"}},
			cxx:   "$FAKE",
			flags: []string{"-std=c++17", "-O3", "-mcpu=native", "-pthread"},
			arch:  "-mcpu=native",
		},
		{
			name:  "a compiler that refuses both arch flags builds for its default target",
			fake:  &fakeCompiler{version: "fakecc 3.0", rejects: []string{"-march=native", "-mcpu=native"}},
			cxx:   "$FAKE",
			flags: []string{"-std=c++17", "-O3", "-pthread"},
			arch:  "",
		},
		{
			name:  "a bare name in CXX is looked up on PATH",
			fake:  &fakeCompiler{version: "fakecc 4.0"},
			cxx:   "fakecc",
			flags: []string{"-std=c++17", "-O3", "-march=native", "-pthread"},
			arch:  "-march=native",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmp := t.TempDir()
			bin := filepath.Join(tmp, "bin")
			if err := os.Mkdir(bin, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Setenv("PATH", bin)
			fake := ""
			if tt.fake != nil {
				fake = tt.fake.write(t, bin, "fakecc")
			}
			cxx := strings.NewReplacer("$FAKE", fake, "$TMP", tmp).Replace(tt.cxx)
			t.Setenv("CXX", cxx)

			c, err := DetectCPU(context.Background())
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("DetectCPU succeeded with %+v, want an error", c)
				}
				if !errors.Is(err, ErrNoCompiler) {
					t.Errorf("error does not wrap ErrNoCompiler: %v", err)
				}
				for _, want := range tt.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error lacks %q:\n%v", want, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Backend != BackendCPU || c.Name != "fakecc" || c.Path != fake || c.Invoke != fake {
				t.Errorf("got Backend=%q Name=%q Path=%q Invoke=%q, want cpu, fakecc, %s, %s", c.Backend, c.Name, c.Path, c.Invoke, fake, fake)
			}
			if c.VersionText != tt.fake.version {
				t.Errorf("VersionText = %q, want %q", c.VersionText, tt.fake.version)
			}
			if first, _, _ := strings.Cut(c.VersionText, "\n"); c.Version != first {
				t.Errorf("Version = %q, want the first line %q", c.Version, first)
			}
			if !slices.Equal(c.Flags, tt.flags) || c.ArchFlag != tt.arch {
				t.Errorf("Flags = %q ArchFlag = %q, want %q and %q", c.Flags, c.ArchFlag, tt.flags, tt.arch)
			}
			if c.Target != HostTarget() || c.Target == "" {
				t.Errorf("Target = %q, want HostTarget() = %q", c.Target, HostTarget())
			}
			if want := fingerprint(c.Path, c.VersionText, c.Flags, c.Env); c.Fingerprint != want {
				t.Errorf("Fingerprint = %s, want %s", c.Fingerprint, want)
			}
		})
	}
}

func TestDetectCPUSearchesPATH(t *testing.T) {
	tests := []struct {
		name     string
		compiler map[string]*fakeCompiler // file name in the PATH folder -> fake
		symlink  map[string]string        // link name -> target file name
		wantName string                   // "" means ErrNoCompiler
		wantPath string                   // file name Path must resolve to
	}{
		{
			name:     "a PATH with no compiler gives ErrNoCompiler",
			wantName: "",
		},
		{
			name: "g++ is preferred to clang++ and c++",
			compiler: map[string]*fakeCompiler{
				"g++": {version: "g++ 12"}, "clang++": {version: "clang 15"}, "c++": {version: "c++ 1"},
			},
			wantName: "g++", wantPath: "g++",
		},
		{
			name:     "clang++ is used when there is no g++",
			compiler: map[string]*fakeCompiler{"clang++": {version: "clang 15"}, "c++": {version: "c++ 1"}},
			wantName: "clang++", wantPath: "clang++",
		},
		{
			name:     "a broken g++ is passed over for a working c++",
			compiler: map[string]*fakeCompiler{"g++": {}, "c++": {version: "c++ 1"}},
			wantName: "c++", wantPath: "c++",
		},
		{
			name:     "a symlinked compiler is resolved in Path and kept in Invoke",
			compiler: map[string]*fakeCompiler{"clang-15": {version: "clang 15"}},
			symlink:  map[string]string{"clang++": "clang-15"},
			wantName: "clang++", wantPath: "clang-15",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin := t.TempDir()
			for name, f := range tt.compiler {
				f.write(t, bin, name)
			}
			for link, target := range tt.symlink {
				if err := os.Symlink(target, filepath.Join(bin, link)); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("PATH", bin)
			t.Setenv("CXX", "")

			c, err := DetectCPU(context.Background())
			if tt.wantName == "" {
				if !errors.Is(err, ErrNoCompiler) {
					t.Fatalf("DetectCPU = %+v, %v; want ErrNoCompiler", c, err)
				}
				for _, want := range []string{"g++", "clang++", "c++", bin, "apt-get install g++", "CXX=/path/to/compiler"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error lacks %q:\n%v", want, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Name != tt.wantName {
				t.Errorf("Name = %q, want %q", c.Name, tt.wantName)
			}
			if want := filepath.Join(bin, tt.wantPath); c.Path != want {
				t.Errorf("Path = %q, want %q", c.Path, want)
			}
			if want := filepath.Join(bin, tt.wantName); c.Invoke != want {
				t.Errorf("Invoke = %q, want %q", c.Invoke, want)
			}
		})
	}
}

func TestDetectCPUProbesEachCompilerOnce(t *testing.T) {
	bin := t.TempDir()
	log := filepath.Join(t.TempDir(), "calls")
	fakeCompiler{version: "fakecc 1.0", log: log}.write(t, bin, "g++")
	t.Setenv("PATH", bin)
	t.Setenv("CXX", "")

	calls := func() int {
		t.Helper()
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(b), "\n")
	}
	first, err := DetectCPU(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := calls()
	if n == 0 {
		t.Fatal("the fake compiler was never run")
	}
	t.Run("a second detection runs nothing", func(t *testing.T) {
		second, err := DetectCPU(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := calls(); got != n {
			t.Errorf("second DetectCPU ran the compiler %d more times", got-n)
		}
		if second.Fingerprint != first.Fingerprint {
			t.Errorf("fingerprint changed between detections: %s then %s", first.Fingerprint, second.Fingerprint)
		}
	})
	t.Run("a compiler replaced in place is probed again and gets a new fingerprint", func(t *testing.T) {
		fakeCompiler{version: "fakecc 1.0.1 (patched)", log: log}.write(t, bin, "g++")
		third, err := DetectCPU(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if calls() == n {
			t.Error("the replaced compiler was not probed")
		}
		if third.Version != "fakecc 1.0.1 (patched)" || third.Fingerprint == first.Fingerprint {
			t.Errorf("after replacement Version = %q Fingerprint = %s (was %s)", third.Version, third.Fingerprint, first.Fingerprint)
		}
	})
}

func TestDetectCPUStopsWhenTheContextIsCancelled(t *testing.T) {
	bin := t.TempDir()
	fakeCompiler{version: "fakecc cancelled"}.write(t, bin, "g++")
	t.Setenv("PATH", bin)
	t.Setenv("CXX", "")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := DetectCPU(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("DetectCPU with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestDetectCPUFindsTheRealCompiler(t *testing.T) {
	c, err := DetectCPU(context.Background())
	if errors.Is(err, ErrNoCompiler) {
		t.Skipf("no C++ compiler on this machine: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(c.Path) || c.Version == "" || len(c.Fingerprint) != 64 {
		t.Errorf("incomplete compiler: %+v", c)
	}
	if runtime.GOARCH == "amd64" && c.ArchFlag != "-march=native" {
		t.Errorf("on amd64 %s refused -march=native (ArchFlag %q)", c.Path, c.ArchFlag)
	}
	t.Logf("found %s (%s) at %s, flags %q, target %q", c.Name, c.Version, c.Path, c.Flags, c.Target)
}

func TestDetectCPURefusesACCompilerDriver(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc on PATH to stand in for a C compiler driver")
	}
	t.Setenv("CXX", gcc)
	_, err = DetectCPU(context.Background())
	if !errors.Is(err, ErrNoCompiler) || !strings.Contains(err.Error(), "cannot build a C++ program") {
		t.Fatalf("DetectCPU with CXX=%s = %v; want ErrNoCompiler saying it cannot build a C++ program", gcc, err)
	}
}

func TestDetectDispatchesOnTheBackend(t *testing.T) {
	bin := t.TempDir()
	fakeCompiler{version: "fakecc 1.0"}.write(t, bin, "g++")
	fakeNVCC{version: nvcc13Version, probeStdout: probeOutput(h100)}.write(t, bin, "nvcc")
	fakeCompiler{version: hipccVersion}.write(t, bin, "hipcc")
	t.Setenv("CXX", "")
	cudaTestEnv(t, bin)
	hipTestEnv(t, bin, "/nonexistent/hipcc", "/nonexistent/rocminfo")
	t.Setenv(hipArchEnv, "gfx1030")

	for _, backend := range []string{BackendCPU, BackendCUDA, BackendHIP} {
		t.Run(backend+" gives a "+backend+" compiler", func(t *testing.T) {
			c, err := Detect(context.Background(), backend)
			if err != nil {
				t.Fatal(err)
			}
			if c.Backend != backend {
				t.Errorf("Detect(%q).Backend = %q", backend, c.Backend)
			}
		})
	}
	t.Run("an unknown backend is refused, naming the known ones", func(t *testing.T) {
		_, err := Detect(context.Background(), "metal")
		if err == nil || !strings.Contains(err.Error(), `"metal"`) || !strings.Contains(err.Error(), `"cuda"`) {
			t.Errorf("Detect(metal) = %v", err)
		}
	})
}
