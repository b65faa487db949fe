package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/gpt"
)

// PeakTFLOPs is the dense f16 tensor-core rate, f32 accumulation, of an
// H100 SXM (NVIDIA's datasheet: 989.4 TFLOP/s; an H200's is the same): the
// peak the training suite's share on the cuda backend is taken of. Another
// GPU's share is of this figure, not of its own peak.
const PeakTFLOPs = 990

// TrainCase is one model trained at one batch: Config.T is the context
// timed, which may be shorter than the model's (the position table then
// has T rows, as in train_anchors.py).
type TrainCase struct {
	Config gpt.Config
	Batch  int
}

// NewTrainCase is the case of the model called name at batch sequences of
// context tokens (0: the model's context).
func NewTrainCase(name string, batch, context int) (TrainCase, error) {
	cfg, err := gpt.ConfigNamed(name)
	if err != nil {
		return TrainCase{}, err
	}
	if batch < 1 {
		return TrainCase{}, fmt.Errorf("bench: --batch %d: want at least 1", batch)
	}
	if context < 0 || context > cfg.T {
		return TrainCase{}, fmt.Errorf("bench: --context %d: want 1 to %s's context, %d (0: all of it)", context, name, cfg.T)
	}
	if context > 0 {
		cfg.T = context
	}
	return TrainCase{Config: cfg, Batch: batch}, nil
}

// Name is the case's name in the results: train_MODEL_bB_tT.
func (c TrainCase) Name() string {
	return fmt.Sprintf("train_%s_b%d_t%d", c.Config.Name, c.Batch, c.Config.T)
}

// FlopsPerToken is the model's training flops per token, as PaLM (appendix
// B) and nanoGPT's estimate_mfu count them: 6·N + 12·L·C·T, N the
// parameters less the position table (wte counts once, as the head's
// matrix, over the V tokens, not the padded Vp), and 12·L·C·T the
// attention's two T×T products, forward and backward, over the whole
// square, not halved for the causal mask.
func (c TrainCase) FlopsPerToken() float64 {
	cfg := c.Config
	n := float64(cfg.Params() - int64(cfg.T)*int64(cfg.C))
	return 6*n + 12*float64(cfg.Layers)*float64(cfg.C)*float64(cfg.T)
}

// TrainAnchor is one line of bench/train_anchors.py: PyTorch's median
// training step of a model in one mode, measured in the same run.
type TrainAnchor struct {
	Anchor          string  `json:"anchor"` // "train"
	Model           string  `json:"model"`
	Mode            string  `json:"mode"` // eager or compile
	Batch           int     `json:"batch"`
	Context         int     `json:"context"`
	Vocab           int     `json:"vocab"`
	PaddedVocab     int     `json:"padded_vocab"`
	Steps           int     `json:"steps"`
	MedianMs        float64 `json:"median_ms"`
	TokensPerSecond float64 `json:"tokens_per_second"`
	Skipped         int     `json:"skipped"`
	Torch           string  `json:"torch"`
	Device          string  `json:"device"`
	Line            int     `json:"-"` // in its file, for errors
}

// label is the name a ratio to a is reported under.
func (a TrainAnchor) label() string {
	if a.Mode == "compile" {
		return "torch.compile"
	}
	return "PyTorch eager"
}

// ReadTrainAnchors reads the JSON lines of bench/train_anchors.py; blank
// lines and lines starting with # are skipped, and any other line must be
// a whole training anchor.
func ReadTrainAnchors(r io.Reader) ([]TrainAnchor, error) {
	anchors, err := readTrainAnchors(r)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return anchors, nil
}

func readTrainAnchors(r io.Reader) ([]TrainAnchor, error) {
	var anchors []TrainAnchor
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		var a TrainAnchor
		if err := json.Unmarshal([]byte(text), &a); err != nil {
			return nil, fmt.Errorf("anchors line %d: %w (want the JSON lines of bench/train_anchors.py)", line, err)
		}
		switch {
		case a.Anchor != "train":
			return nil, fmt.Errorf("anchors line %d has anchor %q, not a training anchor: --suite train reads the lines of bench/train_anchors.py", line, a.Anchor)
		case a.Model == "" || (a.Mode != "eager" && a.Mode != "compile"):
			return nil, fmt.Errorf("anchors line %d: model %q, mode %q: want a model and the mode eager or compile", line, a.Model, a.Mode)
		case a.Batch < 1 || a.Context < 1 || a.Vocab < 1 || a.PaddedVocab < a.Vocab:
			return nil, fmt.Errorf("anchors line %d: batch %d, context %d, vocab %d, padded_vocab %d: want each at least 1 and padded_vocab ≥ vocab", line, a.Batch, a.Context, a.Vocab, a.PaddedVocab)
		case !(a.MedianMs > 0) || !(a.TokensPerSecond > 0):
			return nil, fmt.Errorf("anchors line %d: median_ms %g and tokens_per_second %g must be positive", line, a.MedianMs, a.TokensPerSecond)
		}
		a.Line = line
		anchors = append(anchors, a)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading anchors: %w", err)
	}
	return anchors, nil
}

