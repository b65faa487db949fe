package kernels

import (
	"bytes"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Declared is kernel source that an op declared outside vkern brings for
// one backend (package userop declares it with the op's contract and
// reference). Its files join the embedded ones in every build of that
// backend, and so the cache key: under DeclaredDir, at their own paths,
// each opened by a #line directive that gives the compiler's messages
// the path the program declared it by. Each file with the backend's
// extension (.cc for cpu, .cu for cuda) is a translation unit of the
// server (Sources), opened by the #include of the backend's prelude
// headers (core/backend.h, core/f16.h and cpu/device.h on the cpu;
// core/backend.h, cuda/compat.h and cuda/ops.cuh on a GPU) before its
// #line; the others (headers) are there for them to include, by paths
// relative to the including file.
type Declared struct {
	// Op is the op's name. One of the compiled files must define its
	// entry point at the start of a line, in namespace vkern:
	//
	//	Result run_<op>(const Call& c, uint64_t* problem)                        // cpu
	//	cudaError_t run_<op>(const Call& c, unsigned long long* problem, cudaStream_t s)  // cuda
	Op string
	// Backend is "cpu" or "cuda"; the hip backend builds the cuda sources.
	Backend string
	// Files maps each file's path (relative, slash-separated, as messages
	// should name it: "kernels/cpu/rmsnorm.cc") to its content. Two ops
	// may bring the same file, with the same content, and it is built once.
	Files map[string][]byte
}

// DeclaredDir is the folder, among the sources, that declared files are
// written under.
const DeclaredDir = "user"

// DeclaredPath is where a declared file at p sits among the sources
// (Sources' keys), which is what a planted defect's File names.
func DeclaredPath(p string) string { return DeclaredDir + "/" + p }

var (
	declaredMu sync.RWMutex
	declared   []Declared
)

// backendFamily is the backend whose sources a backend builds: hip builds
// cuda's.
func backendFamily(backend string) string {
	if backend == "hip" {
		return "cuda"
	}
	return backend
}

// entryPattern finds the entry points a backend's sources define: a line
// that starts with the entry's return type and run_<name>(.
var entryPattern = map[string]*regexp.Regexp{
	"cpu":  regexp.MustCompile(`(?m)^[ \t]*Result[ \t]+run_([A-Za-z0-9_]+)[ \t]*\(`),
	"cuda": regexp.MustCompile(`(?m)^[ \t]*cudaError_t[ \t]+run_([A-Za-z0-9_]+)[ \t]*\(`),
}

// entrySignature is the declaration an error asks for.
var entrySignature = map[string]string{
	"cpu":  "Result run_%s(const Call& c, uint64_t* problem)",
	"cuda": "cudaError_t run_%s(const Call& c, unsigned long long* problem, cudaStream_t s)",
}

// CheckDeclared checks d as Declare would, without adding it: a backend
// with sources, file paths that stay inside the source folder, at least
// one file to compile, the op's entry point defined in one of them, and no
// file at a path another declared op brings with other content.
func CheckDeclared(d Declared) error {
	declaredMu.RLock()
	defer declaredMu.RUnlock()
	return d.check()
}

// Declare adds d to every later build of its backend (Sources); see
// Declared.
func Declare(d Declared) error {
	declaredMu.Lock()
	defer declaredMu.Unlock()
	if err := d.check(); err != nil {
		return err
	}
	files := make(map[string][]byte, len(d.Files))
	for p, data := range d.Files {
		files[p] = bytes.Clone(data)
	}
	d.Files = files
	declared = append(declared, d)
	return nil
}

// check is CheckDeclared; the caller holds declaredMu.
func (d Declared) check() error {
	switch d.Backend {
	case "cpu", "cuda":
	case "hip":
		return fmt.Errorf("kernels: %s: declare HIP kernels as cuda sources; the hip backend builds those through cuda/compat.h", d.Op)
	default:
		return fmt.Errorf("kernels: %s: kernel sources for backend %q; declare them for cpu or cuda", d.Op, d.Backend)
	}
	if len(d.Files) == 0 {
		return fmt.Errorf("kernels: %s: no %s kernel files; give the files that define run_%s", d.Op, d.Backend, d.Op)
	}
	ext := backendDirs[d.Backend].ext
	var compiled []string
	defines := false
	for _, p := range slices.Sorted(maps.Keys(d.Files)) {
		if p == "" || path.Clean(p) != p || path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") || !plainPath(p) {
			return fmt.Errorf("kernels: %s: kernel file path %q: want a clean relative path with / between folders, such as \"kernels/%s/%s%s\"", d.Op, p, d.Backend, d.Op, ext)
		}
		for _, other := range declared {
			if data, ok := other.Files[p]; ok && other.Backend == d.Backend && !bytes.Equal(data, d.Files[p]) {
				return fmt.Errorf("kernels: %s and %s both bring a %s kernel file %s, with different contents; rename one of them", other.Op, d.Op, d.Backend, p)
			}
		}
		if !strings.HasSuffix(p, ext) {
			continue
		}
		compiled = append(compiled, p)
		for _, m := range entryPattern[d.Backend].FindAllSubmatch(d.Files[p], -1) {
			defines = defines || string(m[1]) == d.Op
		}
	}
	if len(compiled) == 0 {
		return fmt.Errorf("kernels: %s: none of its %s kernel files (%s) ends in %s, so none would be compiled; name the file that defines run_%s so",
			d.Op, d.Backend, strings.Join(slices.Sorted(maps.Keys(d.Files)), ", "), ext, d.Op)
	}
	if !defines {
		return fmt.Errorf("kernels: %s: no entry point: none of its %s kernel files (%s) defines run_%s; define\n\t"+entrySignature[d.Backend]+"\nin namespace vkern, with the return type at the start of the line",
			d.Op, d.Backend, strings.Join(compiled, ", "), d.Op, d.Op)
	}
	return nil
}

