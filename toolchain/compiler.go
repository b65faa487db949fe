// Package toolchain finds the compiler that builds vkern's kernel server for a
// backend, says exactly which compiler it is, and spells the command that
// builds the server.
//
// DetectCPU finds a C++ compiler for the cpu backend: the one named by $CXX
// when that is set, else the first of g++, clang++ and c++ on PATH that can
// build a program. It runs the compiler to read its version, learns which of
// -march=native and -mcpu=native it accepts, and reads the host CPU's model
// and ISA features into Target, so that a binary built for one CPU is never
// mistaken for one built for another. The resulting Compiler carries a
// Fingerprint (compiler binary, version text, flags) that package cache folds
// into its key together with the Target and the kernel sources.
//
// Probing runs the compiler a few times, so its results are kept for the
// life of the process, per compiler binary: calling DetectCPU again is cheap.
// A compiler replaced in place (new size or modification time) is probed
// afresh.
//
// The package does not build the server (package cache runs Command, under a
// lock, into its store), does not install compilers, does not look for GPUs,
// and does not judge whether a compiler is new enough for the kernels: a
// compiler that cannot build them fails in the build, with its own message.
// The nvcc and hipcc backends will get their own Detect functions that fill
// the same Compiler type.
package toolchain

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"path/filepath"
	"sort"
	"strings"
)

// BackendCPU is the Backend of compilers that build the C++ CPU kernel server.
const BackendCPU = "cpu"

// Compiler is one compiler, found and probed, ready to build a kernel server.
type Compiler struct {
	// Backend is the backend the compiler builds for: "cpu".
	Backend string
	// Name is the compiler as it was asked for: "g++", "clang++", "c++", or
	// the last element of $CXX.
	Name string
	// Path is the compiler's absolute path with every symlink resolved: the
	// binary that actually runs, and the identity used in Fingerprint.
	Path string
	// Invoke is the absolute path the compiler was found at, symlinks kept.
	// Commands start with it rather than with Path because compiler drivers
	// pick their mode from the name they are called by: clang++ is usually a
	// symlink to clang, which does not link the C++ library when called as
	// clang, and a ccache symlink only works under the compiler's name.
	Invoke string
	// Version is the first line of `--version`.
	Version string
	// VersionText is the whole `--version` output, trimmed.
	VersionText string
	// Flags are the flags every build uses, in order, for example
	// -std=c++17 -O3 -march=native -pthread.
	Flags []string
	// ArchFlag is the flag in Flags that targets the host CPU: "-march=native"
	// or "-mcpu=native", whichever the compiler accepted first, or "" when it
	// accepted neither and the build is for the compiler's default target.
	ArchFlag string
	// Target is the CPU the code is built for: GOARCH, the CPU model, and a
	// short hash of the CPU's ISA feature flags, for example
	// "amd64 AMD EPYC family 25 model 1 (features sha256:3f9a0c2b71d4)".
	Target string
	// Fingerprint is the hex SHA-256 of Path, VersionText and Flags, encoded
	// without ambiguity: for each of Path and VersionText its length as a
	// big-endian uint64 and then its bytes; then the number of flags as a
	// big-endian uint64; then each flag as its length and bytes. Nothing else
	// goes in: Backend, Target and the sources enter the cache key separately.
	Fingerprint string
}

// Command returns the argv that builds the kernel server: Invoke (or Path
// when Invoke is empty), Flags, -I srcDir, one -D per define in sorted key
// order, -o out, and srcDir/mainFile.
//
// Every define becomes a C string literal: the value is quoted and its
// backslashes, double quotes and newlines escaped, so -DVKERN_SOURCE_SHA256
// arrives in the code as "3f9a…". The argv is meant for exec, not a shell.
// Keys are used as given; they must be C identifiers.
func (c *Compiler) Command(srcDir, mainFile, out string, defines map[string]string) []string {
	exe := c.Invoke
	if exe == "" {
		exe = c.Path
	}
	argv := []string{exe}
	argv = append(argv, c.Flags...)
	argv = append(argv, "-I", srcDir)
	keys := make([]string, 0, len(defines))
	for k := range defines {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		argv = append(argv, "-D"+k+"="+cStringLiteral(defines[k]))
	}
	return append(argv, "-o", out, filepath.Join(srcDir, mainFile))
}

// cStringLiteral quotes s as a C string literal.
func cStringLiteral(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`)
	return `"` + r.Replace(s) + `"`
}

// fingerprint computes Compiler.Fingerprint; the field's doc gives the encoding.
func fingerprint(path, versionText string, flags []string) string {
	h := sha256.New()
	writeField(h, path)
	writeField(h, versionText)
	writeCount(h, len(flags))
	for _, f := range flags {
		writeField(h, f)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func writeCount(h hash.Hash, n int) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	h.Write(b[:])
}

func writeField(h hash.Hash, s string) {
	writeCount(h, len(s))
	h.Write([]byte(s))
}
