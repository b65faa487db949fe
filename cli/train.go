package cli

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/ckpt"
	"github.com/vkern/vkern/collective"
	"github.com/vkern/vkern/data"
	"github.com/vkern/vkern/gpt"
)

const trainHelp = `Usage: vkern train [flags]

Trains a GPT-2-family model end to end on vkern's kernels: every step is one
batch of op calls to the kernel server (forward, backward, gradient norm),
then the AdamW update; f32 master weights, f16 activations, dynamic loss
scaling as PyTorch's GradScaler, clipping at norm 1, warm-up then cosine decay.

  --model M         nano | char | gpt2 (default nano)
  --data PATH       text files or folders (bytes are tokens), or one .bin of
                    uint16 tokens (llm.c's layout); repeatable. Default: the Go
                    distribution's own sources
  --steps N         the run's total steps (default: the model's, below); with
                    --resume, the step to continue to; 0 writes the initial
                    checkpoint and stops
  --batch B         sequences per micro-batch (default: the model's)
  --accum K         micro-batches per step (gradient accumulation, default 1)
  --lr X            peak learning rate (default: the model's)
  --lr-steps N      the cosine schedule's length (default --steps); keep it
                    when a run is trained in pieces
  --warmup N        warm-up steps (default min(100, steps/10))
  --seed N          initialisation and batches (default 1)
  --out DIR         checkpoint folder (default runs/MODEL-DATE-TIME; with
                    --resume, the resumed folder)
  --resume DIR      continue the run saved in DIR, bit for bit
  --save-every N    also save every N steps (default: only at the end)
  --eval-every N    validation loss every N steps (default, or 0: 10 times a
                    run)
  --eval-windows N  validation windows per evaluation, spread evenly over the
                    validation part (default, or 0: the model's)
  --verify-every N  re-check every call of every N-th step against the float64
                    oracles (sampled for large tensors); stop on a wrong one
  --sample N        bytes of text to generate at the end (default 400)
  --temperature X   sampling temperature (default 0.8)
  --json FILE       the configuration and one record per step (its loss, norm,
                    time, and where the time went: write_ms, gradients_ms,
                    read_ms, update_ms)
  --batches FILE    write every step's windows of T+1 tokens (uint16) to FILE,
                    for replaying the run elsewhere (bench/parity.py)
  --backend B       cpu | cuda | hip | auto (default cpu)
  --call-timeout D  the longest one device call may take (a step's gradient
                    program is one) before its kernel server is taken for
                    hung and stopped, and the run with it (default 60s, at
                    least 1s; a 2-core cpu needs minutes at gpt2's size). A
                    data-parallel run's calls are bounded by --step-timeout
  --gpus N          data-parallel over N GPUs of this machine, one kernel server
                    each, through NCCL (on --backend cpu: N cpu servers, joined
                    on the host, for testing). --batch and --accum are per GPU:
                    a step trains on N times the sequences, the same global
                    batch for any N. A checkpoint is written once, and resumes
                    on any N that divides its micro-batches per step
  --rank-timeout D  how long a rank may fall silent (stopped, hung) before every
                    other rank stops with an error naming it (default 30s,
                    at least 1s)
  --step-timeout D  the longest a data-parallel step's device calls may take,
                    waits for slower ranks included, and the ranks' meeting
                    at the start; past it the communicator is aborted and the
                    run stops (default 5m, at least 1s)
  --bucket-mb N     MiB of gradients per all-reduce, issued as the backward
                    finishes them (default 25, as PyTorch DDP's bucket_cap_mb)

Without --gpus, torchrun's variables make this process one rank of a
multi-process run, one GPU (LOCAL_RANK) each: WORLD_SIZE ranks in all, this
one RANK, meeting rank 0 at MASTER_ADDR:MASTER_PORT over TCP; every rank must
run the same vkern, backend, CUDA, NCCL and settings, or the run does not
start. Only rank 0 prints, evaluates for the record and writes files.

The model defaults:
%s
A checkpoint is a folder that transformers.GPT2LMHeadModel.from_pretrained
loads, plus optimizer.safetensors and train_state.json for --resume. The loss
curve goes to DIR/loss.svg; train_state.json keeps it, so a resumed run draws
the whole run's curve.

Exit status: 0 done · 1 the run failed (the error says which step and call)
             2 usage error · 130 interrupted (once the model is set up,
             the run is saved first; in a run of one process per GPU an
             interrupt of any one stops every rank before the same step)
`

// modelDefaults are the CLI's defaults per model: enough steps to learn
// something on its data, at a batch its usual device holds.
var modelDefaults = map[string]struct {
	steps       int64
	batch       int
	lr          float64
	evalWindows int
}{
	"nano": {steps: 4000, batch: 16, lr: 1e-2, evalWindows: 256},
	"char": {steps: 2000, batch: 32, lr: 1e-3, evalWindows: 128},
	"gpt2": {steps: 1000, batch: 16, lr: 6e-4, evalWindows: 32},
}

func trainHelpText() string {
	var b strings.Builder
	for _, name := range []string{"nano", "char", "gpt2"} {
		c, _ := gpt.ConfigNamed(name)
		d := modelDefaults[name]
		fmt.Fprintf(&b, "  %-5s %s; --steps %d --batch %d --lr %g --eval-windows %d\n", name, c, d.steps, d.batch, d.lr, d.evalWindows)
	}
	return fmt.Sprintf(trainHelp, b.String())
}

