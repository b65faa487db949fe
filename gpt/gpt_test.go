package gpt

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/data"
	"github.com/vkern/vkern/toolchain"
)

// The tests share one cache folder ($VKERN_CACHE when set, so that CI
// builds each server once for every package), and so one cpu server build.
var (
	cacheOnce sync.Once
	cacheDir  string
	ownCache  bool
)

func testCache(t testing.TB) string {
	t.Helper()
	cacheOnce.Do(func() {
		if dir := os.Getenv("VKERN_CACHE"); dir != "" {
			cacheDir = dir
			return
		}
		dir, err := os.MkdirTemp("", "vkern-gpt-test-cache-")
		if err != nil {
			t.Fatal(err)
		}
		cacheDir, ownCache = dir, true
	})
	return cacheDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if ownCache {
		os.RemoveAll(cacheDir)
	}
	os.Exit(code)
}

// openCPU opens the cpu backend (opts may plant a defect), skipping where
// no C++ compiler is found.
func openCPU(t *testing.T, opts vkern.Options) *vkern.Device {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := toolchain.Detect(ctx, "cpu"); err != nil {
		t.Skipf("no C++ compiler: %v", err)
	}
	opts.Backend, opts.CacheDir = "cpu", testCache(t)
	dev, err := vkern.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// newModel allocates cfg at batch b × k on dev and initialises it.
func newModel(t *testing.T, dev *vkern.Device, cfg Config, b, k int, seed uint64) *Model {
	t.Helper()
	ctx := context.Background()
	m, err := New(ctx, dev, cfg, b, k)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	if err := m.Init(ctx, seed); err != nil {
		t.Fatal(err)
	}
	return m
}

// goCorpus is a small corpus of Go source: this package's own files,
// repeated to fill a few windows, enough to train and evaluate nano on.
func goCorpus(t *testing.T) *data.Corpus {
	t.Helper()
	goCorpusOnce.Do(func() {
		files, _ := filepath.Glob("*.go")
		goCorpusLoaded, goCorpusErr = data.Load(context.Background(), files)
	})
	if goCorpusErr != nil {
		t.Fatal(goCorpusErr)
	}
	return goCorpusLoaded
}

// goCorpus reads the files once per test binary: a test that builds two
// runs to compare them (a resumed run against a straight one) must see the
// same tokens in both, even when a file is edited while the tests run.
// Tests only read a Corpus.
var (
	goCorpusOnce   sync.Once
	goCorpusLoaded *data.Corpus
	goCorpusErr    error
)

// fixedCorpus is a corpus that no edit to the code changes: 64 KiB of
// Go-like text drawn from a fixed seed (words, operators, indentation and
// line breaks), for the checks whose tolerances are judged on one batch
// (the whole step, the gradient's derivative), so that their outcome
// depends on the code alone and not on goCorpus's files of the day.
func fixedCorpus(t *testing.T) *data.Corpus {
	t.Helper()
	words := strings.Fields(`func return if else for range err nil := = == != ( ) { } [ ] , . ; + - * / < > & |
		package import type struct interface map chan go defer switch case default break continue var const
		int string byte float32 uint64 len cap append make new copy ctx t b c n i j k v x y buf out in
		"fmt" "errors" Errorf Sprintf New Close Read Write Run Step Model Buffer Shape Op Call 0 1 2 64 1024`)
	rng := rand.New(rand.NewPCG(2026, 11))
	var b strings.Builder
	for b.Len() < 64<<10 {
		b.WriteString(strings.Repeat("\t", rng.IntN(3)))
		for n := 2 + rng.IntN(8); n > 0; n-- {
			b.WriteString(words[rng.IntN(len(words))])
			if n > 1 {
				b.WriteByte(' ')
			}
		}
		b.WriteByte('\n')
	}
	path := filepath.Join(t.TempDir(), "fixed.go.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := data.Load(context.Background(), []string{path})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConfigsCountTheirParameters(t *testing.T) {
	for _, tc := range []struct {
		cfg    Config
		params int64
	}{
		// GPT-2 small: 124,439,808 with the tied head, as transformers counts it.
		{GPT2, 124439808},
		{Nano, 4*(2*64+64*192+192+64*64+64+2*64+64*256+256+256*64+64) + 256*64 + 64*64 + 2*64},
	} {
		if got := tc.cfg.Params(); got != tc.params {
			t.Errorf("%s: %d parameters, want %d", tc.cfg.Name, got, tc.params)
		}
	}
	if p := float64(Char.Params()) / 1e6; p < 10.7 || p > 10.9 {
		t.Errorf("char has %.2f M parameters, want about 10.8 M (TRAINING.md)", p)
	}
	for _, name := range []string{"nano", "char", "gpt2"} {
		if _, err := ConfigNamed(name); err != nil {
			t.Error(err)
		}
	}
	if _, err := ConfigNamed("gpt5"); err == nil || !strings.Contains(err.Error(), "char, gpt2, nano") {
		t.Errorf("an unknown model: %v", err)
	}
	bad := Nano
	bad.Heads = 3
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "do not divide") {
		t.Errorf("3 heads over C = 64: %v", err)
	}
}

func TestLayoutAlignsEveryTensorAndGroupsTheDecayed(t *testing.T) {
	l := newLayout(Char)
	var prevEnd int64
	decayed := true
	for _, tn := range l.tensors {
		if tn.offset%align != 0 || tn.offset < prevEnd {
			t.Fatalf("%s at %d: not aligned to %d or overlapping the previous tensor (ends %d)", tn.name, tn.offset, align, prevEnd)
		}
		if tn.decay && !decayed {
			t.Fatalf("%s decays but follows a tensor that does not", tn.name)
		}
		decayed = tn.decay
		if tn.decay != (tn.offset < l.decayEnd) {
			t.Fatalf("%s (decay %v) lies on the wrong side of the groups' boundary %d", tn.name, tn.decay, l.decayEnd)
		}
		prevEnd = tn.offset + tn.elements()
	}
	if l.total < prevEnd || l.total%align != 0 {
		t.Fatalf("total %d for tensors ending at %d", l.total, prevEnd)
	}
	p := l.initial(1)
	for _, tn := range l.tensors {
		v := p[tn.offset : tn.offset+tn.elements()]
		switch {
		case tn.std == 0:
			if v[0] != float32(tn.fill) || v[len(v)-1] != float32(tn.fill) {
				t.Errorf("%s starts %v, want %v", tn.name, v[0], tn.fill)
			}
		default:
			var sq float64
			for _, x := range v {
				sq += float64(x) * float64(x)
			}
			if rms := math.Sqrt(sq / float64(len(v))); math.Abs(rms-tn.std) > 0.1*tn.std {
				t.Errorf("%s's initial values have RMS %.4f, want about %.4f", tn.name, rms, tn.std)
			}
		}
	}
}

// The ranges a step clears and the tensors its first micro-batch
// overwrites cover the gradient arena exactly once, padding included; for
// GPT-2's layouts the clearing is two fills.
func TestAStepClearsExactlyWhatItDoesNotOverwrite(t *testing.T) {
	odd := Config{Name: "odd", Layers: 2, Heads: 3, C: 24, T: 7, V: 13} // padding after every matrix
	for _, c := range []Config{Nano, paddedNano, Char, GPT2, odd} {
		l := newLayout(c)
		owner := make([]int8, l.total) // 1 cleared, 2 overwritten
		for _, r := range l.cleared() {
			for i := r[0]; i < r[1]; i++ {
				owner[i]++
			}
		}
		for i, tn := range l.tensors {
			if l.overwritten(i) {
				for j := tn.offset; j < tn.offset+tn.arenaElements(); j++ {
					owner[j] += 2
				}
			}
		}
		for i, o := range owner {
			if o != 1 && o != 2 {
				t.Fatalf("%s: element %d of %d is cleared %d and overwritten %d times", c.Name, i, l.total, o%2, o/2)
			}
		}
		rs := l.cleared()
		for i := 1; i < len(rs); i++ {
			if rs[i][0] <= rs[i-1][1] {
				t.Errorf("%s: cleared ranges %v and %v touch or overlap: one fill would do", c.Name, rs[i-1], rs[i])
			}
		}
		if c.C%16 == 0 && len(rs) != 2 {
			t.Errorf("%s: %d fills (%v), want 2 (wpe, and the vectors)", c.Name, len(rs), rs)
		}
		if c == odd && len(rs) <= 2 {
			t.Errorf("odd: %d fills, want the padding after each matrix cleared too", len(rs))
		}
	}
}

func TestScheduleWarmsUpThenDecays(t *testing.T) {
	h := DefaultHyper(1000)
	h.LR, h.MinLR, h.Warmup = 1e-3, 1e-4, 100
	for _, tc := range []struct {
		step int64
		want float64
	}{
		{0, 1e-3 / 101}, {99, 1e-3 * 100 / 101}, {100, 1e-3}, {550, 5.5e-4}, {1000, 1e-4}, {5000, 1e-4},
	} {
		if got := h.LRAt(tc.step); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("step %d: lr %g, want %g", tc.step, got, tc.want)
		}
	}
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := h
	bad.Beta2 = 1
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "beta2") {
		t.Errorf("beta2 = 1: %v", err)
	}
}