// ReadTrainAnchorsFile reads a file of training anchors.
func ReadTrainAnchorsFile(path string) ([]TrainAnchor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bench: %w (bench/train_anchors.py writes the training anchors)", err)
	}
	defer f.Close()
	anchors, err := readTrainAnchors(f)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", path, err)
	}
	return anchors, nil
}

// CheckTrainAnchors says whether anchors can be paired with cases
// (anchorsFor): TrainSuite's check, for a caller to make before it
// builds anything.
func CheckTrainAnchors(cases []TrainCase, anchors []TrainAnchor) error {
	for _, c := range cases {
		if _, err := anchorsFor(c, anchors); err != nil {
			return err
		}
	}
	return nil
}

// anchorsFor returns the anchors of c's model, eager before compile. It
// refuses a line of c's model measured at another batch, context or
// vocabulary, since its ratio would compare unlike steps, and a second
// line of the same mode, since either could be meant.
func anchorsFor(c TrainCase, anchors []TrainAnchor) ([]TrainAnchor, error) {
	cfg := c.Config
	byMode := map[string]TrainAnchor{}
	for _, a := range anchors {
		if a.Model != cfg.Name {
			continue
		}
		var diff []string
		for _, f := range []struct {
			name      string
			got, want int
		}{{"batch", a.Batch, c.Batch}, {"context", a.Context, cfg.T}, {"vocab", a.Vocab, cfg.V}, {"padded_vocab", a.PaddedVocab, cfg.Vp()}} {
			if f.got != f.want {
				diff = append(diff, fmt.Sprintf("%s %d where vkern's is %d", f.name, f.got, f.want))
			}
		}
		if len(diff) > 0 {
			return nil, fmt.Errorf("bench: anchors line %d (%s %s) has %s: time both at the same --batch and --context, the vocabulary padded (train_anchors.py without --unpadded)",
				a.Line, a.Model, a.Mode, strings.Join(diff, ", "))
		}
		if prev, ok := byMode[a.Mode]; ok {
			return nil, fmt.Errorf("bench: anchors lines %d and %d both time %s %s at batch %d, context %d: keep one", prev.Line, a.Line, a.Model, a.Mode, a.Batch, a.Context)
		}
		byMode[a.Mode] = a
	}
	var out []TrainAnchor
	for _, mode := range []string{"eager", "compile"} {
		if a, ok := byMode[mode]; ok {
			out = append(out, a)
		}
	}
	return out, nil
}

// TrainOptions size the training suite.
type TrainOptions struct {
	Open    vkern.Options
	Cases   []TrainCase
	Anchors []TrainAnchor // train_anchors.py's lines from the same run
	Steps   int           // timed steps per case (default 30)
	Warmup  int           // untimed steps first
	Seed    uint64        // the initialisation and the random tokens
}

