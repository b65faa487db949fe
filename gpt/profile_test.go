package gpt

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/vkern/vkern"
)

// TestProfileStep prints where a training step's time goes, op by op, on
// the backend VKERN_PROFILE names (cpu or cuda), for the model
// VKERN_PROFILE_MODEL names (gpt2 unless set) at batch VKERN_PROFILE_B
// (16): the gradients program and the update, each call timed by the
// server, and the batch's wall time beside the kernels' sum. It asserts
// nothing about speed; it skips unless asked.
func TestProfileStep(t *testing.T) {
	backend := os.Getenv("VKERN_PROFILE")
	if backend == "" {
		t.Skip("set VKERN_PROFILE=cpu or cuda to profile a training step")
	}
	b := envCount(t, "VKERN_PROFILE_B", 16)
	cfg := envModel(t, GPT2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dev, err := vkern.Open(ctx, vkern.Options{Backend: backend, CacheDir: testCache(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	m := newModel(t, dev, cfg, b, 1, 1)
	rng := rand.New(rand.NewPCG(1, 2))
	in, tg := make([]int32, b*cfg.T), make([]int32, b*cfg.T)
	for i := range in {
		in[i], tg[i] = int32(rng.IntN(cfg.V)), int32(rng.IntN(cfg.V))
	}
	if err := m.writeBatches(ctx, [][]int32{in}, [][]int32{tg}); err != nil {
		t.Fatal(err)
	}
	grad := m.gradients(1024)
	upd := m.update(DefaultHyper(100), 1e-4, 1, 1.0/1024)
	if grad.err != nil || upd.err != nil {
		t.Fatal(grad.err, upd.err)
	}
	calls := append(append([]vkern.Call{}, grad.calls...), upd.calls...)
	for i := range calls {
		calls[i].Untimed = false
	}
	const reps = 5
	byOp, count := map[string]time.Duration{}, map[string]int{}
	var wall, kernels time.Duration
	for rep := 0; rep <= reps; rep++ {
		start := time.Now()
		times, err := dev.RunBatch(ctx, calls)
		if err != nil {
			t.Fatal(err)
		}
		if rep == 0 {
			continue // warm-up
		}
		wall += time.Since(start)
		for i, c := range calls {
			key := c.Op.Name + " " + c.Shape.String()
			byOp[key] += times[i]
			count[key]++
			kernels += times[i]
		}
	}
	keys := make([]string, 0, len(byOp))
	for k := range byOp {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return byOp[keys[i]] > byOp[keys[j]] })
	ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 / reps }
	fmt.Printf("%-48s %6s %10s %10s %6s\n", "op shape", "calls", "ms/step", "ms/call", "share")
	for _, k := range keys {
		n := count[k] / reps
		fmt.Printf("%-48s %6d %10.3f %10.4f %5.1f%%\n", k, n, ms(byOp[k]), ms(byOp[k])/float64(n), 100*float64(byOp[k])/float64(kernels))
	}
	fmt.Printf("kernels %.2f ms, wall %.2f ms per step, %d calls, %s at B=%d on %s\n", ms(kernels), ms(wall), len(calls), cfg.Name, b, backend)
}

// envModel is the model $VKERN_PROFILE_MODEL names, def when unset.
func envModel(t testing.TB, def Config) Config {
	t.Helper()
	name := os.Getenv("VKERN_PROFILE_MODEL")
	if name == "" {
		return def
	}
	cfg, err := ConfigNamed(name)
	if err != nil {
		t.Fatalf("VKERN_PROFILE_MODEL: %v", err)
	}
	return cfg
}

// envCount is $name as a whole number of at least 1, def when unset.
func envCount(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a whole number of at least 1", name, v)
	}
	return n
}

// TestProfileDataParallel prints where a data-parallel step's gradients
// program spends its time on each rank: VKERN_PROFILE_DP names the
// backend (cuda; cpu runs the host engine, which has no device
// collectives to see), VKERN_PROFILE_GPUS the ranks (2), all in this
// process, gpt2 at VKERN_PROFILE_B sequences a rank (16). Every rank runs
// its forward, backward and bucket all-reduces timed by its server, all
// at once, as a step does. Per rank it prints each segment of the
// compute stream between two all-reduces (the work a bucket's all-reduce
// can overlap) and the ops' totals; run it with one rank for the same
// program without a peer. It asserts nothing about speed; it skips unless
// asked.
func TestProfileDataParallel(t *testing.T) {
	backend := os.Getenv("VKERN_PROFILE_DP")
	if backend == "" {
		t.Skip("set VKERN_PROFILE_DP=cuda to profile a data-parallel gpt2 step")
	}
	gpus, b := envCount(t, "VKERN_PROFILE_GPUS", 2), envCount(t, "VKERN_PROFILE_B", 16)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	p, err := OpenParallel(ctx, ParallelOptions{Backend: backend, CacheDir: testCache(t), GPUs: gpus, Config: GPT2, B: b,
		Accum: gpus, Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	if p.Replicas[0].Group.Comm() == nil {
		t.Skipf("%s ranks all-reduce on the host, not on a device stream: nothing to profile", backend)
	}
	calls := make([][]vkern.Call, gpus)
	for i, rep := range p.Replicas {
		m := rep.Model
		if err := m.Init(ctx, 1); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(i), 2))
		in, tg := make([]int32, b*GPT2.T), make([]int32, b*GPT2.T)
		for j := range in {
			in[j], tg[j] = int32(rng.IntN(GPT2.V)), int32(rng.IntN(GPT2.V))
		}
		if err := m.writeBatches(ctx, [][]int32{in}, [][]int32{tg}); err != nil {
			t.Fatal(err)
		}
		g := rep.gradients(1024)
		if g.err != nil {
			t.Fatal(g.err)
		}
		calls[i] = g.calls
		for j := range calls[i] {
			calls[i][j].Untimed = false
		}
	}
	const reps = 5
	sums := make([][]time.Duration, gpus) // per rank, per call
	walls := make([]time.Duration, gpus)
	for rep := 0; rep <= reps; rep++ {
		var wg sync.WaitGroup
		errs := make([]error, gpus)
		for i, r := range p.Replicas {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				times, err := r.Model.dev.RunBatch(ctx, calls[i])
				if err != nil {
					errs[i] = err
					r.Group.Peer().Abort(err)
					return
				}
				if rep == 0 {
					return // warm-up
				}
				walls[i] += time.Since(start)
				if sums[i] == nil {
					sums[i] = make([]time.Duration, len(times))
				}
				for j, d := range times {
					sums[i][j] += d
				}
			}()
		}
		wg.Wait()
		if err := firstError(errs); err != nil {
			t.Fatal(err)
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 / reps }
	for i := range p.Replicas {
		fmt.Printf("rank %d of %d, gpt2 B=%d on %s: segments of the compute stream, each ended by a collective\n", i, gpus, b, backend)
		var seg, all time.Duration
		n, segs := 0, 0
		byOp := map[string]time.Duration{}
		for j, c := range calls[i] {
			if c.Op == nil {
				fmt.Printf("  segment %2d: %3d calls %8.3f ms, then %s\n", segs, n, ms(seg), c.Collective)
				seg, n = 0, 0
				segs++
				continue
			}
			seg += sums[i][j]
			all += sums[i][j]
			byOp[c.Op.Name] += sums[i][j]
			n++
		}
		fmt.Printf("  segment %2d: %3d calls %8.3f ms (the end)\n", segs, n, ms(seg))
		names := make([]string, 0, len(byOp))
		for k := range byOp {
			names = append(names, k)
		}
		sort.Slice(names, func(a, b int) bool { return byOp[names[a]] > byOp[names[b]] })
		for _, k := range names {
			fmt.Printf("  %-16s %8.3f ms\n", k, ms(byOp[k]))
		}
		fmt.Printf("  kernels %.2f ms, wall %.2f ms a step\n", ms(all), ms(walls[i]))
	}
}

// BenchmarkStepTransfers times the host's part of a step outside the
// batches: writeBatches (the tokens and targets encoded and sent in one
// transfer) and readResults (the losses, the norm and the non-finite count
// read back and reduced), on the backend VKERN_PROFILE names (cpu unless
// set), for VKERN_PROFILE_MODEL (char) at batch VKERN_PROFILE_B (64).
func BenchmarkStepTransfers(b *testing.B) {
	backend := os.Getenv("VKERN_PROFILE")
	if backend == "" {
		backend = "cpu"
	}
	batch := envCount(b, "VKERN_PROFILE_B", 64)
	cfg := envModel(b, Char)
	ctx := context.Background()
	dev, err := vkern.Open(ctx, vkern.Options{Backend: backend, CacheDir: testCache(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	m, err := New(ctx, dev, cfg, batch, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close(context.Background())
	rng := rand.New(rand.NewPCG(1, 2))
	in, tg := make([]int32, batch*cfg.T), make([]int32, batch*cfg.T)
	for i := range in {
		in[i], tg[i] = int32(rng.IntN(cfg.V)), int32(rng.IntN(cfg.V))
	}
	var write, read time.Duration
	b.ResetTimer()
	for b.Loop() {
		began := time.Now()
		if err := m.writeBatches(ctx, [][]int32{in}, [][]int32{tg}); err != nil {
			b.Fatal(err)
		}
		wrote := time.Now()
		if _, _, _, err := m.readResults(ctx); err != nil {
			b.Fatal(err)
		}
		write, read = write+wrote.Sub(began), read+time.Since(wrote)
	}
	b.ReportMetric(float64(write.Nanoseconds())/float64(b.N), "write-ns/op")
	b.ReportMetric(float64(read.Nanoseconds())/float64(b.N), "read-ns/op")
}
