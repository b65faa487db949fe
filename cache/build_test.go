package cache

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
	"time"

	"github.com/vkern/vkern/toolchain"
)

// fakeCompilerScript is a stand-in C++ compiler: it appends one line to the
// counter file per run, "<pid> compile" or "<pid> link" (a run with -c
// compiles), sleeps when compiling, and writes to -o an "object" that
// records its arguments, or when linking an executable "binary" that
// records its own and holds the objects' text.
const fakeCompilerScript = `#!/bin/sh
PATH=/usr/bin:/bin
out=
prev=
mode=link
for a in "$@"; do
  if [ "$prev" = "-o" ]; then out="$a"; fi
  if [ "$a" = "-c" ]; then mode=compile; fi
  prev="$a"
done
echo "$$ $mode" >> '@COUNTER@'
if [ $mode = compile ]; then
  sleep @SLEEP@
  printf '# compiled by: %s\n' "$*" > "$out"
  exit 0
fi
{
  printf '#!/bin/sh\n# linked by: %s\n' "$*"
  for a in "$@"; do
    case "$a" in *.o) cat "$a" ;; esac
  done
  echo 'echo fake server'
} > "$out"
chmod +x "$out"
`

// builderUnitCompiles, in a script, compiles the builder's own
// vkern_source.cc (an empty object) and exits, so that a script's failure
// is main.cc's alone and not a race between two units.
const builderUnitCompiles = `case "$*" in *src/vkern_source.cc*)
  prev=
  for a in "$@"; do
    if [ "$prev" = "-o" ]; then : > "$a"; fi
    prev="$a"
  done
  exit 0 ;;
esac
`

// failingCompilerScript prints 100 numbered error lines and fails.
const failingCompilerScript = `#!/bin/sh
PATH=/usr/bin:/bin
` + builderUnitCompiles + `i=1
while [ $i -le 100 ]; do
  printf 'src/main.cc:%d:1: error: problem %03d\n' $i $i >&2
  i=$((i+1))
done
exit 1
`

// silentCompilerScript succeeds without writing anything (but the
// builder's own unit).
const silentCompilerScript = "#!/bin/sh\nPATH=/usr/bin:/bin\n" + builderUnitCompiles + "exit 0\n"

// slowCompilerScript runs a grandchild that outlives a killed parent unless the
// whole process group is killed.
const slowCompilerScript = "#!/bin/sh\nPATH=/usr/bin:/bin\nsleep 30\n"

// compilerAt returns the Compiler that the tests, and the helper processes,
// build with: path is the script, and the rest is fixed so every process
// computes the same key.
func compilerAt(path string) *toolchain.Compiler {
	return &toolchain.Compiler{
		Backend:     toolchain.BackendCPU,
		Name:        "fakecc",
		Path:        path,
		Version:     "fakecc 1.0",
		VersionText: "fakecc 1.0\nnot a real compiler",
		Flags:       []string{"-std=c++17", "-O3", "-pthread"},
		Target:      "test cpu (features sha256:000000000000)",
		Fingerprint: "fakecc-fingerprint",
	}
}

// testRequest is a small request with a header in a subfolder.
func testRequest(c *toolchain.Compiler) Request {
	return Request{
		Files: map[string][]byte{
			"main.cc":          []byte("#include \"kernels/answer.h\"\nint main() { return kAnswer - 42; }\n"),
			"kernels/answer.h": []byte("static const int kAnswer = 42;\n"),
		},
		Units:    []string{"main.cc"},
		Compiler: c,
	}
}

// fakeSetup writes a compiler script into a fresh folder and opens a store
// in another; it returns the store, the compiler and the counter file.
func fakeSetup(t *testing.T, script string) (*Store, *toolchain.Compiler, string) {
	t.Helper()
	tools := t.TempDir()
	counter := filepath.Join(tools, "builds")
	path := filepath.Join(tools, "fakecc")
	writeScript(t, path, script, counter, "0.05")
	s, err := Open(filepath.Join(t.TempDir(), "cache"))
	if err != nil {
		t.Fatal(err)
	}
	return s, compilerAt(path), counter
}

// writeScript writes a compiler script, filling in its counter file and
// sleep time.
func writeScript(t *testing.T, path, script, counter, sleep string) {
	t.Helper()
	text := strings.NewReplacer("@COUNTER@", counter, "@SLEEP@", sleep).Replace(script)
	if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
}

// builds counts the builds the fake compiler did: its links.
func builds(t *testing.T, counter string) int {
	t.Helper()
	return runs(t, counter, "link")
}

// runs counts the fake compiler's runs of one mode, compile or link.
func runs(t *testing.T, counter, mode string) int {
	t.Helper()
	b, err := os.ReadFile(counter)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), " "+mode+"\n")
}