// TrainSuite times training steps of each case, as `vkern train` takes
// them (gpt.Model.Step: the tokens written, the gradients batch, the loss
// and norm read back, the AdamW batch), on uniformly random tokens, after
// GPT-2's initialisation: the median wall time of Steps steps after Warmup.
// Each result carries tokens/s, the model flops per second
// (TrainCase.FlopsPerToken), on the cuda backend the share of PeakTFLOPs
// (FloorShare: the model flops at the peak over the median), and its
// ratios to the case's eager and torch.compile anchors. It checks the
// anchors against the cases before it opens the device.
func TrainSuite(ctx context.Context, opt TrainOptions, progress io.Writer) ([]Result, error) {
	opt.Steps = orDefault(opt.Steps, 30)
	opt.Warmup = max(opt.Warmup, 0)
	if len(opt.Cases) == 0 {
		return nil, fmt.Errorf("bench: the training suite has no model to time")
	}
	paired := make([][]TrainAnchor, len(opt.Cases))
	for i, c := range opt.Cases {
		var err error
		if paired[i], err = anchorsFor(c, opt.Anchors); err != nil {
			return nil, err
		}
	}
	dev, err := vkern.Open(ctx, opt.Open)
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	info, err := dev.Info(ctx)
	if err != nil {
		return nil, err
	}
	var results []Result
	for i, c := range opt.Cases {
		if progress != nil {
			fmt.Fprintf(progress, "timing %s: %d warm-up and %d timed steps of %s\n", c.Name(), opt.Warmup, opt.Steps, c.Config)
		}
		r, err := timeTraining(ctx, dev, c, opt)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name(), err)
		}
		if info.Backend == "cuda" {
			r.FloorNs = c.FlopsPerToken() * float64(c.Batch*c.Config.T) / (PeakTFLOPs * 1e3)
			r.FloorShare = r.FloorNs / r.MedianNs
			r.Note += fmt.Sprintf("; floor: the model flops at %d TFLOP/s (an H100's dense f16 peak)", PeakTFLOPs)
		}
		for _, a := range paired[i] {
			r.Relations = append(r.Relations, Relation{Anchor: a.label(), Ratio: a.MedianMs * 1e6 / r.MedianNs, TokensPerSecond: a.TokensPerSecond})
			if d := info.Device["device"]; a.Device != "" && d != "" && a.Device != d {
				r.Note += fmt.Sprintf("; the %s anchor ran on %q, vkern on %q", a.Mode, a.Device, d)
			}
		}
		if len(opt.Anchors) > 0 && len(paired[i]) == 0 {
			r.Note += fmt.Sprintf("; the anchors file has no line for %s", c.Config.Name)
		}
		results = append(results, r)
	}
	return results, nil
}

// timeTraining times the steps of one case on a model of its own.
func timeTraining(ctx context.Context, dev *vkern.Device, c TrainCase, opt TrainOptions) (Result, error) {
	m, err := gpt.New(ctx, dev, c.Config, c.Batch, 1)
	if err != nil {
		return Result{}, err
	}
	defer m.Close(context.WithoutCancel(ctx))
	if err := m.Init(ctx, opt.Seed); err != nil {
		return Result{}, err
	}
	// A few batches drawn before the timing and taken in turn: windows of
	// T + 1 uniform tokens, the inputs their first T, the targets their last.
	const batches = 4
	T, n := c.Config.T, c.Batch*c.Config.T
	inputs, targets := make([][]int32, batches), make([][]int32, batches)
	for k := range inputs {
		rng := rand.New(rand.NewPCG(opt.Seed, uint64(k)))
		inputs[k], targets[k] = make([]int32, n), make([]int32, n)
		for r := 0; r < c.Batch; r++ {
			prev := int32(rng.IntN(c.Config.V))
			for j := 0; j < T; j++ {
				next := int32(rng.IntN(c.Config.V))
				inputs[k][r*T+j], targets[k][r*T+j] = prev, next
				prev = next
			}
		}
	}
	h := gpt.DefaultHyper(int64(opt.Warmup + opt.Steps))
	st := gpt.NewState()
	var skipped int
	var phases []gpt.Phases // of the timed steps
	median, err := Median(ctx, opt.Steps, opt.Warmup, Wall(func() error {
		k := int(st.Step) % batches
		res, err := m.Step(ctx, h, &st, inputs[k:k+1], targets[k:k+1])
		if int(st.Step) > opt.Warmup {
			phases = append(phases, res.Phases)
			if res.Skipped {
				skipped++
			}
		}
		return err
	}))
	if err != nil {
		return Result{}, err
	}
	phaseMedian := func(of func(gpt.Phases) time.Duration) float64 {
		d := make([]time.Duration, len(phases))
		for i, p := range phases {
			d[i] = of(p)
		}
		slices.Sort(d)
		return float64(d[len(d)/2].Nanoseconds()) / 1e6
	}
	tokens := float64(n)
	flops := c.FlopsPerToken() * tokens
	return Result{
		Name: c.Name(), N: opt.Steps, MedianNs: float64(median),
		TokensPerSecond: tokens / median.Seconds(), GFLOPs: flops / float64(median),
		PhasesMs: map[string]float64{
			"write":     phaseMedian(func(p gpt.Phases) time.Duration { return p.Write }),
			"gradients": phaseMedian(func(p gpt.Phases) time.Duration { return p.Gradients }),
			"read":      phaseMedian(func(p gpt.Phases) time.Duration { return p.Read }),
			"update":    phaseMedian(func(p gpt.Phases) time.Duration { return p.Update }),
		},
		Note: fmt.Sprintf("wall time of a training step (tokens written, gradients batch, loss and norm read, AdamW batch) on random tokens, seed %d, after %d warm-up steps; %d of %d timed steps skipped by the loss scale; model flops 6·N + 12·L·C·T = %.3g per token",
			opt.Seed, opt.Warmup, skipped, opt.Steps, c.FlopsPerToken()),
	}, nil
}
