package cli

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vkern/vkern/gpt"
)

// readFile is path's contents; a file that cannot be read fails the test.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestTrainUsageErrorsNameTheValue(t *testing.T) {
	dir := t.TempDir()
	notes := filepath.Join(dir, "notes")
	os.MkdirAll(notes, 0o755)
	os.WriteFile(filepath.Join(notes, "train_state.json"), []byte("{}"), 0o644)
	others := filepath.Join(dir, "others") // a folder of the user's, not a run
	os.MkdirAll(others, 0o755)
	os.WriteFile(filepath.Join(others, "a.txt"), []byte("mine"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "--model", "gpt5"}, `no model "gpt5"; choose one of char, gpt2, nano`},
		{[]string{"train", "--batch", "0"}, "--batch 0"},
		{[]string{"train", "--accum", "0"}, "--accum 0"},
		{[]string{"train", "--steps", "-3"}, "--steps -3"},
		{[]string{"train", "--gpus", "0"}, "--gpus 0: want at least 1"},
		{[]string{"train", "--gpus", "2", "--bucket-mb", "0"}, "--bucket-mb 0: want at least 1"},
		{[]string{"train", "--gpus", "2", "--rank-timeout", "1ms"}, "--rank-timeout 1ms: want at least 1s"},
		{[]string{"train", "--gpus", "2", "--step-timeout", "-1s"}, "--step-timeout -1s: want at least 1s"},
		{[]string{"train", "--warmup", "-5"}, "--warmup -5: want 0 or more warm-up steps"},
		{[]string{"train", "--call-timeout", "500ms"}, "--call-timeout 500ms: want at least 1s"},
		{[]string{"train", "--gpus", "2", "--call-timeout", "10m"}, "--call-timeout bounds a one-device run's calls; a data-parallel run's are bounded by --step-timeout"},
		{[]string{"train", "--bucket-mb", "50"}, "--bucket-mb is a setting of data-parallel runs, and this is not one: add --gpus N"},
		{[]string{"train", "--rank-timeout", "10s"}, "--rank-timeout is a setting of data-parallel runs"},
		{[]string{"train", "--lr", "-1"}, "--lr -1: want a learning rate in [0, 10], AdamW's range"},
		{[]string{"train", "--lr", "NaN"}, "--lr NaN: want a learning rate in [0, 10]"},
		{[]string{"train", "--temperature", "-1"}, "--temperature -1"},
		{[]string{"train", "--backend", "tpu"}, `--backend "tpu"`},
		{[]string{"train", "--out", notes}, "holds a run already; continue it with --resume"},
		// Where the checkpoint goes is checked before the run, not after it.
		{[]string{"train", "--out", others}, "holds 1 files but no checkpoint; save into a new or empty folder"},
		{[]string{"train", "--out", filepath.Join(others, "a.txt")}, "is a file; a checkpoint is a folder"},
		{[]string{"train", "--out", "/proc/run"}, "folder /proc is not writable"},
		{[]string{"train", "--resume", filepath.Join(dir, "none")}, "no checkpoint at"},
		{[]string{"train", "--json", "/nonexistent-dir/r.json"}, "/nonexistent-dir"},
		{[]string{"train", "--data", filepath.Join(dir, "missing.txt")}, "missing.txt"},
		{[]string{"eval"}, "--resume DIR names the checkpoint"},
		{[]string{"sample", "--resume", dir, "--prompt", ""}, "--prompt is empty"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.args...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, exitUsage, tc.want)
			}
		})
	}
}