// trainFlags are the parsed flags, with which ones were given.
type trainFlags struct {
	model, out, resume, backend, jsonPath string
	batchesPath                           string
	data                                  listFlag
	steps, lrSteps, warmup                int64
	batch, accum, evalWindows, sample     int
	saveEvery, evalEvery, verifyEvery     int64
	gpus                                  int
	bucketMB                              int
	rankTimeout, stepTimeout, callTimeout time.Duration
	lr, temperature                       float64
	seed                                  uint64
	set                                   map[string]bool
}

func runTrain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f trainFlags
	fs.StringVar(&f.model, "model", "nano", "")
	fs.Var(&f.data, "data", "")
	fs.Int64Var(&f.steps, "steps", 0, "")
	fs.IntVar(&f.batch, "batch", 0, "")
	fs.IntVar(&f.accum, "accum", 1, "")
	fs.Float64Var(&f.lr, "lr", 0, "")
	fs.Int64Var(&f.lrSteps, "lr-steps", 0, "")
	fs.Int64Var(&f.warmup, "warmup", -1, "")
	fs.Uint64Var(&f.seed, "seed", 1, "")
	fs.StringVar(&f.out, "out", "", "")
	fs.StringVar(&f.resume, "resume", "", "")
	fs.Int64Var(&f.saveEvery, "save-every", 0, "")
	fs.Int64Var(&f.evalEvery, "eval-every", 0, "")
	fs.IntVar(&f.evalWindows, "eval-windows", 0, "")
	fs.Int64Var(&f.verifyEvery, "verify-every", 0, "")
	fs.IntVar(&f.sample, "sample", 400, "")
	fs.Float64Var(&f.temperature, "temperature", 0.8, "")
	fs.StringVar(&f.jsonPath, "json", "", "")
	fs.StringVar(&f.batchesPath, "batches", "", "")
	fs.StringVar(&f.backend, "backend", "cpu", "")
	fs.IntVar(&f.gpus, "gpus", 0, "")
	fs.DurationVar(&f.rankTimeout, "rank-timeout", 0, "")
	fs.DurationVar(&f.stepTimeout, "step-timeout", 0, "")
	fs.DurationVar(&f.callTimeout, "call-timeout", 0, "")
	fs.IntVar(&f.bucketMB, "bucket-mb", 0, "")
	if code, done := parseFlags(fs, args, trainHelpText(), stdout, stderr); done {
		return code
	}
	f.set = setFlags(fs)
	fail := func(code int, err error) int {
		if ctx.Err() != nil {
			// Ctrl-C (or SIGTERM) while reading the corpus, building or
			// starting: an error the interrupt caused says only that.
			fmt.Fprintln(stderr, "vkern train: interrupted before the first step; nothing was saved")
			if !errors.Is(err, context.Canceled) {
				fmt.Fprintf(stderr, "vkern train: the error at the time: %v\n", err)
			}
			return exitInterrupted
		}
		fmt.Fprintf(stderr, "vkern train: %v\n", err)
		return code
	}

	setup, err := planRun(&f)
	if err != nil {
		return fail(exitUsage, err)
	}
	par, err := planParallel(&f, setup)
	if err != nil {
		return fail(exitUsage, err)
	}
	if f.set["call-timeout"] {
		switch {
		case par.ranks > 0:
			return fail(exitUsage, errors.New("--call-timeout bounds a one-device run's calls; a data-parallel run's are bounded by --step-timeout: use that, or drop --gpus"))
		case f.callTimeout < time.Second:
			return fail(exitUsage, fmt.Errorf("--call-timeout %v: want at least 1s (a step's calls on a GPU take milliseconds, on a cpu seconds to minutes)", f.callTimeout))
		}
	}
	for _, p := range []string{f.jsonPath, f.batchesPath} {
		if err := checkOutputPath(p); err != nil {
			return fail(exitUsage, err)
		}
	}
	if err := checkCache(); err != nil {
		return fail(exitUsage, err)
	}
	// Where the checkpoint goes, found now rather than after the steps;
	// only the rank that saves (rank 0, or the one process) asks.
	if par.env == nil || par.env.Rank == 0 {
		if err := ckpt.CheckTarget(setup.out); err != nil {
			return fail(exitUsage, fmt.Errorf("--out %s: %w", setup.out, err))
		}
	}

	progress := newProgress(stderr)
	progress.status("reading the corpus")
	corpus, err := data.Load(ctx, f.data)
	progress.clear()
	if err != nil {
		return fail(exitUsage, err)
	}
	if err := corpus.Check(setup.cfg.T, setup.cfg.V); err != nil {
		return fail(exitUsage, err)
	}
	if setup.loaded != nil && setup.loaded.Run != nil && setup.loaded.Run.Data != corpus.Source {
		fmt.Fprintf(stderr, "vkern train: note: the saved run trained on %s; this one reads %s, so its batches differ from an uninterrupted run's\n",
			setup.loaded.Run.Data, corpus.Source)
	}

	tr := &gpt.Trainer{Hyper: setup.hyper, State: gpt.NewState(), Seed: setup.seed, Corpus: corpus}
	var dev *vkern.Device
	if par.ranks > 0 {
		progress.status("starting the kernel servers and meeting the ranks")
		// A rank whose peers do not come says so (the main goroutine only
		// waits in OpenParallel meanwhile, so the line is this one's).
		onWait := func(msg string) {
			progress.clear()
			fmt.Fprintf(stderr, "vkern train: %s\n", msg)
			progress.status("starting the kernel servers and meeting the ranks")
		}
		p, err := gpt.OpenParallel(ctx, par.options(&f, setup, corpus, onWait))
		progress.clear()
		if errors.Is(err, gpt.ErrTooLarge) {
			return fail(exitUsage, err)
		}
		if err != nil {
			return fail(exitFailure, err)
		}
		defer p.Close(context.WithoutCancel(ctx))
		tr.Model, tr.Parallel, dev = p.Replicas[0].Model, p, p.Replicas[0].Group.Device()
		if !p.Rank0() {
			// Rank 0 speaks for the run; the others train quietly.
			stdout, f.sample, f.jsonPath, f.batchesPath = io.Discard, 0, "", ""
		}
	} else {
		progress.status("building and starting the %s kernel server", f.backend)
		var err error
		dev, err = vkern.Open(ctx, vkern.Options{Backend: f.backend, CallTimeout: f.callTimeout})
		progress.clear()
		if err != nil {
			return fail(exitFailure, err)
		}
		defer dev.Close()
		model, err := gpt.New(ctx, dev, setup.cfg, setup.batch, setup.accum)
		if errors.Is(err, gpt.ErrTooLarge) {
			return fail(exitUsage, err)
		}
		if err != nil {
			return fail(exitFailure, err)
		}
		defer model.Close(context.WithoutCancel(ctx))
		tr.Model = model
	}
	info, err := dev.Info(ctx)
	if err != nil {
		return fail(exitFailure, err)
	}
	if setup.loaded != nil {
		err = tr.SetParams(ctx, setup.loaded.Master, setup.loaded.M, setup.loaded.V)
		if setup.loaded.Run != nil {
			tr.State = setup.loaded.Run.State
		}
	} else {
		err = tr.Init(ctx, setup.seed)
	}
	if err != nil {
		return fail(exitFailure, err)
	}

	fmt.Fprintf(stdout, "vkern train: %s on %s (%s)\n", setup.cfg, info.Backend, info.Device["device"])
	if tr.Parallel != nil {
		fmt.Fprintf(stdout, "  data-parallel: %d ranks, collectives by %s; %d micro-batches per step in all, %d a rank\n",
			tr.Ranks(), tr.Parallel.Engine(), tr.MicroBatches(), tr.MicroBatches()/tr.Ranks())
	}
	fmt.Fprintf(stdout, "  data: %s (%d training, %d validation tokens)\n", corpus.Source, len(corpus.Train), len(corpus.Val))
	// The global batch: with --gpus, --batch and --accum are a rank's, and
	// accum here is every rank's micro-batches together.
	fmt.Fprintf(stdout, "  batch %d × %d tokens × accum %d = %d sequences a step; lr %.12g (warm-up %d, cosine to %.12g at step %d); seed %d\n",
		setup.batch, setup.cfg.T, tr.MicroBatches(), setup.batch*tr.MicroBatches(), setup.hyper.LR, setup.hyper.Warmup, setup.hyper.MinLR, setup.hyper.Steps, setup.seed)
	if tr.State.Step > 0 {
		fmt.Fprintf(stdout, "  resuming %s at step %d (loss scale %g)\n", f.resume, tr.State.Step, tr.State.LossScale)
	}
	fmt.Fprintf(stdout, "  checkpoint: %s\n", setup.out)

	rec := &trainRecord{Model: setup.cfg.Name, Config: setup.cfg, Batch: setup.batch, Accum: tr.MicroBatches(), Ranks: tr.Ranks(), Seed: setup.seed,
		Hyper: setup.hyper, Backend: info.Backend, Device: info.Device["device"], Data: corpus.Source,
		Command: "vkern train " + strings.Join(args, " "), StartStep: tr.State.Step}
	// The curve a resumed checkpoint holds, which this process's steps
	// extend in every save and in loss.svg.
	var history []gpt.CurvePoint
	if setup.loaded != nil && setup.loaded.Run != nil {
		history = setup.loaded.Run.Curve
	}
	run := func() gpt.Run {
		return gpt.Run{Batch: setup.batch, Accum: tr.MicroBatches(), Seed: setup.seed, Hyper: setup.hyper, State: tr.State,
			Data: corpus.Source, Curve: runCurve(history, rec.Steps)}
	}
	code := trainLoop(ctx, &f, setup, tr, rec, run, progress, stdout, stderr)
	if f.jsonPath != "" {
		if err := writeAtomic(f.jsonPath, rec.write); err != nil {
			fmt.Fprintf(stderr, "vkern train: %v\n", err)
			if code == exitOK {
				code = exitFailure
			}
		}
	}
	return code
}

