// Package vkern builds kernels with the machine's own compiler, caches the
// binary by content, runs it as a persistent kernel-server process, and gives
// callers a small device API: Open a device, Alloc buffers, Write inputs,
// Run an op, Read the result, Close.
//
// The layers it ties together each live in their own package, in the order
// data flows: toolchain (find the compiler) → cache (build once per content
// key, recheck the binary's SHA-256 before every start) → kserver (the child
// process and its binary protocol) → verify (check results against package
// oracle) → report (evidence). Package op holds each op's contract.
//
// A Device owns one kernel server. Buffers live in the server (device memory
// on GPUs); the host holds handles. If the server dies, the call that saw it
// returns an error carrying the server's stderr tail, buffers of the dead
// server report ErrStaleBuffer, and the next call starts a fresh server.
//
// vkern does not schedule work across devices, keep autograd state, or
// retry a failed call on its own.
package vkern