// dirNames lists dir.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestBuildOnceThenHit(t *testing.T) {
	s, cc, counter := fakeSetup(t, fakeCompilerScript)
	r := testRequest(cc)
	ctx := context.Background()

	first, err := s.Build(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("the first build compiles each unit once and publishes a complete entry", func(t *testing.T) {
		// main.cc and the builder's vkern_source.cc. The fake compiler
		// writes no dependency file, so nothing goes to the object cache.
		if n, c := builds(t, counter), runs(t, counter, "compile"); n != 1 || c != 2 {
			t.Errorf("compiler linked %d times and compiled %d, want 1 and 2", n, c)
		}
		if got, want := dirNames(t, s.Dir), []string{Key(r)}; !slices.Equal(got, want) {
			t.Errorf("store holds %q, want only the entry %q (no lock file, no build folder)", got, want)
		}
		if got, want := dirNames(t, first.Dir), []string{buildLogName, manifestName, binaryName}; !slices.Equal(got, want) {
			t.Errorf("entry holds %q, want %q", got, want)
		}
		if err := first.Recheck(); err != nil {
			t.Error(err)
		}
	})
	t.Run("the manifest says what was built from what", func(t *testing.T) {
		m := first.Manifest
		sum, err := fileSHA256(first.Binary)
		if err != nil {
			t.Fatal(err)
		}
		checks := []struct {
			field     string
			got, want any
		}{
			{"Key", m.Key, Key(r)},
			{"Backend", m.Backend, "cpu"},
			{"Units", strings.Join(m.Units, " "), "main.cc vkern_source.cc"},
			{"ReusedUnits", len(m.ReusedUnits), 0},
			{"SourceSHA256", m.SourceSHA256, SourceSHA256(r.Files)},
			{"BinarySHA256", m.BinarySHA256, sum},
			{"Compiler", m.Compiler, CompilerInfo{Name: "fakecc", Path: cc.Path, Version: "fakecc 1.0", Fingerprint: "fakecc-fingerprint"}},
			{"Flags", strings.Join(m.Flags, " "), "-std=c++17 -O3 -pthread"},
			{"Target", m.Target, cc.Target},
			{"BuildCommands", len(m.BuildCommands), 3},
			{"the compile", strings.Join(m.BuildCommands[0], " "),
				cc.Path + ` -std=c++17 -O3 -pthread -I src -c -o obj/main.cc.o -MD -MF obj/main.cc.o.d src/main.cc`},
			{"the source unit's compile", strings.Join(m.BuildCommands[1], " "),
				cc.Path + ` -std=c++17 -O3 -pthread -I src -c -o obj/vkern_source.cc.o src/vkern_source.cc`},
			{"the link", strings.Join(m.BuildCommands[2], " "), cc.Path + ` -std=c++17 -O3 -pthread -o server obj/main.cc.o obj/vkern_source.cc.o`},
			{"UnitSeconds", len(m.UnitSeconds), 2},
			{"Replaced", m.Replaced, ""},
		}
		for _, c := range checks {
			if c.got != c.want {
				t.Errorf("Manifest.%s = %v, want %v", c.field, c.got, c.want)
			}
		}
		if time.Since(m.BuiltAt) > time.Minute || m.BuildSeconds <= 0 || m.UnitSeconds[0] <= 0 || m.LinkSeconds <= 0 ||
			m.BuildSeconds < m.UnitSeconds[0]+m.LinkSeconds {
			t.Errorf("BuiltAt %v, BuildSeconds %v, UnitSeconds %v, LinkSeconds %v", m.BuiltAt, m.BuildSeconds, m.UnitSeconds, m.LinkSeconds)
		}
	})
	t.Run("no unit is compiled with the source hash", func(t *testing.T) {
		b, err := os.ReadFile(first.Binary)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), SourceSHA256(r.Files)) {
			t.Errorf("the fake binary records its build arguments as\n%s\nwith the source hash: objects could not be shared", b)
		}
	})
	t.Run("a second build of the same request is a hit", func(t *testing.T) {
		second, err := s.Build(ctx, testRequest(cc))
		if err != nil {
			t.Fatal(err)
		}
		if n := builds(t, counter); n != 1 {
			t.Errorf("compiler ran %d times, want 1", n)
		}
		if second.Binary != first.Binary || second.Manifest.BinarySHA256 != first.Manifest.BinarySHA256 ||
			!second.Manifest.BuiltAt.Equal(first.Manifest.BuiltAt) {
			t.Errorf("second artifact %+v differs from the first %+v", second, first)
		}
	})
	t.Run("a changed source builds a second entry", func(t *testing.T) {
		r2 := testRequest(cc)
		r2.Files["kernels/answer.h"] = []byte("static const int kAnswer = 43;\n")
		third, err := s.Build(ctx, r2)
		if err != nil {
			t.Fatal(err)
		}
		if n := builds(t, counter); n != 2 || third.Key == first.Key {
			t.Errorf("compiler ran %d times (want 2), keys %s and %s", n, first.Key, third.Key)
		}
	})
}

