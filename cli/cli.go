// Package cli is vkern's command line as a library: verify, build, bench,
// train, eval, sample, doctor, cache and version, callable from any
// program's main. cmd/vkern is Main and nothing else; a program that
// declares its own ops (package userop) passes them to Main and gets every
// command for its ops beside vkern's:
//
//	func main() { os.Exit(cli.Main(os.Args[1:], myops.RMSNorm, myops.SwiGLU)) }
//
// The flag parsing is the standard library's flag package, one FlagSet per
// command: the commands are few and flat, and a CLI framework would add
// dependencies without adding behaviour. The progress display is one status
// line rewritten in place, for the same reason.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"unicode"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/userop"
)

// vkernBuild is vkern.Build with the default options but the backend.
func vkernBuild(ctx context.Context, backend string) (vkern.Info, error) {
	return vkern.Build(ctx, vkern.Options{Backend: backend})
}

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1 // a case was incorrect or failed, or the tool could not do its job
	exitUsage   = 2 // the command line was wrong
	// exitInterrupted: Ctrl-C or SIGTERM stopped the command (128 + SIGINT,
	// as a shell reports it).
	exitInterrupted = 130
)

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"verify", "build the kernels, run every case, check it against the oracle, report", runVerify},
		{"build", "build the kernel server into the cache without starting it", runBuild},
		{"bench", "measure the server and the kernels, with ratios to anchors measured in the same run", runBench},
		{"train", "train a GPT-2-family model on vkern's kernels, every step checkable", runTrain},
		{"eval", "a checkpoint's mean loss over windows of the validation data", runEval},
		{"sample", "generate text from a checkpoint", runSample},
		{"doctor", "say which compilers, devices and cache work here, and how to fix what does not", runDoctor},
		{"cache", "path | ls | clean: the content-addressed kernel cache", runCache},
		{"version", "print the version", runVersion},
	}
}

// Main runs the command line args (os.Args[1:]) with ops declared beside
// vkern's own, on the standard streams, until it is done or interrupted
// (SIGINT, SIGTERM, SIGHUP), and returns the exit status: 0 success, 1 a case
// incorrect, failed or not supported, or a tool that could not do its job
// (an op that cannot be declared among them), 2 a usage error.
func Main(args []string, ops ...userop.Op) int {
	// SIGHUP too: a closed terminal or a dropped ssh session stops a
	// training run as Ctrl-C does (saved), instead of killing it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	return Run(ctx, args, os.Stdout, os.Stderr, ops...)
}

// Run is Main with its context and streams given, for tests and for
// programs that run a command among their own work.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, ops ...userop.Op) int {
	if err := userop.Declare(ops...); err != nil {
		fmt.Fprintf(stderr, "vkern: %v\n", err)
		return exitFailure
	}
	return run(ctx, args, stdout, stderr)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			return run(ctx, []string{args[1], "--help"}, stdout, stderr)
		}
		usage(stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name == name {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "vkern: unknown command %q; run `vkern help` for the list\n", name)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "vkern builds GPU and CPU kernels with this machine's compiler, serves them from a")
	fmt.Fprintln(w, "persistent kernel server, and checks every result against a float64 oracle.")
	fmt.Fprintln(w, "\nUsage: vkern COMMAND [flags]   (vkern COMMAND --help for its flags)")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
}

// listFlag collects a repeatable flag; values may also be comma-separated.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part == "" {
			return fmt.Errorf("empty value in %q", v)
		}
		*l = append(*l, part)
	}
	return nil
}

// shapeListFlag is a listFlag of shapes, whose parameters are themselves
// comma-separated ("64x768:residual=1,dx_sum=1"): a comma-separated part
// of the form name=value, with no dimensions of its own, continues the
// shape before it in the same value when that shape has settings, so the
// form the help and the README show works as one --shape value and in a
// list of them.
type shapeListFlag []string

func (l *shapeListFlag) String() string { return strings.Join(*l, ",") }

func (l *shapeListFlag) Set(v string) error {
	var parts listFlag
	if err := parts.Set(v); err != nil {
		return err
	}
	first := len(*l) // settings continue shapes of this value only
	for _, part := range parts {
		name, _, isSetting := strings.Cut(part, "=")
		if last := len(*l) - 1; isSetting && isSettingName(name) && last >= first && strings.Contains((*l)[last], ":") {
			(*l)[last] += "," + part
			continue
		}
		*l = append(*l, part)
	}
	return nil
}

// isSettingName says whether s names a shape's setting (dx_sum, residual):
// a letter or underscore, then letters, digits and underscores. A shape's
// dimensions start with a digit.
func isSettingName(s string) bool {
	for i, r := range s {
		if r != '_' && !unicode.IsLetter(r) && (i == 0 || !unicode.IsDigit(r)) {
			return false
		}
	}
	return s != ""
}
