package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/data"
	"github.com/vkern/vkern/gpt"
)

const evalHelp = `Usage: vkern eval --resume DIR [flags]

Prints the mean loss of the checkpoint in DIR over the first N windows of the
validation part of the data: window w is validation tokens [w·(T+1),
(w+1)·(T+1)), its first T tokens the inputs and its last T the targets, every
position counted (natural log, the mean over all N·T predictions). The
validation part is package data's rule: of text, every 20th file in lexical
order (the 20th, 40th, …), or the last 5% of the bytes when there are fewer
than 20 files; of a .bin, its last 5% of tokens.

  --resume DIR   a checkpoint folder (vkern's, or a GPT-2 saved by transformers)
  --data PATH    text files or folders, or one .bin (repeatable; default: the
                 Go distribution's sources)
  --windows N    windows to evaluate (default 64; 0: all of them)
  --batch B      windows per call (default 8)
  --json FILE    {"loss", "windows", "tokens", "checkpoint", "data"}
  --backend B    cpu | cuda | hip | auto (default cpu)
`

func runEval(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var paths listFlag
	resume := fs.String("resume", "", "")
	fs.Var(&paths, "data", "")
	windows := fs.Int("windows", 64, "")
	batch := fs.Int("batch", 8, "")
	jsonPath := fs.String("json", "", "")
	backend := fs.String("backend", "cpu", "")
	if code, done := parseFlags(fs, args, evalHelp, stdout, stderr); done {
		return code
	}
	fail := func(code int, err error) int {
		fmt.Fprintf(stderr, "vkern eval: %v\n", err)
		return code
	}
	if *resume == "" {
		return fail(exitUsage, fmt.Errorf("--resume DIR names the checkpoint to evaluate"))
	}
	if *windows < 0 || *batch < 1 {
		return fail(exitUsage, fmt.Errorf("--windows %d must be ≥ 0 and --batch %d ≥ 1", *windows, *batch))
	}
	if err := checkBackend(*backend); err != nil {
		return fail(exitUsage, err)
	}
	if err := checkOutputPath(*jsonPath); err != nil {
		return fail(exitUsage, err)
	}
	loaded, err := gpt.Load(*resume)
	if err != nil {
		return fail(exitUsage, err)
	}
	corpus, err := data.Load(ctx, paths)
	if err != nil {
		return fail(exitUsage, err)
	}
	if err := corpus.Check(loaded.Config.T, loaded.Config.V); err != nil {
		return fail(exitUsage, err)
	}
	m, closeAll, err := openModel(ctx, *backend, loaded, *batch)
	if err != nil {
		return fail(exitFailure, err)
	}
	defer closeAll()
	n := *windows
	if avail := len(corpus.Val) / (loaded.Config.T + 1); n == 0 || n > avail {
		n = avail
	}
	loss, err := gpt.EvalCorpus(ctx, m, corpus.Val, n, false)
	if err != nil {
		return fail(exitFailure, err)
	}
	fmt.Fprintf(stdout, "%.6f\n", loss)
	fmt.Fprintf(stderr, "vkern eval: mean loss %.6f over %d windows of %d tokens of the validation part of %s (%s)\n",
		loss, n, loaded.Config.T+1, corpus.Source, loaded.Config)
	if *jsonPath != "" {
		doc := map[string]any{"loss": loss, "windows": n, "tokens": n * loaded.Config.T, "checkpoint": *resume, "data": corpus.Source,
			"model": loaded.Config.Name, "perplexity": math.Exp(loss)}
		if err := writeAtomic(*jsonPath, func(w io.Writer) error {
			e := json.NewEncoder(w)
			e.SetIndent("", "  ")
			return e.Encode(doc)
		}); err != nil {
			return fail(exitFailure, err)
		}
	}
	return exitOK
}

const sampleHelp = `Usage: vkern sample --resume DIR [flags]

Generates text from the checkpoint in DIR: each next token drawn from the
softmax of the last position's logits divided by the temperature, with the
context cut to the model's last T tokens.

  --resume DIR      a checkpoint folder
  --prompt TEXT     the text to continue, as bytes (default a newline)
  --n BYTES         tokens to generate (default 400)
  --temperature X   0 picks the most likely token (default 0.8)
  --seed N          the draws' seed (default 1)
  --backend B       cpu | cuda | hip | auto (default cpu)

Byte-level models print text; a model with a larger vocabulary prints token
ids, and its prompt is read as bytes, which are token ids below 256.
`

func runSample(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sample", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	resume := fs.String("resume", "", "")
	prompt := fs.String("prompt", "\n", "")
	n := fs.Int("n", 400, "")
	temperature := fs.Float64("temperature", 0.8, "")
	seed := fs.Uint64("seed", 1, "")
	backend := fs.String("backend", "cpu", "")
	if code, done := parseFlags(fs, args, sampleHelp, stdout, stderr); done {
		return code
	}
	fail := func(code int, err error) int {
		fmt.Fprintf(stderr, "vkern sample: %v\n", err)
		return code
	}
	switch {
	case *resume == "":
		return fail(exitUsage, fmt.Errorf("--resume DIR names the checkpoint to sample from"))
	case *n < 0:
		return fail(exitUsage, fmt.Errorf("--n %d: want 0 or more", *n))
	case *prompt == "":
		return fail(exitUsage, fmt.Errorf("--prompt is empty; the model needs at least one byte to continue"))
	case !(*temperature >= 0) || math.IsInf(*temperature, 0):
		return fail(exitUsage, fmt.Errorf("--temperature %g: want a finite value ≥ 0", *temperature))
	}
	if err := checkBackend(*backend); err != nil {
		return fail(exitUsage, err)
	}
	loaded, err := gpt.Load(*resume)
	if err != nil {
		return fail(exitUsage, err)
	}
	m, closeAll, err := openModel(ctx, *backend, loaded, 1)
	if err != nil {
		return fail(exitFailure, err)
	}
	defer closeAll()
	var ids []int32
	for _, b := range []byte(*prompt) {
		ids = append(ids, int32(b))
	}
	out, err := m.Sample(ctx, ids, *n, *temperature, *seed)
	if err != nil {
		return fail(exitFailure, err)
	}
	fmt.Fprintln(stdout, tokensText(append(ids, out...), loaded.Config.V <= 256))
	return exitOK
}

// openModel starts a device and puts a loaded checkpoint on it, for b
// sequences at a time.
func openModel(ctx context.Context, backend string, l *gpt.Loaded, b int) (*gpt.Model, func(), error) {
	dev, err := vkern.Open(ctx, vkern.Options{Backend: backend})
	if err != nil {
		return nil, nil, err
	}
	m, err := gpt.New(ctx, dev, l.Config, b, 1)
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	closeAll := func() {
		m.Close(context.WithoutCancel(ctx))
		dev.Close()
	}
	if err := m.SetParams(ctx, l.Master, l.M, l.V); err != nil {
		closeAll()
		return nil, nil, err
	}
	return m, closeAll, nil
}
