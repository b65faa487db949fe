package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/bench"
)

const benchHelp = `Usage: vkern bench [flags]

Measures vkern and prints a table; each figure is a median after warm-up, and
where an anchor was measured in the same run, the ratio to it (above 1: faster
than the anchor). Benchmarks only report; they never fail on a time.

  --suite S      core (default): ping, start-up, the GEMMs at --n³, the oracle
                 server: ping, tiny and batched runs, WRITE/READ 1 MiB..1 GiB, and the
                 seed-style baselines (decimal text over the pipe, a process per call)
                 ops: each --op at each --shape it fits (default: every op at its
                 Bench shapes, the sizes of a real model), median of --runs
                 device-timed runs over rotated operand sets, GB/s, TFLOP/s, the
                 floor from the anchors' copy and GEMM rates, and the ratio to each
                 case's anchor
                 train: training steps of each --model (default char and gpt2) as
                 vkern train takes them, on random tokens: median ms/step of --steps
                 after --warmup, tokens/s, the ratio to the PyTorch eager and
                 torch.compile steps of bench/train_anchors.py at the same model,
                 batch and context, and on cuda the share of an H100's 990 TFLOP/s
                 (f16) that the model flops, 6·N + 12·L·C·T per token, would take
                 (N: the parameters less the position table; L layers, C channels)
  --backend B    auto | cpu | cuda | hip (default auto)
  --anchors FILE JSON lines from bench/cpu_anchors.py, anchors.py or op_anchors.py,
                 run just before; for --suite train, bench/train_anchors.py's
  --n N          GEMM size for the core suite (default 1024)
  --op NAME      ops suite: the ops (repeatable; default all)
  --shape S      ops suite: the shapes (repeatable)
  --runs N       ops suite: timed runs per case (default 50)
  --list         ops suite: print each case as OP ANCHOR SHAPE, one a line (ANCHOR: the
                 name the anchor scripts report its PyTorch equivalent under), and
                 measure nothing
  --quick        server suite: the small calls only (3000 of each), 1 MiB transfers,
                 the baselines at a token size: a sample of the round trips in seconds
  --model M      train suite: nano, char or gpt2 (repeatable; default char,gpt2)
  --batch B      train suite: sequences per step (default: vkern train's for the model:
                 nano 16, char 32, gpt2 16)
  --context T    train suite: tokens per sequence, at most the model's (default: the
                 model's; a shorter T shortens the position table too)
  --steps N      train suite: timed steps (default 30)
  --warmup N     train suite: untimed steps first (default 10)
  --seed N       train suite: the initialisation and the random tokens (default 1)
  --json FILE    write the results as JSON
  --svg FILE     write a chart of the ratios to the anchors

Example, on a GPU machine (bench/cuda-train-bench.sh runs both):
  python3 bench/train_anchors.py > train-anchors.jsonl
  vkern bench --suite train --backend cuda --anchors train-anchors.jsonl --json train.json
`

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	suite := fs.String("suite", "core", "")
	backend := fs.String("backend", "auto", "")
	anchorsPath := fs.String("anchors", "", "")
	n := fs.Int("n", 1024, "")
	jsonPath := fs.String("json", "", "")
	svgPath := fs.String("svg", "", "")
	runs := fs.Int("runs", 50, "")
	quick := fs.Bool("quick", false, "")
	list := fs.Bool("list", false, "")
	var ops, models listFlag
	var shapes shapeListFlag
	fs.Var(&ops, "op", "")
	fs.Var(&shapes, "shape", "")
	fs.Var(&models, "model", "")
	batch := fs.Int("batch", 0, "")
	seqLen := fs.Int("context", 0, "")
	steps := fs.Int("steps", 30, "")
	warmup := fs.Int("warmup", 10, "")
	seed := fs.Uint64("seed", 1, "")
	if code, done := parseFlags(fs, args, benchHelp, stdout, stderr); done {
		return code
	}
	set := setFlags(fs)
	if *suite != "train" {
		for _, name := range []string{"model", "batch", "context", "steps", "warmup", "seed"} {
			if set[name] {
				fmt.Fprintf(stderr, "vkern bench: --%s is for --suite train, not %q\n", name, *suite)
				return exitUsage
			}
		}
	}
	if *list {
		return listOpCases(*suite, ops, shapes, stdout, stderr)
	}
	if err := checkBackend(*backend); err != nil {
		fmt.Fprintf(stderr, "vkern bench: %v\n", err)
		return exitUsage
	}
	if err := checkCache(); err != nil {
		fmt.Fprintf(stderr, "vkern bench: %v\n", err)
		return exitUsage
	}
	if *n < 1 {
		fmt.Fprintf(stderr, "vkern bench: --n %d: want at least 1\n", *n)
		return exitUsage
	}
	for _, p := range []string{*jsonPath, *svgPath} {
		if err := checkOutputPath(p); err != nil {
			fmt.Fprintf(stderr, "vkern bench: %v\n", err)
			return exitUsage
		}
	}
	if *runs < 1 {
		fmt.Fprintf(stderr, "vkern bench: --runs %d: want at least 1\n", *runs)
		return exitUsage
	}
	if *quick && *suite != "server" {
		fmt.Fprintf(stderr, "vkern bench: --quick is for --suite server, not %q\n", *suite)
		return exitUsage
	}
	var anchors []bench.Anchor
	var trainAnchors []bench.TrainAnchor
	if *anchorsPath != "" {
		var err error
		if *suite == "train" {
			trainAnchors, err = bench.ReadTrainAnchorsFile(*anchorsPath)
		} else {
			anchors, err = bench.ReadAnchorsFile(*anchorsPath)
		}
		if err != nil {
			fmt.Fprintf(stderr, "vkern bench: %v\n", err)
			return exitUsage
		}
	}
	var results []bench.Result
	var err error
	switch *suite {
	case "core":
		results, err = bench.CoreSuite(ctx, bench.CoreOptions{Open: vkern.Options{Backend: *backend}, Anchors: anchors, GemmN: *n}, stderr)
	case "ops":
		var cases []bench.OpCase
		if cases, err = opCases(ops, shapes); err != nil {
			fmt.Fprintf(stderr, "vkern bench: %v\n", err)
			return exitUsage
		}
		results, err = bench.OpsSuite(ctx, bench.OpsOptions{Open: vkern.Options{Backend: *backend}, Cases: cases, Anchors: anchors, Runs: *runs}, stderr)
	case "server":
		var info vkern.Info
		if info, err = vkern.Build(ctx, vkern.Options{Backend: *backend}); err == nil {
			opts := bench.ServerOptions{Progress: stderr}
			if *quick {
				opts = bench.QuickServerOptions
				opts.Progress = stderr
			}
			results, err = bench.ServerSuite(ctx, info.BinaryPath, info.SourceSHA256, opts)
		}
	case "train":
		var cases []bench.TrainCase
		if cases, err = trainCases(models, *batch, set["batch"], *seqLen, *steps, *warmup); err == nil {
			err = bench.CheckTrainAnchors(cases, trainAnchors)
		}
		if err != nil {
			fmt.Fprintf(stderr, "vkern bench: %v\n", err)
			return exitUsage
		}
		results, err = bench.TrainSuite(ctx, bench.TrainOptions{Open: vkern.Options{Backend: *backend}, Cases: cases,
			Anchors: trainAnchors, Steps: *steps, Warmup: *warmup, Seed: *seed}, stderr)
	default:
		fmt.Fprintf(stderr, "vkern bench: unknown --suite %q: want core, ops, server or train\n", *suite)
		return exitUsage
	}
	if err != nil {
		fmt.Fprintf(stderr, "vkern bench: %v\n", err)
		return exitFailure
	}
	printResults(stdout, results)
	if *svgPath != "" {
		title := fmt.Sprintf("vkern bench --suite %s --backend %s: ratio to the anchor (above 1: faster)", *suite, *backend)
		if err := writeAtomic(*svgPath, func(w io.Writer) error { return bench.WriteSVG(w, title, results) }); err != nil {
			fmt.Fprintf(stderr, "vkern bench: %v\n", err)
			return exitFailure
		}
	}
	if *jsonPath != "" {
		doc := struct {
			Suite   string         `json:"suite"`
			Backend string         `json:"backend"`
			Date    time.Time      `json:"date"`
			Results []bench.Result `json:"results"`
		}{*suite, *backend, time.Now().UTC(), results}
		err := writeAtomic(*jsonPath, func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(doc)
		})
		if err != nil {
			fmt.Fprintf(stderr, "vkern bench: %v\n", err)
			return exitFailure
		}
	}
	return exitOK
}

