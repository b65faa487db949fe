package gpt

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/ckpt"
	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/kerneltest"
)

// newTrainer is a nano run on the package's own sources.
func newTrainer(t *testing.T, dev *vkern.Device, b, k int, steps int64) *Trainer {
	t.Helper()
	return newTrainerOf(t, dev, Nano, b, k, steps)
}

// newTrainerOf is newTrainer's run of cfg.
func newTrainerOf(t *testing.T, dev *vkern.Device, cfg Config, b, k int, steps int64) *Trainer {
	t.Helper()
	h := DefaultHyper(steps)
	h.LR, h.MinLR, h.Warmup = 2e-3, 2e-4, 5
	return &Trainer{Model: newModel(t, dev, cfg, b, k, 1), Hyper: h, State: NewState(), Seed: 5, Corpus: goCorpus(t)}
}

// TestResumedRunsContinueBitForBit at nano and at a vocabulary the device
// pads, whose checkpoint holds wte's V rows only.
func TestResumedRunsContinueBitForBit(t *testing.T) {
	dev := openCPU(t, vkern.Options{})
	for _, cfg := range []Config{Nano, paddedNano} {
		t.Run(cfg.Name, func(t *testing.T) { resumedRunContinuesBitForBit(t, dev, cfg) })
	}
}

func resumedRunContinuesBitForBit(t *testing.T, dev *vkern.Device, cfg Config) {
	ctx := context.Background()
	const steps = 40
	straight := newTrainerOf(t, dev, cfg, 2, 2, steps)
	var want []float64
	for i := 0; i < steps; i++ {
		r, err := straight.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, r.Loss)
	}

	first := newTrainerOf(t, dev, cfg, 2, 2, steps)
	var got []float64
	for i := 0; i < steps/2; i++ {
		r, err := first.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.Loss)
	}
	dir := filepath.Join(t.TempDir(), "run")
	run := Run{Batch: 2, Accum: 2, Seed: first.Seed, Hyper: first.Hyper, State: first.State, Data: first.Corpus.Source}
	if err := first.Model.Save(ctx, dir, run); err != nil {
		t.Fatal(err)
	}
	l, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if l.Run == nil || l.Run.State != first.State || l.Run.Hyper != first.Hyper {
		t.Fatalf("the checkpoint's run is %+v, want %+v", l.Run, run)
	}
	m, err := New(ctx, dev, l.Config, l.Run.Batch, l.Run.Accum)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	if err := m.SetParams(ctx, l.Master, l.M, l.V); err != nil {
		t.Fatal(err)
	}
	second := &Trainer{Model: m, Hyper: l.Run.Hyper, State: l.Run.State, Seed: l.Run.Seed, Corpus: first.Corpus}
	for i := steps / 2; i < steps; i++ {
		r, err := second.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.Loss)
	}
	for i := range want {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			t.Fatalf("step %d: loss %v resumed, %v straight; they must be the same bits", i, got[i], want[i])
		}
	}
	if want[steps-1] >= want[0] {
		t.Errorf("the loss went from %.4f to %.4f in %d steps; it should fall", want[0], want[steps-1], steps)
	}
}

