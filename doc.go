// Package vkern builds GPU and CPU kernels with the machine's own compiler,
// runs them in a persistent kernel-server process, and checks every result
// against a CPU oracle under a per-element error bound.
package vkern