func TestTamperedBinaryIsReportedAndRebuilt(t *testing.T) {
	s, cc, counter := fakeSetup(t, fakeCompilerScript)
	r := testRequest(cc)
	ctx := context.Background()
	a, err := s.Build(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(a.Binary, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("echo pwned\n")
	f.Close()
	tampered, err := fileSHA256(a.Binary)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("Recheck names the path and both hashes", func(t *testing.T) {
		err := a.Recheck()
		if !errors.Is(err, ErrTampered) || !errors.Is(err, ErrBadEntry) {
			t.Fatalf("Recheck = %v, want ErrTampered", err)
		}
		for _, want := range []string{a.Binary, a.Manifest.BinarySHA256, tampered} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q:\n%v", want, err)
			}
		}
	})
	t.Run("Build reports the entry instead of returning it or quietly rebuilding", func(t *testing.T) {
		got, err := s.Build(ctx, r)
		if !errors.Is(err, ErrTampered) || got != nil {
			t.Fatalf("Build = %v, %v; want nil and ErrTampered", got, err)
		}
		if n := builds(t, counter); n != 1 {
			t.Errorf("compiler ran %d times, want 1", n)
		}
	})
	t.Run("Rebuild replaces it and says why", func(t *testing.T) {
		fresh, err := s.Rebuild(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if n := builds(t, counter); n != 2 {
			t.Errorf("compiler ran %d times, want 2", n)
		}
		if err := fresh.Recheck(); err != nil {
			t.Error(err)
		}
		if !strings.Contains(fresh.Manifest.Replaced, tampered) {
			t.Errorf("Manifest.Replaced = %q, want the reason naming hash %s", fresh.Manifest.Replaced, tampered)
		}
		if got := dirNames(t, s.Dir); !slices.Equal(got, []string{a.Key}) {
			t.Errorf("store holds %q, want only the entry", got)
		}
	})
	t.Run("Rebuild of a good entry returns it without compiling", func(t *testing.T) {
		if _, err := s.Rebuild(ctx, r); err != nil {
			t.Fatal(err)
		}
		if n := builds(t, counter); n != 2 {
			t.Errorf("compiler ran %d times, want 2", n)
		}
	})
}

func TestBadEntriesAreReportedAndRebuilt(t *testing.T) {
	tests := []struct {
		name    string
		damage  func(t *testing.T, a *Artifact)
		wantErr error
		wantMsg string
	}{
		{
			name:    "a manifest that is not JSON is corrupt",
			damage:  func(t *testing.T, a *Artifact) { write(t, filepath.Join(a.Dir, manifestName), "{not json") },
			wantErr: ErrCorrupt, wantMsg: manifestName,
		},
		{
			name:    "a missing manifest is corrupt",
			damage:  func(t *testing.T, a *Artifact) { remove(t, filepath.Join(a.Dir, manifestName)) },
			wantErr: ErrCorrupt, wantMsg: "has no manifest.json",
		},
		{
			name: "a manifest for another key is corrupt",
			damage: func(t *testing.T, a *Artifact) {
				path := filepath.Join(a.Dir, manifestName)
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				write(t, path, strings.Replace(string(b), a.Key, strings.Repeat("e", 64), 1))
			},
			wantErr: ErrCorrupt, wantMsg: "is for key",
		},
		{
			name: "a manifest without a binary hash is corrupt",
			damage: func(t *testing.T, a *Artifact) {
				path := filepath.Join(a.Dir, manifestName)
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				write(t, path, strings.Replace(string(b), a.Manifest.BinarySHA256, "", 1))
			},
			wantErr: ErrCorrupt, wantMsg: "binary_sha256",
		},
		{
			name:    "a missing binary is tampered with",
			damage:  func(t *testing.T, a *Artifact) { remove(t, a.Binary) },
			wantErr: ErrTampered, wantMsg: "is missing",
		},
		{
			name: "a file in place of the entry folder is corrupt",
			damage: func(t *testing.T, a *Artifact) {
				if err := os.RemoveAll(a.Dir); err != nil {
					t.Fatal(err)
				}
				write(t, a.Dir, "not a folder")
			},
			wantErr: ErrCorrupt, wantMsg: "is not a folder",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, cc, counter := fakeSetup(t, fakeCompilerScript)
			r := testRequest(cc)
			ctx := context.Background()
			a, err := s.Build(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			tt.damage(t, a)

			_, err = s.Build(ctx, r)
			if !errors.Is(err, tt.wantErr) || !errors.Is(err, ErrBadEntry) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("Build on the damaged entry = %v; want %v mentioning %q", err, tt.wantErr, tt.wantMsg)
			}
			if !strings.Contains(err.Error(), "Rebuild") {
				t.Errorf("error does not say what to do: %v", err)
			}
			fresh, err := s.Rebuild(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if err := fresh.Recheck(); err != nil {
				t.Error(err)
			}
			if n := builds(t, counter); n != 2 {
				t.Errorf("compiler ran %d times, want 2", n)
			}
			if fresh.Manifest.Replaced == "" {
				t.Error("Manifest.Replaced is empty, want the reason the old entry was discarded")
			}
			if _, err := s.Build(ctx, r); err != nil {
				t.Errorf("Build after Rebuild: %v", err)
			}
		})
	}
}

func TestFailedBuildsLeaveNothingBehind(t *testing.T) {
	tests := []struct {
		name    string
		script  string
		want    []string // in the error
		notWant []string
	}{
		{
			name:   "a compiler error reports the last 40 lines of output and the command",
			script: failingCompilerScript,
			want: []string{"build failed: compiling main.cc: exit status 1\nfirst error: src/main.cc:1:1: error: problem 001",
				"problem 061", "problem 100", "-c -o obj/main.cc.o -MD -MF obj/main.cc.o.d src/main.cc"},
			notWant: []string{"problem 060"},
		},
		{
			name:   "a compiler that writes no object is a failed build",
			script: silentCompilerScript,
			want:   []string{"compiling main.cc: the compiler exited 0 but wrote no obj/main.cc.o", "(no output)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, cc, _ := fakeSetup(t, tt.script)
			a, err := s.Build(context.Background(), testRequest(cc))
			var be *BuildError
			if !errors.As(err, &be) {
				t.Fatalf("Build = %+v, %v; want a *BuildError", a, err)
			}
			if be.Command[0] != cc.Path {
				t.Errorf("BuildError.Command = %q", be.Command)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
			for _, bad := range tt.notWant {
				if strings.Contains(err.Error(), bad) {
					t.Errorf("error has %q, beyond the last 40 lines:\n%v", bad, err)
				}
			}
			if left := dirNames(t, s.Dir); len(left) != 0 {
				t.Errorf("failed build left %q in the store", left)
			}
		})
	}
}

func TestCancelledBuildKillsTheCompilerAndLeavesNothing(t *testing.T) {
	s, cc, _ := fakeSetup(t, slowCompilerScript)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Build(ctx, testRequest(cc))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Build = %v, want context.DeadlineExceeded", err)
	}
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		t.Errorf("Build took %v to give up; the compiler's children kept it waiting", elapsed)
	}
	if left := dirNames(t, s.Dir); len(left) != 0 {
		t.Errorf("cancelled build left %q in the store", left)
	}
}

// unitsRequest is testRequest with n units, unit0.cc … unit<n-1>.cc.
func unitsRequest(c *toolchain.Compiler, n int) Request {
	r := testRequest(c)
	r.Units = nil
	for i := range n {
		u := fmt.Sprintf("unit%d.cc", i)
		r.Files[u] = []byte(fmt.Sprintf("int unit%d() { return %d; }\n", i, i))
		r.Units = append(r.Units, u)
	}
	return r
}

func TestUnitsCompileAtOnceThenLink(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: the units compile one after another")
	}
	tools := t.TempDir()
	counter := filepath.Join(tools, "builds")
	compiler := filepath.Join(tools, "fakecc")
	writeScript(t, compiler, fakeCompilerScript, counter, "0.5")
	s, err := Open(filepath.Join(t.TempDir(), "cache"))
	if err != nil {
		t.Fatal(err)
	}
	cc := compilerAt(compiler)
	// The request's units and the builder's vkern_source.cc, at most 4.
	units := min(runtime.NumCPU(), 4)
	r := unitsRequest(cc, units-1)
	all := append(append([]string(nil), r.Units...), SourceUnit)
	a, err := s.Build(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if n, c := builds(t, counter), runs(t, counter, "compile"); n != 1 || c != units {
		t.Errorf("compiler linked %d times and compiled %d, want 1 and %d", n, c, units)
	}
	m := a.Manifest
	// One after another the compiles would take units × 0.5 s.
	if m.BuildSeconds >= float64(units)*0.5 {
		t.Errorf("%d units of 0.5 s each took %.2f s to build: they did not compile at once", units, m.BuildSeconds)
	}
	if !slices.Equal(m.Units, all) || len(m.UnitSeconds) != units || len(m.BuildCommands) != units+1 {
		t.Fatalf("manifest units %q, unit seconds %v, %d commands", m.Units, m.UnitSeconds, len(m.BuildCommands))
	}
	link := m.BuildCommands[units]
	for i, u := range all {
		if obj := "obj/" + u + ".o"; link[len(link)-units+i] != obj || !slices.Contains(m.BuildCommands[i], "src/"+u) {
			t.Errorf("unit %s: compile %q, link %q; want src/%s compiled to %s and linked in unit order", u, m.BuildCommands[i], link, u, obj)
		}
	}
	b, err := os.ReadFile(a.Binary)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(b), "# compiled by:") != units {
		t.Errorf("the fake binary holds %d objects, want %d:\n%s", strings.Count(string(b), "# compiled by:"), units, b)
	}
}

