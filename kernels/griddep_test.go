package kernels

import (
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestEveryKernelOpensWithItsGridDependency holds every kernel of the
// cuda sources to what a batch's graph counts on when it launches kernels
// programmatically (cuda/device.cu's programmatic_edges): its first
// statement is vk_grid_dependency() (cuda/compat.h), so that no block
// touches memory, or returns, before the kernels it follows have finished.
func TestEveryKernelOpensWithItsGridDependency(t *testing.T) {
	files, _, err := Sources("cuda")
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	kernels := 0
	for _, name := range names {
		for _, k := range kernelBodies(string(files[name])) {
			kernels++
			if !strings.HasPrefix(k.body, "vk_grid_dependency();") {
				first, _, _ := strings.Cut(k.body, "\n")
				t.Errorf("%s:%d: the kernel's first statement is %q; open it with vk_grid_dependency(); (cuda/compat.h says why)", name, k.line, first)
			}
		}
	}
	// The sources' kernels when this test was written: 49. Fewer than that
	// means the scan below lost track of them.
	if kernels < 49 {
		t.Errorf("found %d kernels in the cuda sources, want at least 49: the scan for __global__ bodies missed some", kernels)
	}
}

// kernel is a __global__ function's body, from its first statement, and
// the line its declaration starts on.
type kernel struct {
	line int
	body string
}

var comment = regexp.MustCompile(`(?s)//[^\n]*|/\*.*?\*/`)

// kernelBodies finds each __global__ definition in src (a declaration
// without a body is skipped): its body begins at the first '{' outside
// parentheses after the keyword (__launch_bounds__(…) and the parameter
// list hold none), and is returned without leading space or comments.
func kernelBodies(src string) []kernel {
	var out []kernel
	for at := 0; ; {
		i := strings.Index(src[at:], "__global__")
		if i < 0 {
			return out
		}
		start := at + i
		at = start + len("__global__")
		depth, open := 0, -1
	scan:
		for j := at; j < len(src); j++ {
			switch src[j] {
			case '(':
				depth++
			case ')':
				depth--
			case ';':
				if depth == 0 {
					break scan
				}
			case '{':
				if depth == 0 {
					open = j
					break scan
				}
			}
		}
		if open < 0 {
			continue
		}
		body := strings.TrimSpace(comment.ReplaceAllString(src[open+1:], ""))
		out = append(out, kernel{line: strings.Count(src[:start], "\n") + 1, body: body})
		at = open
	}
}