// holdsRun reports whether dir holds a saved run (its train_state.json).
func holdsRun(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ckpt.StateFile))
	return err == nil
}

// sameFolder reports whether a and b name one folder (however written:
// relative, absolute, through a link).
func sameFolder(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	if errA != nil || errB != nil {
		return filepath.Clean(a) == filepath.Clean(b)
	}
	return os.SameFile(sa, sb)
}

// parallelRun is what --gpus and torchrun's variables ask for: ranks 0
// for a run on one device without collectives.
type parallelRun struct {
	ranks int
	env   *collective.Env
}

// planParallel reads --gpus and torchrun's variables and settles s.accum
// as the micro-batches of a step over all ranks: a new run's --accum is
// per GPU; a resumed run keeps its own, which the ranks must divide.
func planParallel(f *trainFlags, s *runSetup) (parallelRun, error) {
	env, multi, err := collective.EnvFrom(os.Getenv)
	if err != nil {
		return parallelRun{}, err
	}
	var p parallelRun
	switch {
	case multi && f.set["gpus"] && f.gpus != 1:
		return p, fmt.Errorf("--gpus %d with WORLD_SIZE=%d: a process of a multi-process run drives one GPU (LOCAL_RANK); start one process per GPU, or drop WORLD_SIZE for one process", f.gpus, env.Size)
	case multi:
		p.ranks, p.env = env.Size, &env
	case f.set["gpus"]:
		if f.gpus < 1 {
			return p, fmt.Errorf("--gpus %d: want at least 1", f.gpus)
		}
		p.ranks = f.gpus
	default:
		// A data-parallel setting without a data-parallel run would be
		// ignored: say so rather than let the user believe it applied.
		for _, name := range []string{"rank-timeout", "step-timeout", "bucket-mb"} {
			if f.set[name] {
				return p, fmt.Errorf("--%s is a setting of data-parallel runs, and this is not one: add --gpus N (or run as one of torchrun's ranks), or drop --%s", name, name)
			}
		}
		return p, nil
	}
	// 0 is the default; below a second, a rank busy for a moment (heartbeats
	// come every quarter of --rank-timeout) or a slow start reads as a
	// dead one.
	if f.set["rank-timeout"] && f.rankTimeout < time.Second {
		return p, fmt.Errorf("--rank-timeout %v: want at least 1s (a rank's heartbeats come every quarter of it; a shorter one takes a busy rank for a stopped one)", f.rankTimeout)
	}
	if f.set["step-timeout"] && f.stepTimeout < time.Second {
		return p, fmt.Errorf("--step-timeout %v: want at least 1s (it bounds the ranks' meeting and every step's device calls)", f.stepTimeout)
	}
	if f.set["bucket-mb"] && f.bucketMB < 1 {
		return p, fmt.Errorf("--bucket-mb %d: want at least 1 (MiB of gradients per all-reduce)", f.bucketMB)
	}
	if f.verifyEvery > 0 {
		return p, fmt.Errorf("--verify-every checks one device's calls one at a time, and a data-parallel step's collectives cannot be checked that way: verify without --gpus, on one device")
	}
	if s.loaded == nil || s.loaded.Run == nil {
		s.accum *= p.ranks
	} else if s.accum%p.ranks != 0 {
		var fit []string
		for d := 1; d <= s.accum; d++ {
			if s.accum%d == 0 {
				fit = append(fit, fmt.Sprint(d))
			}
		}
		return p, fmt.Errorf("--resume %s: the run takes %d micro-batches per step, which %d ranks cannot share equally; resume on %s ranks", f.resume, s.accum, p.ranks, strings.Join(fit, ", "))
	}
	return p, nil
}

