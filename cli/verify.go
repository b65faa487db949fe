package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/cache"
	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
	"github.com/vkern/vkern/report"
	"github.com/vkern/vkern/verify"
)

const verifyHelpText = `Usage: vkern verify [flags]

Builds the kernel server for the backend (or finds it in the cache), runs every
case (op × shape × distribution × seed), checks each output element against a
float64 reference under its error bound, and prints a summary.

  --backend B    auto | cpu | cuda | hip (default auto)
  --op NAME      an op below (repeatable or comma-separated; default all)
  --shape S      a shape in an op's syntax below (repeatable; each applies to the
                 chosen ops it fits; default: each op's built-in set); a parameter
                 is set after a colon, several separated by commas
  --dist D       integer | uniform | normal | wide | special | rounding (repeatable;
                 default all; rounding: exact results that f16 must round, ties
                 included, for the ops whose results can be exact)
  --seed N       first seed (default 1); trial t uses seed N+t
  --trials N     seeds per op, shape and distribution (default 1)
  --quick        smaller default shapes
  --json FILE    write the JSON report to FILE
  --md FILE      write the Markdown report to FILE
  --timeout D    give up after D, e.g. 10m (default none)

Ops, their shape syntax and an example shape:

%s
Before anything is built, each case's memory need is compared with what is
free; a case that cannot fit is refused (a GEMM is sampled where that fits).

Exit status: 0 every case passed · 1 a case was incorrect, failed or not supported
             2 usage error, or a case that cannot fit in memory
`

// verifyHelp is the help text, with the table of ops from their contracts.
func verifyHelp() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, o := range op.All() {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", o.Name, o.ShapeSyntax(), o.Example(), o.Math)
	}
	tw.Flush()
	for _, o := range op.All() {
		for _, p := range o.Params {
			fmt.Fprintf(&b, "  %s's %s: %s\n", o.Name, p.Name, p.Meaning)
		}
	}
	return fmt.Sprintf(verifyHelpText, b.String())
}