// editState returns the train_state.json bytes b with edit applied.
func editState(t *testing.T, b []byte, edit func(*Run)) []byte {
	t.Helper()
	var r Run
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	edit(&r)
	out, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCheckpointsLoadAndRefuseDamage(t *testing.T) {
	ctx := context.Background()
	dev := openCPU(t, vkern.Options{})
	m := newModel(t, dev, Nano, 1, 1, 3)
	dir := filepath.Join(t.TempDir(), "ck")
	run := Run{Batch: 1, Accum: 1, Seed: 3, Hyper: DefaultHyper(10), State: NewState()}
	if err := m.Save(ctx, dir, run); err != nil {
		t.Fatal(err)
	}
	l, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	master, _, _, err := m.Params(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range master {
		if l.Master[i] != master[i] {
			t.Fatalf("parameter %d read back as %v, saved %v", i, l.Master[i], master[i])
		}
	}
	if l.Config != Nano {
		t.Fatalf("config read back as %+v", l.Config)
	}

	// A tensor of the wrong shape, a missing one and a NaN are each
	// refused, naming the file and the tensor.
	c, err := ckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		edit       func(c *ckpt.Checkpoint)
	}{
		{"shape", "has shape [64, 64], want [64, 192]", func(c *ckpt.Checkpoint) {
			w := ckpt.Find(c.Model, "transformer.h.1.attn.c_attn.weight")
			w.Shape, w.Data = []int64{64, 64}, w.Data[:64*64]
		}},
		{"missing", "has no tensor transformer.ln_f.bias", func(c *ckpt.Checkpoint) {
			var kept []ckpt.Tensor
			for _, x := range c.Model {
				if x.Name != "transformer.ln_f.bias" {
					kept = append(kept, x)
				}
			}
			c.Model = kept
		}},
		{"nan", "holds NaN at element 5", func(c *ckpt.Checkpoint) {
			ckpt.Find(c.Model, "transformer.wpe.weight").Data[5] = float32(math.NaN())
		}},
		{"config", "tensor transformer.wte.weight has shape [256, 64], want [256, 96]", func(c *ckpt.Checkpoint) {
			c.Config = []byte(strings.Replace(string(c.Config), `"n_embd": 64`, `"n_embd": 96`, 1))
		}},
		// A run state no run could have saved (edited by hand) is refused
		// at loading, naming the field, not as a kernel's parameter later.
		{"state-scale", "train_state.json: state loss_scale 0: want a finite value above 0", func(c *ckpt.Checkpoint) {
			c.State = editState(t, c.State, func(r *Run) { r.State.LossScale = 0 })
		}},
		{"state-step", "train_state.json: state step -5", func(c *ckpt.Checkpoint) {
			c.State = editState(t, c.State, func(r *Run) { r.State.Step = -5 })
		}},
		{"state-batch", "train_state.json: batch 0 and accum 1", func(c *ckpt.Checkpoint) {
			c.State = editState(t, c.State, func(r *Run) { r.Batch = 0 })
		}},
		{"state-curve", "train_state.json: curve point 1 has step 0: want steps from 0, each above the one before and below the state's step 5", func(c *ckpt.Checkpoint) {
			c.State = editState(t, c.State, func(r *Run) {
				r.State.Step, r.State.Updates = 5, 5
				r.Curve = []CurvePoint{{Step: 0}, {Step: 0}}
			})
		}},
		{"state-curve-ahead", "curve point 0 has step 5", func(c *ckpt.Checkpoint) {
			c.State = editState(t, c.State, func(r *Run) {
				r.State.Step, r.State.Updates = 5, 5
				r.Curve = []CurvePoint{{Step: 5}}
			})
		}},
	} {
		bad := filepath.Join(t.TempDir(), tc.name)
		cc := *c
		cc.Model = append([]ckpt.Tensor(nil), c.Model...)
		for i := range cc.Model {
			cc.Model[i].Data = append([]float32(nil), c.Model[i].Data...)
		}
		tc.edit(&cc)
		if err := ckpt.Save(ctx, bad, &cc); err != nil {
			t.Fatal(err)
		}
		_, err := Load(bad)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	// A truncated file names itself.
	model := filepath.Join(dir, ckpt.ModelFile)
	b, _ := os.ReadFile(model)
	os.WriteFile(model, b[:len(b)/2], 0o644)
	if _, err := Load(dir); !errors.Is(err, ckpt.ErrCorrupt) || !strings.Contains(err.Error(), model) {
		t.Errorf("a truncated model file: %v", err)
	}
}

func TestLiveVerificationChecksEveryCall(t *testing.T) {
	ctx := context.Background()
	dev := openCPU(t, vkern.Options{})
	tr := newTrainer(t, dev, 2, 1, 4)
	res, rep, err := tr.StepVerified(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := tr.Model.gradients(1)
	want := len(p.calls) + 2 // and the two AdamW groups
	if rep.Calls != want || rep.Checked == 0 || rep.Checked != rep.Elements || rep.Worst > 1 {
		t.Fatalf("checked %d calls (want %d), %d of %d elements, worst %.3g: %s", rep.Calls, want, rep.Checked, rep.Elements, rep.Worst, rep.Summary())
	}
	// The checked step computed what an unchecked one computes.
	plain := newTrainer(t, dev, 2, 1, 4)
	r2, err := plain.Step(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if math.Float64bits(r2.Loss) != math.Float64bits(res.Loss) || r2.GradNorm != res.GradNorm {
		t.Fatalf("a checked step gave loss %v and norm %v, an unchecked one %v and %v", res.Loss, res.GradNorm, r2.Loss, r2.GradNorm)
	}
}

func TestTrainingLowersTheValidationLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("trains nano for 150 steps")
	}
	ctx := context.Background()
	dev := openCPU(t, vkern.Options{})
	tr := newTrainer(t, dev, 8, 1, 150)
	before, err := tr.ValLoss(ctx, 16)
	if err != nil {
		t.Fatal(err)
	}
	for tr.State.Step < 150 {
		if _, err := tr.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	after, err := tr.ValLoss(ctx, 16)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("validation loss %.4f before, %.4f after 150 steps", before, after)
	if math.Abs(before-math.Log(256)) > 0.1 {
		t.Errorf("an untrained model's loss is %.4f, want about ln 256 = %.4f", before, math.Log(256))
	}
	if after > 3.2 {
		t.Errorf("after 150 steps the validation loss is %.4f; want below 3.2", after)
	}
}

// A cancelled context stops an evaluation and a sample between their
// device calls, with its error, and leaves the model serving.
func TestEvalAndSampleStopWhenCancelled(t *testing.T) {
	dev := openCPU(t, vkern.Options{})
	tr := newTrainer(t, dev, 8, 1, 10)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tr.ValLoss(cancelled, 64); !errors.Is(err, context.Canceled) {
		t.Errorf("an evaluation under a cancelled context: %v, want context.Canceled", err)
	}
	if out, err := tr.Model.Sample(cancelled, []int32{1, 2, 3}, 50, 1, 1); !errors.Is(err, context.Canceled) || len(out) != 0 {
		t.Errorf("a sample under a cancelled context: %d tokens, %v; want none and context.Canceled", len(out), err)
	}
	if v, err := tr.ValLoss(context.Background(), 16); err != nil || !(v > 0) {
		t.Errorf("an evaluation afterwards: %v, %v", v, err)
	}
}

// TestLiveVerificationStopsAtAWrongCall: with a defect planted in the GELU
// (cpu/gelu.h, which the step reaches through linear's GELU epilogue), a
// checked step fails with an error that names the step, the call and the
// wrong element, where an unchecked step would have trained on.
func TestLiveVerificationStopsAtAWrongCall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a server with a planted defect")
	}
	var defect kerneltest.Mutation
	for _, m := range kerneltest.CPUDefects {
		if m.Name == "gelu with x² where x³ belongs" {
			defect = m
		}
	}
	if defect.Name == "" {
		t.Fatal("the planted gelu defect is gone from kerneltest.CPUDefects; pick another")
	}
	ctx := context.Background()
	dev := openCPU(t, vkern.Options{EditSources: defect.Plant(), QuickBuild: true})
	tr := newTrainer(t, dev, 2, 1, 4)
	if _, err := tr.Step(ctx); err != nil {
		t.Fatalf("an unchecked step on the planted server: %v", err)
	}
	_, _, err := tr.StepVerified(ctx)
	if err == nil {
		t.Fatal("a checked step passed with the gelu defect planted")
	}
	for _, want := range []string{"step 1", "linear ", "gelu=1", "y["} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not name %q: %v", want, err)
		}
	}
	t.Log(err)
}