// options are gpt.OpenParallel's: the run's settings, what every rank
// must share for the handshake, and what to say when the ranks are slow
// to meet (onWait).
func (p parallelRun) options(f *trainFlags, s *runSetup, corpus *data.Corpus, onWait func(string)) gpt.ParallelOptions {
	hyper, _ := json.Marshal(s.hyper)
	step := int64(0)
	if s.loaded != nil && s.loaded.Run != nil {
		step = s.loaded.Run.State.Step
	}
	gpus := p.ranks
	if p.env != nil {
		gpus = 0 // one process per rank
	}
	return gpt.ParallelOptions{
		Backend: f.backend, GPUs: gpus, Env: p.env, Config: s.cfg, B: s.batch, Accum: s.accum,
		Match: map[string]string{
			"vkern": vkernVersion(), "seed": fmt.Sprint(s.seed), "hyper": string(hyper), "steps": fmt.Sprint(s.steps),
			"start step": fmt.Sprint(step), "bucket MiB": fmt.Sprint(f.bucketMB), "data": fmt.Sprintf("%d training and %d validation tokens", len(corpus.Train), len(corpus.Val)),
		},
		Peer:        collective.Options{HeartbeatTimeout: f.rankTimeout, OnWait: onWait},
		Timeout:     f.stepTimeout,
		BucketBytes: int64(f.bucketMB) << 20,
	}
}

// runSetup is what the flags and a resumed checkpoint decide.
type runSetup struct {
	cfg          gpt.Config
	hyper        gpt.Hyper
	batch, accum int
	seed         uint64
	steps        int64 // the step to stop at
	evalWindows  int
	out          string
	loaded       *gpt.Loaded
}