// TestTrainStepsZeroStops: --steps 0 writes the initial checkpoint and
// stops, without the sample at the end; the settings line prints the
// learning rates as they were given (a tenth of 0.0006 is 6e-05 there,
// not float64's 5.9999999999999995e-05).
func TestTrainStepsZeroStops(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus.txt")
	os.WriteFile(corpus, []byte(strings.Repeat("package main\n\nfunc main() {}\n", 400)), 0o644)
	out := filepath.Join(dir, "run")
	code, stdout, stderr := runCLI(t, "train", "--steps", "0", "--lr", "0.0006", "--out", out, "--data", corpus)
	if code != exitOK {
		t.Fatalf("exit %d: %s\n%s", code, stdout, stderr)
	}
	for _, f := range []string{"config.json", "model.safetensors", "optimizer.safetensors", "train_state.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("the initial checkpoint lacks %s: %v", f, err)
		}
	}
	if strings.Contains(stdout, "sample") {
		t.Errorf("--steps 0 sampled; the output:\n%s", stdout)
	}
	if !strings.Contains(stdout, "lr 0.0006 (warm-up ") || !strings.Contains(stdout, "cosine to 6e-05 at step ") {
		t.Errorf("the settings line should read lr 0.0006 … cosine to 6e-05; the output:\n%s", stdout)
	}
}

