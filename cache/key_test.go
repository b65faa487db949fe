package cache

import (
	"slices"
	"testing"

	"github.com/vkern/vkern/toolchain"
)

func baseKeyRequest() Request {
	return Request{
		Files: map[string][]byte{
			"main.cc":     []byte("#include \"cpu/gemm.h\"\nint main() {}\n"),
			"cpu/gemm.h":  []byte("// gemm\n"),
			"cpu/empty.h": {},
		},
		Units: []string{"main.cc"},
		Compiler: &toolchain.Compiler{
			Backend:     "cpu",
			Name:        "g++",
			Path:        "/usr/bin/x86_64-linux-gnu-g++-12",
			Version:     "g++ 12.2.0",
			VersionText: "g++ 12.2.0",
			Flags:       []string{"-std=c++17", "-O3", "-march=native", "-pthread"},
			Target:      "amd64 AMD EPYC family 25 model 1 (features sha256:3a9985ab6e49)",
			Fingerprint: "5b1c7f2a00000000000000000000000000000000000000000000000000000000",
		},
	}
}

// cloneRequest copies r deeply enough that a test may change any part of it.
func cloneRequest(r Request) Request {
	files := make(map[string][]byte, len(r.Files))
	for p, b := range r.Files {
		files[p] = slices.Clone(b)
	}
	c := *r.Compiler
	c.Flags = slices.Clone(c.Flags)
	return Request{Files: files, Units: slices.Clone(r.Units), Compiler: &c}
}

func TestSourceSHA256(t *testing.T) {
	t.Run("the hash does not depend on the order files were added", func(t *testing.T) {
		a := map[string][]byte{}
		b := map[string][]byte{}
		names := []string{"z.h", "a.cc", "m/n.h", "b.h"}
		for _, n := range names {
			a[n] = []byte(n + " content")
		}
		for i := len(names) - 1; i >= 0; i-- {
			b[names[i]] = []byte(names[i] + " content")
		}
		if SourceSHA256(a) != SourceSHA256(b) {
			t.Error("same files, different hashes")
		}
	})
	// The pinned values below were computed by a separate implementation of
	// the encodings documented on SourceSHA256 and Key (a few lines of Python
	// with hashlib and struct.pack(">Q", n)), not copied from this code.
	t.Run("the encoding is pinned, so a change to it is a deliberate one", func(t *testing.T) {
		got := SourceSHA256(map[string][]byte{"main.cc": []byte("int main() {}\n")})
		const want = "8179791b06cbdf3fa8a7b4731866219249660b1edf2e926bce663bbfb11453c1"
		if got != want {
			t.Errorf("SourceSHA256 = %s, want %s (if the encoding changed on purpose, update this and keyFormat)", got, want)
		}
	})
	ambiguous := []struct {
		name string
		a, b map[string][]byte
	}{
		{"moving a byte from the path into the content changes the hash",
			map[string][]byte{"ab": []byte("c")}, map[string][]byte{"a": []byte("bc")}},
		{"splitting one file into two changes the hash",
			map[string][]byte{"a": []byte("xy")}, map[string][]byte{"a": []byte("x"), "b": []byte("y")}},
		{"an empty file is not the same as no file",
			map[string][]byte{"a": []byte("x")}, map[string][]byte{"a": []byte("x"), "b": {}}},
		{"no files at all differ from one empty file",
			map[string][]byte{}, map[string][]byte{"": {}}},
	}
	for _, tt := range ambiguous {
		t.Run(tt.name, func(t *testing.T) {
			if SourceSHA256(tt.a) == SourceSHA256(tt.b) {
				t.Errorf("%q and %q hash the same", tt.a, tt.b)
			}
		})
	}
}

func TestKey(t *testing.T) {
	base := baseKeyRequest()
	baseKey := Key(base)

	t.Run("the same request gives the same key", func(t *testing.T) {
		if again := Key(cloneRequest(base)); again != baseKey {
			t.Errorf("Key is not stable: %s then %s", baseKey, again)
		}
		if !isSHA256Hex(baseKey) {
			t.Errorf("Key %q is not 64 lowercase hex digits", baseKey)
		}
	})
	t.Run("the encoding is pinned, so a change to it is a deliberate one", func(t *testing.T) {
		const want = "c07dfec42e05de0d55e483ffd7b79d684027c92cdd3a00fced37faae20dbbc9b"
		if baseKey != want {
			t.Errorf("Key = %s, want %s (if the encoding changed on purpose, update this and keyFormat)", baseKey, want)
		}
	})

	changes := []struct {
		name   string
		change func(r *Request)
	}{
		{"a changed source byte changes the key", func(r *Request) { r.Files["cpu/gemm.h"] = []byte("// gemm!\n") }},
		{"a renamed source file changes the key", func(r *Request) {
			r.Files["cpu/gemm2.h"] = r.Files["cpu/gemm.h"]
			delete(r.Files, "cpu/gemm.h")
		}},
		{"an added source file changes the key", func(r *Request) { r.Files["cpu/softmax.h"] = nil }},
		{"another unit changes the key", func(r *Request) { r.Units = []string{"cpu/gemm.h"} }},
		{"an added unit changes the key", func(r *Request) { r.Units = append(r.Units, "cpu/gemm.h") }},
		{"units in another order change the key", func(r *Request) { r.Units = []string{"cpu/gemm.h", "main.cc"} }},
		{"another compiler fingerprint changes the key", func(r *Request) { r.Compiler.Fingerprint = "6" + r.Compiler.Fingerprint[1:] }},
		{"another arch flag changes the key", func(r *Request) { r.Compiler.Flags[2] = "-mcpu=native" }},
		{"reordered flags change the key", func(r *Request) { r.Compiler.Flags[0], r.Compiler.Flags[1] = r.Compiler.Flags[1], r.Compiler.Flags[0] }},
		{"two flags joined into one change the key", func(r *Request) {
			r.Compiler.Flags = []string{"-std=c++17 -O3", "-march=native", "-pthread"}
		}},
		{"another target CPU changes the key", func(r *Request) {
			r.Compiler.Target = "amd64 AMD EPYC family 25 model 17 (features sha256:0b0b0b0b0b0b)"
		}},
		{"another backend changes the key", func(r *Request) { r.Compiler.Backend = "cuda" }},
		{"text moved from the target into the backend changes the key", func(r *Request) {
			r.Compiler.Backend = r.Compiler.Target[len(r.Compiler.Target)-1:] + r.Compiler.Backend
			r.Compiler.Target = r.Compiler.Target[:len(r.Compiler.Target)-1]
		}},
	}
	seen := map[string]string{baseKey: "the base request"}
	for _, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			r := cloneRequest(base)
			c.change(&r)
			k := Key(r)
			if other, dup := seen[k]; dup {
				t.Errorf("key %s is the same as for %s", k, other)
			}
			seen[k] = c.name
		})
	}
	t.Run("the compiler's name, version line and invoke path do not change the key", func(t *testing.T) {
		// They are covered by Fingerprint (version text, resolved path) or do not
		// change the binary (the name it was found by).
		r := cloneRequest(base)
		r.Compiler.Name, r.Compiler.Version, r.Compiler.Invoke = "c++", "something", "/usr/bin/c++"
		if Key(r) != baseKey {
			t.Error("key changed")
		}
	})
}