// planRun checks the flags and settles the run: a new one from the flags
// and the model's defaults, or a resumed one from its checkpoint, where a
// flag that contradicts the saved run is an error.
func planRun(f *trainFlags) (*runSetup, error) {
	if err := checkBackend(f.backend); err != nil {
		return nil, err
	}
	for _, c := range []struct {
		name string
		v    int64
	}{{"--steps", f.steps}, {"--save-every", f.saveEvery}, {"--eval-every", f.evalEvery}, {"--verify-every", f.verifyEvery},
		{"--sample", int64(f.sample)}, {"--eval-windows", int64(f.evalWindows)}, {"--lr-steps", f.lrSteps}} {
		if c.v < 0 {
			return nil, fmt.Errorf("%s %d: want 0 or more", c.name, c.v)
		}
	}
	// --warmup's default is -1, "not given" (the default depends on
	// --steps); a negative value given is a mistake, not that default.
	if f.set["warmup"] && f.warmup < 0 {
		return nil, fmt.Errorf("--warmup %d: want 0 or more warm-up steps (leave it out for min(100, steps/10))", f.warmup)
	}
	if f.set["batch"] && f.batch < 1 {
		return nil, fmt.Errorf("--batch %d: want at least 1", f.batch)
	}
	if f.accum < 1 {
		return nil, fmt.Errorf("--accum %d: want at least 1", f.accum)
	}
	if !(f.temperature >= 0) || math.IsInf(f.temperature, 0) {
		return nil, fmt.Errorf("--temperature %g: want a finite value ≥ 0", f.temperature)
	}
	s := &runSetup{seed: f.seed, accum: f.accum}
	if f.resume != "" {
		l, err := gpt.Load(f.resume)
		if err != nil {
			return nil, err
		}
		if l.Run == nil {
			return nil, fmt.Errorf("--resume %s: the folder holds a model but no train_state.json (not a vkern run); nothing to resume", f.resume)
		}
		r := l.Run
		for _, c := range []struct {
			flag      string
			given     bool
			got, want any
		}{
			{"model", f.set["model"], f.model, l.Config.Name}, {"batch", f.set["batch"], f.batch, r.Batch},
			{"accum", f.set["accum"], f.accum, r.Accum}, {"seed", f.set["seed"], f.seed, r.Seed},
			{"lr", f.set["lr"], f.lr, r.Hyper.LR}, {"warmup", f.set["warmup"], f.warmup, r.Hyper.Warmup},
		} {
			if c.given && fmt.Sprint(c.got) != fmt.Sprint(c.want) {
				return nil, fmt.Errorf("--%s %v differs from the resumed run's %v; a resumed run keeps its settings (start a new run with --out to change them)", c.flag, c.got, c.want)
			}
		}
		s.cfg, s.loaded, s.batch, s.accum, s.seed, s.hyper = l.Config, l, r.Batch, r.Accum, r.Seed, r.Hyper
		s.steps = f.steps
		if !f.set["steps"] {
			s.steps = r.Hyper.Steps
		}
		if s.steps < r.State.Step {
			if f.set["steps"] {
				return nil, fmt.Errorf("--steps %d: the run in %s is at step %d already; --steps is the run's total", s.steps, f.resume, r.State.Step)
			}
			return nil, fmt.Errorf("the run in %s is at step %d, past its schedule's %d steps; give --steps N, the new total (above %d), to train it on", f.resume, r.State.Step, s.steps, r.State.Step)
		}
		if f.set["lr-steps"] {
			s.hyper.Steps = max(f.lrSteps, 1)
		}
		s.out = f.resume
		if f.out != "" && !sameFolder(f.out, f.resume) {
			if holdsRun(f.out) {
				return nil, fmt.Errorf("--out %s holds another run, which saving this one would replace; resume into %s itself or a new folder", f.out, f.resume)
			}
			s.out = f.out
		}
	} else {
		cfg, err := gpt.ConfigNamed(f.model)
		if err != nil {
			return nil, err
		}
		d := modelDefaults[cfg.Name]
		s.cfg, s.batch, s.steps = cfg, d.batch, d.steps
		if f.set["batch"] {
			s.batch = f.batch
		}
		if f.set["steps"] {
			s.steps = f.steps
		}
		lrSteps := max(s.steps, 1)
		if f.set["lr-steps"] {
			lrSteps = max(f.lrSteps, 1)
		}
		s.hyper = gpt.DefaultHyper(lrSteps)
		s.hyper.LR, s.hyper.MinLR = d.lr, d.lr/10
		if f.set["lr"] {
			s.hyper.LR, s.hyper.MinLR = f.lr, f.lr/10
		}
		if f.warmup >= 0 {
			s.hyper.Warmup = f.warmup
		}
		s.out = f.out
		if s.out == "" {
			s.out = filepath.Join("runs", cfg.Name+"-"+time.Now().Format("20060102-150405"))
		}
		if holdsRun(s.out) {
			return nil, fmt.Errorf("--out %s holds a run already; continue it with --resume %s, or name another --out", s.out, s.out)
		}
	}
	if lo, hi := gpt.AdamWRange("lr"); f.set["lr"] && !(f.lr >= lo && f.lr <= hi) {
		return nil, fmt.Errorf("--lr %g: want a learning rate in [%g, %g], AdamW's range", f.lr, lo, hi)
	}
	if err := s.hyper.Validate(); err != nil {
		return nil, err
	}
	s.evalWindows = modelDefaults[s.cfg.Name].evalWindows
	if s.evalWindows == 0 {
		s.evalWindows = 64
	}
	if f.evalWindows > 0 {
		s.evalWindows = f.evalWindows
	}
	return s, nil
}

