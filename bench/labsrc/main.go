// Command labsrc writes a backend's kernel sources, the generated op table
// (core/optable.h) included, into a folder, for building the labs
// (bench/attention_lab.cu, bench/gemm_lab.cu) by hand with -I on it. The GPU
// machine has no Go: write them here and carry the folder there.
//
//	go run ./bench/labsrc labsrc          # cuda (default)
//	go run ./bench/labsrc labsrc hip
package main

import (
	"fmt"
	"os"

	"github.com/vkern/vkern/kernels"
)

func main() {
	if len(os.Args) < 2 || len(os.Args) > 3 {
		fmt.Fprintln(os.Stderr, "usage: labsrc DIR [BACKEND]   (BACKEND: cuda, the default, or hip)")
		os.Exit(2)
	}
	backend := "cuda"
	if len(os.Args) == 3 {
		backend = os.Args[2]
	}
	if _, err := kernels.Write(os.Args[1], backend); err != nil {
		fmt.Fprintln(os.Stderr, "labsrc:", err)
		os.Exit(1)
	}
}
