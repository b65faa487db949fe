// Package toolchain finds the compiler that builds vkern's kernel server for a
// backend, says exactly which compiler it is and which target it builds for,
// and spells the command that builds the server.
//
// Detect dispatches on the backend name. DetectCPU finds a C++ compiler for
// the cpu backend: the one named by $CXX when that is set, else the first of
// g++, clang++ and c++ on PATH that can build a program. It runs the compiler
// to read its version, learns which of -march=native and -mcpu=native it
// accepts, and reads the host CPU's model and ISA features into Target, so
// that a binary built for one CPU is never mistaken for one built for
// another.
//
// DetectCUDA finds nvcc and asks the GPU itself for its compute capability:
// it builds a small probe program with that nvcc and runs it, and the probe
// prints what cudaGetDeviceProperties says about every visible device. The
// architecture picks the -gencode flag (sm_90a on Hopper, whose wgmma needs
// the 'a' target). DetectHIP finds hipcc and reads the GPU agents' gfx names
// from rocminfo. Both take the architecture from an environment variable
// instead ($VKERN_CUDA_ARCH, $VKERN_HIP_ARCH), so that a machine without a
// GPU can compile for one.
//
// Every Compiler carries a Fingerprint (compiler binary, version text,
// flags; the GPU architecture is among the flags) that package cache folds
// into its key together with the Target and the kernel sources.
//
// Probing runs the compiler, and for cuda builds and runs a program, so the
// results are kept for the life of the process, per compiler binary:
// detecting again is cheap. A compiler replaced in place (new size or
// modification time) is probed afresh. Failed probes are not kept.
//
// The package does not build the server (package cache runs CompileCommand
// and LinkCommand, under a lock, into its store), does not install compilers
// or drivers, and does not judge whether a compiler is new enough for the
// kernels or knows the architecture it is asked for: a compiler that cannot
// build them fails in the build, with its own message.
package toolchain

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"os"
	"path/filepath"
)

// The backends, as Compiler.Backend and Detect spell them.
const (
	// BackendCPU is the Backend of compilers that build the C++ CPU kernel
	// server: g++, clang++ or c++.
	BackendCPU = "cpu"
	// BackendCUDA is the Backend of nvcc, building the server for NVIDIA GPUs.
	BackendCUDA = "cuda"
	// BackendHIP is the Backend of hipcc, building the same .cu sources for
	// AMD GPUs.
	BackendHIP = "hip"
)

// Compiler is one compiler, found and probed, ready to build a kernel server.
type Compiler struct {
	// Backend is the backend the compiler builds for: "cpu", "cuda" or
	// "hip".
	Backend string
	// Name is the compiler as it was asked for: "g++", "clang++", "c++", or
	// the last element of $CXX; "nvcc" or "hipcc", or the last element of
	// $NVCC or $HIPCC.
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
	// Version is the first line of `--version`; for nvcc, whose first line
	// only says "nvcc: NVIDIA (R) Cuda compiler driver", it is "nvcc " and the
	// version from the "Cuda compilation tools, release 13.0, V13.0.48" line
	// ("nvcc 13.0.48").
	Version string
	// VersionText is the whole `--version` output, trimmed.
	VersionText string
	// Flags are the flags every build uses, in order, each one argv element,
	// for example
	//   cpu:  -std=c++17 -O3 -march=native -pthread
	//   cuda: -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xcompiler=-pthread
	//   hip:  -std=c++17 -O3 --offload-arch=gfx1030 --offload-arch=gfx90a -pthread
	// No flag relaxes floating point (no fast-math).
	Flags []string
	// ArchFlag is the one flag in Flags that picks the target. cpu:
	// "-march=native" or "-mcpu=native", whichever the compiler accepted
	// first, or "" when it accepted neither and the build is for the
	// compiler's default target. cuda and hip: the -gencode= or
	// --offload-arch= flag when the build is for one architecture, and ""
	// when it is for several (one flag each; Arch lists them).
	ArchFlag string
	// Arch is the GPU architecture the code is built for, as the compiler
	// spells it: "sm_90a", "sm_86" (cuda), "gfx1030" (hip), or several
	// separated by commas ("gfx1030,gfx90a"). It is "" for cpu.
	Arch string
	// Target is what the code is built for. cpu: GOARCH, the CPU model, and
	// a short hash of the CPU's ISA feature flags, for example
	// "amd64 AMD EPYC family 25 model 1 (features sha256:3f9a0c2b71d4)".
	// cuda and hip: each architecture followed by the name of the device that
	// asked for it, "sm_90a NVIDIA H100 80GB HBM3" (several joined by ", "),
	// or Arch alone when it came from $VKERN_CUDA_ARCH or $VKERN_HIP_ARCH.
	Target string
	// GPUs are the devices the probe saw, in the runtime's order (cuda:
	// CUDA_VISIBLE_DEVICES applies; hip: rocminfo's GPU agents). Nil for cpu
	// and when the architecture came from $VKERN_CUDA_ARCH or
	// $VKERN_HIP_ARCH: then no device was asked.
	GPUs []GPU
	// Env is the compiler drivers' environment as detection found it: each
	// variable of DriverEnv that was set, as "NAME=value", in DriverEnv's
	// order. They change what a compile reads (include paths) or how it
	// runs (flags a driver adds, nvcc's host compiler), so they are part
	// of the Fingerprint.
	Env []string
	// Fingerprint is the hex SHA-256 of Path, VersionText, Flags and Env,
	// encoded without ambiguity: for each of Path and VersionText its
	// length as a big-endian uint64 and then its bytes; then the number of
	// flags as a big-endian uint64; then each flag as its length and bytes;
	// then, only when Env is not empty, the field "env", the number of its
	// entries and each entry the same way (so a compiler detected with none
	// of them set keeps the fingerprint it had before Env existed). Nothing
	// else goes in: Backend, Target and the sources enter the cache key
	// separately.
	Fingerprint string
}

