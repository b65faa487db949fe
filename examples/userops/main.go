// Command userops is vkern with three ops of its own: rmsnorm,
// rmsnorm_grad and swiglu. Every vkern command works on them beside
// vkern's ops:
//
//	go run . verify --backend cpu --op rmsnorm,rmsnorm_grad,swiglu --quick
//	go run . bench --suite ops --op swiglu --shape 64x4096
//	go run . doctor
//
// README.md builds it step by step.
package main

import (
	"os"

	"github.com/vkern/vkern/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], Ops()...)) }
