// Command vkern builds, serves and verifies kernels. See `vkern help`.
//
// The commands live in package cli, which programs that declare ops of
// their own (package userop) run too.
package main

import (
	"os"

	"github.com/vkern/vkern/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