// stopBetweenSteps stops the run before its next step when this process
// was interrupted or, in a multi-process run, when any rank's was (every
// rank decides alike: gpt.Parallel.Stopping): it saves (rank 0 writes),
// waits for every rank to be past its save, and says why. stopped is
// false when the run goes on; code is the exit status otherwise.
func stopBetweenSteps(ctx, work context.Context, tr *gpt.Trainer, s *runSetup, save func() error, progress *progress,
	stderr io.Writer) (stopped bool, code int) {
	here := ctx.Err() != nil
	var asked []int
	var failed error // another rank failed while agreeing
	if tr.Parallel != nil {
		asked, failed = tr.Parallel.Stopping(work, here)
		if failed != nil && !here {
			progress.clear()
			fmt.Fprintf(stderr, "vkern train: before step %d: %v\n", tr.State.Step, failed)
			return true, exitFailure
		}
		if failed == nil && len(asked) == 0 {
			return false, 0
		}
	} else if !here {
		return false, 0
	}
	// Interrupted here (then this rank's state between steps is whole and
	// is kept even when another rank failed meanwhile), or another rank
	// was: save (rank 0 writes).
	progress.clear()
	why := "interrupted"
	if !here {
		why = fmt.Sprintf("rank %s of %d was interrupted", joinInts(asked), tr.Ranks())
		if len(asked) > 1 {
			why = fmt.Sprintf("ranks %s of %d were interrupted", joinInts(asked), tr.Ranks())
		}
	}
	if err := save(); err != nil {
		fmt.Fprintf(stderr, "vkern train: %s at step %d, and saving failed: %v\n", why, tr.State.Step, err)
		return true, exitFailure
	}
	if failed != nil {
		fmt.Fprintf(stderr, "vkern train: %s at step %d; saved to %s; and another rank failed: %v\n", why, tr.State.Step, s.out, failed)
		return true, exitFailure
	}
	if tr.Parallel != nil {
		// No rank leaves before rank 0 has saved.
		if err := tr.Parallel.Finish(work); err != nil {
			fmt.Fprintf(stderr, "vkern train: %s at step %d: %v\n", why, tr.State.Step, err)
			return true, exitFailure
		}
	}
	fmt.Fprintf(stderr, "vkern train: %s at step %d; saved to %s; continue with --resume %s\n", why, tr.State.Step, s.out, s.out)
	return true, exitInterrupted
}