// trainCases are the train suite's cases: each model (default char and
// gpt2) at --batch (default: vkern train's for the model) and --context.
func trainCases(models []string, batch int, batchSet bool, seqLen, steps, warmup int) ([]bench.TrainCase, error) {
	if steps < 1 || warmup < 0 {
		return nil, fmt.Errorf("--steps %d and --warmup %d: want at least 1 timed step and no negative warm-up", steps, warmup)
	}
	if len(models) == 0 {
		models = []string{"char", "gpt2"}
	}
	var cases []bench.TrainCase
	for _, name := range models {
		b := batch
		if !batchSet {
			b = modelDefaults[name].batch
		}
		c, err := bench.NewTrainCase(name, b, seqLen)
		if err != nil {
			return nil, err
		}
		cases = append(cases, c)
	}
	return cases, nil
}

// opCases pairs each chosen op with each shape that fits it: the shapes
// given, else each op's own benchmark shapes (op.Shapes.Bench).
func opCases(ops, shapes []string) ([]bench.OpCase, error) {
	plan, err := buildPlan(ops, shapes, nil, 1, 1, false)
	if err != nil {
		return nil, err
	}
	var cases []bench.OpCase
	for _, o := range plan.Ops {
		specs := plan.Shapes
		if len(specs) == 0 {
			specs = o.Shapes.Bench
		}
		for _, spec := range specs {
			if s, err := o.ParseShape(spec); err == nil {
				cases = append(cases, bench.OpCase{Op: o, Shape: s})
			}
		}
	}
	if len(cases) == 0 {
		return nil, fmt.Errorf("no chosen op fits the chosen shapes (each op's syntax: vkern verify --help)")
	}
	return cases, nil
}

