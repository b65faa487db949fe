// Package userop lets a program outside vkern bring its own op — a fused
// SwiGLU, an RMSNorm, an attention variant — and get what vkern's own ops
// get: the content-addressed build, the kernel server, verify's four kinds
// of check under a sound bound, planted-defect tests, reports and
// benchmarks, without forking vkern.
//
// An op is three things, each the same as a built-in op's:
//
//   - its contract, an *op.Op: dimensions, parameters, operands (element
//     type, shape over the dimensions, role, the domain of an i32 input),
//     shapes to check and time it at, and what checking it does not show.
//     Leave ID 0: Declare gives it a wire id from the range above the
//     built-in ops', derived from its name (op.UserID).
//   - its float64 reference, an oracle.Spec: Compute returns each output's
//     values and a per-element Bound on the error of a correct binary32
//     kernel (derive it in Compute's doc comment, as package oracle does
//     for the built-in ops), and Generate, when the inputs have a domain,
//     draws them.
//   - its kernels: C++ for the cpu backend and CUDA for the cuda backend,
//     which the hip backend builds too.
//
// A kernel file defines the op's entry point in namespace vkern, with the
// return type at the start of the line:
//
//	Result run_<name>(const Call& c, uint64_t* problem)                                 // cpu
//	cudaError_t run_<name>(const Call& c, unsigned long long* problem, cudaStream_t s)  // cuda
//
// It reads its dimensions and parameters as c.dim(op_<name>::param::R) and
// c.real(op_<name>::param::eps), and its buffers as
// c.ptr<const uint16_t>(op_<name>::buf::x) (f16 as bits on the cpu, __half
// on a GPU): names generated from the contract. Each kernel file is a
// translation unit of the server of its own, compiled after the server's
// headers for kernels, so it can use their helpers without including
// them: on the cpu, f16_to_f32 and f32_to_f16 (core/f16.h, round to
// nearest even) and
// cpu_pool().parallel_for(tasks, [&](size_t task, unsigned worker) {…})
// (cpu/device.h); on a GPU, cuda/compat.h's names, which HIP maps. Helpers
// of the built-in kernel files are not among them: a file that wants one
// includes its header (cpu/convert.h, cuda/rows.cuh), and a helper shared
// by two declared files goes in a header of the op's own. A CUDA entry
// enqueues its kernels on s and returns cudaGetLastError() without waiting.
//
// Declare checks all three and adds them to the registries the build, the
// server, verify and bench read, beside the built-in ops: nothing else in
// vkern names an op, so a declared op is checked exactly as a built-in one
// is. The kernel files become part of every server build of their backend
// and of its cache key; a compiler error names the file by the path it was
// declared with, and its line. A backend an op brings no kernel for
// answers not_supported for it, saying so.
//
// Package cli runs vkern's commands (verify, bench, doctor, …) with
// declared ops added: a program whose main is cli.Main(os.Args[1:], ops...)
// is vkern with the ops. Package kerneltest's conformance check (Op) and
// planted defects (Mutation, with File the declared path, and Planted)
// work on declared ops as on built-in ones. examples/userops in vkern's repository is a
// worked example: rmsnorm, rmsnorm_grad and swiglu, step by step.
//
// Declare is for a program's start: it registers process-wide and cannot be
// undone. It does not compile anything (the first build does) and does not
// judge a reference's mathematics: it tries it once (oracle.CheckSpec), so
// that a reference that cannot be compared with, or bounds nothing, is an
// error here rather than a verdict later.
package userop

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"

	"github.com/vkern/vkern/kernels"
	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
)

// Op is an op a program declares: its contract, reference and kernels.
type Op struct {
	// Contract is the op's contract (package op). Leave ID 0 for a wire id
	// derived from the name; Declare sets it.
	Contract *op.Op
	// Reference is its float64 reference and input generator (package
	// oracle).
	Reference oracle.Spec
	// CPU and CUDA are its kernels for the cpu and the cuda (and hip)
	// backends; an op needs at least one. A backend it has none for
	// reports not_supported for it.
	CPU, CUDA Kernel
}

// Kernel is an op's kernel source for one backend.
type Kernel struct {
	// FS holds the files: an embed.FS of the program's own package, or
	// os.DirFS.
	FS fs.FS
	// Files are paths in FS, or fs.Glob patterns: the files to compile
	// (.cc for the cpu, .cu for cuda), one of which defines run_<name>,
	// and any headers they include by relative paths. Errors and the
	// compiler name each file by its path here. Two ops may list the same
	// file (a forward and its backward in one file).
	Files []string
}

func (k Kernel) empty() bool { return k.FS == nil && len(k.Files) == 0 }

var (
	mu sync.Mutex
	// done holds the contracts declared so far: declaring one again is a
	// no-op, so that a test and the command it runs may both declare.
	done = map[*op.Op]bool{}
)