// gradients runs the gradients program of one micro-batch on m and reads
// back the loss and the (scaled) gradients.
func gradients(t *testing.T, m *Model, inputs, targets []int32, scale float64) (float64, []float32) {
	t.Helper()
	ctx := context.Background()
	if err := m.writeBatches(ctx, [][]int32{inputs}, [][]int32{targets}); err != nil {
		t.Fatal(err)
	}
	p := m.gradients(scale)
	if p.err != nil {
		t.Fatal(p.err)
	}
	if _, err := m.dev.RunBatch(ctx, p.calls); err != nil {
		t.Fatal(err)
	}
	loss, err := m.readLoss(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := make([]float32, m.lay.total)
	if err := m.grad.ReadF32(ctx, g); err != nil {
		t.Fatal(err)
	}
	return loss, g
}

// A batch that cannot fit is ErrTooLarge (a usage error to vkern train),
// whether the device's free memory or a buffer's size limit refuses it,
// and nothing is allocated.
func TestABatchThatCannotFitIsErrTooLarge(t *testing.T) {
	dev := openCPU(t, vkern.Options{})
	for _, tc := range []struct {
		b    int
		want string
	}{
		{1<<40/(64*256) + 1, "is past what one buffer holds"},      // B·T·Vp just past 2⁴⁰
		{1 << 40 / (64 * 256), "GB of buffers and the device has"}, // at the limit: past the host's memory
	} {
		_, err := New(context.Background(), dev, Nano, tc.b, 1)
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), fmt.Sprintf("batch %d", tc.b)) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("batch %d: %v, want ErrTooLarge naming the batch and saying %q", tc.b, err, tc.want)
		}
	}
}