// DeclaredBackends lists the backends op brought kernel sources for, in
// order; nil for a built-in op.
func DeclaredBackends(op string) []string {
	declaredMu.RLock()
	defer declaredMu.RUnlock()
	var backends []string
	for _, d := range declared {
		if d.Op == op {
			backends = append(backends, d.Backend)
		}
	}
	sort.Strings(backends)
	return backends
}

// declaredFiles adds every file declared for backend's family to files,
// under DeclaredDir: each opened by a #line directive, and those with the
// backend's extension, each a unit, first by the backend's prelude.
func declaredFiles(backend string, files map[string][]byte) {
	declaredMu.RLock()
	defer declaredMu.RUnlock()
	bd := backendDirs[backend]
	for _, d := range declared {
		if d.Backend != backendFamily(backend) {
			continue
		}
		for p, data := range d.Files {
			var b bytes.Buffer
			if strings.HasSuffix(p, bd.ext) {
				for _, h := range bd.prelude {
					fmt.Fprintf(&b, "#include %q  // vkern's prelude for declared kernel files\n", h)
				}
			}
			fmt.Fprintf(&b, "#line 1 %q\n", p)
			b.Write(data)
			files[DeclaredPath(p)] = b.Bytes()
		}
	}
}

// missingReason says why op has no kernel on backend, for the server's
// NOT_SUPPORTED answer.
func missingReason(op, backend string) string {
	declared := DeclaredBackends(op)
	family := backendFamily(backend)
	switch {
	case len(declared) > 0:
		return fmt.Sprintf("%s was declared with %s kernel sources only, none for %s", op, strings.Join(declared, " and "), family)
	case family == "cpu":
		return fmt.Sprintf("no file of kernels/cpu defines run_%s", op)
	}
	return fmt.Sprintf("no file of kernels/cuda defines run_%s", op)
}

// plainPath says whether p holds only printable ASCII other than " and \\,
// which a #line directive can quote as it is.
func plainPath(p string) bool {
	for _, r := range p {
		if r < ' ' || r > '~' || r == '"' || r == '\\' {
			return false
		}
	}
	return true
}