// Declare checks each op — its contract (op.Check), its kernel files
// (kernels.CheckDeclared: the entry point defined, paths that stay in the
// source folder) and its reference (oracle.CheckSpec) — and, when all are
// sound, registers them all. The error names the op, what is wrong and
// what to do; on an error nothing is registered. An op whose Contract was
// declared before is skipped.
func Declare(ops ...Op) error {
	mu.Lock()
	defer mu.Unlock()
	type checked struct {
		op      Op
		sources []kernels.Declared
	}
	var todo []checked
	names := map[string]string{}
	ids := map[op.ID]string{}
	for i, o := range ops {
		c := o.Contract
		if c == nil {
			return fmt.Errorf("userop: op %d of %d has no Contract; give it its *op.Op", i+1, len(ops))
		}
		if done[c] {
			continue
		}
		if err := op.Check(c); err != nil {
			return fmt.Errorf("userop: %w", err)
		}
		id := c.ID
		if id == 0 {
			id = op.UserID(c.Name)
		}
		if other, dup := names[c.Name]; dup {
			return fmt.Errorf("userop: %s is declared twice in one call (%s); give one of them another name", c.Name, other)
		}
		if other, dup := ids[id]; dup {
			return fmt.Errorf("userop: %s and %s collide at wire id %d; rename one of them or give one an explicit ID from %d up", other, c.Name, id, op.FirstUserID)
		}
		names[c.Name], ids[id] = c.Name, c.Name
		var sources []kernels.Declared
		for _, k := range []struct {
			backend string
			kernel  Kernel
		}{{"cpu", o.CPU}, {"cuda", o.CUDA}} {
			if k.kernel.empty() {
				continue
			}
			files, err := read(c.Name, k.backend, k.kernel)
			if err != nil {
				return err
			}
			d := kernels.Declared{Op: c.Name, Backend: k.backend, Files: files}
			if err := kernels.CheckDeclared(d); err != nil {
				return fmt.Errorf("userop: %w", err)
			}
			for _, prev := range todo {
				for _, p := range prev.sources {
					if err := sameFiles(p, d); err != nil {
						return err
					}
				}
			}
			sources = append(sources, d)
		}
		if len(sources) == 0 {
			return fmt.Errorf("userop: %s has no kernels; give it CPU or CUDA kernel files (or both)", c.Name)
		}
		if err := oracle.CheckSpec(context.Background(), c, o.Reference); err != nil {
			return fmt.Errorf("userop: %w", err)
		}
		todo = append(todo, checked{o, sources})
	}
	for _, t := range todo {
		if err := op.Register(t.op.Contract); err != nil {
			return fmt.Errorf("userop: %w", err)
		}
		if err := oracle.Register(t.op.Contract, t.op.Reference); err != nil {
			return fmt.Errorf("userop: %w", err)
		}
		for _, d := range t.sources {
			if err := kernels.Declare(d); err != nil {
				return fmt.Errorf("userop: %w", err)
			}
		}
		done[t.op.Contract] = true
	}
	return nil
}

// read reads a kernel's files from its FS, expanding patterns.
func read(name, backend string, k Kernel) (map[string][]byte, error) {
	if k.FS == nil {
		return nil, fmt.Errorf("userop: %s's %s kernel lists files but has no FS to read them from; set FS (an embed.FS, or os.DirFS)", name, backend)
	}
	if len(k.Files) == 0 {
		return nil, fmt.Errorf("userop: %s's %s kernel has an FS but no Files; list the files to compile", name, backend)
	}
	files := map[string][]byte{}
	for _, pattern := range k.Files {
		paths := []string{pattern}
		if strings.ContainsAny(pattern, "*?[") {
			var err error
			if paths, err = fs.Glob(k.FS, pattern); err != nil {
				return nil, fmt.Errorf("userop: %s's %s kernel: pattern %q: %w", name, backend, pattern, err)
			}
			if len(paths) == 0 {
				return nil, fmt.Errorf("userop: %s's %s kernel: pattern %q matches no file", name, backend, pattern)
			}
		}
		for _, p := range paths {
			data, err := fs.ReadFile(k.FS, p)
			if err != nil {
				var pe *fs.PathError
				if errors.As(err, &pe) && errors.Is(err, fs.ErrNotExist) {
					return nil, fmt.Errorf("userop: %s's %s kernel file %s does not exist in its FS (the files there: %s)", name, backend, p, listing(k.FS, path.Dir(p)))
				}
				return nil, fmt.Errorf("userop: %s's %s kernel file %s: %w", name, backend, p, err)
			}
			files[p] = data
		}
	}
	return files, nil
}

// listing names the files in dir of fsys, for an error about a missing
// one.
func listing(fsys fs.FS, dir string) string {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil || len(entries) == 0 {
		return "none in " + dir
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, path.Join(dir, e.Name()))
	}
	return strings.Join(names, ", ")
}

// sameFiles refuses two ops of one call that bring one path with different
// contents (kernels.CheckDeclared does so against the ops declared before).
func sameFiles(a, b kernels.Declared) error {
	if a.Backend != b.Backend {
		return nil
	}
	for p, data := range b.Files {
		if other, ok := a.Files[p]; ok && string(other) != string(data) {
			return fmt.Errorf("userop: %s and %s both bring a %s kernel file %s, with different contents; rename one of them", a.Op, b.Op, b.Backend, p)
		}
	}
	return nil
}