// TestWtesPaddedRowsStayZero: at V = 300, Vp = 320, after a few steps the
// rows of wte past V are +0 in the master, the f16 copy, the gradient and
// both moments, while the rows of tokens that never occur (256 … 299) are
// trained; the head's padded logits are −Inf and their gradient +0; a
// checkpoint holds V rows and loads back as the device's arenas, bit for
// bit; sampling draws tokens below V only.
func TestWtesPaddedRowsStayZero(t *testing.T) {
	ctx := context.Background()
	dev := openCPU(t, vkern.Options{})
	cfg := paddedNano
	tr := newTrainerOf(t, dev, cfg, 2, 2, 10)
	for i := 0; i < 5; i++ {
		r, err := tr.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Skipped {
			t.Fatalf("step %d was skipped", r.Step)
		}
	}
	m := tr.Model
	wte := m.lay.tensors[m.lay.wte]
	V, Vp, C := int64(cfg.V), int64(cfg.Vp()), int64(cfg.C)
	if wte.arenaElements() != Vp*C {
		t.Fatalf("wte has %d elements in the arenas, want Vp·C = %d", wte.arenaElements(), Vp*C)
	}
	master, m1, m2, err := m.Params(ctx)
	if err != nil {
		t.Fatal(err)
	}
	grad := make([]float32, m.lay.total)
	if err := m.grad.ReadF32(ctx, grad); err != nil {
		t.Fatal(err)
	}
	work := make([]uint16, m.lay.total)
	if err := m.work.ReadF16(ctx, work); err != nil {
		t.Fatal(err)
	}
	rows := func(a []float32, lo, hi int64) []float32 { return a[wte.offset+lo*C : wte.offset+hi*C] }
	for _, a := range []struct {
		name string
		v    []float32
	}{{"master", master}, {"gradient", grad}, {"first moment", m1}, {"second moment", m2}} {
		for i, x := range rows(a.v, V, Vp) {
			if math.Float32bits(x) != 0 {
				t.Fatalf("wte's %s holds %v at padded row %d, column %d; want +0", a.name, x, V+int64(i)/C, int64(i)%C)
			}
		}
	}
	for i, h := range work[wte.offset+V*C : wte.offset+Vp*C] {
		if h != 0 {
			t.Fatalf("wte's f16 copy holds %#04x at padded row %d, column %d; want +0", h, V+int64(i)/C, int64(i)%C)
		}
	}
	trained := false
	for _, x := range rows(grad, 256, V) {
		trained = trained || x != 0
	}
	if !trained {
		t.Errorf("the gradient of wte's rows 256 … %d (tokens that never occur, but not padding) is all zero; the softmax should push them down", V-1)
	}

	M := int64(m.B * cfg.T)
	logits, dlogits := make([]uint16, M*Vp), make([]uint16, M*Vp)
	if err := m.top.logits.ReadF16(ctx, logits); err != nil {
		t.Fatal(err)
	}
	if err := m.top.dlogits.ReadF16(ctx, dlogits); err != nil {
		t.Fatal(err)
	}
	for r := int64(0); r < M; r++ {
		for j := int64(0); j < Vp; j++ {
			x, d := logits[r*Vp+j], dlogits[r*Vp+j]
			switch {
			case j >= V && (x != f16.NegInf || d != 0):
				t.Fatalf("padded logit [%d, %d] is %#04x with gradient %#04x; want −Inf (0xfc00) and +0", r, j, x, d)
			case j < V && (f16.IsInf(x) || f16.IsNaN(x)):
				t.Fatalf("logit [%d, %d] is %#04x; want a finite value", r, j, x)
			}
		}
	}

	dir := filepath.Join(t.TempDir(), "padded")
	run := Run{Batch: 2, Accum: 2, Seed: tr.Seed, Hyper: tr.Hyper, State: tr.State, Data: tr.Corpus.Source}
	if err := m.Save(ctx, dir, run); err != nil {
		t.Fatal(err)
	}
	c, err := ckpt.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []*ckpt.Tensor{ckpt.Find(c.Model, wte.name), ckpt.Find(c.Optimizer, wte.name+".exp_avg"), ckpt.Find(c.Optimizer, wte.name+".exp_avg_sq")} {
		if x == nil || !sameShape(x.Shape, []int64{V, C}) {
			t.Fatalf("the checkpoint's wte (or a moment of it) is %+v; want shape [%d, %d], Hugging Face's", x, V, C)
		}
	}
	l, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct {
		name      string
		got, want []float32
	}{{"master", l.Master, master}, {"first moment", l.M, m1}, {"second moment", l.V, m2}} {
		for i := range a.want {
			if math.Float32bits(a.got[i]) != math.Float32bits(a.want[i]) {
				t.Fatalf("the loaded %s's element %d is %v, the device's %v", a.name, i, a.got[i], a.want[i])
			}
		}
	}

	prompt := []int32{'f', 'u', 'n', 'c'}
	for _, temperature := range []float64{0, 1, 5} {
		out, err := m.Sample(ctx, prompt, 40, temperature, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range out {
			if tok < 0 || int64(tok) >= V {
				t.Fatalf("sampling at temperature %g drew token %d, outside [0, V = %d)", temperature, tok, V)
			}
		}
	}
}

// TestSamplingsLastRowHeadMatchesTheWholeForward: Sample runs ln_f and the
// head over the last position's row alone where that row starts on a view's
// boundary (sampleLogits). At nano's C = 64 (128-byte rows) that is every
// other context length, so both ways run; at each length from 1 to 12 the
// last position's logits are the bits the whole forward gives, and a
// sample's tokens are the ones drawn from the whole forward's logits.
func TestSamplingsLastRowHeadMatchesTheWholeForward(t *testing.T) {
	ctx := context.Background()
	dev := openCPU(t, vkern.Options{})
	m := newModel(t, dev, Nano, 1, 1, 7)
	c := m.Config
	tokens := []int32{10, 200, 33, 47, 5, 99, 120, 7, 64, 250, 1, 42}
	whole := func(seq []int32) []uint16 {
		t.Helper()
		if err := m.tokens[0].WriteI32(ctx, seq); err != nil {
			t.Fatal(err)
		}
		var p program
		m.forward(&p, 0, 1, len(seq))
		if p.err != nil {
			t.Fatal(p.err)
		}
		if _, err := m.dev.RunBatch(ctx, p.calls); err != nil {
			t.Fatal(err)
		}
		row := make([]uint16, c.Vp())
		all := make([]uint16, len(seq)*c.Vp())
		if err := m.top.logits.ReadF16(ctx, all); err != nil {
			t.Fatal(err)
		}
		copy(row, all[(len(seq)-1)*c.Vp():])
		return row[:c.V]
	}
	viewed := 0
	for n := 1; n <= len(tokens); n++ {
		want := whole(tokens[:n])
		if err := m.tokens[0].WriteI32(ctx, tokens[:n]); err != nil {
			t.Fatal(err)
		}
		at, err := m.sampleLogits(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		if at == 0 && n > 1 {
			viewed++
		}
		all := make([]uint16, n*c.Vp())
		if err := m.top.logits.ReadF16(ctx, all); err != nil {
			t.Fatal(err)
		}
		got := all[at*int64(c.Vp()):][:c.V]
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("context of %d tokens: logit %d is %#04x, the whole forward's %#04x", n, i, got[i], want[i])
			}
		}
	}
	if viewed == 0 {
		t.Fatal("no context length took the last row's head alone")
	}
	// The tokens Sample draws are those drawn from the whole forward's logits.
	const draws = 6
	out, err := m.Sample(ctx, tokens[:3], draws, 0.9, 11)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(11, 0))
	probs := make([]float64, c.V)
	seq := append([]int32(nil), tokens[:3]...)
	for i := 0; i < draws; i++ {
		seq = append(seq, draw(whole(seq), probs, 0.9, rng))
	}
	for i := range out {
		if out[i] != seq[3+i] {
			t.Fatalf("token %d sampled %d, %d from the whole forward's logits", i, out[i], seq[3+i])
		}
	}
}

