package gpt

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/vkern/vkern"
)

// TestProfileStep prints where a training step's time goes, op by op, on
// the backend VKERN_PROFILE names (cpu or cuda), for gpt2 at batch
// VKERN_PROFILE_B (16): the gradients program and the update, each call
// timed by the server. It asserts nothing about speed; it skips unless
// asked.
func TestProfileStep(t *testing.T) {
	backend := os.Getenv("VKERN_PROFILE")
	if backend == "" {
		t.Skip("set VKERN_PROFILE=cpu or cuda to profile a gpt2 step")
	}
	b := 16
	if v := os.Getenv("VKERN_PROFILE_B"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("VKERN_PROFILE_B=%q: want a batch of at least 1", v)
		}
		b = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dev, err := vkern.Open(ctx, vkern.Options{Backend: backend, CacheDir: testCache(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	m := newModel(t, dev, GPT2, b, 1, 1)
	rng := rand.New(rand.NewPCG(1, 2))
	in, tg := make([]int32, b*GPT2.T), make([]int32, b*GPT2.T)
	for i := range in {
		in[i], tg[i] = int32(rng.IntN(GPT2.V)), int32(rng.IntN(GPT2.V))
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
	fmt.Printf("kernels %.2f ms, wall %.2f ms per step, %d calls, B=%d on %s\n", ms(kernels), ms(wall), len(calls), b, backend)
}