// oneUnitFailsScript fails the compile of bad.cc after 0.2 s, with a
// compiler error line, and takes 30 s over every other unit.
const oneUnitFailsScript = `#!/bin/sh
PATH=/usr/bin:/bin
for a in "$@"; do
  case "$a" in
    src/bad.cc) sleep 0.2; echo 'src/bad.cc:3:7: error: expected ; before }' >&2; exit 1 ;;
  esac
done
sleep 30
`

func TestTheFirstFailingUnitStopsTheOthersAndIsReported(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: the units compile one after another")
	}
	s, cc, _ := fakeSetup(t, oneUnitFailsScript)
	// The units start in order, as many at once as there are CPUs: the
	// failing one among the first, the slow ones after it still running.
	r := unitsRequest(cc, runtime.NumCPU()-1)
	r.Files["bad.cc"] = []byte("int bad() {\n  return\n}\n")
	r.Units = append([]string{"bad.cc"}, r.Units...)
	start := time.Now()
	_, err := s.Build(context.Background(), r)
	var be *BuildError
	if !errors.As(err, &be) {
		t.Fatalf("Build = %v, want a *BuildError", err)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Errorf("Build took %v: the other units were not stopped", elapsed)
	}
	if be.Unit != "bad.cc" || be.FirstError != "src/bad.cc:3:7: error: expected ; before }" || be.Command[len(be.Command)-1] != "src/bad.cc" {
		t.Errorf("BuildError unit %q, first error %q, command %q; want bad.cc's", be.Unit, be.FirstError, be.Command)
	}
	if want := "cache: build failed: compiling bad.cc: exit status 1\nfirst error: src/bad.cc:3:7: error: expected ; before }\n"; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error starts\n%s\nwant\n%s", err, want)
	}
	if left := dirNames(t, s.Dir); len(left) != 0 {
		t.Errorf("failed build left %q in the store", left)
	}
}

// linkFailsScript compiles (writes the object) and fails every link with a
// linker's error.
const linkFailsScript = `#!/bin/sh
PATH=/usr/bin:/bin
out=
prev=
for a in "$@"; do
  if [ "$prev" = "-o" ]; then out="$a"; fi
  if [ "$a" = "-c" ]; then compile=1; fi
  prev="$a"
done
if [ -n "$compile" ]; then : > "$out"; exit 0; fi
echo "/usr/bin/ld: obj/main.cc.o: in function main: undefined reference to \` + "`" + `vkern::run_probe'" >&2
echo "collect2: error: ld returned 1 exit status" >&2
exit 1
`

func TestAFailedLinkIsReportedWithItsFirstError(t *testing.T) {
	s, cc, _ := fakeSetup(t, linkFailsScript)
	_, err := s.Build(context.Background(), testRequest(cc))
	var be *BuildError
	if !errors.As(err, &be) {
		t.Fatalf("Build = %v, want a *BuildError", err)
	}
	if be.Unit != "" || !strings.Contains(be.FirstError, "undefined reference to `vkern::run_probe'") || !slices.Contains(be.Command, "server") {
		t.Errorf("BuildError unit %q, first error %q, command %q; want the link's", be.Unit, be.FirstError, be.Command)
	}
	if !strings.HasPrefix(err.Error(), "cache: build failed: linking: exit status 1\nfirst error: ") {
		t.Errorf("error:\n%v", err)
	}
}

func TestBuildWaitsForTheLockOnlyAsLongAsTheContextAllows(t *testing.T) {
	s, cc, counter := fakeSetup(t, fakeCompilerScript)
	r := testRequest(cc)
	held, err := s.lockKey(context.Background(), Key(r))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = s.Build(ctx, r)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "another vkern process") {
		t.Fatalf("Build with the lock held elsewhere = %v, want a deadline error that says why it waited", err)
	}
	held.release()
	if _, err := s.Build(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if n := builds(t, counter); n != 1 {
		t.Errorf("compiler ran %d times, want 1", n)
	}
}

func TestBuildRemovesWhatAKilledBuilderLeft(t *testing.T) {
	s, cc, _ := fakeSetup(t, fakeCompilerScript)
	r := testRequest(cc)
	stale := filepath.Join(s.Dir, buildPrefix+Key(r)+"-killed")
	if err := os.MkdirAll(filepath.Join(stale, srcDirName), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(s.Dir, Key(r)+lockSuffix), "") // a lock file no one holds
	if _, err := s.Build(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if got := dirNames(t, s.Dir); !slices.Equal(got, []string{Key(r)}) {
		t.Errorf("store holds %q, want only the entry", got)
	}
}

func TestBuildRejectsBadRequests(t *testing.T) {
	s, cc, counter := fakeSetup(t, fakeCompilerScript)
	tests := []struct {
		name   string
		change func(r *Request)
		want   string
	}{
		{"a request without a compiler is refused", func(r *Request) { r.Compiler = nil }, "toolchain.Detect"},
		{"a compiler without a path is refused", func(r *Request) { r.Compiler = &toolchain.Compiler{Backend: "cpu"} }, "incomplete"},
		{"a request without files is refused", func(r *Request) { r.Files = nil }, "no source files"},
		{"a unit that is not among the files is refused", func(r *Request) { r.Units = []string{"main.cc", "server.cc"} }, `unit "server.cc" is not one of the 2 source files (kernels/answer.h, main.cc)`},
		{"a request without units is refused", func(r *Request) { r.Units = nil }, "no units to compile"},
		{"a unit listed twice is refused", func(r *Request) { r.Units = []string{"main.cc", "main.cc"} }, `unit "main.cc" is listed twice`},
		{"a source path that climbs out is refused", func(r *Request) { r.Files["../evil.h"] = nil }, `"../evil.h" must be relative`},
		{"an absolute source path is refused", func(r *Request) { r.Files["/etc/evil.h"] = nil }, `"/etc/evil.h" must be relative`},
		{"an unclean source path is refused", func(r *Request) { r.Files["kernels/../x.h"] = nil }, `"kernels/../x.h" must be relative`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := testRequest(cc)
			tt.change(&r)
			for _, build := range []func(context.Context, Request) (*Artifact, error){s.Build, s.Rebuild} {
				_, err := build(context.Background(), r)
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("got %v, want an error containing %q", err, tt.want)
				}
			}
		})
	}
	if n := builds(t, counter); n != 0 {
		t.Errorf("compiler ran %d times for bad requests", n)
	}
	if left := dirNames(t, s.Dir); len(left) != 0 {
		t.Errorf("bad requests left %q in the store", left)
	}
}