// FuzzRunState: train_state.json's decoder never panics, and whatever it
// accepts is a run that could have been saved: steps, updates and loss scale
// in range, a valid schedule, and a curve of increasing steps below the
// state's.
func FuzzRunState(f *testing.F) {
	loss, val := 2.5, 2.4
	saved := Run{Format: RunFormat, Batch: 4, Accum: 2, Seed: 1, Hyper: DefaultHyper(10),
		State: State{Step: 3, Updates: 2, LossScale: 1024, Good: 2},
		Curve: []CurvePoint{{Step: 0, Loss: &loss}, {Step: 1}, {Step: 2, Loss: &loss, Val: &val}}}
	b, err := json.Marshal(saved)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"format": "vkern-train 1", "batch": 1, "accum": 1, "state": {"step": 0, "loss_scale": 65536}}`))
	f.Add([]byte(`{"format": "vkern-train 1", "curve": [{"step": 5, "loss": null}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		run, err := decodeRun(b, "train_state.json")
		if err != nil {
			return
		}
		st := run.State
		if st.Step < 0 || st.Updates < 0 || st.Updates > st.Step || !(st.LossScale > 0) || math.IsInf(st.LossScale, 0) {
			t.Fatalf("accepted state %+v", st)
		}
		if err := run.Hyper.Validate(); err != nil {
			t.Fatalf("accepted a schedule that does not validate: %v", err)
		}
		for i, p := range run.Curve {
			if p.Step < 0 || p.Step >= st.Step || (i > 0 && p.Step <= run.Curve[i-1].Step) {
				t.Fatalf("accepted curve point %d at step %d (state step %d)", i, p.Step, st.Step)
			}
		}
	})
}