// joinInts writes ranks as "1", "1 and 3" or "0, 1 and 3".
func joinInts(ranks []int) string {
	parts := make([]string, len(ranks))
	for i, r := range ranks {
		parts[i] = strconv.Itoa(r)
	}
	if len(parts) < 2 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

// trainLoop runs the steps, evaluations and saves, and finishes the run.
func trainLoop(ctx context.Context, f *trainFlags, s *runSetup, tr *gpt.Trainer, rec *trainRecord, run func() gpt.Run,
	progress *progress, stdout, stderr io.Writer) int {
	// Device calls run under a context the interrupt does not cancel: a
	// step in flight finishes, and the run stops between steps, saved.
	work := context.WithoutCancel(ctx)
	rank0 := tr.Parallel == nil || tr.Parallel.Rank0()
	save := func() error {
		progress.status("saving the checkpoint to %s", s.out)
		defer progress.clear()
		r := run()
		if err := tr.Save(work, s.out, r); err != nil {
			return err
		}
		// The curve beside the checkpoint at every save, so that the
		// folder's loss.svg is the saved run's, interrupted or not.
		if len(r.Curve) == 0 || !rank0 {
			return nil
		}
		return writeAtomic(filepath.Join(s.out, "loss.svg"), func(w io.Writer) error { return writeLossSVG(w, s.cfg.Name, r.Curve) })
	}
	evalEvery := f.evalEvery
	if evalEvery == 0 {
		evalEvery = max(1, (s.steps-tr.State.Step)/10)
	}
	lineEvery := max(1, (s.steps-tr.State.Step)/20)
	var batches *os.File
	if f.batchesPath != "" {
		var err error
		if batches, err = os.Create(f.batchesPath); err != nil {
			fmt.Fprintf(stderr, "vkern train: %v\n", err)
			return exitFailure
		}
		defer batches.Close()
	}
	first := tr.State.Step
	started := time.Now()
	tokensPerStep := float64(s.batch * tr.MicroBatches() * s.cfg.T)
	var lastVal float64 = math.NaN()
	evalStopped := false // the last evaluation was cut short by an interrupt
	for tr.State.Step < s.steps {
		if stopped, code := stopBetweenSteps(ctx, work, tr, s, save, progress, stderr); stopped {
			return code
		}
		step := tr.State.Step
		if batches != nil {
			if err := writeWindows(batches, tr, step); err != nil {
				fmt.Fprintf(stderr, "vkern train: %v\n", err)
				return exitFailure
			}
		}
		var res gpt.StepResult
		var err error
		if f.verifyEvery > 0 && step%f.verifyEvery == 0 {
			var rep *gpt.LiveReport
			res, rep, err = tr.StepVerified(work)
			if rep != nil {
				rec.Verified = append(rec.Verified, rep.Summary())
				fmt.Fprintf(stdout, "  step %d verified: %s\n", step, rep.Summary())
			}
		} else {
			res, err = tr.Step(work)
		}
		if err != nil {
			progress.clear()
			fmt.Fprintf(stderr, "vkern train: %v\n", err)
			if tr.Parallel == nil && work.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				// The call outlived --call-timeout on a device that was
				// working: a slow one, or a hung one.
				fmt.Fprintf(stderr, "vkern train: a call of step %d ran past --call-timeout (%v); where the device is slow rather than hung (a cpu at a large model's size), give it more, e.g. --call-timeout 30m\n",
					step, callTimeoutOrDefault(f.callTimeout))
			}
			return exitFailure
		}
		sr := stepRecord{Step: step, Loss: res.Loss, LossScale: res.LossScale, Skipped: res.Skipped, GradNorm: res.GradNorm,
			LR: res.LR, Ms: ms(res.Time), WriteMs: ms(res.Phases.Write), GradientsMs: ms(res.Phases.Gradients),
			ReadMs: ms(res.Phases.Read), UpdateMs: ms(res.Phases.Update)}
		done := tr.State.Step
		if done%evalEvery == 0 || done == s.steps {
			progress.status("step %d: evaluating", done)
			// An interrupt stops the evaluation between its batches (the
			// run then saves and stops, as between steps).
			v, err := tr.ValLoss(ctx, s.evalWindows)
			evalStopped = err != nil && ctx.Err() != nil
			if err != nil && ctx.Err() == nil {
				progress.clear()
				fmt.Fprintf(stderr, "vkern train: evaluating after step %d: %v\n", step, err)
				return exitFailure
			}
			if err == nil {
				lastVal = v
				sr.ValLoss = &v
			}
		}
		rec.Steps = append(rec.Steps, sr)
		elapsed := time.Since(started)
		perStep := elapsed / time.Duration(done-first)
		eta := perStep * time.Duration(s.steps-done)
		line := fmt.Sprintf("step %d/%d  loss %.4f  val %s  %.0f tok/s  %.1f ms/step  scale %g  ETA %s",
			done, s.steps, res.Loss, fmtLoss(lastVal), tokensPerStep/perStep.Seconds(), float64(perStep.Microseconds())/1000,
			res.LossScale, eta.Round(time.Second))
		if res.Skipped {
			line += "  (skipped: a gradient was not finite)"
		}
		if progress.terminal {
			progress.status("%s", line)
		} else if done%lineEvery == 0 || sr.ValLoss != nil || done == s.steps {
			fmt.Fprintln(stdout, line)
		}
		if f.saveEvery > 0 && done%f.saveEvery == 0 && done < s.steps {
			if err := save(); err != nil {
				fmt.Fprintf(stderr, "vkern train: saving after step %d: %v\n", step, err)
				return exitFailure
			}
		}
	}
	progress.clear()
	if tr.State.Step > first {
		elapsed := time.Since(started)
		n := tr.State.Step - first
		rec.TokensPerSecond = tokensPerStep * float64(n) / elapsed.Seconds()
		rec.MsPerStep = ms(elapsed) / float64(n)
		fmt.Fprintf(stdout, "vkern train: %d steps in %s: %.0f tokens/s, %.1f ms/step; final loss %.4f, validation loss %s\n",
			n, elapsed.Round(time.Millisecond), rec.TokensPerSecond, rec.MsPerStep, rec.Steps[len(rec.Steps)-1].Loss, fmtLoss(lastVal))
		// The run's figure counts evaluations, saves and the first step (the
		// kernels' loading, NCCL's connections); the median step after the
		// first is the training rate.
		if len(rec.Steps) > 1 {
			after := make([]float64, 0, len(rec.Steps)-1)
			for _, r := range rec.Steps[1:] {
				after = append(after, r.Ms)
			}
			slices.Sort(after)
			rec.MedianStepMs = after[len(after)/2]
			if rec.MedianStepMs > 0 {
				rec.MedianTokensPerSecond = tokensPerStep / (rec.MedianStepMs / 1000)
			}
			fmt.Fprintf(stdout, "  steps after the first: median %.2f ms, %.0f tokens/s\n", rec.MedianStepMs, rec.MedianTokensPerSecond)
		}
	}
	if f.resume != "" && tr.State.Step == first && sameFolder(s.out, f.resume) && !f.set["lr-steps"] {
		// Nothing trained and no setting changed (--lr-steps would be): the
		// checkpoint stays as it was (saving would only record this
		// call's --data as the run's).
		fmt.Fprintf(stdout, "  the run in %s is at step %d, its total; nothing to train (give --steps above %d to go on)\n",
			s.out, first, first)
	} else {
		if err := save(); err != nil {
			fmt.Fprintf(stderr, "vkern train: saving the checkpoint: %v\n", err)
			return exitFailure
		}
		fmt.Fprintf(stdout, "  checkpoint saved to %s (transformers.GPT2LMHeadModel.from_pretrained loads it)\n", s.out)
	}
	if tr.Parallel != nil {
		// No rank leaves before every rank has finished its last step (one
		// that left would end the others' watch mid-update) and rank 0 has
		// saved the run (a launcher may end the others when one exits).
		if err := tr.Parallel.Finish(work); err != nil {
			fmt.Fprintf(stderr, "vkern train: after the last step: %v\n", err)
			return exitFailure
		}
	}
	interrupted := func(during string) int {
		fmt.Fprintf(stderr, "vkern train: interrupted %s; the run is saved in %s\n", during, s.out)
		return exitInterrupted
	}
	if len(rec.Steps) > 0 && rank0 {
		fmt.Fprintf(stdout, "  loss curve: %s\n", filepath.Join(s.out, "loss.svg")) // drawn by the last save
	}
	if ctx.Err() != nil {
		if evalStopped {
			return interrupted("during the last evaluation")
		}
		return interrupted("after the last step")
	}
	// --steps 0 writes the initial checkpoint and stops: an untrained
	// model's sample is noise, and gpt2's takes minutes on the cpu backend.
	if f.sample > 0 && s.steps > 0 {
		progress.status("sampling %d tokens", f.sample)
		text, err := sampleText(ctx, tr.Model, tr.Corpus, nil, f.sample, f.temperature, s.seed)
		progress.clear()
		if ctx.Err() != nil {
			return interrupted("while sampling")
		}
		if err != nil {
			fmt.Fprintf(stderr, "vkern train: sampling: %v\n", err)
			return exitFailure
		}
		fmt.Fprintf(stdout, "  sample (temperature %g):\n%s\n", f.temperature, text)
	}
	return exitOK
}