func TestListAndClean(t *testing.T) {
	s, cc, _ := fakeSetup(t, fakeCompilerScript)
	ctx := context.Background()
	var keys []string
	for _, answer := range []string{"1", "2", "3"} {
		r := testRequest(cc)
		r.Files["kernels/answer.h"] = []byte("static const int kAnswer = " + answer + ";\n")
		a, err := s.Build(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, a.Key)
	}

	t.Run("List returns every entry, newest first", func(t *testing.T) {
		ms, err := s.List()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range ms {
			got = append(got, m.Key)
		}
		if want := []string{keys[2], keys[1], keys[0]}; !slices.Equal(got, want) {
			t.Errorf("List keys = %q, want %q", got, want)
		}
	})
	t.Run("List names a corrupt entry and still returns the others", func(t *testing.T) {
		write(t, filepath.Join(s.Dir, keys[1], manifestName), "garbage")
		ms, err := s.List()
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), keys[1]) {
			t.Errorf("List error = %v, want ErrCorrupt naming %s", err, keys[1])
		}
		if len(ms) != 2 {
			t.Errorf("List returned %d manifests, want 2", len(ms))
		}
	})
	t.Run("Clean leaves an entry that is being built and says so", func(t *testing.T) {
		held, err := s.lockKey(ctx, keys[0])
		if err != nil {
			t.Fatal(err)
		}
		removed, err := s.Clean()
		held.release()
		if removed != 2 || err == nil || !strings.Contains(err.Error(), keys[0]) {
			t.Errorf("Clean = %d, %v; want 2 removed and an error naming %s", removed, err, keys[0])
		}
		if got := dirNames(t, s.Dir); !slices.Equal(got, []string{keys[0]}) {
			t.Errorf("store holds %q, want only %s", got, keys[0])
		}
	})
	t.Run("Clean removes entries, leftovers and stray lock files but not foreign files", func(t *testing.T) {
		if err := os.MkdirAll(filepath.Join(s.Dir, buildPrefix+keys[1]+"-killed", srcDirName), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(s.Dir, trashPrefix+keys[2]+"-killed", keys[2]), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(s.Dir, keys[2]+lockSuffix), "")
		write(t, filepath.Join(s.Dir, probePrefix+"killed"), "vkern")
		write(t, filepath.Join(s.Dir, "README.txt"), "someone else's file")
		removed, err := s.Clean()
		if err != nil || removed != 1 {
			t.Errorf("Clean = %d, %v; want 1, nil", removed, err)
		}
		if got := dirNames(t, s.Dir); !slices.Equal(got, []string{"README.txt"}) {
			t.Errorf("store holds %q, want only README.txt", got)
		}
		if ms, err := s.List(); len(ms) != 0 || err != nil {
			t.Errorf("List after Clean = %v, %v", ms, err)
		}
	})
}

// formatOneManifest is an entry's manifest as vkern wrote them before
// units: one main file and one build command.
const formatOneManifest = `{
  "format": 1,
  "key": "@KEY@",
  "backend": "cpu",
  "main": "cpu/main.cc",
  "source_sha256": "8179791b06cbdf3fa8a7b4731866219249660b1edf2e926bce663bbfb11453c1",
  "binary_sha256": "8179791b06cbdf3fa8a7b4731866219249660b1edf2e926bce663bbfb11453c1",
  "compiler": {"name": "g++", "path": "/usr/bin/g++", "version": "g++ 12.2.0", "fingerprint": "f"},
  "flags": ["-std=c++17", "-O3"],
  "target": "test cpu",
  "build_command": ["/usr/bin/g++", "-o", "server", "src/cpu/main.cc"],
  "built_at": "2025-01-02T03:04:05Z",
  "build_seconds": 6.5
}
`

func TestAnEntryOfAnOlderVkernIsListedAndCleaned(t *testing.T) {
	s, cc, _ := fakeSetup(t, fakeCompilerScript)
	if _, err := s.Build(context.Background(), testRequest(cc)); err != nil {
		t.Fatal(err)
	}
	old := strings.Repeat("a", 64)
	if err := os.Mkdir(filepath.Join(s.Dir, old), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(s.Dir, old, manifestName), strings.Replace(formatOneManifest, "@KEY@", old, 1))
	ms, err := s.List()
	if err != nil || len(ms) != 2 {
		t.Fatalf("List = %d manifests, %v; want both entries, no error", len(ms), err)
	}
	if m := ms[1]; m.Key != old || m.Format != 1 || m.BuildSeconds != 6.5 || m.Compiler.Version != "g++ 12.2.0" {
		t.Errorf("the older entry lists as %+v", m)
	}
	if n, err := s.Clean(); n != 2 || err != nil {
		t.Errorf("Clean = %d, %v; want 2, nil", n, err)
	}
}

