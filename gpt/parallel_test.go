package gpt

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/collective"
)

func TestBucketsCoverTheGradientsOnceInBackwardOrder(t *testing.T) {
	for _, cfg := range []Config{Nano, Char, GPT2} {
		lay := newLayout(cfg)
		for _, target := range []int64{1, 64 << 10, DefaultBucketBytes, 1 << 40} {
			bs := lay.buckets(target)
			var rs [][2]int64
			last := cfg.stageHead() + 1
			for _, b := range bs {
				if b.stage >= last || b.stage < 0 {
					t.Errorf("%s at %d bytes: bucket stages %v are not in backward order", cfg.Name, target, bs)
				}
				last = b.stage
				rs = append(rs, b.ranges...)
			}
			if bs[0].stage != cfg.stageHead() || len(bs[0].ranges) != 1 || bs[0].ranges[0] != [2]int64{0, lay.tensors[lay.blocks[0].attnW].offset} {
				t.Errorf("%s at %d bytes: the first bucket is %v, want wte and wpe alone after the head", cfg.Name, target, bs[0])
			}
			if last != 0 {
				t.Errorf("%s at %d bytes: the last bucket is at stage %d, want 0 (block 0; the embeddings are gathered, not all-reduced)", cfg.Name, target, last)
			}
			sort.Slice(rs, func(i, j int) bool { return rs[i][0] < rs[j][0] })
			at := int64(0)
			for _, r := range rs {
				if r[0] != at || r[1] <= r[0] || r[0]%align != 0 {
					t.Fatalf("%s at %d bytes: ranges %v leave a gap or overlap at %d", cfg.Name, target, rs, at)
				}
				at = r[1]
			}
			if at != lay.total {
				t.Errorf("%s at %d bytes: ranges end at %d, want the arena's %d", cfg.Name, target, at, lay.total)
			}
			if target == 1 && len(bs) != cfg.Layers+2 {
				t.Errorf("%s, one block a bucket: %d buckets, want %d (the embeddings, ln_f, the blocks)", cfg.Name, len(bs), cfg.Layers+2)
			}
		}
	}
}

// openParallel opens n cpu ranks in this process for nano at batch b and
// accum k (over all ranks), with small buckets so that a step all-reduces
// several.
func openParallel(t *testing.T, n, b, k int) *Parallel {
	t.Helper()
	ctx := context.Background()
	p, err := OpenParallel(ctx, ParallelOptions{Backend: "cpu", CacheDir: testCache(t), GPUs: n, Config: Nano, B: b, Accum: k,
		BucketBytes: 64 << 10, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

func parallelTrainer(t *testing.T, p *Parallel, steps int64) *Trainer {
	t.Helper()
	h := DefaultHyper(steps)
	h.LR, h.MinLR, h.Warmup = 2e-3, 2e-4, 2
	return &Trainer{Model: p.Replicas[0].Model, Parallel: p, Hyper: h, State: NewState(), Seed: 5, Corpus: goCorpus(t)}
}

func losses(t *testing.T, tr *Trainer, n int) []float64 {
	t.Helper()
	var out []float64
	for i := 0; i < n; i++ {
		r, err := tr.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r.Loss)
	}
	return out
}

// One rank through the device engine (the cpu server's one-rank
// communicator, its collectives entries of the step's batch) is the
// one-device run, bit for bit.
func TestOneRankThroughTheCommunicatorIsTheOneDeviceRunBitForBit(t *testing.T) {
	ctx := context.Background()
	const steps = 4
	par := openParallel(t, 1, 2, 2)
	if par.Engine() == "host (the cpu backend's test path)" {
		t.Fatalf("one cpu rank runs on the host collective; want the server's communicator")
	}
	dp := parallelTrainer(t, par, steps)
	if err := dp.Init(ctx, 1); err != nil {
		t.Fatal(err)
	}
	dev := openCPU(t, vkern.Options{})
	one := &Trainer{Model: newModel(t, dev, Nano, 2, 2, 1), Hyper: dp.Hyper, State: NewState(), Seed: dp.Seed, Corpus: dp.Corpus}
	want, got := losses(t, one, steps), losses(t, dp, steps)
	for i := range want {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			t.Fatalf("step %d: loss %v on one rank, %v on one device; want the same bits", i, got[i], want[i])
		}
	}
	a, _, _, _ := one.Model.Params(ctx)
	b, _, _, _ := dp.Model.Params(ctx)
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("parameter %d: %v on one rank, %v on one device", i, b[i], a[i])
		}
	}
}

