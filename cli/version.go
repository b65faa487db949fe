package cli

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
)

func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	version := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				version += " " + s.Value
			}
		}
	}
	fmt.Fprintf(stdout, "vkern %s\n", version)
	return exitOK
}
