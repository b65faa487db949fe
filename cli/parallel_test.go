package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The data-parallel runs of `vkern train` on the cpu backend: several
// ranks in one process (--gpus), one process per rank meeting over TCP
// (torchrun's variables; the test binary re-executed as each rank), and
// the faults: a rank killed (kill -9) or stopped (SIGSTOP) mid-run ends
// the other with an error naming it, within the deadline.

// TestHelperRank is not a test: re-executed with VKERN_TEST_RANK_ARGS set,
// it is one rank's `vkern train`, its exit status the command's.
func TestHelperRank(t *testing.T) {
	args := os.Getenv("VKERN_TEST_RANK_ARGS")
	if args == "" {
		t.Skip("a helper process for the multi-process tests")
	}
	var list []string
	if err := json.Unmarshal([]byte(args), &list); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	// As Main: an interrupt stops the run between steps, saved.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	os.Exit(run(ctx, list, os.Stdout, os.Stderr))
}

// smallCorpus writes this package's sources as one text file: a corpus
// that loads in milliseconds.
func smallCorpus(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "corpus.txt")
	src, _ := filepath.Glob("*.go")
	var text []byte
	for _, f := range src {
		b, _ := os.ReadFile(f)
		text = append(text, b...)
	}
	if err := os.WriteFile(path, text, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// recordedLosses reads the per-step losses of a --json record.
func recordedLosses(t *testing.T, path string) []float64 {
	t.Helper()
	var rec struct {
		Steps []struct {
			Loss        float64 `json:"loss"`
			Ms          float64 `json:"ms"`
			WriteMs     float64 `json:"write_ms"`
			GradientsMs float64 `json:"gradients_ms"`
			ReadMs      float64 `json:"read_ms"`
			UpdateMs    float64 `json:"update_ms"`
		} `json:"steps"`
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	var out []float64
	for _, s := range rec.Steps {
		out = append(out, s.Loss)
		// The phases split the step's time: each at least 0, the device
		// program's above 0, and together the step's time, less only the
		// instants between them (each is truncated to the microsecond).
		sum := s.WriteMs + s.GradientsMs + s.ReadMs + s.UpdateMs
		if s.WriteMs < 0 || s.GradientsMs <= 0 || s.ReadMs < 0 || s.UpdateMs < 0 || sum > s.Ms+0.004 || sum < s.Ms-max(0.05, s.Ms/100) {
			t.Errorf("%s: step phases %v, %v, %v, %v ms (sum %v) against the step's %v ms", path, s.WriteMs, s.GradientsMs, s.ReadMs, s.UpdateMs, sum, s.Ms)
		}
	}
	return out
}

// rankProcess starts rank of size as a process of its own, the ranks
// meeting at port.
func rankProcess(t *testing.T, rank, size, port int, args []string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	list, _ := json.Marshal(append([]string{"train"}, args...))
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperRank$")
	cmd.Env = append(os.Environ(), "VKERN_TEST_RANK_ARGS="+string(list), "VKERN_THREADS=1",
		"MASTER_ADDR=127.0.0.1", fmt.Sprintf("MASTER_PORT=%d", port), fmt.Sprintf("RANK=%d", rank), fmt.Sprintf("WORLD_SIZE=%d", size))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, &out
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// waitExit waits for cmd at most d and returns its exit status, or -1.
func waitExit(cmd *exec.Cmd, d time.Duration) int {
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	case <-time.After(d):
		return -1
	}
}

// Two ranks in one process and two processes of one rank each train as
// one device does at the same global batch (--batch and --accum are per
// GPU), and the checkpoint is written once.
func TestTrainOnTwoRanksInOneProcessOrTwo(t *testing.T) {
	if testing.Short() {
		t.Skip("trains nano four times")
	}
	t.Setenv("VKERN_THREADS", "1")
	dir := t.TempDir()
	corpus := smallCorpus(t)
	common := []string{"--data", corpus, "--batch", "2", "--steps", "5", "--sample", "0", "--eval-windows", "4", "--eval-every", "5"}
	one := filepath.Join(dir, "one")
	if code, stdout, stderr := runCLI(t, append([]string{"train", "--accum", "2", "--out", one, "--json", one + ".json"}, common...)...); code != exitOK {
		t.Fatalf("one device: exit %d: %s\n%s", code, stdout, stderr)
	}
	want := recordedLosses(t, one+".json")

	gpus := filepath.Join(dir, "gpus")
	code, stdout, stderr := runCLI(t, append([]string{"train", "--gpus", "2", "--out", gpus, "--json", gpus + ".json"}, common...)...)
	if code != exitOK {
		t.Fatalf("--gpus 2: exit %d: %s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "data-parallel: 2 ranks") {
		t.Errorf("--gpus 2 does not say it runs 2 ranks:\n%s", stdout)
	}

	procs := filepath.Join(dir, "procs")
	port := freePort(t)
	args := append([]string{"--out", procs, "--json", procs + ".json"}, common...)
	r0, out0 := rankProcess(t, 0, 2, port, args)
	r1, out1 := rankProcess(t, 1, 2, port, args)
	if c0, c1 := waitExit(r0, 3*time.Minute), waitExit(r1, time.Minute); c0 != 0 || c1 != 0 {
		t.Fatalf("two processes: exits %d and %d\nrank 0:\n%s\nrank 1:\n%s", c0, c1, out0, out1)
	}
	if out1.Len() != 0 {
		t.Errorf("rank 1 printed %q; only rank 0 speaks for the run", out1)
	}

	for name, got := range map[string][]float64{"--gpus 2": recordedLosses(t, gpus+".json"), "two processes": recordedLosses(t, procs+".json")} {
		if len(got) != len(want) {
			t.Fatalf("%s recorded %d steps, want %d", name, len(got), len(want))
		}
		for i := range want {
			if math.Abs(got[i]-want[i]) > 1e-5*want[i] {
				t.Errorf("%s, step %d: loss %v, one device %v", name, i, got[i], want[i])
			}
		}
	}
	for _, d := range []string{gpus, procs} {
		if _, err := os.Stat(filepath.Join(d, "train_state.json")); err != nil {
			t.Errorf("no checkpoint in %s: %v", d, err)
		}
	}
}

// A rank killed with SIGKILL, or stopped with SIGSTOP, mid-run makes the
// other rank's process exit with an error naming it, within its deadline.
// twoRanksMidRun starts nano on two processes of one rank each, saving
// every 2 steps into out, and returns once rank 0 has saved the first
// time: mid-run.
func twoRanksMidRun(t *testing.T, corpus, rankTimeout string) (r0, r1 *exec.Cmd, out0, out1 *bytes.Buffer, out string) {
	t.Helper()
	out = filepath.Join(t.TempDir(), "run")
	args := []string{"--data", corpus, "--batch", "2", "--steps", "100000", "--sample", "0", "--eval-every", "100000",
		"--eval-windows", "2", "--save-every", "2", "--out", out, "--rank-timeout", rankTimeout}
	port := freePort(t)
	r0, out0 = rankProcess(t, 0, 2, port, args)
	r1, out1 = rankProcess(t, 1, 2, port, args)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(out, "train_state.json")); err == nil {
			return r0, r1, out0, out1, out
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint after 3 minutes; rank 0 said:\n%s", out0)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestARankKilledOrStoppedMidRunEndsTheOtherNamingIt(t *testing.T) {
	if testing.Short() {
		t.Skip("trains nano in two processes")
	}
	corpus := smallCorpus(t)
	for _, tc := range []struct {
		name   string
		signal syscall.Signal
		want   string
	}{
		{"killed", syscall.SIGKILL, "is gone: "},
		{"stopped", syscall.SIGSTOP, "sent nothing for"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r0, r1, out0, _, _ := twoRanksMidRun(t, corpus, "1s")
			if err := r1.Process.Signal(tc.signal); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			code := waitExit(r0, 20*time.Second)
			took := time.Since(start)
			if code != exitFailure {
				t.Fatalf("rank 0 exit %d (-1: still running after 20 s), want %d; it said:\n%s", code, exitFailure, out0)
			}
			if s := out0.String(); !strings.Contains(s, "rank 1 of 2") || !strings.Contains(s, tc.want) {
				t.Errorf("rank 0's error does not name rank 1 and say %q:\n%s", tc.want, s)
			}
			t.Logf("rank 0 ended %v after rank 1 was %s", took.Round(time.Millisecond), tc.name)
		})
	}
}

// An interrupt of one process of a multi-process run (kill -INT of rank 1
// alone) stops every rank before the same step: rank 0 saves the run at
// that step, and both exit 130, rank 0 naming the rank interrupted. Before,
// rank 1 stopped alone and rank 0 failed in its next step, unsaved.
func TestAnInterruptOfOneRankStopsEveryRankSaved(t *testing.T) {
	if testing.Short() {
		t.Skip("trains nano in two processes")
	}
	r0, r1, out0, out1, out := twoRanksMidRun(t, smallCorpus(t), "5s")
	if err := r1.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	code0, code1 := waitExit(r0, 30*time.Second), waitExit(r1, 30*time.Second)
	if code0 != exitInterrupted || code1 != exitInterrupted {
		t.Fatalf("exit %d and %d (-1: still running after 30 s), want %d from both; rank 0 said:\n%s\nrank 1 said:\n%s",
			code0, code1, exitInterrupted, out0, out1)
	}
	var step int64
	said := out0.String()
	at := strings.Index(said, "vkern train: rank 1 of 2 was interrupted at step ")
	if at < 0 {
		t.Fatalf("rank 0 does not say rank 1 was interrupted:\n%s", said)
	}
	fmt.Sscanf(said[at+len("vkern train: rank 1 of 2 was interrupted at step "):], "%d", &step)
	if !strings.Contains(out1.String(), fmt.Sprintf("vkern train: interrupted at step %d;", step)) {
		t.Errorf("rank 1 did not stop at rank 0's step %d:\n%s", step, out1)
	}
	var run struct {
		State struct {
			Step int64 `json:"step"`
		} `json:"state"`
		Curve []json.RawMessage `json:"curve"`
	}
	b, err := os.ReadFile(filepath.Join(out, "train_state.json"))
	if err == nil {
		err = json.Unmarshal(b, &run)
	}
	if err != nil || run.State.Step != step || step < 2 {
		t.Errorf("the checkpoint is at step %d (%v), want the step both ranks stopped at, %d", run.State.Step, err, step)
	}
	// The save on the interrupt keeps the curve and draws it beside.
	if int64(len(run.Curve)) != step {
		t.Errorf("the saved curve has %d points, want one a step, %d", len(run.Curve), step)
	}
	if svg := readFile(t, filepath.Join(out, "loss.svg")); !strings.Contains(svg, fmt.Sprintf(">step %d</text>", step)) {
		t.Errorf("loss.svg does not end at step %d:\n%s", step, svg)
	}
}

// A rank whose peers never come says what it waits for (after 3 s), then
// gives up at --step-timeout, exit 1.
func TestALoneRankSaysWhatItWaitsFor(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 4 s")
	}
	port := freePort(t)
	r1, out1 := rankProcess(t, 1, 2, port, []string{"--data", smallCorpus(t), "--steps", "1", "--sample", "0", "--step-timeout", "4s"})
	if code := waitExit(r1, 30*time.Second); code != exitFailure {
		t.Fatalf("exit %d (-1: still running after 30 s), want %d:\n%s", code, exitFailure, out1)
	}
	want := fmt.Sprintf("vkern train: rank 1 of 2: waiting for rank 0 at 127.0.0.1:%d (MASTER_ADDR:MASTER_PORT); giving up in ", port)
	if !strings.Contains(out1.String(), want) {
		t.Errorf("rank 1 did not say %q…:\n%s", want, out1)
	}
}

// Ranks whose settings differ do not start: each says which rank and
// which setting.
func TestRanksWithDifferentSettingsDoNotStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two processes")
	}
	corpus := smallCorpus(t)
	port := freePort(t)
	dir := t.TempDir()
	common := []string{"--data", corpus, "--batch", "2", "--steps", "2", "--sample", "0", "--out", filepath.Join(dir, "run")}
	r0, out0 := rankProcess(t, 0, 2, port, append([]string{"--seed", "1"}, common...))
	r1, out1 := rankProcess(t, 1, 2, port, append([]string{"--seed", "2"}, common...))
	c0, c1 := waitExit(r0, time.Minute), waitExit(r1, time.Minute)
	for r, c := range []int{c0, c1} {
		out := []*bytes.Buffer{out0, out1}[r].String()
		if c != exitFailure || !strings.Contains(out, `rank 1`) || !strings.Contains(out, `seed "2"`) {
			t.Errorf("rank %d: exit %d, want %d and an error naming rank 1's seed:\n%s", r, c, exitFailure, out)
		}
	}
}