// TestTrainResumeEvalSample runs the commands end to end on the cpu
// backend: 12 steps straight, or 6 and 6 more resumed, give the same
// losses bit for bit; the checkpoint evaluates and samples.
func TestTrainResumeEvalSample(t *testing.T) {
	if testing.Short() {
		t.Skip("trains nano")
	}
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus.txt")
	src, _ := filepath.Glob("*.go")
	var text []byte
	for _, f := range src {
		b, _ := os.ReadFile(f)
		text = append(text, b...)
	}
	os.WriteFile(corpus, text, 0o644)
	common := []string{"--data", corpus, "--batch", "4", "--lr-steps", "12", "--sample", "20", "--eval-windows", "8"}
	straight := filepath.Join(dir, "straight")
	code, stdout, stderr := runCLI(t, append([]string{"train", "--steps", "12", "--out", straight, "--json", straight + ".json"}, common...)...)
	if code != exitOK {
		t.Fatalf("exit %d: %s\n%s", code, stdout, stderr)
	}
	for _, f := range []string{"config.json", "model.safetensors", "optimizer.safetensors", "train_state.json", "loss.svg"} {
		if _, err := os.Stat(filepath.Join(straight, f)); err != nil {
			t.Errorf("the run folder lacks %s: %v", f, err)
		}
	}
	pieces := filepath.Join(dir, "pieces")
	if code, stdout, stderr := runCLI(t, append([]string{"train", "--steps", "6", "--out", pieces, "--json", pieces + "1.json"}, common...)...); code != exitOK {
		t.Fatalf("first piece: exit %d: %s\n%s", code, stdout, stderr)
	}
	// The second piece re-checks step 10 against the oracles on the way:
	// a checked step computes what an unchecked one does, bit for bit.
	code, stdout, stderr = runCLI(t, "train", "--resume", pieces, "--steps", "12", "--json", pieces+"2.json", "--data", corpus, "--sample", "0", "--verify-every", "5",
		"--eval-windows", "8")
	if code != exitOK {
		t.Fatalf("resumed: exit %d: %s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "step 10 verified: ") || strings.Contains(stdout, "step 5 verified") {
		t.Errorf("--verify-every 5 from step 6 to 12 should check step 10 alone; the output:\n%s", stdout)
	}
	want, got := recordedLosses(t, straight+".json"), append(recordedLosses(t, pieces+"1.json"), recordedLosses(t, pieces+"2.json")...)
	if len(got) != 12 || len(want) != 12 {
		t.Fatalf("%d and %d steps recorded, want 12", len(want), len(got))
	}
	for i := range want {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			t.Fatalf("step %d: %v resumed, %v straight", i, got[i], want[i])
		}
	}
	// The checkpoint keeps the curve, so the resumed piece draws the whole
	// run's, as the straight run does.
	if a, b := readFile(t, filepath.Join(straight, "loss.svg")), readFile(t, filepath.Join(pieces, "loss.svg")); a != b {
		t.Errorf("the run trained in two pieces drew another loss.svg than the straight run:\n%s\nstraight:\n%s", b, a)
	}
	checkCurve := func(when string) {
		t.Helper()
		var run gpt.Run
		if err := json.Unmarshal([]byte(readFile(t, filepath.Join(pieces, "train_state.json"))), &run); err != nil {
			t.Fatal(err)
		}
		if len(run.Curve) != 12 {
			t.Fatalf("%s: the saved curve has %d points, want 12", when, len(run.Curve))
		}
		for i, p := range run.Curve {
			if p.Step != int64(i) || p.Loss == nil || math.Float64bits(*p.Loss) != math.Float64bits(want[i]) {
				t.Fatalf("%s: curve point %d is %+v, want step %d, loss %v", when, i, p, i, want[i])
			}
		}
	}
	checkCurve("after the second piece")
	// The run's own folder named another way (through a link) is the run's:
	// resuming into it is allowed.
	link := filepath.Join(dir, "link")
	if err := os.Symlink(pieces, link); err != nil {
		t.Fatal(err)
	}
	// The run is at step 12 already: nothing trains, and the checkpoint
	// is left as it was, not saved again.
	before, _ := os.Stat(filepath.Join(pieces, "train_state.json"))
	time.Sleep(10 * time.Millisecond)
	if code, stdout, stderr := runCLI(t, "train", "--resume", pieces, "--out", link, "--steps", "12", "--data", corpus, "--sample", "0"); code != exitOK ||
		!strings.Contains(stdout, "is at step 12, its total; nothing to train") {
		t.Errorf("resuming into the run's own folder through a link: exit %d, %s%s", code, stdout, stderr)
	}
	if after, err := os.Stat(filepath.Join(pieces, "train_state.json")); err != nil || before == nil || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("a resume with nothing to train wrote the checkpoint again (%v)", err)
	}
	// A new --lr-steps is a change to the run: it is saved, steps or none.
	if code, _, stderr := runCLI(t, "train", "--resume", pieces, "--steps", "12", "--lr-steps", "24", "--data", corpus, "--sample", "0"); code != exitOK {
		t.Errorf("resuming with a new --lr-steps: exit %d, %s", code, stderr)
	}
	if b, err := os.ReadFile(filepath.Join(pieces, "train_state.json")); err != nil || !strings.Contains(string(b), `"lr_steps": 24`) {
		t.Errorf("the new --lr-steps was not saved: %v\n%s", err, b)
	}
	checkCurve("after a save with no steps")
	// Resuming into another run's folder is refused: saving would replace it.
	if code, _, stderr := runCLI(t, "train", "--resume", pieces, "--out", straight, "--steps", "13", "--data", corpus); code != exitUsage || !strings.Contains(stderr, "holds another run") {
		t.Errorf("resuming into another run's folder: exit %d, %s", code, stderr)
	}
	// A flag that contradicts the saved run is refused.
	if code, _, stderr := runCLI(t, "train", "--resume", pieces, "--batch", "8", "--data", corpus); code != exitUsage || !strings.Contains(stderr, "--batch 8 differs from the resumed run's 4") {
		t.Errorf("resuming with another batch: exit %d, %s", code, stderr)
	}

	code, stdout, stderr = runCLI(t, "eval", "--resume", straight, "--data", corpus, "--windows", "4")
	if code != exitOK {
		t.Fatalf("eval: exit %d: %s", code, stderr)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(stdout), 64)
	if err != nil || !(v > 0 && v < 6) {
		t.Errorf("eval printed %q (%v), want a loss", stdout, err)
	}
	code, stdout, stderr = runCLI(t, "sample", "--resume", straight, "--prompt", "package ", "--n", "30", "--temperature", "0")
	if code != exitOK || !strings.HasPrefix(stdout, "package ") || len(stdout) < len("package ")+30 {
		t.Errorf("sample: exit %d, %q, %s", code, stdout, stderr)
	}
}