// writeWindows appends step's K·B windows of T + 1 tokens as uint16.
func writeWindows(w io.Writer, tr *gpt.Trainer, step int64) error {
	inputs, targets := tr.Batch(step)
	T := tr.Model.Config.T
	var buf []byte
	for k := range inputs {
		for r := 0; r < len(inputs[k])/T; r++ {
			for j := 0; j < T; j++ {
				buf = binary.LittleEndian.AppendUint16(buf, uint16(inputs[k][r*T+j]))
			}
			buf = binary.LittleEndian.AppendUint16(buf, uint16(targets[k][r*T+T-1]))
		}
	}
	_, err := w.Write(buf)
	return err
}

func fmtLoss(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.4f", v)
}

// sampleText generates n tokens after prompt (nil: the first 32 tokens of
// the validation part) and writes them as text: bytes when the vocabulary
// is bytes, else token ids.
func sampleText(ctx context.Context, m *gpt.Model, c *data.Corpus, prompt []int32, n int, temperature float64, seed uint64) (string, error) {
	if prompt == nil {
		for _, t := range c.Val[:min(32, len(c.Val))] {
			prompt = append(prompt, int32(t))
		}
	}
	out, err := m.Sample(ctx, prompt, n, temperature, seed)
	if err != nil {
		return "", err
	}
	return tokensText(append(prompt, out...), c == nil || c.Vocab <= 256), nil
}

func tokensText(ts []int32, bytes bool) string {
	var b strings.Builder
	for i, t := range ts {
		if bytes && t < 256 {
			b.WriteByte(byte(t))
			continue
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprint(&b, t)
	}
	return b.String()
}

// trainRecord is --json's document.
type trainRecord struct {
	Command         string     `json:"command"`
	Model           string     `json:"model"`
	Config          gpt.Config `json:"config"`
	Batch           int        `json:"batch"`
	Accum           int        `json:"accum"` // micro-batches per step, all ranks'
	Ranks           int        `json:"ranks"`
	Seed            uint64     `json:"seed"`
	Hyper           gpt.Hyper  `json:"hyper"`
	Backend         string     `json:"backend"`
	Device          string     `json:"device"`
	Data            string     `json:"data"`
	StartStep       int64      `json:"start_step"`
	TokensPerSecond float64    `json:"tokens_per_second,omitempty"`
	MsPerStep       float64    `json:"ms_per_step,omitempty"`
	// The median step after the first, and its tokens/s.
	MedianStepMs          float64      `json:"median_step_ms,omitempty"`
	MedianTokensPerSecond float64      `json:"median_tokens_per_second,omitempty"`
	Verified              []string     `json:"verified,omitempty"`
	Steps                 []stepRecord `json:"steps"`
}

type stepRecord struct {
	Step      int64    `json:"step"`
	Loss      float64  `json:"loss"`
	ValLoss   *float64 `json:"val_loss"`
	LossScale float64  `json:"loss_scale"`
	Skipped   bool     `json:"skipped"`
	GradNorm  float64  `json:"grad_norm"`
	LR        float64  `json:"lr"`
	Ms        float64  `json:"ms"`
	// The step's phases (gpt.Phases), milliseconds.
	WriteMs     float64 `json:"write_ms"`
	GradientsMs float64 `json:"gradients_ms"`
	ReadMs      float64 `json:"read_ms"`
	UpdateMs    float64 `json:"update_ms"`
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// MarshalJSON writes a non-finite loss or norm (a skipped step's norm is
// +Inf or NaN) as null, which JSON can carry.
func (r stepRecord) MarshalJSON() ([]byte, error) {
	type plain stepRecord
	var val *float64
	if r.ValLoss != nil {
		val = finite(*r.ValLoss)
	}
	return json.Marshal(struct {
		plain
		Loss     *float64 `json:"loss"`
		ValLoss  *float64 `json:"val_loss"`
		GradNorm *float64 `json:"grad_norm"`
	}{plain(r), finite(r.Loss), val, finite(r.GradNorm)})
}

func (r *trainRecord) write(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(r)
}

// callTimeoutOrDefault is the call timeout a run's device has: --call-timeout,
// or vkern's default where it is not given.
func callTimeoutOrDefault(d time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return vkern.DefaultCallTimeout
}