// listOpCases prints the ops suite's cases, one a line: the op, the name
// its anchor is reported under, and the shape as the suite writes it, so
// that a script can time the anchors of exactly the cases vkern will time.
func listOpCases(suite string, ops, shapes []string, stdout, stderr io.Writer) int {
	if suite != "ops" {
		fmt.Fprintf(stderr, "vkern bench: --list is for --suite ops, not %q\n", suite)
		return exitUsage
	}
	cases, err := opCases(ops, shapes)
	if err != nil {
		fmt.Fprintf(stderr, "vkern bench: %v\n", err)
		return exitUsage
	}
	for _, c := range cases {
		fmt.Fprintf(stdout, "%s %s %s\n", c.Op.Name, bench.AnchorName(c.Op), c.Shape)
	}
	return exitOK
}

func printResults(w io.Writer, results []bench.Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tN\tMEDIAN\tFIGURE\tANCHOR\tRATIO\tFLOOR SHARE")
	for _, r := range results {
		figure := ""
		switch {
		case r.TokensPerSecond > 0:
			figure = fmt.Sprintf("%.0f tok/s", r.TokensPerSecond)
		case r.GFLOPs >= 1000:
			figure = fmt.Sprintf("%.1f TFLOP/s", r.GFLOPs/1000)
		case r.GFLOPs > 0:
			figure = fmt.Sprintf("%.1f GFLOP/s", r.GFLOPs)
		case r.GBps > 0:
			figure = fmt.Sprintf("%.2f GB/s", r.GBps)
		}
		anchor, ratio := "", ""
		ratios := r.Ratios()
		if len(ratios) > 0 {
			anchor, ratio = ratios[0].Anchor, fmt.Sprintf("%.3g", ratios[0].Ratio)
		}
		share := ""
		if r.FloorShare > 0 {
			share = fmt.Sprintf("%.2f", r.FloorShare)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.N, time.Duration(r.MedianNs).Round(10*time.Nanosecond), figure, anchor, ratio, share)
		for _, rel := range ratios[min(1, len(ratios)):] {
			fmt.Fprintf(tw, "\t\t\t\t%s\t%.3g\t\n", rel.Anchor, rel.Ratio)
		}
	}
	tw.Flush()
	for _, r := range results {
		if p := r.PhasesMs; p != nil {
			fmt.Fprintf(w, "%s, the host's phases (medians): write %.3f, gradients %.3f, read %.3f, update %.3f ms\n",
				r.Name, p["write"], p["gradients"], p["read"], p["update"])
		}
	}
}