// DriverEnv are the environment variables that compiler drivers read to
// change a compile: include paths (gcc's and clang's CPATH family), flags
// that nvcc and hipcc add, nvcc's host compiler, gcc's search for its own
// programs. A build run with any of them set is another build.
var DriverEnv = []string{
	"CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "GCC_EXEC_PREFIX", "COMPILER_PATH",
	"NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN",
	"HIPCC_COMPILE_FLAGS_APPEND", "HIPCC_LINK_FLAGS_APPEND",
}

// driverEnv is Compiler.Env for the environment now.
func driverEnv() []string {
	var env []string
	for _, name := range DriverEnv {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return env
}

// CompileCommand returns the argv that compiles one translation unit of the
// kernel server to an object file: Invoke (or Path when Invoke is empty),
// Flags, -I srcDir, -c, -o obj, and srcDir/unit. For cuda and hip the
// source file is preceded by "-x cu" or "-x hip", so that it is compiled as
// GPU code whatever its extension (the GPU units are .cu files).
// LinkCommand then links the objects. The argv is meant for exec, not a
// shell. It takes no defines: what a unit needs to know is written into the
// sources (the source hash into vkern_source.cc), so that nothing has to
// survive the quoting of nvcc's and hipcc's shells.
func (c *Compiler) CompileCommand(srcDir, unit, obj string) []string {
	argv := []string{c.exe()}
	argv = append(argv, c.Flags...)
	argv = append(argv, "-I", srcDir, "-c", "-o", obj)
	switch c.Backend {
	case BackendCUDA:
		argv = append(argv, "-x", "cu")
	case BackendHIP:
		argv = append(argv, "-x", "hip")
	}
	return append(argv, filepath.Join(srcDir, unit))
}

// LinkCommand returns the argv that links the objects CompileCommand made
// into the kernel server out: Invoke (or Path), Flags, -o out, and the
// objects in order. The flags are the compile's, so that the driver links
// what it compiled for (-pthread; nvcc and hipcc add their runtimes, and
// nvcc needs no device link: no unit calls another's device code).
func (c *Compiler) LinkCommand(objects []string, out string) []string {
	argv := []string{c.exe()}
	argv = append(argv, c.Flags...)
	argv = append(argv, "-o", out)
	return append(argv, objects...)
}

// exe is the program a command starts: Invoke, or Path when Invoke is empty.
func (c *Compiler) exe() string {
	if c.Invoke != "" {
		return c.Invoke
	}
	return c.Path
}

// fingerprint computes Compiler.Fingerprint; the field's doc gives the encoding.
func fingerprint(path, versionText string, flags, env []string) string {
	h := sha256.New()
	writeField(h, path)
	writeField(h, versionText)
	writeCount(h, len(flags))
	for _, f := range flags {
		writeField(h, f)
	}
	if len(env) > 0 {
		writeField(h, "env")
		writeCount(h, len(env))
		for _, e := range env {
			writeField(h, e)
		}
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
