package cli

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
)

func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintf(stdout, "vkern %s\n", vkernVersion())
	return exitOK
}

// vkernVersion is the module's version and the commit it was built from.
func vkernVersion() string {
	version := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				version += " " + s.Value
			}
		}
	}
	return version
}
