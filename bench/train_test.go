package bench

import (
	"fmt"
	"strings"
	"testing"
)

// anchorLine is a line of train_anchors.py.
func anchorLine(model, mode string, batch, context, vocab, padded int) string {
	return fmt.Sprintf(`{"anchor": "train", "model": %q, "mode": %q, "batch": %d, "context": %d, "vocab": %d, "padded_vocab": %d, `+
		`"steps": 30, "median_ms": 80.5, "tokens_per_second": 203528.0, "skipped": 0, "torch": "2.11.0", "device": "NVIDIA H100 80GB HBM3"}`,
		model, mode, batch, context, vocab, padded)
}

func TestReadTrainAnchorsReadsTrainAnchorsPyLines(t *testing.T) {
	in := anchorLine("gpt2", "eager", 16, 1024, 50257, 50304) + "\n# a comment\n\n" + anchorLine("gpt2", "compile", 16, 1024, 50257, 50304) + "\n"
	anchors, err := ReadTrainAnchors(strings.NewReader(in))
	if err != nil || len(anchors) != 2 {
		t.Fatalf("%d anchors, err %v", len(anchors), err)
	}
	a := anchors[1]
	if a.Mode != "compile" || a.Batch != 16 || a.PaddedVocab != 50304 || a.MedianMs != 80.5 || a.Line != 4 {
		t.Errorf("second anchor %+v", a)
	}
}

func TestReadTrainAnchorsRefusesOtherLinesNamingTheLine(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"an op anchor", `{"op": "gemm", "shape": "8x8x8", "impl": "torch.mm", "median_ms": 0.1}`, `anchors line 1 has anchor "", not a training anchor`},
		{"not JSON", "eager 80 ms", "anchors line 1"},
		{"an unknown mode", strings.Replace(anchorLine("char", "eager", 32, 256, 256, 256), `"eager"`, `"jit"`, 1), `mode "jit"`},
		{"no median", strings.Replace(anchorLine("char", "eager", 32, 256, 256, 256), `"median_ms": 80.5`, `"median_ms": 0`, 1), "median_ms 0"},
		{"a padded vocabulary below V", "\n" + anchorLine("gpt2", "eager", 16, 1024, 50257, 256), "anchors line 2: batch 16, context 1024, vocab 50257, padded_vocab 256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadTrainAnchors(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestTrainAnchorsPairOnlyAtTheSameModelBatchContextAndVocabulary(t *testing.T) {
	gpt2, err := NewTrainCase("gpt2", 16, 0)
	if err != nil {
		t.Fatal(err)
	}
	read := func(lines ...string) []TrainAnchor {
		t.Helper()
		a, err := ReadTrainAnchors(strings.NewReader(strings.Join(lines, "\n")))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	same := read(anchorLine("gpt2", "compile", 16, 1024, 50257, 50304), anchorLine("char", "eager", 32, 256, 256, 256),
		anchorLine("gpt2", "eager", 16, 1024, 50257, 50304))
	got, err := anchorsFor(gpt2, same)
	if err != nil || len(got) != 2 || got[0].Mode != "eager" || got[1].Mode != "compile" {
		t.Fatalf("paired %+v, err %v; want gpt2's eager then compile", got, err)
	}
	for _, tc := range []struct {
		name    string
		anchors []TrainAnchor
		want    string
	}{
		{"another batch", read(anchorLine("gpt2", "eager", 8, 1024, 50257, 50304)), "anchors line 1 (gpt2 eager) has batch 8 where vkern's is 16"},
		{"another context", read(anchorLine("gpt2", "eager", 16, 512, 50257, 50304)), "context 512 where vkern's is 1024"},
		{"the unpadded vocabulary", read(anchorLine("gpt2", "compile", 16, 1024, 50257, 50257)), "padded_vocab 50257 where vkern's is 50304"},
		{"one mode twice", read(anchorLine("gpt2", "eager", 16, 1024, 50257, 50304), anchorLine("gpt2", "eager", 16, 1024, 50257, 50304)), "anchors lines 1 and 2 both time gpt2 eager"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckTrainAnchors([]TrainCase{gpt2}, tc.anchors)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want one containing %q", err, tc.want)
			}
		})
	}
	// A line of another model is no concern of gpt2's.
	char, _ := NewTrainCase("char", 8, 128)
	if got, err := anchorsFor(char, read(anchorLine("gpt2", "eager", 16, 1024, 50257, 50304))); err != nil || len(got) != 0 {
		t.Errorf("char paired %+v, err %v; want nothing and no error", got, err)
	}
}

func TestNewTrainCaseRefusesWhatTheModelCannotTake(t *testing.T) {
	for _, tc := range []struct {
		model          string
		batch, context int
		want           string
	}{
		{"gpt3", 16, 0, `no model "gpt3"`},
		{"char", 0, 0, "--batch 0"},
		{"char", 32, 257, "--context 257: want 1 to char's context, 256"},
		{"char", 32, -1, "--context -1"},
	} {
		if _, err := NewTrainCase(tc.model, tc.batch, tc.context); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewTrainCase(%q, %d, %d): err %v, want %q", tc.model, tc.batch, tc.context, err, tc.want)
		}
	}
	c, err := NewTrainCase("char", 4, 64)
	if err != nil || c.Config.T != 64 || c.Name() != "train_char_b4_t64" {
		t.Errorf("case %+v (%s), err %v", c, c.Name(), err)
	}
}

// GPT-2 small's 124,439,808 parameters less its 1024×768 position table,
// six flops each, and the attention's 12·L·C·T.
func TestGPT2sFlopsPerTokenArePaLMs(t *testing.T) {
	c, _ := NewTrainCase("gpt2", 16, 0)
	if p := c.Config.Params(); p != 124_439_808 {
		t.Fatalf("gpt2 has %d parameters, want Hugging Face's 124439808", p)
	}
	want := 6.0*(124_439_808-1024*768) + 12*12*768*1024
	if got := c.FlopsPerToken(); got != want {
		t.Errorf("FlopsPerToken %v, want %v", got, want)
	}
}

func TestWriteSVGDrawsABarPerRelation(t *testing.T) {
	var b strings.Builder
	err := WriteSVG(&b, "train", []Result{{Name: "train_gpt2_b16_t1024", Relations: []Relation{{Anchor: "PyTorch eager", Ratio: 1.2}, {Anchor: "torch.compile", Ratio: 0.8}}}})
	if err != nil {
		t.Fatal(err)
	}
	if svg := b.String(); strings.Count(svg, `<rect x=`) != 2 || !strings.Contains(svg, "train_gpt2_b16_t1024 vs torch.compile") {
		t.Errorf("want a bar per anchor, each named:\n%s", svg)
	}
}
