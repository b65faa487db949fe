package main

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
  --backend B    auto | cpu | cuda | hip (default auto)
  --anchors FILE JSON lines from bench/cpu_anchors.py or anchors.py, run just before
  --n N          GEMM size for the core suite (default 1024)
  --json FILE    write the results as JSON
`

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	suite := fs.String("suite", "core", "")
	backend := fs.String("backend", "auto", "")
	anchorsPath := fs.String("anchors", "", "")
	n := fs.Int("n", 1024, "")
	jsonPath := fs.String("json", "", "")
	if code, done := parseFlags(fs, args, benchHelp, stdout, stderr); done {
		return code
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
	if err := checkOutputPath(*jsonPath); err != nil {
		fmt.Fprintf(stderr, "vkern bench: %v\n", err)
		return exitUsage
	}
	var anchors []bench.Anchor
	if *anchorsPath != "" {
		var err error
		if anchors, err = bench.ReadAnchorsFile(*anchorsPath); err != nil {
			fmt.Fprintf(stderr, "vkern bench: %v\n", err)
			return exitUsage
		}
	}
	var results []bench.Result
	var err error
	switch *suite {
	case "core":
		results, err = bench.CoreSuite(ctx, bench.CoreOptions{Open: vkern.Options{Backend: *backend}, Anchors: anchors, GemmN: *n}, stderr)
	case "server":
		var info vkern.Info
		if info, err = vkern.Build(ctx, vkern.Options{Backend: *backend}); err == nil {
			results, err = bench.ServerSuite(ctx, info.BinaryPath, info.SourceSHA256, bench.ServerOptions{Progress: stderr})
		}
	default:
		fmt.Fprintf(stderr, "vkern bench: unknown --suite %q: want core or server\n", *suite)
		return exitUsage
	}
	if err != nil {
		fmt.Fprintf(stderr, "vkern bench: %v\n", err)
		return exitFailure
	}
	printResults(stdout, results)
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

func printResults(w io.Writer, results []bench.Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tN\tMEDIAN\tFIGURE\tANCHOR\tRATIO")
	for _, r := range results {
		figure := ""
		switch {
		case r.GFLOPs > 0:
			figure = fmt.Sprintf("%.1f GFLOP/s", r.GFLOPs)
		case r.GBps > 0:
			figure = fmt.Sprintf("%.2f GB/s", r.GBps)
		}
		ratio := ""
		if r.Anchor != "" {
			ratio = fmt.Sprintf("%.3g", r.Ratio)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", r.Name, r.N, time.Duration(r.MedianNs).Round(10*time.Nanosecond), figure, r.Anchor, ratio)
	}
	tw.Flush()
}