// closeTo reports whether the losses agree within tol, relatively.
func closeTo(a, b, tol float64) bool { return math.Abs(a-b) <= tol*math.Abs(b) }

// Two ranks (cpu servers joined by the host collective) train as one
// device does at the same global batch: the first step's loss is the same
// bits, the later ones agree within rounding (the gradients' sums are
// grouped by rank, parallel.go). A checkpoint of the two-rank run resumes
// on one device, and one of a one-device run on two ranks, each continuing
// as the run it came from.
func TestTwoRanksTrainAsOneDeviceAndResumeEitherWay(t *testing.T) {
	ctx := context.Background()
	const steps, half = 6, 3
	const tol = 1e-5
	dev := openCPU(t, vkern.Options{})
	newOne := func() *Trainer {
		h := DefaultHyper(steps)
		h.LR, h.MinLR, h.Warmup = 2e-3, 2e-4, 2
		return &Trainer{Model: newModel(t, dev, Nano, 2, 2, 1), Hyper: h, State: NewState(), Seed: 5, Corpus: goCorpus(t)}
	}
	dir := t.TempDir()
	save := func(tr *Trainer, name string) string {
		t.Helper()
		d := filepath.Join(dir, name)
		if err := tr.Save(ctx, d, Run{Batch: 2, Seed: tr.Seed, Hyper: tr.Hyper, State: tr.State, Data: tr.Corpus.Source}); err != nil {
			t.Fatal(err)
		}
		return d
	}
	resume := func(tr *Trainer, d string) {
		t.Helper()
		l, err := Load(d)
		if err != nil {
			t.Fatal(err)
		}
		if l.Run.Accum != 2 {
			t.Fatalf("the checkpoint keeps %d micro-batches per step, want 2 (all ranks')", l.Run.Accum)
		}
		if err := tr.SetParams(ctx, l.Master, l.M, l.V); err != nil {
			t.Fatal(err)
		}
		tr.State = l.Run.State
	}

	one := newOne()
	want := losses(t, one, half)
	oneCkpt := save(one, "one")
	want = append(want, losses(t, one, steps-half)...)

	two := parallelTrainer(t, openParallel(t, 2, 2, 2), steps)
	if err := two.Init(ctx, 1); err != nil {
		t.Fatal(err)
	}
	got := losses(t, two, half)
	twoCkpt := save(two, "two")
	got = append(got, losses(t, two, steps-half)...)
	if math.Float64bits(got[0]) != math.Float64bits(want[0]) {
		t.Errorf("step 0: loss %v on two ranks, %v on one device; want the same bits", got[0], want[0])
	}
	for i := range want {
		if !closeTo(got[i], want[i], tol) {
			t.Errorf("step %d: loss %v on two ranks, %v on one device; want them within %g", i, got[i], want[i], tol)
		}
	}
	t.Logf("two ranks vs one device: %v vs %v", got, want)
	if l, err := Load(twoCkpt); err != nil || l.Run.Ranks != 2 {
		t.Errorf("the two-rank checkpoint: %v, ranks %v; want 2", err, l)
	}

	// Two ranks' checkpoint, resumed on one device.
	onward := newOne()
	resume(onward, twoCkpt)
	for i, l := range losses(t, onward, steps-half) {
		if !closeTo(l, got[half+i], tol) {
			t.Errorf("step %d resumed on one device from two ranks: loss %v, the two-rank run had %v", half+i, l, got[half+i])
		}
	}
	// One device's checkpoint, resumed on two ranks.
	two2 := parallelTrainer(t, openParallel(t, 2, 2, 2), steps)
	resume(two2, oneCkpt)
	for i, l := range losses(t, two2, steps-half) {
		if !closeTo(l, want[half+i], tol) {
			t.Errorf("step %d resumed on two ranks from one device: loss %v, the one-device run had %v", half+i, l, want[half+i])
		}
	}
}

