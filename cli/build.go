package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

const buildHelp = `Usage: vkern build [--backend B]

Builds the kernel server for the backend into the cache (or finds it there)
without starting it, and prints what was built. With $VKERN_CUDA_ARCH or
$VKERN_HIP_ARCH set (for example VKERN_HIP_ARCH=gfx1030,gfx90a) it needs no
GPU: that is how a GPU build is compile-checked on a machine without one.

  --backend B    auto | cpu | cuda | hip (default auto)
`

func runBuild(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	backend := fs.String("backend", "auto", "")
	if code, done := parseFlags(fs, args, buildHelp, stdout, stderr); done {
		return code
	}
	if err := checkBackend(*backend); err != nil {
		fmt.Fprintf(stderr, "vkern build: %v\n", err)
		return exitUsage
	}
	if err := checkCache(); err != nil {
		fmt.Fprintf(stderr, "vkern build: %v\n", err)
		return exitUsage
	}
	info, err := vkernBuild(ctx, *backend)
	if err != nil {
		fmt.Fprintf(stderr, "vkern build: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "backend    %s (%s)\n", info.Backend, info.BackendReason)
	fmt.Fprintf(stdout, "compiler   %s (%s)\n", info.Compiler.Path, info.Compiler.Version)
	fmt.Fprintf(stdout, "flags      %s\n", strings.Join(info.Compiler.Flags, " "))
	fmt.Fprintf(stdout, "target     %s\n", info.Compiler.Target)
	fmt.Fprintf(stdout, "cache key  %s\n", info.CacheKey)
	fmt.Fprintf(stdout, "binary     %s (sha256 %s)\n", info.BinaryPath, info.BinarySHA256)
	return exitOK
}