func runVerify(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var ops, dists listFlag
	var shapes shapeListFlag
	backend := fs.String("backend", "auto", "")
	fs.Var(&ops, "op", "")
	fs.Var(&shapes, "shape", "")
	fs.Var(&dists, "dist", "")
	seed := fs.Uint64("seed", 1, "")
	trials := fs.Int("trials", 1, "")
	quick := fs.Bool("quick", false, "")
	jsonPath := fs.String("json", "", "")
	mdPath := fs.String("md", "", "")
	timeout := fs.Duration("timeout", 0, "")
	if code, done := parseFlags(fs, args, verifyHelp(), stdout, stderr); done {
		return code
	}
	if err := checkBackend(*backend); err != nil {
		fmt.Fprintf(stderr, "vkern verify: %v\n", err)
		return exitUsage
	}
	plan, err := buildPlan(ops, shapes, dists, *seed, *trials, *quick)
	if err != nil {
		fmt.Fprintf(stderr, "vkern verify: %v\n", err)
		return exitUsage
	}
	for _, p := range []string{*jsonPath, *mdPath} {
		if err := checkOutputPath(p); err != nil {
			fmt.Fprintf(stderr, "vkern verify: %v\n", err)
			return exitUsage
		}
	}
	cases, err := plan.Cases()
	if err != nil {
		fmt.Fprintf(stderr, "vkern verify: %v\n", err)
		return exitUsage
	}
	// The host's share first, before anything is built or started: a shape
	// that cannot fit is a typo to fix, not a run to wait for.
	if cases, err = verify.Fit(ctx, cases, nil); err != nil {
		fmt.Fprintf(stderr, "vkern verify: %v\n", err)
		return exitUsage
	}
	if err := checkCache(); err != nil {
		fmt.Fprintf(stderr, "vkern verify: %v\n", err)
		return exitUsage
	}
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}

	started := time.Now()
	progress := newProgress(stderr)
	progress.status("building and starting the %s kernel server", *backend)
	dev, err := vkern.Open(ctx, vkern.Options{Backend: *backend})
	progress.clear()
	if err != nil {
		fmt.Fprintf(stderr, "vkern verify: %v\n", err)
		return exitFailure
	}
	defer dev.Close()
	info, err := dev.Info(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "vkern verify: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "vkern verify: %d cases on %s (%s), %s\n", len(cases), info.Backend, info.Device["device"], info.BackendReason)

	arith, err := dev.Arithmetic(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "vkern verify: %v\n", err)
		return exitFailure
	}
	res, err := verify.Run(ctx, dev, cases, verify.Options{
		Arithmetic: arith,
		DeviceMemory: func(ctx context.Context) (int64, bool, error) {
			m, err := dev.Memory(ctx)
			return m.Free, m.Host, err
		},
		Progress: func(done int, r verify.CaseResult) { progress.step(done, len(cases), r) },
	})
	progress.clear()
	var tooLarge *verify.TooLargeError
	if errors.As(err, &tooLarge) {
		fmt.Fprintf(stderr, "vkern verify: %v\n", err)
		return exitUsage
	}
	if err != nil {
		fmt.Fprintf(stderr, "vkern verify: %v\n", err)
		return exitFailure
	}
	if info2, err := dev.Info(ctx); err == nil {
		info = info2 // notes gathered during the run, e.g. a rebuilt binary
	}
	rep := report.New(res, report.Environment{
		Backend: info.Backend, BackendReason: info.BackendReason, Device: info.Device,
		Compiler: report.Compiler{
			Path: info.Compiler.Path, Version: info.Compiler.Version, Fingerprint: info.Compiler.Fingerprint,
			Flags: info.Compiler.Flags, Target: info.Compiler.Target,
		},
		CacheKey: info.CacheKey, SourceSHA256: info.SourceSHA256, BinarySHA256: info.BinarySHA256,
		Notes: info.Notes, Started: started, Elapsed: time.Since(started),
		Command: "vkern verify " + strings.Join(args, " "),
	})
	printSummary(stdout, rep)
	code := exitOK
	if res.Verdict != verify.Passed {
		code = exitFailure
	}
	if *jsonPath != "" {
		if err := writeAtomic(*jsonPath, rep.WriteJSON); err != nil {
			fmt.Fprintf(stderr, "vkern verify: %v\n", err)
			code = exitFailure
		}
	}
	if *mdPath != "" {
		if err := writeAtomic(*mdPath, rep.WriteMarkdown); err != nil {
			fmt.Fprintf(stderr, "vkern verify: %v\n", err)
			code = exitFailure
		}
	}
	return code
}

// setFlags are the names of the flags the command line gave.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// parseFlags parses args, printing help on --help. done says the command
// should return code now.
func parseFlags(fs *flag.FlagSet, args []string, help string, stdout, stderr io.Writer) (code int, done bool) {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, help)
		return exitOK, true
	case err != nil:
		fmt.Fprintf(stderr, "vkern %s: %v; run `vkern %s --help` for the flags\n", fs.Name(), err, fs.Name())
		return exitUsage, true
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "vkern %s: unexpected argument %q; flags start with --; run `vkern %s --help`\n", fs.Name(), fs.Arg(0), fs.Name())
		return exitUsage, true
	}
	return 0, false
}

func checkBackend(name string) error {
	switch name {
	case "auto", "cpu", "cuda", "hip":
		return nil
	}
	return fmt.Errorf("--backend %q: want auto, cpu, cuda or hip", name)
}