func TestBuildWithTheRealCompiler(t *testing.T) {
	ctx := context.Background()
	cc, err := toolchain.DetectCPU(ctx)
	if errors.Is(err, toolchain.ErrNoCompiler) {
		t.Skipf("no C++ compiler here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Two units, as the kernel server: main calls a function of the other
	// and prints the sources' hash, which the builder's unit defines.
	files := func(word string, mainHeader string) map[string][]byte {
		return map[string][]byte{
			"main.cc": []byte(`#include <cstdio>
#include "kernels/greeting.h"
#include "kernels/main.h"
extern "C" const char vkern_source_sha256[];
int main() { std::printf("%s %d %s\n", greeting(), kMain, vkern_source_sha256); }
`),
			"kernels/main.h":      []byte(mainHeader),
			"kernels/greeting.h":  []byte("const char* greeting();\n"),
			"kernels/greeting.cc": []byte(`#include "kernels/greeting.h"` + "\nconst char* greeting() { return \"" + word + "\"; }\n"),
		}
	}
	build := func(t *testing.T, f map[string][]byte, wantOut string, wantReused ...string) *Artifact {
		t.Helper()
		r := Request{Files: f, Units: []string{"main.cc", "kernels/greeting.cc"}, Compiler: cc}
		a, err := s.Build(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(a.Binary).Output()
		if err != nil {
			t.Fatal(err)
		}
		if want := wantOut + " " + SourceSHA256(r.Files) + "\n"; string(out) != want {
			t.Errorf("the built binary printed %q, want %q", out, want)
		}
		if !slices.Equal(a.Manifest.ReusedUnits, wantReused) {
			t.Errorf("units from the object cache: %q, want %q", a.Manifest.ReusedUnits, wantReused)
		}
		return a
	}
	a := build(t, files("hello from vkern", "const int kMain = 1;\n"), "hello from vkern 1")
	t.Run("the same request is the same entry", func(t *testing.T) {
		again := build(t, files("hello from vkern", "const int kMain = 1;\n"), "hello from vkern 1")
		if !again.Manifest.BuiltAt.Equal(a.Manifest.BuiltAt) {
			t.Error("the second Build compiled again")
		}
	})
	t.Run("a changed unit is compiled, the unchanged one reused", func(t *testing.T) {
		build(t, files("hello again", "const int kMain = 1;\n"), "hello again 1", "main.cc")
	})
	t.Run("a changed header recompiles the unit that includes it", func(t *testing.T) {
		build(t, files("hello again", "const int kMain = 2;\n"), "hello again 2", "kernels/greeting.cc")
	})
	t.Run("a file added beside the sources recompiles every unit", func(t *testing.T) {
		f := files("hello again", "const int kMain = 2;\n")
		f["kernels/notes.txt"] = []byte("nothing includes this\n")
		build(t, f, "hello again 2")
	})
	t.Run("a damaged object is compiled again", func(t *testing.T) {
		objs, err := filepath.Glob(filepath.Join(s.Dir, objectsDirName, "*", "*.o"))
		if err != nil || len(objs) == 0 {
			t.Fatalf("no objects in the object cache: %v", err)
		}
		for _, o := range objs {
			if err := os.WriteFile(o, []byte("damaged"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		build(t, files("hello once more", "const int kMain = 2;\n"), "hello once more 2")
	})
	t.Run("Rebuild trusts no stored object", func(t *testing.T) {
		f := files("hello once more", "const int kMain = 2;\n")
		r := Request{Files: f, Units: []string{"main.cc", "kernels/greeting.cc"}, Compiler: cc}
		entry, err := s.Build(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(entry.Binary, []byte("tampered"), 0o755); err != nil {
			t.Fatal(err)
		}
		rebuilt, err := s.Rebuild(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if len(rebuilt.Manifest.ReusedUnits) != 0 || rebuilt.Manifest.Replaced == "" {
			t.Errorf("Rebuild reused %q (replaced %q); want every unit compiled", rebuilt.Manifest.ReusedUnits, rebuilt.Manifest.Replaced)
		}
	})
	t.Run("Clean removes the object cache", func(t *testing.T) {
		if _, err := s.Clean(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(s.Dir, objectsDirName)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after Clean the object cache is still there: %v", err)
		}
	})
	t.Logf("%s built %s in %.2fs", cc.Version, a.Key[:12], a.Manifest.BuildSeconds)
}

func TestParseDepsNamesSourcesRelativeAndHeadersAbsolute(t *testing.T) {
	dep := "obj/main.cc.o: src/main.cc src/kernels/a\\ b.h \\\n /usr/include/stdio.h src/cpu/../core/x.h \\\n" +
		" /abs/build/src/core/y.h src/main.cc\n\nsrc/kernels/a\\ b.h:\n"
	got, err := parseDeps([]byte(dep), "src/", "/abs/build/src")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/usr/include/stdio.h", "core/x.h", "core/y.h", "kernels/a b.h", "main.cc"}; !slices.Equal(got, want) {
		t.Errorf("parseDeps = %q, want %q", got, want)
	}
	if _, err := parseDeps([]byte("no rule here\n"), "src/", ""); err == nil {
		t.Error("a file without a target parsed")
	}
	if _, err := parseDeps([]byte("obj/m.o: src/m.cc elsewhere/h.h\n"), "src/", ""); err == nil {
		t.Error("a relative dependency outside the sources parsed; it could not be found again")
	}
}

func TestDepsKeyFollowsSourcesAndHeaders(t *testing.T) {
	header := filepath.Join(t.TempDir(), "sys.h")
	write(t, header, "int a;\n")
	files := map[string][]byte{"m.cc": []byte("x"), "h.h": []byte("y")}
	deps := []string{header, "h.h", "m.cc"}
	first, ok := depsKey(deps, newSources(files))
	if !ok {
		t.Fatal("depsKey refused sources and a header that exist")
	}
	if again, _ := depsKey(deps, newSources(files)); again != first {
		t.Error("the same sources and header gave two keys")
	}
	changed := map[string][]byte{"m.cc": []byte("x"), "h.h": []byte("z")}
	if k, _ := depsKey(deps, newSources(changed)); k == first {
		t.Error("a changed source kept the key")
	}
	write(t, header, "int a, b;\n")
	if k, _ := depsKey(deps, newSources(files)); k == first {
		t.Error("a changed header (size) kept the key")
	}
	if _, ok := depsKey(append(deps, "gone.h"), newSources(files)); ok {
		t.Error("a source that is not among the files gave a key")
	}
	if err := os.Remove(header); err != nil {
		t.Fatal(err)
	}
	if _, ok := depsKey(deps, newSources(files)); ok {
		t.Error("a header that is gone gave a key")
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

// TestGPUBuildsRecompileTheUnitsAnEditReaches: on cuda (and hip) a unit is
// taken to read itself and, transitively, the sources its #include lines
// name, so an edited kernel file recompiles that unit alone and an edited
// header the units that include it, with the compile commands unchanged
// (no dependency files).
func TestGPUBuildsRecompileTheUnitsAnEditReaches(t *testing.T) {
	s, cc, counter := fakeSetup(t, fakeCompilerScript)
	cc.Backend = toolchain.BackendCUDA
	files := func(b, header string) map[string][]byte {
		return map[string][]byte{
			"main.cu":   []byte("#include \"ops.cuh\"\n#include \"shared.cu\"\nint main() { return 0; }\n"),
			"a.cu":      []byte("#include \"ops.cuh\"\nint a() { return 1; }\n"),
			"b.cu":      []byte(b),
			"ops.cuh":   []byte(header),
			"shared.cu": []byte("int shared() { return 3; }\n"),
		}
	}
	// The builds run in order, each against the object cache the ones
	// before it left; what says which case a failure belongs to.
	ctx := context.Background()
	compiles, what := 0, "the first build"
	build := func(t *testing.T, f map[string][]byte, units []string, wantCompiles int, wantReused ...string) {
		t.Helper()
		a, err := s.Build(ctx, Request{Files: f, Units: units, Compiler: cc})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		now := runs(t, counter, "compile")
		if now-compiles != wantCompiles {
			t.Errorf("%s: %d compiles, want %d (the build's vkern_source.cc among them)", what, now-compiles, wantCompiles)
		}
		compiles = now
		if !slices.Equal(a.Manifest.ReusedUnits, wantReused) {
			t.Errorf("%s: units from the object cache: %q, want %q", what, a.Manifest.ReusedUnits, wantReused)
		}
		for _, argv := range a.Manifest.BuildCommands {
			if slices.Contains(argv, "-MD") {
				t.Errorf("a GPU compile asked for a dependency file: %q", argv)
			}
		}
	}
	units := []string{"main.cu", "a.cu", "b.cu"}
	build(t, files("int b() { return 2; }\n", "// ops\n"), units, 4)
	what = "an edited kernel file recompiles its unit alone"
	build(t, files("int b() { return 20; }\n", "// ops\n"), units, 2, "main.cu", "a.cu")
	what = "an edited header recompiles the units that include it"
	build(t, files("int b() { return 20; }\n", "// ops, edited\n"), units, 3, "b.cu")
	what = "a header that includes another passes an edit of it on"
	{
		f := files("int b() { return 20; }\n", "#include \"deep.cuh\"\n")
		f["deep.cuh"] = []byte("// deep\n")
		build(t, f, units, 4) // a new file: every unit key changes
		f["deep.cuh"] = []byte("// deep, edited\n")
		build(t, f, units, 3, "b.cu")                           // main.cu and a.cu, through ops.cuh
		f["shared.cu"] = []byte("int shared() { return 4; }\n") // main.cu's alone
		build(t, f, units, 2, "a.cu", "b.cu")
	}
	what = "a unit that an #include names recompiles with the units that include it"
	{
		u := append(append([]string(nil), units...), "shared.cu")
		f := files("int b() { return 20; }\n", "// ops, edited\n")
		build(t, f, u, 2, "main.cu", "a.cu", "b.cu")
		f["shared.cu"] = []byte("int shared() { return 30; }\n")
		build(t, f, u, 3, "a.cu", "b.cu")
	}
	what = "an #include it cannot read turns reuse off"
	{
		f := files("#define HEADER \"ops.cuh\"\n#include HEADER\nint b() { return 2; }\n", "// ops, edited\n")
		build(t, f, units, 4)
		f["b.cu"] = []byte("#define HEADER \"ops.cuh\"\n#include HEADER\nint b() { return 21; }\n")
		build(t, f, units, 4)
	}
}

func TestIncludeReadsFollowEveryIncludeByBaseName(t *testing.T) {
	files := map[string][]byte{
		"cuda/main.cu":      []byte("#include \"core/server.cc\"\n  #  include <cuda/gemm_sm90.cu>\n"),
		"core/server.cc":    []byte("#if 0\n#include \"cuda/unused.cu\" // an #if 0 block still counts\n#endif\n"),
		"cuda/gemm.cu":      []byte("#include \"gemm.cuh\"\nint g;\n"),
		"cuda/gemm.cuh":     []byte("#include \"cuda/gemm_sm90.cu\"\n"),
		"other/gemm.cuh":    []byte("int o; // the same base name: read too\n"),
		"cuda/gemm_sm90.cu": []byte("int h;\n"),
		"cuda/unused.cu":    []byte("int u;\n"),
	}
	got, ok := includeReads(files, []string{"cuda/main.cu", "cuda/gemm.cu", "cuda/unused.cu"})
	want := map[string][]string{
		"cuda/main.cu":   {"core/server.cc", "cuda/gemm_sm90.cu", "cuda/main.cu", "cuda/unused.cu"},
		"cuda/gemm.cu":   {"cuda/gemm.cu", "cuda/gemm.cuh", "cuda/gemm_sm90.cu", "other/gemm.cuh"},
		"cuda/unused.cu": {"cuda/unused.cu"},
	}
	if !ok || len(got) != len(want) {
		t.Fatalf("includeReads = %q, %v; want %q, true", got, ok, want)
	}
	for u, w := range want {
		if !slices.Equal(got[u], w) {
			t.Errorf("%s reads %q, want %q", u, got[u], w)
		}
	}
	files["cuda/gemm.cu"] = []byte("#include_next <x.h>\n")
	if _, ok := includeReads(files, []string{"cuda/main.cu"}); ok {
		t.Error("an #include_next was read as a plain #include")
	}
}

// TestIncludedNamesMissNoDirective: each spelling of a directive that
// reads x.cuh which g++ or clang accept, as four reviews of the scan found
// them, names it or turns reuse off; a name made by a macro turns it off;
// and text that only mentions a directive leaves it on.
func TestIncludedNamesMissNoDirective(t *testing.T) {
	reads := []string{
		"#include \"x.cuh\"\n",
		"  #  include <dir/x.cuh>\n",
		"#include\"x.cuh\"// a comment\n",
		"/**/ #include \"x.cuh\"\n",
		"#/**/include \"x.cuh\"\n",
		"#\\\ninclude \"x.cuh\"\n",
		"#inc\\\nlude \"x.cuh\"\n",
		"#inc\\  \nlude \"x.cuh\"\n", // blanks after the backslash, as gcc allows
		"%:include \"x.cuh\"\n",
		"??=include \"x.cuh\"\n",
		"\ufeff#include \"x.cuh\"\n",
		"\v#include \"x.cuh\"\n",
		"\f #include \"x.cuh\"\n",
		"#import \"x.cuh\"\n",
		"#embed \"x.cuh\" limit(4)\n",
		"// a\r#include \"x.cuh\"\r",
		"// a\r\n#include \"x.cuh\"\r\n",
		"/* a\n*/ #include \"x.cuh\"\n",
		"int a; /* a\n*/ #include \"x.cuh\"\n",
		"int n = 1'000;\n#include \"x.cuh\"\n",
		"auto c = u8'a';\n#include \"x.cuh\"\n",
		"const char* s = \"/*\";\n#include \"x.cuh\"\n",
		"char q = '\"';\n#include \"x.cuh\"\n",
		"const char* e = \"\\\"/*\";\n#include \"x.cuh\"\n",
		"#error don't\n#include \"x.cuh\"\n",
		"#if 0\n#include \"x.cuh\"\n#endif\n",
		"#include <a//x.cuh>\n",
		"#include <a/*b*/x.cuh>\n",
		"#define S(x) #x\nconst char* s = S(1'/*');\n#include \"x.cuh\"\n// */\n",
		"#define S(x) #x\nconst char* s = S(0x1'/*');\n#include \"x.cuh\"\n// */\n",
		"#define S(x) #x\nconst char* s = S(1_x'/*');\n#include \"x.cuh\"\n// */\n",
		"#define S(x) #x\nconst char* s = S(1'x'/*');\n#include \"x.cuh\"\n// */\n",
		"#define S(x) #x\nconst char* s = S($1'/*');\n#include \"x.cuh\"\n// */\n",
		"#define S(x) #x\nconst char* s = S(1$'a'/*');\n#include \"x.cuh\"\n// */\n",
		"#define S(x) #x\nconst char* s = S(1\\u00e9'a'/*');\n#include \"x.cuh\"\n// */\n",
		"#define UNUSED 1'/*'\n#include \"x.cuh\"\n// */\n",
		"#define UNUSED 1'$/*'\n#include \"x.cuh\"\n// */\n",
		"#if 0\nversion 2' /* x\n#endif\n#include \"x.cuh\"\n// */\n",
		"#error version 2' /* x\n#include \"x.cuh\"\n// */\n",
		"#\x00include \"x.cuh\"\n",
		"\x00#include \"x.cuh\"\n",
		"#include \"x.cuh\x00junk\"\n",
		"#inc\\\x00\nlude \"x.cuh\"\n",
		"#define UNUSED \u00b0R\"x(\")/*)x\"\n#include \"x.cuh\"\n// */\n",
		"#define UNUSED \u00d71'a'/*'\n#include \"x.cuh\"\n// */\n",
		"#define UNUSED \xb0R\"x(\")/*)x\"\n#include \"x.cuh\"\n// */\n", // Latin-1
		"const char* r = R\"(\n#include \"x.cuh\"\n)\";\n",
		"auto r = u8R\"d(/*)d\";\n#include \"x.cuh\"\n",
		"// a ??/\n#include \"x.cuh\"\n", // a splice where trigraphs are on
		"#/*\nfoo */include \"x.cuh\"\n", // a comment across lines inside a directive
		"# /* a\n b */ include <x.cuh>\n",
		"#if __has_include(<a/*>)\n#endif\n#include \"x.cuh\"\n// */\n",
		"#if 0\n??=include <a /* >\n/*/\n#endif\n#include \"x.cuh\"\n// */\n",
		"#if 0\n#embed <a /* >\n/*/\n#endif\n#include \"x.cuh\"\n// */\n",
		"#if 0\n#include <a/* >\n/*/\n#endif\n#include \"x.cuh\"\n// */\n",
		"#if 0\n#import <a/* >\n/*/\n#endif\n#include \"x.cuh\"\n// */\n",
		"#if __has_include(\"a\\\" /*\n/*/ )\n#endif\n#include \"x.cuh\"\n// */\n",
		"const char* s = \"\\\n\r/*\";\n#include \"x.cuh\"\n// */\n", // clang splices backslash, LF, CR
		"#\u00a0include \"x.cuh\"\n",                                 // a no-break space, white space to clang
		"%:\u3000include \"x.cuh\"\n",
		"#include\u00a0\"x.cuh\"\n",
		"#include \"d\\\"/x.cuh\"\n", // clang reads d\"/x.cuh
	}
	off := []string{
		"#define H \"x.cuh\"\n#include H\n",
		"#include_next <x.cuh>\n",
		"#include\n",
		"#include \"x.cuh\n\"\n",
		"#include /* never closed\n",
	}
	on := []string{
		"// we include the header above\n",
		"#define N 1\n#if N\n#pragma once\n#endif\n",
		"int includes = 1; // #includes\n",
		"x = a#b;\n",
	}
	for _, want := range []struct {
		srcs []string
		fine func(names []string, ok bool) bool
		what string
	}{
		{reads, func(names []string, ok bool) bool { return !ok || slices.Contains(names, "x.cuh") }, "x.cuh named, or reuse off"},
		{off, func(_ []string, ok bool) bool { return !ok }, "reuse off"},
		{on, func(_ []string, ok bool) bool { return ok }, "reuse on"},
	} {
		for _, src := range want.srcs {
			if names, ok := includedNames([]byte(src)); !want.fine(names, ok) {
				t.Errorf("%q: names %q, reuse on %v; want %s", src, names, ok, want.what)
			}
		}
	}
}
