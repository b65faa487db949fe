package gpt

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/ckpt"
)

// RunFormat names train_state.json's layout.
const RunFormat = "vkern-train 1"

// Run is train_state.json: how a run was set up and where it stands.
// Resuming takes the settings from here.
type Run struct {
	Format string `json:"format"`
	Model  string `json:"model"`
	Batch  int    `json:"batch"`
	Accum  int    `json:"accum"` // micro-batches per step, over all ranks
	// Ranks is how many ranks trained the run last, when more than one
	// (data-parallel; parallel.go). A checkpoint resumes on any number of
	// ranks that divides Accum.
	Ranks int    `json:"ranks,omitempty"`
	Seed  uint64 `json:"seed"`
	Hyper Hyper  `json:"hyper"`
	State State  `json:"state"`
	// Data describes the corpus (data.Corpus.Source), to tell a resumed
	// run on other data.
	Data string `json:"data"`
	// Curve is the run's loss at each step trained so far, oldest first,
	// with the validation loss where one was measured: what a resumed run
	// needs to draw the whole run's curve, not only its own piece.
	// Checkpoints written before it was kept have none.
	Curve []CurvePoint `json:"curve,omitempty"`
}

// CurvePoint is a step's place on a run's loss curve. Loss is nil where
// the step's loss was not finite (JSON has no NaN or infinity); Val is nil
// where no validation loss was measured after the step.
type CurvePoint struct {
	Step int64    `json:"step"`
	Loss *float64 `json:"loss"`
	Val  *float64 `json:"val,omitempty"`
}

// decodeRun reads train_state.json (b, read from path): a run of this
// format that a run could have saved, or an error naming path.
func decodeRun(b []byte, path string) (*Run, error) {
	var run Run
	if err := json.Unmarshal(b, &run); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ckpt.ErrCorrupt, path, err)
	}
	if run.Format != RunFormat {
		return nil, fmt.Errorf("gpt: %s has format %q; this vkern reads %q", path, run.Format, RunFormat)
	}
	if err := run.check(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ckpt.ErrCorrupt, path, err)
	}
	return &run, nil
}

// check refuses a run state no run could have saved (a file edited by
// hand, or damaged), naming the field, before it reaches a kernel as a
// strange parameter.
func (r *Run) check() error {
	st := r.State
	switch {
	case r.Batch < 1 || r.Accum < 1:
		return fmt.Errorf("batch %d and accum %d: each is at least 1 in a saved run", r.Batch, r.Accum)
	case r.Ranks < 0:
		return fmt.Errorf("ranks %d: a saved run has 0 (one device) or more", r.Ranks)
	case st.Step < 0 || st.Updates < 0 || st.Updates > st.Step || st.Good < 0:
		return fmt.Errorf("state step %d, updates %d, good_steps %d: want 0 ≤ updates ≤ step and good_steps ≥ 0", st.Step, st.Updates, st.Good)
	case !(st.LossScale > 0) || math.IsInf(st.LossScale, 0):
		return fmt.Errorf("state loss_scale %v: want a finite value above 0", st.LossScale)
	}
	for i, p := range r.Curve {
		if p.Step < 0 || p.Step >= st.Step || (i > 0 && p.Step <= r.Curve[i-1].Step) {
			return fmt.Errorf("curve point %d has step %d: want steps from 0, each above the one before and below the state's step %d", i, p.Step, st.Step)
		}
	}
	if err := r.Hyper.Validate(); err != nil {
		return err
	}
	return nil
}

// hfConfig is the part of a transformers GPT2Config this package writes
// and reads.
type hfConfig struct {
	Architectures       []string `json:"architectures"`
	ModelType           string   `json:"model_type"`
	VocabSize           int      `json:"vocab_size"`
	NPositions          int      `json:"n_positions"`
	NCtx                int      `json:"n_ctx"`
	NEmbd               int      `json:"n_embd"`
	NLayer              int      `json:"n_layer"`
	NHead               int      `json:"n_head"`
	NInner              *int     `json:"n_inner"`
	ActivationFunction  string   `json:"activation_function"`
	ResidPdrop          float64  `json:"resid_pdrop"`
	EmbdPdrop           float64  `json:"embd_pdrop"`
	AttnPdrop           float64  `json:"attn_pdrop"`
	LayerNormEpsilon    float64  `json:"layer_norm_epsilon"`
	InitializerRange    float64  `json:"initializer_range"`
	TieWordEmbeddings   *bool    `json:"tie_word_embeddings,omitempty"`
	ScaleAttnWeights    *bool    `json:"scale_attn_weights,omitempty"`
	ScaleByInverseLayer bool     `json:"scale_attn_by_inverse_layer_idx"`
	ReorderAndUpcast    bool     `json:"reorder_and_upcast_attn"`
	BosTokenID          int      `json:"bos_token_id"`
	EosTokenID          int      `json:"eos_token_id"`
	TorchDtype          string   `json:"torch_dtype"`
	VkernModel          string   `json:"vkern_model,omitempty"`
}

