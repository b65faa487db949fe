package cache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/vkern/vkern/toolchain"
)

// keyFormat opens every key's hash input. Change it whenever the encoding
// below or the layout of an entry changes, so that old entries are simply
// never found again instead of being misread.
const keyFormat = "vkern-cache-key/2"

// Request is what to build.
type Request struct {
	// Files maps each source file's path, relative and slash-separated
	// ("cpu/gemm.cc"), to its content.
	Files map[string][]byte
	// Units are the translation units, each one of the Files keys: each is
	// compiled to an object of its own, all at once, and the objects are
	// linked in this order into the server (kernels.Sources lists them).
	// What a unit includes is among the Files.
	Units []string
	// Compiler builds it; see toolchain.Detect.
	Compiler *toolchain.Compiler
}

// SourceSHA256 returns the hex SHA-256 of a set of source files, encoded
// without ambiguity: the number of files as a big-endian uint64, then for
// each file in byte order of path its path's length and bytes, and its
// content's length and bytes (lengths are big-endian uint64).
func SourceSHA256(files map[string][]byte) string {
	paths := slices.Sorted(maps.Keys(files))
	h := sha256.New()
	writeCount(h, len(paths))
	for _, p := range paths {
		writeBytes(h, []byte(p))
		writeBytes(h, files[p])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Key returns the hex SHA-256 that names r's entry. The hash input is a
// sequence of length-prefixed strings (big-endian uint64 length, then the
// bytes): keyFormat ("vkern-cache-key/1"), SourceSHA256(r.Files), the
// compiler's Fingerprint, the number of flags as a bare big-endian uint64
// followed by each flag, Target, Backend, and the number of units as a
// bare big-endian uint64 followed by each unit, in order. Flags are in the
// fingerprint already; they are hashed again so that the key does not rest on
// how a fingerprint was computed. A nil Compiler hashes as empty fields (Build
// rejects such a request before it gets that far).
func Key(r Request) string {
	var fp, target, backend string
	var flags []string
	if c := r.Compiler; c != nil {
		fp, target, backend, flags = c.Fingerprint, c.Target, c.Backend, c.Flags
	}
	h := sha256.New()
	writeBytes(h, []byte(keyFormat))
	writeBytes(h, []byte(SourceSHA256(r.Files)))
	writeBytes(h, []byte(fp))
	writeCount(h, len(flags))
	for _, f := range flags {
		writeBytes(h, []byte(f))
	}
	writeBytes(h, []byte(target))
	writeBytes(h, []byte(backend))
	writeCount(h, len(r.Units))
	for _, u := range r.Units {
		writeBytes(h, []byte(u))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func writeCount(h hash.Hash, n int) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	h.Write(b[:])
}

func writeBytes(h hash.Hash, b []byte) {
	writeCount(h, len(b))
	h.Write(b)
}

// isSHA256Hex reports whether s is a hex SHA-256 as this package writes
// them (keys, hashes): 64 lowercase hex digits.
func isSHA256Hex(s string) bool {
	return len(s) == sha256.Size*2 && strings.Trim(s, "0123456789abcdef") == ""
}

// validate checks r before anything is written.
func (r Request) validate() error {
	c := r.Compiler
	if c == nil {
		return fmt.Errorf("cache: the request has no compiler; detect one with toolchain.Detect")
	}
	if c.Path == "" || c.Backend == "" {
		return fmt.Errorf("cache: the request's compiler is incomplete (Path %q, Backend %q); detect it with toolchain.Detect", c.Path, c.Backend)
	}
	if len(r.Files) == 0 {
		return fmt.Errorf("cache: the request has no source files")
	}
	for p := range r.Files {
		if p == "" || path.Clean(p) != p || !filepath.IsLocal(filepath.FromSlash(p)) || strings.Contains(p, `\`) {
			return fmt.Errorf("cache: source path %q must be relative, clean, slash-separated and inside the source folder (like \"cpu/gemm.cc\")", p)
		}
		if p == SourceUnit {
			return fmt.Errorf("cache: source path %q is the builder's own (it defines vkern_source_sha256); rename that file", p)
		}
	}
	if len(r.Units) == 0 {
		return fmt.Errorf("cache: the request has no units to compile; kernels.Sources lists them")
	}
	seen := make(map[string]bool, len(r.Units))
	for _, u := range r.Units {
		if _, ok := r.Files[u]; !ok {
			names := make([]string, 0, len(r.Files))
			for p := range r.Files {
				names = append(names, p)
			}
			sort.Strings(names)
			return fmt.Errorf("cache: unit %q is not one of the %d source files (%s)", u, len(names), strings.Join(names, ", "))
		}
		if seen[u] {
			return fmt.Errorf("cache: unit %q is listed twice; each unit is compiled once", u)
		}
		seen[u] = true
	}
	return nil
}
