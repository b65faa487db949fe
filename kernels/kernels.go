// Package kernels holds the C++ sources of the kernel server, embedded in the
// vkern binary so that a kernel server can be built on any machine with a
// compiler and nothing else.
//
// The tree is one backend-neutral core and one folder per backend:
//
//	core/   the wire protocol (PROTOCOL.md), the frame loop, the op table,
//	        the backend interface and the f16 conversions
//	cpu/    the C++ backend: host buffers, a thread pool, gemm, softmax and
//	        cross_entropy
//	cuda/   the CUDA backend (and HIP, through cuda/compat.h): device
//	        buffers, a stream and a second one for the entries of a
//	        batch that run beside the others (cuda/beside.h), the same ops
//
// A backend's server is several translation units (Sources' units): the
// main file (the core, the device and the op dispatch); the op kernel files
// of the backend's folder, those that no source file includes by name
// (gemm.cuh includes gemm_sm90.cu), each a unit of its own; and each kernel
// file of an op declared outside vkern. What units share is in headers,
// and kernel_list.inc declares every run_<op> for the dispatch. The
// builder compiles the units at once, one compiler process each, and links
// the objects:
//
//	$CXX -std=c++17 -O3 -march=native -pthread -I<dir> \
//	    -c -o <unit>.o -MD -MF <unit>.o.d <dir>/<unit>    (each of Sources' units)
//	$CXX -std=c++17 -O3 -march=native -pthread -o server <unit>.o …
//
// where <dir> holds the files of Sources at their relative paths. So a build
// takes about as long as its largest unit, where one unity file took the sum
// of them all. The builder adds a unit of its own, vkern_source.cc, that
// defines the sources' SHA-256 (core/server.cc reports it in HELLO), and
// keeps each unit's object and reuses it when nothing the unit reads has
// changed (package cache).
//
// Why each cpu op file is a unit of its own, when every g++ unit first pays
// for the standard headers and the std:: templates it instantiates again:
// the cold build costs a little more (on the 2-core build machine, at -O3,
// 8.8 s against 8.2 s, 15.3 s of CPU against 12.6, when the op files
// shared one generated unit, cpu/ops.cc), and every later build that
// changes one op file compiles that file (0.6-2.9 s alone at -O3) instead
// of all of them (cpu/ops.cc: 9.6 s alone, measured the same hour), since
// the cache keeps each unit's object. The test suites'
// planted defects build over a hundred such servers. A GPU unit's fixed
// cost is larger (hipcc about 2 s), but the GPU machine has a core for
// every unit, and there the units themselves are long (the whole cuda
// server is 97-116 s of nvcc work on the H100 machine).
//
// This package only hands out bytes; it does not compile, cache or run them
// (see the toolchain, cache and kserver packages).
package kernels

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/vkern/vkern/op"
)

//go:embed core/*.h core/*.cc cpu/*.h cpu/*.cc cuda/*.cu cuda/*.cuh cuda/*.h
var sources embed.FS

// backendDirs lists, per backend, the folders whose files make up its
// server, its main file, and what a declared kernel file is compiled after.
var backendDirs = map[string]struct {
	dirs []string
	main string
	ext  string // the kernel files' extension
	// prelude are the headers a declared kernel file's unit includes
	// before the file: what package userop's doc promises such a file
	// may use without including anything (Call and the op names, the f16
	// conversions and cpu_pool on the cpu, compat.h's names on a GPU).
	prelude []string
}{
	"cpu": {dirs: []string{"core", "cpu"}, main: "cpu/main.cc", ext: ".cc",
		prelude: []string{"core/backend.h", "core/f16.h", "cpu/device.h"}},
	// HIP compiles the cuda sources through cuda/compat.h.
	"cuda": {dirs: []string{"core", "cuda"}, main: "cuda/main.cu", ext: ".cu",
		prelude: []string{"core/backend.h", "cuda/compat.h", "cuda/ops.cuh"}},
	"hip": {dirs: []string{"core", "cuda"}, main: "cuda/main.cu", ext: ".cu",
		prelude: []string{"core/backend.h", "cuda/compat.h", "cuda/ops.cuh"}},
}

// Sources returns the kernel-server sources of backend, keyed by their path
// relative to the build folder ("core/server.cc", "cpu/gemm.cc", ...), and
// its translation units: the files to compile, each into an object of its
// own, which are then linked into the server (see the package doc). The
// units are the main file first, then the backend's op kernel files (the
// other kernel files of its folder that no source file includes by name) in
// name order, then the declared kernel files (DeclaredDir), in name order. "cuda" and
// "hip" share one set of sources.
func Sources(backend string) (files map[string][]byte, units []string, err error) {
	b, ok := backendDirs[backend]
	if !ok {
		return nil, nil, fmt.Errorf("kernels: unknown backend %q (backends with sources: %s)", backend, backendList())
	}
	files = make(map[string][]byte)
	for _, dir := range b.dirs {
		err := fs.WalkDir(sources, dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := sources.ReadFile(path)
			if err != nil {
				return err
			}
			files[path] = data
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("kernels: reading the embedded %s sources: %w", backend, err)
		}
	}
	if _, ok := files[b.main]; !ok {
		return nil, nil, fmt.Errorf("kernels: the %s main file %s is not embedded", backend, b.main)
	}
	declaredFiles(backend, files)
	ops := op.All()
	table, err := OpTable(ops)
	if err != nil {
		return nil, nil, err
	}
	files[OpTablePath] = table
	dir := path.Dir(b.main)
	files[dir+"/kernel_list.inc"] = kernelList(files, ops, backend, dir, b.ext)
	opFiles, declared := kernelFiles(files, b.main, dir, b.ext)
	units = append([]string{b.main}, opFiles...)
	return files, append(units, declared...), nil
}