func (c Config) hf() hfConfig {
	yes := true
	return hfConfig{
		Architectures: []string{"GPT2LMHeadModel"}, ModelType: "gpt2",
		VocabSize: c.V, NPositions: c.T, NCtx: c.T, NEmbd: c.C, NLayer: c.Layers, NHead: c.Heads,
		ActivationFunction: "gelu_new", LayerNormEpsilon: 1e-5, InitializerRange: 0.02,
		TieWordEmbeddings: &yes, ScaleAttnWeights: &yes,
		BosTokenID: c.V - 1, EosTokenID: c.V - 1, TorchDtype: "float32", VkernModel: c.Name,
	}
}

// configFromHF reads a GPT2Config, refusing what this GPT does not
// compute.
func configFromHF(raw json.RawMessage) (Config, error) {
	h := hfConfig{LayerNormEpsilon: 1e-5, ActivationFunction: "gelu_new"}
	if err := json.Unmarshal(raw, &h); err != nil {
		return Config{}, fmt.Errorf("gpt: %s: %w", ckpt.ConfigFile, err)
	}
	bad := func(what string, got any, want string) error {
		return fmt.Errorf("gpt: %s has %s %v; vkern's GPT-2 computes %s only", ckpt.ConfigFile, what, got, want)
	}
	switch {
	case h.ModelType != "gpt2":
		return Config{}, bad("model_type", h.ModelType, "gpt2")
	case h.ActivationFunction != "gelu_new" && h.ActivationFunction != "gelu_pytorch_tanh":
		return Config{}, bad("activation_function", h.ActivationFunction, "the tanh GELU (gelu_new)")
	case h.LayerNormEpsilon != 1e-5:
		return Config{}, bad("layer_norm_epsilon", h.LayerNormEpsilon, "1e-5")
	case h.NInner != nil && *h.NInner != 4*h.NEmbd:
		return Config{}, bad("n_inner", *h.NInner, "4·n_embd")
	case h.TieWordEmbeddings != nil && !*h.TieWordEmbeddings:
		return Config{}, bad("tie_word_embeddings", false, "a head tied to wte")
	case h.ScaleAttnWeights != nil && !*h.ScaleAttnWeights:
		return Config{}, bad("scale_attn_weights", false, "scores scaled by 1/√head_size")
	case h.ScaleByInverseLayer || h.ReorderAndUpcast:
		return Config{}, bad("scale_attn_by_inverse_layer_idx or reorder_and_upcast_attn", true, "GPT-2's attention")
	}
	c := Config{Name: h.VkernModel, Layers: h.NLayer, Heads: h.NHead, C: h.NEmbd, T: h.NPositions, V: h.VocabSize}
	if c.Name == "" {
		c.Name = "custom"
		for _, k := range configs {
			if k.Layers == c.Layers && k.Heads == c.Heads && k.C == c.C && k.T == c.T && k.V == c.V {
				c.Name = k.Name
			}
		}
	}
	return c, c.Validate()
}

// Save writes the model's parameters, optimizer state and run to the
// checkpoint folder dir (package ckpt: atomic; loadable by transformers).
// Every tensor has Hugging Face's shape: wte and its two moments have V
// rows, not the device's Vp (Config.Vp), whose padded rows are zero.
func (m *Model) Save(ctx context.Context, dir string, run Run) error {
	run.Format, run.Model = RunFormat, m.Config.Name
	cfg, err := json.MarshalIndent(m.Config.hf(), "", "  ")
	if err != nil {
		return err
	}
	state, err := json.MarshalIndent(run, "", "  ")
	if err != nil {
		return err
	}
	// Each tensor is read from the device when the file's writer reaches
	// it (ckpt.Tensor.Read): the host holds one tensor at a time, not the
	// three whole arenas (1.5 GB at gpt2).
	c := &ckpt.Checkpoint{Config: cfg, State: state}
	for _, t := range m.lay.tensors {
		from := func(arena *vkern.Buffer) func([]float32) error {
			return func(dst []float32) error { return arena.ReadF32At(ctx, int64(t.offset), dst) }
		}
		c.Model = append(c.Model, ckpt.Tensor{Name: t.name, Shape: t.shape(), Read: from(m.master)})
		c.Optimizer = append(c.Optimizer,
			ckpt.Tensor{Name: t.name + ".exp_avg", Shape: t.shape(), Read: from(m.m)},
			ckpt.Tensor{Name: t.name + ".exp_avg_sq", Shape: t.shape(), Read: from(m.v)})
	}
	return ckpt.Save(ctx, dir, c)
}

// Loaded is a checkpoint read and checked against its configuration.
type Loaded struct {
	Config Config
	// Run is nil for a model saved by transformers (no train_state.json).
	Run *Run
	// Master, M and V are in the arena layout of Config (wte padded to
	// Vp rows of which those past V are zero); M and V are zero when the
	// folder has no optimizer state.
	Master, M, V []float32
}

