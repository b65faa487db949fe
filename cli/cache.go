package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/vkern/vkern/cache"
)

const cacheHelp = `Usage: vkern cache path | ls | clean

  path   print the cache folder ($VKERN_CACHE, else the user cache folder)
  ls     list the built kernel servers: key, backend, compiler, built, size
  clean  remove every entry
`

func runCache(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cache", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err == flag.ErrHelp {
		fmt.Fprint(stdout, cacheHelp)
		return exitOK
	} else if err != nil || fs.NArg() != 1 {
		fmt.Fprintf(stderr, "vkern cache: want one of path, ls, clean; run `vkern cache --help`\n")
		return exitUsage
	}
	dir, err := cache.DefaultDir()
	if err != nil {
		fmt.Fprintf(stderr, "vkern cache: %v\n", err)
		return exitFailure
	}
	switch fs.Arg(0) {
	case "path":
		fmt.Fprintln(stdout, dir)
		return exitOK
	case "ls", "clean":
	default:
		fmt.Fprintf(stderr, "vkern cache: unknown subcommand %q: want path, ls or clean\n", fs.Arg(0))
		return exitUsage
	}
	store, err := cache.Open(dir)
	if err != nil {
		fmt.Fprintf(stderr, "vkern cache: %v\n", err)
		return exitFailure
	}
	if fs.Arg(0) == "clean" {
		n, err := store.Clean()
		if err != nil {
			fmt.Fprintf(stderr, "vkern cache: %v\n", err)
			return exitFailure
		}
		fmt.Fprintf(stdout, "removed %d entries from %s\n", n, dir)
		return exitOK
	}
	entries, err := store.List()
	if err != nil {
		fmt.Fprintf(stderr, "vkern cache: %v\n", err)
		return exitFailure
	}
	if len(entries) == 0 {
		fmt.Fprintf(stdout, "%s holds no kernel servers yet; `vkern verify` builds one\n", dir)
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tBACKEND\tCOMPILER\tBUILT\tSECONDS")
	for _, m := range entries {
		fmt.Fprintf(tw, "%.16s\t%s\t%s\t%s\t%.1f\n", m.Key, m.Backend, m.Compiler.Version, m.BuiltAt.Format("2006-01-02 15:04"), m.BuildSeconds)
	}
	tw.Flush()
	return exitOK
}
