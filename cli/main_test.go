package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vkern/vkern/bench"
	"github.com/vkern/vkern/userop"
	"github.com/vkern/vkern/verify"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestUsageErrorsExitTwoWithALineThatNamesTheValue(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{nil, "Usage"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"verify", "--bogus"}, "-bogus"},
		{[]string{"verify", "--op", "gemv"}, `unknown op "gemv"`},
		{[]string{"verify", "--dist", "weird"}, `unknown distribution "weird"`},
		{[]string{"verify", "--shape", "0x4x4"}, "M = 0"},
		{[]string{"verify", "--shape", "4x4x"}, "not a whole number"},
		{[]string{"verify", "--op", "softmax", "--shape", "4x4x4"}, "softmax"},
		{[]string{"verify", "--op", "softmax", "--shape", "4x4:ignore_index=-100"}, "shape 4x4:ignore_index=-100 sets ignore_index, but softmax takes no parameters"},
		{[]string{"verify", "--op", "cross_entropy", "--shape", "4x4:ignore=-1"}, "which cross_entropy does not take (it takes ignore_index, grad_scale)"},
		{[]string{"verify", "--op", "cross_entropy", "--shape", "4x4:ignore_index=1e9x"}, "not NAME=WHOLE_NUMBER"},
		{[]string{"verify", "--trials", "0"}, "--trials 0"},
		{[]string{"verify", "--backend", "tpu"}, `--backend "tpu"`},
		{[]string{"verify", "--json", "/nonexistent-dir/r.json"}, "/nonexistent-dir"},
		{[]string{"verify", "--md", "/proc/r.md"}, "folder /proc is not writable"},
		{[]string{"verify", "--op", "softmax", "--dist", "rounding"}, "--dist rounding gives no case here: softmax 1x1: exp is not exact"},
		{[]string{"verify", "stray"}, `unexpected argument "stray"`},
		{[]string{"cache"}, "want one of path, ls, clean"},
		{[]string{"cache", "empty"}, `unknown subcommand "empty"`},
		{[]string{"bench", "--suite", "nope"}, `unknown --suite "nope"`},
		{[]string{"bench", "--n", "0"}, "--n 0"},
		{[]string{"bench", "--suite", "ops", "--quick"}, `--quick is for --suite server, not "ops"`},
		{[]string{"bench", "--list"}, `--list is for --suite ops, not "core"`},
		{[]string{"bench", "--suite", "ops", "--list", "--op", "attention", "--shape", "4x4"}, `--shape "4x4" fits none of the chosen ops`},
		{[]string{"bench", "--suite", "train", "--model", "gpt5"}, `no model "gpt5"; choose one of char, gpt2, nano`},
		{[]string{"bench", "--suite", "train", "--steps", "0"}, "--steps 0"},
		{[]string{"bench", "--suite", "train", "--batch", "0"}, "--batch 0"},
		{[]string{"bench", "--suite", "train", "--model", "char", "--context", "257"}, "--context 257: want 1 to char's context, 256"},
		{[]string{"bench", "--suite", "train", "--anchors", "/nonexistent-dir/train.jsonl"}, "/nonexistent-dir/train.jsonl: no such file"},
		{[]string{"bench", "--suite", "ops", "--steps", "5"}, `--steps is for --suite train, not "ops"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, stderr := runCLI(t, tt.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("stderr %q does not contain %q", stderr, tt.want)
			}
			if n := strings.Count(strings.TrimSpace(stderr), "\n"); n > 0 && tt.args != nil {
				t.Errorf("the error takes %d lines, want one: %q", n+1, stderr)
			}
		})
	}
}

// The listed cases are the ones the ops suite times, each with the name its
// anchor is reported under, the shape written exactly as the suite writes
// it (the key anchors are matched by), and nothing built or measured.
func TestBenchListPrintsEachCaseWithItsAnchorName(t *testing.T) {
	t.Setenv("VKERN_CACHE", "/nonexistent/cache") // listing needs no cache
	code, stdout, stderr := runCLI(t, "bench", "--suite", "ops", "--op", "attention_grad,linear,fill", "--list")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	want := []string{
		"attention_grad attention_backward 16x1024x768x12",
		"linear linear 16384x2304x768",
		"linear linear 16384x3072x768:gelu=1",
		"linear linear 16384x768x3072:residual=1",
		"linear linear 16384x768x50304:bias=0",
		"linear linear 16384x768x50257:bias=0",
		"fill fill 124475904",
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 11 {
		t.Errorf("%d cases listed, want 11 (1 attention_grad, 9 linear, 1 fill):\n%s", len(lines), stdout)
	}
	for _, w := range want {
		if !strings.Contains("\n"+stdout, "\n"+w+"\n") {
			t.Errorf("no line %q in:\n%s", w, stdout)
		}
	}
}

// TestAShapeWithSeveralSettingsIsOneShape: the form the help shows,
// "16384x768:residual=1,dx_sum=1", is one --shape, alone or in a list
// (the list's commas once cut it after its first setting).
func TestAShapeWithSeveralSettingsIsOneShape(t *testing.T) {
	t.Setenv("VKERN_CACHE", "/nonexistent/cache")
	code, stdout, stderr := runCLI(t, "bench", "--suite", "ops", "--op", "layernorm_grad", "--list",
		"--shape", "16384x768:residual=1,dx_sum=1", "--shape", "64x768,8x8:dx_sum=1,residual=0,3x3")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var shapes []string
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		fields := strings.Fields(line)
		shapes = append(shapes, fields[len(fields)-1])
	}
	want := []string{"16384x768:residual=1,dx_sum=1", "64x768", "8x8:residual=0,dx_sum=1", "3x3"}
	if len(shapes) != len(want) {
		t.Fatalf("listed %q, want shapes %q", shapes, want)
	}
	for i := range want {
		if shapes[i] != want[i] {
			t.Errorf("case %d: shape %q, want %q (all: %q)", i, shapes[i], want[i], shapes)
		}
	}
	// A setting joins only a shape with settings, of the same value; else
	// it stays a shape of its own, for the parser to refuse by name.
	var l shapeListFlag
	for _, v := range []string{"dx_sum=1", "8x8", "dx_sum=1", "8x8,residual=1", "8x8:dx_sum=1"} {
		if err := l.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"dx_sum=1", "8x8", "dx_sum=1", "8x8", "residual=1", "8x8:dx_sum=1"}; strings.Join(l, " ") != strings.Join(want, " ") {
		t.Errorf("shapes %q, want %q", l, want)
	}
}

// TestAShapeThatCannotFitIsRefusedAtOnce fakes a 4 GiB machine: shapes
// whose inputs alone would take it down are refused with exit 2, naming
// the need and what is free, before anything is built or allocated.
func TestAShapeThatCannotFitIsRefusedAtOnce(t *testing.T) {
	saved := verify.HostMemory
	verify.HostMemory = func() (int64, string, error) { return 4 << 30, "a test's fake 4 GiB", nil }
	t.Cleanup(func() { verify.HostMemory = saved })
	for _, shape := range []string{"100000x100000x100000", "1x1x4294967297", "50000x50000x8"} {
		start := time.Now()
		code, _, stderr := runCLI(t, "verify", "--backend", "cpu", "--op", "gemm", "--shape", shape)
		if code != exitUsage || !strings.Contains(stderr, "gemm "+shape) || !strings.Contains(stderr, "of host memory") ||
			!strings.Contains(stderr, "4.00 GiB is free (a test's fake 4 GiB)") || !strings.Contains(stderr, "use a smaller shape") {
			t.Errorf("--shape %s: exit %d, stderr %q", shape, code, stderr)
		}
		if elapsed := time.Since(start); elapsed > 5*time.Second {
			t.Errorf("--shape %s: refused after %v, want at once", shape, elapsed)
		}
	}
}

func TestEveryCommandHasHelp(t *testing.T) {
	for _, c := range commands() {
		if c.name == "version" {
			continue
		}
		code, stdout, _ := runCLI(t, c.name, "--help")
		if code != exitOK || !strings.Contains(stdout, "Usage: vkern "+c.name) {
			t.Errorf("vkern %s --help: exit %d, output %q", c.name, code, stdout)
		}
	}
	if code, stdout, _ := runCLI(t, "help"); code != exitOK || !strings.Contains(stdout, "verify") {
		t.Errorf("vkern help: exit %d, output %q", code, stdout)
	}
}

func TestCachePathHonoursVKERN_CACHE(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("VKERN_CACHE", dir)
	code, stdout, _ := runCLI(t, "cache", "path")
	if code != exitOK || strings.TrimSpace(stdout) != dir {
		t.Fatalf("exit %d, path %q, want %q", code, stdout, dir)
	}
}

func TestAMissingCompilerExitsOneWithTheFix(t *testing.T) {
	t.Setenv("VKERN_CACHE", t.TempDir())
	t.Setenv("CXX", "/no/such/compiler")
	code, _, stderr := runCLI(t, "verify", "--backend", "cpu", "--quick")
	if code != exitFailure || !strings.Contains(stderr, "/no/such/compiler") || !strings.Contains(stderr, "CXX") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

func TestAnUnwritableCacheExitsWithTheFolderAndTheFix(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	t.Setenv("VKERN_CACHE", filepath.Join(file, "cache"))
	code, _, stderr := runCLI(t, "verify", "--backend", "cpu", "--quick")
	if code != exitUsage || !strings.Contains(stderr, "VKERN_CACHE") || !strings.Contains(stderr, file) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

func TestVerifyEndToEndWritesBothReports(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the kernel server")
	}
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("no g++")
	}
	t.Setenv("VKERN_CACHE", t.TempDir())
	dir := t.TempDir()
	jsonPath, mdPath := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.md")
	code, stdout, stderr := runCLI(t, "verify", "--backend", "cpu", "--op", "gemm,softmax",
		"--shape", "5x6x7", "--shape", "3x9", "--dist", "integer", "--dist", "special", "--json", jsonPath, "--md", mdPath)
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "PASSED: 4 passed") {
		t.Errorf("stdout lacks the summary:\n%s", stdout)
	}
	var rep map[string]any
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("report JSON: %v", err)
	}
	for _, key := range []string{"backend", "device", "toolchain", "cache_key", "verdict", "summary", "evidence", "non_claims", "cases"} {
		if _, ok := rep[key]; !ok {
			t.Errorf("JSON report lacks %q", key)
		}
	}
	cases, _ := rep["cases"].([]any)
	if len(cases) != 4 {
		t.Fatalf("%d cases in the JSON, want 4", len(cases))
	}
	first, _ := cases[0].(map[string]any)
	for _, key := range []string{"op", "shape", "dist", "seed", "verdict", "max_abs_error", "max_error_over_bound", "rms_error", "elements", "kernel_time_ns"} {
		if _, ok := first[key]; !ok {
			t.Errorf("JSON case lacks %q", key)
		}
	}
	md, err := os.ReadFile(mdPath)
	if err != nil || !bytes.Contains(md, []byte("# vkern verify: passed")) {
		t.Errorf("Markdown report: %v\n%s", err, md)
	}
}

func TestBenchOpsSuiteWritesResultsAndAChart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the kernel server")
	}
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("no g++")
	}
	t.Setenv("VKERN_CACHE", t.TempDir())
	dir := t.TempDir()
	anchors := filepath.Join(dir, "anchors.jsonl")
	os.WriteFile(anchors, []byte(`{"op": "copy", "shape": "1073741824B", "impl": "memcpy", "median_ms": 100, "gbps": 20}
{"op": "gemm", "shape": "32x16x8", "impl": "reference gemm", "median_ms": 0.001, "tflops": 0.008}
`), 0o644)
	jsonPath, svgPath := filepath.Join(dir, "ops.json"), filepath.Join(dir, "ops.svg")
	code, stdout, stderr := runCLI(t, "bench", "--suite", "ops", "--backend", "cpu", "--op", "gemm,softmax",
		"--shape", "32x16x8", "--shape", "3x50", "--runs", "3", "--anchors", anchors, "--json", jsonPath, "--svg", svgPath)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	results, data := benchJSON(t, jsonPath)
	if len(results) != 2 {
		t.Fatalf("JSON %s: want two results", data)
	}
	g := results[0]
	if g.Name != "gemm_32x16x8" || g.N != 3 || g.MedianNs <= 0 || g.Ratio <= 0 || g.FloorShare <= 0 {
		t.Errorf("gemm result %+v: want 3 runs, a ratio to its anchor and a floor share", g)
	}
	if svg, err := os.ReadFile(svgPath); err != nil || !bytes.Contains(svg, []byte("gemm_32x16x8")) {
		t.Errorf("chart: %v\n%s", err, svg)
	}
}

// The train suite times training steps on the cpu backend, at a size CI
// takes in seconds, and relates each to the anchors of its model, batch
// and context; it refuses an anchors file it cannot read or pair.
func TestBenchTrainSuiteTimesStepsAgainstTheirAnchors(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the kernel server")
	}
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("no g++")
	}
	dir := t.TempDir()
	line := func(mode string, batch int, ms float64) string {
		return fmt.Sprintf(`{"anchor": "train", "model": "nano", "mode": %q, "batch": %d, "context": 16, "vocab": 256, "padded_vocab": 256, "steps": 30, "median_ms": %g, "tokens_per_second": %g, "skipped": 0, "torch": "2.11.0", "device": "cpu"}`,
			mode, batch, ms, float64(batch*16)/ms*1e3)
	}
	write := func(name string, lines ...string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	anchors := write("anchors.jsonl", line("eager", 2, 40), line("compile", 2, 20))
	jsonPath := filepath.Join(dir, "train.json")
	args := []string{"bench", "--suite", "train", "--backend", "cpu", "--model", "nano", "--batch", "2", "--context", "16", "--steps", "2", "--warmup", "1"}
	code, stdout, stderr := runCLI(t, append(args, "--anchors", anchors, "--json", jsonPath)...)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	results, data := benchJSON(t, jsonPath)
	if len(results) != 1 {
		t.Fatalf("JSON %s: want one result", data)
	}
	r := results[0]
	if r.Name != "train_nano_b2_t16" || r.N != 2 || r.MedianNs <= 0 || r.GFLOPs <= 0 {
		t.Errorf("result %+v: want 2 timed steps of nano at B 2, T 16", r)
	}
	if got, want := r.TokensPerSecond, 2*16/(r.MedianNs/1e9); math.Abs(got-want) > 1e-9*want {
		t.Errorf("tokens/s %v, want B·T over the median, %v", got, want)
	}
	if len(r.Relations) != 2 || r.Relations[0].Anchor != "PyTorch eager" || r.Relations[1].Anchor != "torch.compile" ||
		math.Abs(r.Relations[0].Ratio-40e6/r.MedianNs) > 1e-9 || r.Relations[1].TokensPerSecond != 1600 {
		t.Errorf("relations %+v: want eager's and compile's, each the anchor's median over ours", r.Relations)
	}
	if r.FloorShare != 0 {
		t.Errorf("a share of the GPU peak on the cpu backend: %v", r.FloorShare)
	}
	// The host's phases of the timed steps: all four, each inside a step.
	// (Which takes longest is a timing, which a test does not assert: on a
	// loaded 2-core machine the write once took longer than the gradients
	// at this size.)
	for _, phase := range []string{"write", "gradients", "read", "update"} {
		if ms, ok := r.PhasesMs[phase]; !ok || ms <= 0 || ms*1e6 > 2*r.MedianNs {
			t.Errorf("phase %s: %v ms (present %v), want above 0 and within a step of %.3f ms", phase, ms, ok, r.MedianNs/1e6)
		}
	}
	if !strings.Contains(stdout, "train_nano_b2_t16, the host's phases (medians): write ") {
		t.Errorf("table lacks the phases' line:\n%s", stdout)
	}
	if !strings.Contains(stdout, "tok/s") || !strings.Contains(stdout, "torch.compile") {
		t.Errorf("table lacks the tokens/s or the compile ratio:\n%s", stdout)
	}

	for _, tc := range []struct{ name, anchors, want string }{
		{"an anchor at another batch", write("b4.jsonl", line("eager", 4, 40)), "anchors line 1 (nano eager) has batch 4 where vkern's is 2"},
		{"an op anchors file", write("ops.jsonl", `{"op": "gemm", "shape": "8x8x8", "impl": "torch.mm", "median_ms": 0.1}`), "not a training anchor"},
		{"a truncated line", write("cut.jsonl", line("eager", 2, 40)[:50]), "anchors line 1: unexpected end of JSON input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, append(args, "--anchors", tc.anchors)...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, exitUsage, tc.want)
			}
		})
	}
}

// The quick server suite samples the round trips, through the rings and on
// the pipes, in seconds.
func TestBenchServerQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the C++ server")
	}
	jsonPath := filepath.Join(t.TempDir(), "server.json")
	code, stdout, stderr := runCLI(t, "bench", "--suite", "server", "--backend", "cpu", "--quick", "--json", jsonPath)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	results, data := benchJSON(t, jsonPath)
	seen := map[string]bool{}
	for _, r := range results {
		seen[r.Name] = true
		if r.Name == "ping" && (r.N != 3000 || r.MedianNs <= 0 || r.Anchor != "ping_pipes") {
			t.Errorf("ping: %+v, want 3000 calls anchored to ping_pipes", r)
		}
	}
	for _, name := range []string{"ping", "ping_pipes", "run_tiny_untimed", "run_tiny_untimed_pipes", "write_1MiB", "read_1MiB", "text_write_64KiB"} {
		if !seen[name] {
			t.Errorf("no %s result in %s", name, data)
		}
	}
	if seen["write_256MiB"] {
		t.Error("the quick suite measured 256 MiB transfers")
	}
}

// benchJSON reads the results `vkern bench --json` wrote, and the file.
func benchJSON(t *testing.T, path string) ([]bench.Result, []byte) {
	t.Helper()
	var doc struct {
		Results []bench.Result `json:"results"`
	}
	data, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(data, &doc)
	}
	if err != nil {
		t.Fatalf("JSON %s: %v", data, err)
	}
	return doc.Results, data
}

// An op that cannot be declared stops the command before it runs, with
// exit 1 and the declaration's error.
func TestAnOpThatCannotBeDeclaredExitsOneWithTheReason(t *testing.T) {
	var out, errOut bytes.Buffer
	code := Run(context.Background(), []string{"version"}, &out, &errOut, userop.Op{})
	if code != exitFailure || out.Len() != 0 || !strings.Contains(errOut.String(), "vkern: userop: op 1 of 1 has no Contract") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
}