// Load reads the checkpoint in dir: a folder vkern saved, or a GPT-2
// saved by transformers (its names with or without the "transformer."
// prefix; a causal-mask buffer and an lm_head equal to wte are skipped).
// Every tensor must be present, of its shape and finite; the error names
// the file, the tensor and what was expected. wte's padded rows (Config.Vp)
// are zero in Master, M and V, as on the device, so a run resumes bit for
// bit.
func Load(dir string) (*Loaded, error) {
	c, err := ckpt.Load(dir)
	if err != nil {
		return nil, err
	}
	cfg, err := configFromHF(c.Config)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, dir)
	}
	lay := newLayout(cfg)
	l := &Loaded{Config: cfg, Master: make([]float32, lay.total), M: make([]float32, lay.total), V: make([]float32, lay.total)}
	modelFile := dir + "/" + ckpt.ModelFile
	used := map[string]bool{}
	if err := place(lay, c.Model, "", l.Master, modelFile, true, used); err != nil {
		return nil, err
	}
	if err := unknown(c.Model, used, modelFile, true); err != nil {
		return nil, err
	}
	if c.State != nil {
		run, err := decodeRun(c.State, dir+"/"+ckpt.StateFile)
		if err != nil {
			return nil, err
		}
		if c.Optimizer == nil {
			return nil, fmt.Errorf("gpt: %s has %s but no %s: the run cannot be resumed without its optimizer state", dir, ckpt.StateFile, ckpt.OptimizerFile)
		}
		l.Run = run
	}
	if c.Optimizer != nil {
		opt := dir + "/" + ckpt.OptimizerFile
		used := map[string]bool{}
		if err := place(lay, c.Optimizer, ".exp_avg", l.M, opt, false, used); err != nil {
			return nil, err
		}
		if err := place(lay, c.Optimizer, ".exp_avg_sq", l.V, opt, false, used); err != nil {
			return nil, err
		}
		if err := unknown(c.Optimizer, used, opt, false); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// place copies each of lay's tensors (name + suffix) from ts into dst,
// marking the ones it took in used; hf allows transformers' names.
func place(lay *layout, ts []ckpt.Tensor, suffix string, dst []float32, file string, hf bool, used map[string]bool) error {
	for _, t := range lay.tensors {
		name := t.name + suffix
		got := ckpt.Find(ts, name)
		if got == nil && hf {
			got = ckpt.Find(ts, trimPrefix(name))
		}
		if got == nil {
			return fmt.Errorf("gpt: %s has no tensor %s, which the model of its config needs (shape %s)", file, name, ckpt.ShapeString(t.shape()))
		}
		used[got.Name] = true
		if got.Data == nil {
			return fmt.Errorf("gpt: %s: tensor %s is %s; parameters are read from F32, F16 or BF16", file, got.Name, got.DType)
		}
		if !sameShape(got.Shape, t.shape()) {
			return fmt.Errorf("gpt: %s: tensor %s has shape %s, want %s for the model of its config", file, got.Name, ckpt.ShapeString(got.Shape), ckpt.ShapeString(t.shape()))
		}
		for i, x := range got.Data {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return fmt.Errorf("gpt: %s: tensor %s holds %v at element %d; a checkpoint's values must be finite", file, got.Name, x, i)
			}
		}
		copy(dst[t.offset:], got.Data)
	}
	return nil
}

// unknown refuses a tensor of ts that place did not take; hf skips
// transformers' extras.
func unknown(ts []ckpt.Tensor, used map[string]bool, file string, hf bool) error {
	for _, t := range ts {
		if used[t.Name] {
			continue
		}
		if hf && skippable(t, ts) {
			continue
		}
		return fmt.Errorf("gpt: %s holds tensor %s, which the model of its config does not have", file, t.Name)
	}
	return nil
}

func trimPrefix(name string) string {
	const p = "transformer."
	if len(name) > len(p) && name[:len(p)] == p {
		return name[len(p):]
	}
	return name
}

// skippable: transformers' causal-mask buffers, and an lm_head.weight
// equal to wte (the tied head saved anyway).
func skippable(t ckpt.Tensor, ts []ckpt.Tensor) bool {
	n := t.Name
	if hasSuffix(n, ".attn.bias") || hasSuffix(n, ".attn.masked_bias") {
		return true
	}
	if n == "lm_head.weight" {
		wte := ckpt.Find(ts, "transformer.wte.weight")
		if wte == nil {
			wte = ckpt.Find(ts, "wte.weight")
		}
		if wte == nil || len(wte.Data) != len(t.Data) {
			return false
		}
		for i := range t.Data {
			if t.Data[i] != wte.Data[i] {
				return false
			}
		}
		return true
	}
	return false
}

func hasSuffix(s, suffix string) bool {
	return len(s) >= len(suffix) && s[len(s)-len(suffix):] == suffix
}

func sameShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
