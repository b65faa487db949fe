package toolchain

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// cudaArchEnv names the CUDA architecture instead of the device's answer.
const cudaArchEnv = "VKERN_CUDA_ARCH"

// nvccSearch is where DetectCUDA looks for nvcc.
var nvccSearch = toolSearch{
	name:     "nvcc",
	override: "NVCC",
	roots:    []string{"CUDA_HOME", "CUDA_PATH"},
	fallback: []string{"/usr/local/cuda/bin/nvcc"},
}

const nvccFix = "install the CUDA toolkit and put its bin folder on PATH, or set NVCC=/path/to/nvcc or CUDA_HOME=/usr/local/cuda"

// cudaNoDeviceFix is the hint every ErrNoDevice from DetectCUDA ends with.
const cudaNoDeviceFix = "run on a machine whose NVIDIA GPU and driver answer (nvidia-smi lists the GPU), or set " +
	cudaArchEnv + " to the GPU's compute capability to compile without one (" +
	cudaArchEnv + "=90a for an H100 or H200, 80 for an A100, 86 for an RTX 30x0)"

// cudaBaseFlags come before the -gencode flags, cudaHostFlags after them.
// Nothing relaxes floating point: no -use_fast_math, and nvcc's defaults
// (-ftz=false -prec-div=true -prec-sqrt=true) stand.
var (
	cudaBaseFlags = []string{"-std=c++17", "-O3"}
	cudaHostFlags = []string{"-Xcompiler=-pthread"}
)

// cudaProbeSource is the program DetectCUDA builds with nvcc and runs to ask
// the devices what they are. It launches no kernel, so it needs no GPU code
// and builds for nvcc's default target; it fails, with the CUDA error's name,
// where there is no device or no driver. Its output is line-based: a format
// line, the driver's and runtime's versions, then one tab-separated line per
// device with the name last (names hold spaces, never tabs).
const cudaProbeSource = `// vkern's CUDA device probe: prints what the runtime says about each visible device.
#include <cstdio>
#include <cuda_runtime.h>

static int fail(const char* call, cudaError_t e) {
  std::fprintf(stderr, "vkern-cuda-probe: %s failed: %s (%s)\n", call, cudaGetErrorName(e), cudaGetErrorString(e));
  return 2;
}

int main() {
  int driver = 0, runtime = 0, count = 0;
  cudaError_t e = cudaDriverGetVersion(&driver);
  if (e != cudaSuccess) return fail("cudaDriverGetVersion", e);
  e = cudaRuntimeGetVersion(&runtime);
  if (e != cudaSuccess) return fail("cudaRuntimeGetVersion", e);
  std::printf("vkern-cuda-probe 1\ndriver %d\nruntime %d\n", driver, runtime);
  e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return fail("cudaGetDeviceCount", e);
  if (count < 1) {
    std::fprintf(stderr, "vkern-cuda-probe: cudaGetDeviceCount found no device\n");
    return 3;
  }
  for (int i = 0; i < count; i++) {
    cudaDeviceProp p;
    e = cudaGetDeviceProperties(&p, i);
    if (e != cudaSuccess) return fail("cudaGetDeviceProperties", e);
    std::printf("device\t%d\t%d\t%d\t%d\t%llu\t%s\n", i, p.major, p.minor, p.multiProcessorCount,
                (unsigned long long)p.totalGlobalMem, p.name);
  }
  return 0;
}
`