func buildPlan(ops, shapes, dists []string, seed uint64, trials int, quick bool) (verify.Plan, error) {
	plan := verify.Plan{Seed: seed, Trials: trials, Quick: quick}
	if trials < 1 {
		return plan, fmt.Errorf("--trials %d: want at least 1", trials)
	}
	if len(ops) == 0 {
		plan.Ops = op.All()
	}
	for _, name := range ops {
		o, err := op.Lookup(name)
		if err != nil {
			return plan, fmt.Errorf("--op: %w", err)
		}
		plan.Ops = append(plan.Ops, o)
	}
	for _, spec := range shapes {
		if _, err := parseAnyShape(plan.Ops, spec); err != nil {
			return plan, err
		}
		plan.Shapes = append(plan.Shapes, strings.TrimSpace(spec))
	}
	for _, name := range dists {
		d, err := oracle.ParseDist(name)
		if err != nil {
			return plan, fmt.Errorf("--dist: %w", err)
		}
		plan.Dists = append(plan.Dists, d)
	}
	return plan, nil
}

// parseAnyShape parses spec with the first chosen op whose syntax has the
// same number of dimensions, so the error names the right contract.
func parseAnyShape(ops []*op.Op, spec string) (op.Shape, error) {
	dims := len(strings.Split(spec, "x"))
	var last error
	for _, o := range ops {
		s, err := o.ParseShape(spec)
		if err == nil {
			return s, nil
		}
		last = err
		if len(o.Dims) == dims {
			return op.Shape{}, fmt.Errorf("--shape: %w", err)
		}
	}
	return op.Shape{}, fmt.Errorf("--shape %q fits none of the chosen ops: %w", spec, last)
}

// checkCache fails early, as a usage error, when the cache folder cannot be
// used: the fix is a setting ($VKERN_CACHE), not a retry.
func checkCache() error {
	dir, err := cache.DefaultDir()
	if err == nil {
		_, err = cache.Open(dir)
	}
	return err
}

// checkOutputPath fails early when a report could not be written (no such
// folder, not a folder, not writable), so a long run does not end in a lost
// report.
func checkOutputPath(path string) error {
	if path == "" {
		return nil
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("cannot write %s: folder %s: %w; create it first", path, dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("cannot write %s: %s is not a folder", path, dir)
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("cannot write %s: it is a folder; name a file", path)
	}
	// The report is written through a temporary file in the same folder
	// (writeAtomic): try one now.
	probe, err := os.CreateTemp(dir, "."+filepath.Base(path)+".probe-")
	if err != nil {
		return fmt.Errorf("cannot write %s: folder %s is not writable: %w; choose another folder", path, dir, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	return nil
}

// writeAtomic writes a file through a temporary file in the same folder and
// a rename, so a reader never sees half a report.
func writeAtomic(path string, write func(io.Writer) error) error {
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	_, werr := tmp.Write(buf.Bytes())
	merr := tmp.Chmod(0o644) // CreateTemp makes 0600; a report is for reading
	cerr := tmp.Close()
	if err := errors.Join(werr, merr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func printSummary(w io.Writer, r *report.Report) {
	fmt.Fprintf(w, "\n%-14s %-10s %7s %6s %14s\n", "op", "verdict", "passed", "exact", "worst err/bnd")
	for _, o := range op.All() {
		l, ok := r.Ops[o.Name]
		if !ok {
			continue
		}
		worst := "–"
		if l.Passed > 0 {
			worst = fmt.Sprintf("%.3g", float64(l.MaxErrorOverBound))
		}
		fmt.Fprintf(w, "%-14s %-10s %3d/%-3d %6d %14s\n", o.Name, l.Verdict, l.Passed, l.Cases, l.ExactCases, worst)
	}
	for _, c := range r.Cases {
		if c.Verdict != verify.Passed {
			fmt.Fprintf(w, "\n%s %s %s seed %d: %s: %s\n", c.Op, c.Shape, c.Dist, c.Seed, c.Verdict, c.Reason)
		}
	}
	fmt.Fprintf(w, "\n%s: %d passed, %d incorrect, %d failed, %d not supported (%.1f s)\n",
		strings.ToUpper(r.Verdict.String()), r.Summary.Passed, r.Summary.Incorrect, r.Summary.Failed, r.Summary.NotSupported, r.Seconds)
}
