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
//	        buffers, one stream, the same ops
//
// A backend's main file is a unity file that includes everything it needs, so
// a build is one compiler call:
//
//	$CXX -std=c++17 -O3 -march=native -pthread -I<dir> \
//	    -DVKERN_SOURCE_SHA256=\"<hex>\" -o server <dir>/cpu/main.cc
//
// where <dir> holds the files of Sources at their relative paths.
//
// This package only hands out bytes; it does not compile, cache or run them
// (see the toolchain, cache and kserver packages).
package kernels

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/vkern/vkern/op"
)

//go:embed core/*.h core/*.cc cpu/*.cc cuda/*.cu cuda/*.cuh cuda/*.h
var sources embed.FS

// backendDirs lists, per backend, the folders whose files make up its
// server, and its main file.
var backendDirs = map[string]struct {
	dirs []string
	main string
}{
	"cpu": {dirs: []string{"core", "cpu"}, main: "cpu/main.cc"},
	// HIP compiles the cuda sources through cuda/compat.h.
	"cuda": {dirs: []string{"core", "cuda"}, main: "cuda/main.cu"},
	"hip":  {dirs: []string{"core", "cuda"}, main: "cuda/main.cu"},
}

// Sources returns the kernel-server sources of backend, keyed by their path
// relative to the build folder ("core/server.cc", "cpu/gemm.cc", ...), and
// the one file to compile. "cuda" and "hip" share one set of sources.
func Sources(backend string) (files map[string][]byte, mainFile string, err error) {
	b, ok := backendDirs[backend]
	if !ok {
		return nil, "", fmt.Errorf("kernels: unknown backend %q (backends with sources: %s)", backend, backendList())
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
			return nil, "", fmt.Errorf("kernels: reading the embedded %s sources: %w", backend, err)
		}
	}
	if _, ok := files[b.main]; !ok {
		return nil, "", fmt.Errorf("kernels: the %s main file %s is not embedded", backend, b.main)
	}
	table, err := OpTable(op.All())
	if err != nil {
		return nil, "", err
	}
	files[OpTablePath] = table
	return files, b.main, nil
}

func backendList() string {
	names := make([]string, 0, len(backendDirs))
	for name := range backendDirs {
		names = append(names, name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