func TestAParallelRunNeedsRanksThatShareItsMicroBatches(t *testing.T) {
	_, err := OpenParallel(context.Background(), ParallelOptions{Backend: "cpu", CacheDir: testCache(t), GPUs: 2, Config: Nano, B: 2, Accum: 3})
	if err == nil || !strings.Contains(err.Error(), "3 micro-batches per step cannot be shared by 2 ranks") || !strings.Contains(err.Error(), "1, 3") {
		t.Errorf("error %v, want one that says 2 ranks cannot share 3 micro-batches and names 1, 3", err)
	}
}

// serverPID reads a device's server's pid from its start-up line.
func serverPID(t *testing.T, dev *vkern.Device) int {
	t.Helper()
	m := regexp.MustCompile(`kernel server: pid (\d+)`).FindAllStringSubmatch(dev.Stderr(), -1)
	if len(m) == 0 {
		t.Fatalf("no pid in the server's stderr: %q", dev.Stderr())
	}
	pid, _ := strconv.Atoi(m[len(m)-1][1])
	return pid
}

// A rank whose kernel server is killed fails its step, and the other rank,
// waiting for it in the all-reduce, fails too, naming it, at once.
func TestAKilledServerFailsEveryRankNamingIt(t *testing.T) {
	ctx := context.Background()
	par := openParallel(t, 2, 2, 2)
	tr := parallelTrainer(t, par, 4)
	if err := tr.Init(ctx, 1); err != nil {
		t.Fatal(err)
	}
	losses(t, tr, 1)
	pid := serverPID(t, par.Replicas[1].Group.Device())
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := tr.Step(ctx)
	if err == nil || !strings.Contains(err.Error(), "rank 1 of 2") {
		t.Fatalf("step after rank 1's server was killed: %v, want an error naming rank 1 of 2", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the failure took %v", d)
	}
	var pe *collective.PeerError
	if peer := par.Replicas[0].Group.Peer().Err(); !errors.As(peer, &pe) || pe.Rank != 1 {
		t.Errorf("rank 0's group ended with %v, want a PeerError naming rank 1", peer)
	}
	fmt.Fprintln(testWriter{t}, "the error, after", time.Since(start), ":", err)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// Stopping waits for every rank at most the step timeout: a rank that
// answers heartbeats but never comes (hung in an evaluation) is an error
// naming it, as it was in the next step's collectives before the ranks
// agreed between steps.
func TestStoppingWaitsAtMostTheStepTimeout(t *testing.T) {
	ctx := context.Background()
	peers, err := collective.Local(ctx, 2, func(r int) collective.Hello { return collective.NewHello(r, 2, nil) }, collective.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer peers[0].Close()
	defer peers[1].Close()
	// This process holds rank 0 of 2; rank 1 lives but never asks.
	p := &Parallel{World: 2, timeout: 300 * time.Millisecond, peers: peers[:1]}
	start := time.Now()
	_, err = p.Stopping(ctx, false)
	if err == nil || !strings.Contains(err.Error(), "within the step timeout (300ms)") || !strings.Contains(err.Error(), "rank 1") {
		t.Errorf("Stopping: %v; want the step timeout's error naming rank 1", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Stopping gave up after %v, want about 300ms", took)
	}
}