// Write writes the sources of backend into dir at their relative paths, and
// returns the paths of its translation units (Sources), in order; tests that
// build a server by hand use it (g++ compiles and links them in one call).
func Write(dir, backend string) (unitPaths []string, err error) {
	files, units, err := Sources(backend)
	if err != nil {
		return nil, err
	}
	for p, data := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return nil, fmt.Errorf("kernels: %w", err)
		}
		if err := os.WriteFile(full, data, 0o644); err != nil {
			return nil, fmt.Errorf("kernels: %w", err)
		}
	}
	for _, u := range units {
		unitPaths = append(unitPaths, filepath.Join(dir, filepath.FromSlash(u)))
	}
	return unitPaths, nil
}

// kernelFiles lists, in name order, the op kernel files among files: those
// in dir with extension ext, other than main, that no file includes by name
// (#include "dir/name.ext"), and the declared files with that extension. A
// file included by name is part of the unit that includes it: main.cc
// includes device.cc and kernels.cc, and gemm.cuh includes gemm_sm90.cu,
// whose kernels only gemm.cuh's product launches. So a new op's kernel file needs no
// line anywhere else.
func kernelFiles(files map[string][]byte, main, dir, ext string) (ops, declared []string) {
	included := map[string]bool{}
	for p, data := range files {
		if strings.HasPrefix(p, DeclaredDir+"/") {
			continue // declared files include by relative paths, never a built-in kernel file
		}
		for _, line := range strings.Split(string(data), "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "#include \""); ok {
				name, _, _ := strings.Cut(rest, "\"")
				included[name] = true
			}
		}
	}
	for p := range files {
		switch {
		case p == main:
		case path.Dir(p) == dir && strings.HasSuffix(p, ext) && !included[p]:
			ops = append(ops, p)
		case strings.HasPrefix(p, DeclaredDir+"/") && strings.HasSuffix(p, ext):
			declared = append(declared, p)
		}
	}
	sort.Strings(ops)
	sort.Strings(declared)
	return ops, declared
}

// kernelList writes <dir>/kernel_list.inc, which kernels.cc (or .cu)
// includes inside namespace vkern: the declaration of every registered op's
// entry point run_<name> that a kernel file of the backend defines
// (entryPattern; the file is a unit of its own, so kernels.cc sees only the
// declaration), kKernels, their entries in wire-id order, and
// missing_kernel_reason, which says for each other op why it has none, for
// its NOT_SUPPORTED answer. Built-in and declared ops are listed alike: a
// backend has a kernel for an op exactly when its sources define the op's
// entry point.
func kernelList(files map[string][]byte, ops []*op.Op, backend, dir, ext string) []byte {
	family := backendFamily(backend)
	defined := map[string]bool{}
	for p, data := range files {
		if (path.Dir(p) == dir || strings.HasPrefix(p, DeclaredDir+"/")) && strings.HasSuffix(p, ext) {
			for _, m := range entryPattern[family].FindAllSubmatch(data, -1) {
				defined[string(m[1])] = true
			}
		}
	}
	var b strings.Builder
	b.WriteString("// Generated by vkern (kernels.Sources): the declaration and the entry of every\n// op whose run_<name> a kernel file of this backend defines, in wire-id order.\n")
	b.WriteString("// clang-format off\n")
	var have, missing []*op.Op
	for _, o := range ops {
		if defined[o.Name] {
			have = append(have, o)
		} else {
			missing = append(missing, o)
		}
	}
	for _, o := range have {
		fmt.Fprintf(&b, entrySignature[family]+";\n", o.Name)
	}
	b.WriteString("\nconstexpr Entry kKernels[] = {\n")
	for _, o := range have {
		fmt.Fprintf(&b, "    {op_%s::kId, %q, run_%s},\n", o.Name, o.Name, o.Name)
	}
	b.WriteString("};\n// clang-format on\n\n// Why an op has no kernel here.\nconst char* missing_kernel_reason(uint32_t op_id) {\n  switch (op_id) {\n")
	for _, o := range missing {
		fmt.Fprintf(&b, "    case op_%s::kId:\n      return %q;\n", o.Name, missingReason(o.Name, backend))
	}
	b.WriteString("    default:\n      return \"no op has this id\";\n  }\n}\n")
	return []byte(b.String())
}

func backendList() string {
	names := make([]string, 0, len(backendDirs))
	for name := range backendDirs {
		names = append(names, name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
