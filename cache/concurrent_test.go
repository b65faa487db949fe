package cache

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Environment of a helper process (see TestHelperProcess).
const (
	helperEnv         = "VKERN_CACHE_TEST_HELPER" // "build" makes TestHelperProcess act
	helperDirEnv      = "VKERN_CACHE_TEST_DIR"    // the store folder
	helperCompilerEnv = "VKERN_CACHE_TEST_CC"     // the fake compiler's path
	helperGateEnv     = "VKERN_CACHE_TEST_GATE"   // a file whose appearance means "go"
	helperResultTag   = "VKERN-HELPER-RESULT "
)

// helperResult is what a helper process reports on stdout.
type helperResult struct {
	Key, Binary, BinarySHA256 string
	BuiltAt                   time.Time
}

// TestHelperProcess is not a test: run as a child of
// TestEightProcessesBuildOnce, it waits for the gate file, calls Build on the
// shared store, prints the artifact and exits.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "build" {
		t.Skip("a helper process for TestEightProcessesBuildOnce, not a test on its own")
	}
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		if _, err := os.Stat(os.Getenv(helperGateEnv)); err == nil {
			break
		}
		if ctx.Err() != nil {
			fail("the gate %s never opened", os.Getenv(helperGateEnv))
		}
		time.Sleep(time.Millisecond)
	}
	s, err := Open(os.Getenv(helperDirEnv))
	if err != nil {
		fail("%v", err)
	}
	// What a vkern process does: build, and replace an entry found bad.
	r := testRequest(compilerAt(os.Getenv(helperCompilerEnv)))
	a, err := s.Build(ctx, r)
	if errors.Is(err, ErrBadEntry) {
		a, err = s.Rebuild(ctx, r)
	}
	if err != nil {
		fail("%v", err)
	}
	b, err := json.Marshal(helperResult{a.Key, a.Binary, a.Manifest.BinarySHA256, a.Manifest.BuiltAt})
	if err != nil {
		fail("%v", err)
	}
	fmt.Printf("%s%s\n", helperResultTag, b)
	os.Exit(0)
}

func TestEightProcessesBuildOnce(t *testing.T) {
	tools := t.TempDir()
	counter := filepath.Join(tools, "builds")
	compiler := filepath.Join(tools, "fakecc")
	writeScript(t, compiler, fakeCompilerScript, counter, "0.2")
	dir := filepath.Join(t.TempDir(), "cache")

	var first []helperResult
	t.Run("eight processes started together on an empty store compile once and share the entry", func(t *testing.T) {
		first = runHelpers(t, 8, dir, compiler)
		checkOneArtifact(t, first, dir)
		if n := builds(t, counter); n != 1 {
			b, _ := os.ReadFile(counter)
			t.Errorf("compiler ran %d times, want 1; counter file:\n%s", n, b)
		}
	})
	if t.Failed() {
		return
	}
	t.Run("eight processes that find the binary tampered with rebuild it once", func(t *testing.T) {
		f, err := os.OpenFile(first[0].Binary, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("echo pwned\n")
		f.Close()
		second := runHelpers(t, 8, dir, compiler)
		checkOneArtifact(t, second, dir)
		if n := builds(t, counter); n != 2 {
			b, _ := os.ReadFile(counter)
			t.Errorf("compiler ran %d times in all, want 2; counter file:\n%s", n, b)
		}
		if second[0].BinarySHA256 != first[0].BinarySHA256 || second[0].BuiltAt.Equal(first[0].BuiltAt) {
			t.Errorf("after the rebuild got %+v, want a new build of the same binary as %+v", second[0], first[0])
		}
	})
}

// runHelpers starts n helper processes on the store dir, lets them all go at
// once, and returns what each reported.
func runHelpers(t *testing.T, n int, dir, compiler string) []helperResult {
	t.Helper()
	gate := filepath.Join(t.TempDir(), "go")
	type child struct {
		cmd            *exec.Cmd
		stdout, stderr bytes.Buffer
	}
	children := make([]*child, n)
	for i := range children {
		c := &child{cmd: exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")}
		c.cmd.Env = append(os.Environ(),
			helperEnv+"=build", helperDirEnv+"="+dir, helperCompilerEnv+"="+compiler, helperGateEnv+"="+gate)
		c.cmd.Stdout, c.cmd.Stderr = &c.stdout, &c.stderr
		c.cmd.WaitDelay = 5 * time.Second
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children[i] = c
	}
	// Every child is started and polling; open the gate so they all call
	// Build within a millisecond or so of each other.
	write(t, gate, "")

	var results []helperResult
	for i, c := range children {
		if err := c.cmd.Wait(); err != nil {
			t.Errorf("helper %d: %v\nstderr:\n%s", i, err, c.stderr.String())
			continue
		}
		found := false
		sc := bufio.NewScanner(&c.stdout)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), helperResultTag); ok {
				var r helperResult
				if err := json.Unmarshal([]byte(line), &r); err != nil {
					t.Fatalf("helper %d printed %q: %v", i, line, err)
				}
				results = append(results, r)
				found = true
			}
		}
		if !found {
			t.Errorf("helper %d printed no result; stdout:\n%s", i, c.stdout.String())
		}
	}
	if len(results) != n {
		t.FailNow()
	}
	return results
}

// checkOneArtifact checks that every helper got the same artifact and that
// the store holds that entry and nothing else.
func checkOneArtifact(t *testing.T, results []helperResult, dir string) {
	t.Helper()
	for i, r := range results[1:] {
		if r.Key != results[0].Key || r.Binary != results[0].Binary ||
			r.BinarySHA256 != results[0].BinarySHA256 || !r.BuiltAt.Equal(results[0].BuiltAt) {
			t.Errorf("helper %d got %+v, helper 0 got %+v", i+1, r, results[0])
		}
	}
	if got := dirNames(t, dir); !slices.Equal(got, []string{results[0].Key}) {
		t.Errorf("store holds %q, want only the entry %s", got, results[0].Key)
	}
}
