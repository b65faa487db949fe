package gpt

import (
	"fmt"
	"sort"
	"strings"
)

// Config is a GPT-2 shape: Layers blocks of Heads attention heads over C
// channels, a context of T positions and a vocabulary of V tokens.
type Config struct {
	Name   string `json:"name"`
	Layers int    `json:"layers"`
	Heads  int    `json:"heads"`
	C      int    `json:"channels"`
	T      int    `json:"context"`
	V      int    `json:"vocab"`
}

// The configurations of TRAINING.md, by the names the CLI takes.
var (
	// Nano is the seed's scale: about 0.2 M parameters, bytes as tokens.
	Nano = Config{Name: "nano", Layers: 4, Heads: 4, C: 64, T: 64, V: 256}
	// Char is a 10.8 M-parameter byte-level model.
	Char = Config{Name: "char", Layers: 6, Heads: 6, C: 384, T: 256, V: 256}
	// GPT2 is GPT-2 small (124 M parameters) with its BPE vocabulary.
	GPT2 = Config{Name: "gpt2", Layers: 12, Heads: 12, C: 768, T: 1024, V: 50257}
)

var configs = map[string]Config{Nano.Name: Nano, Char.Name: Char, GPT2.Name: GPT2}

// ConfigNamed returns the configuration called name.
func ConfigNamed(name string) (Config, error) {
	c, ok := configs[name]
	if !ok {
		names := make([]string, 0, len(configs))
		for n := range configs {
			names = append(names, n)
		}
		sort.Strings(names)
		return Config{}, fmt.Errorf("gpt: no model %q; choose one of %s", name, strings.Join(names, ", "))
	}
	return c, nil
}

// Validate says whether c is a shape the kernels and checkpoints can hold.
func (c Config) Validate() error {
	switch {
	case c.Layers < 1 || c.Heads < 1 || c.C < 1 || c.T < 1 || c.V < 1:
		return fmt.Errorf("gpt: model %q has layers %d, heads %d, C %d, T %d, V %d; every one must be at least 1", c.Name, c.Layers, c.Heads, c.C, c.T, c.V)
	case c.C%c.Heads != 0:
		return fmt.Errorf("gpt: model %q: %d heads do not divide C = %d", c.Name, c.Heads, c.C)
	case c.V > 1<<16:
		return fmt.Errorf("gpt: model %q: V = %d does not fit the uint16 token ids of the data", c.Name, c.V)
	case c.Layers > 1024 || c.C > 1<<16 || c.T > 1<<16:
		return fmt.Errorf("gpt: model %q is outside the sizes this package was built for (layers ≤ 1024, C ≤ 65536, T ≤ 65536)", c.Name)
	}
	return nil
}

// vocabAlign is the multiple Vp rounds the vocabulary up to, as llm.c and
// nanoGPT pad GPT-2's 50257 to 50304: a row of Vp halves is a whole number
// of 128-byte lines, so every row of the logits and of their gradient
// starts 16-byte aligned, which the GPU GEMMs' TMA and 16-byte copies
// (kernels/cuda/gemm.cuh) and cross_entropy's vector loads need; at V = 50257
// the head's three GEMMs pad their operands into scratch or take a slower
// path.
const vocabAlign = 64

// Vp is the padded vocabulary, V rounded up to a multiple of 64: 50257 →
// 50304, 256 → 256. On the device wte (its f32 master, f16 copy, gradient
// and AdamW moments) has Vp rows and the logits Vp columns. Rows V … Vp−1
// of wte are zero and stay exactly zero: no token or label is ≥ V, the
// head adds a bias of −Inf to their logits, so softmax gives them exactly 0
// and their gradient is exactly 0, and AdamW keeps a zero weight with zero
// gradient and moments at zero. Everything outside the device sees V: the
// tokens, the checkpoints (V rows, as Hugging Face's), the float64
// reference.
func (c Config) Vp() int { return (c.V + vocabAlign - 1) / vocabAlign * vocabAlign }

// HeadSize is C / Heads.
func (c Config) HeadSize() int { return c.C / c.Heads }

// Params is the number of parameters, the lm_head tied to the token
// embedding and so counted once.
func (c Config) Params() int64 {
	var n int64
	for _, t := range c.tensors() {
		n += t.elements()
	}
	return n
}

func (c Config) String() string {
	v := fmt.Sprint(c.V)
	if c.Vp() != c.V {
		v += fmt.Sprintf(" (padded to %d on the device)", c.Vp())
	}
	return fmt.Sprintf("%s (%d layers, %d heads, C %d, T %d, V %s: %.2f M parameters)",
		c.Name, c.Layers, c.Heads, c.C, c.T, v, float64(c.Params())/1e6)
}