// DetectCUDA finds nvcc and the architecture to build for.
//
// nvcc is the file named by $NVCC when that is set (a name looked up on PATH,
// or a path; nothing else is tried), else the first that answers --version
// of $CUDA_HOME/bin/nvcc, $CUDA_PATH/bin/nvcc, nvcc on PATH and
// /usr/local/cuda/bin/nvcc. When none does, the error wraps ErrNoCompiler and
// names each place tried and why it failed.
//
// The architecture comes from $VKERN_CUDA_ARCH when that is set (see
// ParseCUDAArch), else from the devices: DetectCUDA builds a probe program
// with nvcc, runs it, and reads each visible device's compute capability,
// name, multiprocessor count and memory, and the driver's and runtime's
// versions (Compiler.GPUs). When the probe fails (no GPU, no driver, a
// driver older than the runtime) the error wraps ErrNoDevice, quotes the end
// of the probe's output and says how to set $VKERN_CUDA_ARCH; when nvcc
// cannot build the probe the error wraps ErrNoCompiler. One -gencode flag is
// added per distinct architecture. A cancelled ctx is returned as such.
func DetectCUDA(ctx context.Context) (*Compiler, error) {
	nvcc, err := nvccSearch.findCompiler(ctx, BackendCUDA, nvccFix)
	if err != nil {
		return nil, err
	}
	var (
		archs  []string
		target string
		gpus   []GPU
	)
	if archs, err = archsFromEnv(BackendCUDA, cudaArchEnv, ParseCUDAArch,
		"set it to a compute capability such as 90a, sm_90a, 8.6 or 80,90a, or unset it to ask the GPU"); err != nil {
		return nil, err
	}
	if archs != nil {
		target = strings.Join(archs, ",")
	} else {
		key, err := fileKey(BackendCUDA, nvcc.invoke, nvcc.resolved)
		if err != nil {
			return nil, fmt.Errorf("toolchain: cuda: %w", err)
		}
		dk := deviceProbeKey{key, visibleEnv("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}
		gpus, err = cachedDevices(dk, func() ([]GPU, error) { return probeCUDADevices(ctx, nvcc.invoke) })
		if err != nil {
			return nil, err
		}
		archs, target = distinctArchs(gpus)
	}

	var archFlags []string
	for _, a := range archs {
		archFlags = append(archFlags, gencodeFlag(a))
	}
	flags := concat(cudaBaseFlags, archFlags, cudaHostFlags)
	return gpuCompiler(BackendCUDA, nvcc, nvccVersion(nvcc.versionText), flags, archFlags, archs, target, gpus), nil
}

// ParseCUDAArch turns a compute capability, as $VKERN_CUDA_ARCH gives it,
// into the nvcc target vkern builds for it: "8.6", "86", "sm_86" and
// "compute_86" all give "sm_86". Compute capability 9.0 gives "sm_90a",
// since vkern's Hopper kernels use wgmma, which only the 'a' target has. An
// explicit suffix is kept: "90a" and "sm_100a" give "sm_90a" and "sm_100a";
// "f" (family targets, "sm_100f") likewise.
func ParseCUDAArch(s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	body := strings.TrimPrefix(strings.TrimPrefix(s, "sm_"), "compute_")
	var major, minor int
	var suffix string
	if m := dottedCC.FindStringSubmatch(body); m != nil {
		major, _ = strconv.Atoi(m[1])
		minor, _ = strconv.Atoi(m[2])
		suffix = m[3]
	} else if m := packedCC.FindStringSubmatch(body); m != nil {
		major, _ = strconv.Atoi(m[1])
		minor, _ = strconv.Atoi(m[2])
		suffix = m[3]
	} else {
		return "", fmt.Errorf("%q is not a compute capability (major.minor such as 8.6, or sm_86, 86, 90a)", s)
	}
	if major < 1 {
		return "", fmt.Errorf("%q is not a compute capability: the major version must be at least 1", s)
	}
	return cudaArch(major, minor, suffix), nil
}

var (
	dottedCC = regexp.MustCompile(`^([0-9]{1,2})\.([0-9])([af]?)$`)
	packedCC = regexp.MustCompile(`^([0-9]{1,2})([0-9])([af]?)$`)
)

// cudaArch is the nvcc target for compute capability major.minor: sm_XY,
// with the 'a' suffix on 9.0 when no suffix is given.
func cudaArch(major, minor int, suffix string) string {
	if suffix == "" && major == 9 && minor == 0 {
		suffix = "a"
	}
	return fmt.Sprintf("sm_%d%d%s", major, minor, suffix)
}

// gencodeFlag is the one-element nvcc flag that builds machine code for arch
// ("sm_90a"): -gencode=arch=compute_90a,code=sm_90a.
func gencodeFlag(arch string) string {
	n := strings.TrimPrefix(arch, "sm_")
	return "-gencode=arch=compute_" + n + ",code=sm_" + n
}

// nvccVersionRE finds the version in nvcc's "Cuda compilation tools,
// release 13.0, V13.0.48" line.
var nvccVersionRE = regexp.MustCompile(`(?m)^Cuda compilation tools, release [0-9.]+, V([0-9][0-9.]*)`)

// nvccVersion is Compiler.Version for nvcc: "nvcc 13.0.48", or the line
// that says "release" when the V number is missing, or the first line.
func nvccVersion(text string) string {
	if m := nvccVersionRE.FindStringSubmatch(text); m != nil {
		return "nvcc " + m[1]
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, "release") {
			return strings.TrimSpace(line)
		}
	}
	first, _, _ := strings.Cut(text, "\n")
	return strings.TrimSpace(first)
}

// archsFromEnv reads a comma-separated list of architectures from the
// environment variable env, parsed by parse and without repeats; nil when the
// variable is unset or empty.
func archsFromEnv(backend, env string, parse func(string) (string, error), fix string) ([]string, error) {
	v := strings.TrimSpace(os.Getenv(env))
	if v == "" {
		return nil, nil
	}
	var archs []string
	for _, entry := range strings.Split(v, ",") {
		arch, err := parse(entry)
		if err != nil {
			return nil, fmt.Errorf("toolchain: %s: %s=%q: %w; fix: %s", backend, env, v, err, fix)
		}
		if !slices.Contains(archs, arch) {
			archs = append(archs, arch)
		}
	}
	return archs, nil
}

// probeCUDADevices builds cudaProbeSource with nvcc, runs it, and parses
// what it printed.
func probeCUDADevices(ctx context.Context, nvcc string) ([]GPU, error) {
	dir, err := os.MkdirTemp("", "vkern-cuda-probe-")
	if err != nil {
		return nil, fmt.Errorf("toolchain: cuda: probing the GPU: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "probe.cu"), []byte(cudaProbeSource), 0o644); err != nil {
		return nil, fmt.Errorf("toolchain: cuda: probing the GPU: %w", err)
	}

	buildArgs := []string{"-o", "probe", "probe.cu"}
	bctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	build := inFolder(probeCommand(bctx, nvcc, buildArgs...), dir)
	out, err := build.CombinedOutput()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("toolchain: cuda: building the GPU probe: %w", ctx.Err())
	}
	if bctx.Err() != nil {
		return nil, fmt.Errorf("toolchain: cuda: %w: %s %s did not finish within %v", ErrNoCompiler, nvcc, strings.Join(buildArgs, " "), probeTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("toolchain: cuda: %w: %s cannot build a CUDA program (%v): %s; fix: install a host C++ compiler this nvcc supports (apt-get install g++), or set NVCC to a working nvcc",
			ErrNoCompiler, nvcc, err, tail(out))
	}

	rctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	run := probeCommand(rctx, filepath.Join(dir, "probe"))
	run.Dir = dir
	var stdout, stderr strings.Builder
	run.Stdout = &stdout
	run.Stderr = &stderr
	err = run.Run()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("toolchain: cuda: running the GPU probe: %w", ctx.Err())
	}
	both := []byte(stdout.String() + stderr.String())
	if rctx.Err() != nil {
		return nil, fmt.Errorf("toolchain: cuda: %w: the GPU probe did not answer within %v: %s; fix: %s", ErrNoDevice, probeTimeout, tail(both), cudaNoDeviceFix)
	}
	if err != nil {
		var exitErr *exec.ExitError
		how := err.Error()
		if errors.As(err, &exitErr) {
			how = exitErr.ProcessState.String()
		}
		return nil, fmt.Errorf("toolchain: cuda: %w: the GPU probe built by %s failed (%s): %s; fix: %s", ErrNoDevice, nvcc, how, tail(both), cudaNoDeviceFix)
	}
	gpus, err := parseCUDAProbe(stdout.String())
	if err != nil {
		return nil, fmt.Errorf("toolchain: cuda: %w: %w; the probe printed: %s", ErrNoDevice, err, tail(both))
	}
	return gpus, nil
}

// parseCUDAProbe reads cudaProbeSource's output.
func parseCUDAProbe(out string) ([]GPU, error) {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) == 0 || strings.TrimSpace(lines[0]) != "vkern-cuda-probe 1" {
		return nil, errors.New(`the GPU probe's output does not start with "vkern-cuda-probe 1"`)
	}
	var driver, runtime string
	var gpus []GPU
	for _, line := range lines[1:] {
		line = strings.TrimRight(line, "\r")
		if f := strings.Fields(line); len(f) == 2 && (f[0] == "driver" || f[0] == "runtime") {
			v, err := strconv.Atoi(f[1])
			if err != nil {
				return nil, fmt.Errorf("the GPU probe's %s line %q holds no number", f[0], line)
			}
			if f[0] == "driver" {
				driver = cudaVersionString(v)
			} else {
				runtime = cudaVersionString(v)
			}
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 7 || f[0] != "device" {
			return nil, fmt.Errorf("the GPU probe printed an unexpected line %q", line)
		}
		var n [5]uint64
		for i := range n {
			v, err := strconv.ParseUint(f[1+i], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("the GPU probe's device line %q has a bad number %q", line, f[1+i])
			}
			n[i] = v
		}
		if n[1] < 1 || n[1] > 99 || n[2] > 9 {
			return nil, fmt.Errorf("the GPU probe's device line %q has compute capability %d.%d", line, n[1], n[2])
		}
		major, minor := int(n[1]), int(n[2])
		gpus = append(gpus, GPU{
			Index:             int(n[0]),
			Name:              strings.TrimSpace(f[6]),
			Arch:              cudaArch(major, minor, ""),
			ComputeCapability: fmt.Sprintf("%d.%d", major, minor),
			Multiprocessors:   int(n[3]),
			MemoryBytes:       n[4],
		})
	}
	if len(gpus) == 0 {
		return nil, errors.New("the GPU probe listed no device")
	}
	for i := range gpus {
		gpus[i].DriverVersion, gpus[i].RuntimeVersion = driver, runtime
	}
	return gpus, nil
}

// cudaVersionString renders a CUDA version number (13000, 12040) as
// major.minor ("13.0", "12.4"); 0 (no driver) is "".
func cudaVersionString(v int) string {
	if v <= 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}
