package toolchain

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Nothing here has a GPU, so these tests put a fake nvcc in its place: a
// shell script that answers --version and, asked to build the device probe,
// "compiles" it into a shell script that prints what a real probe would print
// on some GPU (or fails as it would without one). They check how DetectCUDA
// searches, parses and maps what the probe says; the real probe program is
// run only by TestDetectCUDAOnTheRealGPU, which skips without nvcc and a GPU.

// nvcc13Version is `nvcc --version` of CUDA 13.0, as the H100 machines print it.
const nvcc13Version = `nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Jul_16_07:30:01_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.48
Build cuda_13.0.r13.0/compiler.36260728_0`

// fakeNVCC describes a shell script that stands in for nvcc.
type fakeNVCC struct {
	version     string // printed by --version; "" makes --version fail
	buildFails  string // when set, every build prints this to stderr and exits 1
	probeStdout string // what the built probe prints
	probeStderr string // what the built probe prints on stderr
	probeExit   int    // the built probe's exit status
	log         string // when set, every invocation's arguments are appended here
	saveSource  string // when set, the .cu file it builds is copied here
}

// write puts the script at dir/name, with the probe's canned output beside
// it, and returns the script's path.
func (f fakeNVCC) write(t *testing.T, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	stdout, stderr := path+".probe-stdout", path+".probe-stderr"
	for file, text := range map[string]string{stdout: f.probeStdout, stderr: f.probeStderr} {
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var s strings.Builder
	s.WriteString("#!/bin/sh\nPATH=/usr/bin:/bin\n")
	if f.log != "" {
		fmt.Fprintf(&s, "echo \"$*\" >> '%s'\n", f.log)
	}
	s.WriteString("out=''; src=''; prev=''\nfor a in \"$@\"; do\n  case \"$a\" in\n")
	if f.version == "" {
		s.WriteString("    --version) echo 'nvcc: cannot tell' >&2; exit 3;;\n")
	} else {
		fmt.Fprintf(&s, "    --version) printf '%%s\\n' '%s'; exit 0;;\n", strings.ReplaceAll(f.version, "\n", "' '"))
	}
	s.WriteString("    *.cu) src=\"$a\";;\n  esac\n  if [ \"$prev\" = -o ]; then out=\"$a\"; fi\n  prev=\"$a\"\ndone\n")
	if f.buildFails != "" {
		fmt.Fprintf(&s, "echo '%s' >&2\nexit 1\n", f.buildFails)
	}
	if f.saveSource != "" {
		fmt.Fprintf(&s, "cp \"$src\" '%s'\n", f.saveSource)
	}
	fmt.Fprintf(&s, "printf '#!/bin/sh\\nPATH=/usr/bin:/bin\\ncat %s\\ncat %s >&2\\nexit %d\\n' > \"$out\"\nchmod +x \"$out\"\n", stdout, stderr, f.probeExit)
	if err := os.WriteFile(path, []byte(s.String()), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// probeOutput is what cudaProbeSource prints for devices given as
// "major minor SMs memory name" strings.
func probeOutput(devices ...string) string {
	var b strings.Builder
	b.WriteString("vkern-cuda-probe 1\ndriver 13000\nruntime 13000\n")
	for i, d := range devices {
		f := strings.SplitN(d, " ", 5)
		fmt.Fprintf(&b, "device\t%d\t%s\t%s\t%s\t%s\t%s\n", i, f[0], f[1], f[2], f[3], f[4])
	}
	return b.String()
}

const (
	h100 = "9 0 132 85045477376 NVIDIA H100 80GB HBM3"
	a100 = "8 0 108 85198045184 NVIDIA A100-SXM4-80GB"
	a10  = "8 6 72 23609475072 NVIDIA A10"
)

// cudaTestEnv gives the test an environment with nothing of the caller's
// CUDA settings: PATH is bin alone, the fallback paths are fallback, and the
// variables DetectCUDA reads are unset (empty).
func cudaTestEnv(t *testing.T, bin string, fallback ...string) {
	t.Helper()
	t.Setenv("PATH", bin)
	for _, v := range []string{"NVCC", "CUDA_HOME", "CUDA_PATH", cudaArchEnv} {
		t.Setenv(v, "")
	}
	saved := nvccSearch.fallback
	nvccSearch.fallback = fallback
	t.Cleanup(func() { nvccSearch.fallback = saved })
}

func TestDetectCUDASearchOrder(t *testing.T) {
	// Each place holds a fake nvcc whose version names the place, so the
	// one chosen shows in Version.
	tests := []struct {
		name     string
		places   []string          // where fakes are put: "nvcc-env", "cuda-home", "cuda-path", "path", "fallback"
		broken   []string          // places whose fake fails --version
		env      map[string]string // "$place" in a value becomes that place's path
		want     string            // the place whose nvcc is used; "" means ErrNoCompiler
		wantErrs []string          // substrings of the error when want is ""
	}{
		{name: "NVCC is used before everything else", places: []string{"nvcc-env", "cuda-home", "path", "fallback"},
			env: map[string]string{"NVCC": "$nvcc-env", "CUDA_HOME": "$cuda-home"}, want: "nvcc-env"},
		{name: "a missing NVCC is an error naming it even when PATH has nvcc", places: []string{"path"},
			env:  map[string]string{"NVCC": "/nonexistent/vkern/nvcc"},
			want: "", wantErrs: []string{`NVCC="/nonexistent/vkern/nvcc"`, "no such file", "unset it to search $CUDA_HOME/bin, $CUDA_PATH/bin, PATH"}},
		{name: "a broken NVCC is an error with its output", places: []string{"nvcc-env", "path"}, broken: []string{"nvcc-env"},
			env: map[string]string{"NVCC": "$nvcc-env"}, want: "", wantErrs: []string{"--version failed", "nvcc: cannot tell"}},
		{name: "CUDA_HOME comes before CUDA_PATH and PATH", places: []string{"cuda-home", "cuda-path", "path", "fallback"},
			env: map[string]string{"CUDA_HOME": "$cuda-home", "CUDA_PATH": "$cuda-path"}, want: "cuda-home"},
		{name: "CUDA_PATH comes before PATH", places: []string{"cuda-path", "path", "fallback"},
			env: map[string]string{"CUDA_PATH": "$cuda-path"}, want: "cuda-path"},
		{name: "a CUDA_HOME without nvcc is passed over for PATH", places: []string{"path"},
			env: map[string]string{"CUDA_HOME": "/nonexistent/cuda"}, want: "path"},
		{name: "PATH comes before /usr/local/cuda/bin", places: []string{"path", "fallback"}, want: "path"},
		{name: "/usr/local/cuda/bin is tried last", places: []string{"fallback"}, want: "fallback"},
		{name: "a broken nvcc on PATH is passed over for the fallback", places: []string{"path", "fallback"}, broken: []string{"path"},
			want: "fallback"},
		{name: "no nvcc anywhere names every place tried and the fix", places: nil,
			env:  map[string]string{"CUDA_HOME": "/nonexistent/cuda"},
			want: "", wantErrs: []string{"no working nvcc", "$CUDA_HOME/bin/nvcc = /nonexistent/cuda/bin/nvcc", "nvcc on PATH=", "not found on PATH",
				"/fallback/bin/nvcc", "install the CUDA toolkit", "NVCC=/path/to/nvcc"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			dirs := map[string]string{}
			for _, place := range []string{"nvcc-env", "cuda-home", "cuda-path", "path", "fallback"} {
				dirs[place] = filepath.Join(root, place)
				if err := os.MkdirAll(filepath.Join(dirs[place], "bin"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			paths := map[string]string{}
			for _, place := range tt.places {
				f := fakeNVCC{version: "nvcc at " + place, probeStdout: probeOutput(h100)}
				if slices.Contains(tt.broken, place) {
					f.version = ""
				}
				paths[place] = f.write(t, filepath.Join(dirs[place], "bin"), "nvcc")
			}
			cudaTestEnv(t, filepath.Join(dirs["path"], "bin"), filepath.Join(dirs["fallback"], "bin", "nvcc"))
			for k, v := range tt.env {
				if strings.HasPrefix(v, "$") {
					if p, ok := paths[v[1:]]; ok && k == "NVCC" {
						v = p
					} else {
						v = dirs[v[1:]]
					}
				}
				t.Setenv(k, v)
			}

			c, err := DetectCUDA(context.Background())
			if tt.want == "" {
				if !errors.Is(err, ErrNoCompiler) {
					t.Fatalf("DetectCUDA = %+v, %v; want ErrNoCompiler", c, err)
				}
				for _, want := range tt.wantErrs {
					want = strings.ReplaceAll(want, "/fallback/", "/"+filepath.Base(dirs["fallback"])+"/")
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error lacks %q:\n%v", want, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.VersionText != "nvcc at "+tt.want || c.Path != paths[tt.want] || c.Name != "nvcc" {
				t.Errorf("got %q at %s named %q, want the nvcc at %s (%s)", c.VersionText, c.Path, c.Name, tt.want, paths[tt.want])
			}
		})
	}
}

func TestNVCCVersion(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{name: "CUDA 13.0's text gives its V number", text: nvcc13Version, want: "nvcc 13.0.48"},
		{name: "CUDA 11.8's text gives its V number", text: "nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2022 NVIDIA Corporation\nBuilt on Wed_Sep_21_10:33:58_PDT_2022\nCuda compilation tools, release 11.8, V11.8.89\nBuild cuda_11.8.r11.8/compiler.31833905_0",
			want: "nvcc 11.8.89"},
		{name: "a release line without a V number is used whole", text: "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.4", want: "Cuda compilation tools, release 12.4"},
		{name: "an unknown text gives its first line", text: "some-wrapper 1.2\nmore", want: "some-wrapper 1.2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nvccVersion(tt.text); got != tt.want {
				t.Errorf("nvccVersion = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseCUDAArch(t *testing.T) {
	tests := []struct{ in, want string }{
		{"8.0", "sm_80"}, {"80", "sm_80"}, {"sm_80", "sm_80"}, {"compute_80", "sm_80"},
		{"8.6", "sm_86"}, {"86", "sm_86"}, {" SM_86 ", "sm_86"}, {"8.9", "sm_89"},
		{"9.0", "sm_90a"}, {"90", "sm_90a"}, {"sm_90", "sm_90a"}, {"90a", "sm_90a"}, {"sm_90a", "sm_90a"}, {"compute_90a", "sm_90a"},
		{"10.0", "sm_100"}, {"100a", "sm_100a"}, {"sm_100f", "sm_100f"}, {"12.0", "sm_120"}, {"7.5", "sm_75"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q maps to %s", tt.in, tt.want), func(t *testing.T) {
			got, err := ParseCUDAArch(tt.in)
			if err != nil || got != tt.want {
				t.Errorf("ParseCUDAArch(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
	for _, bad := range []string{"", "9", "hopper", "sm_9x", "05", "8.10", "1000", "90b", "sm_"} {
		t.Run(fmt.Sprintf("%q is refused", bad), func(t *testing.T) {
			if got, err := ParseCUDAArch(bad); err == nil {
				t.Errorf("ParseCUDAArch(%q) = %q, want an error", bad, got)
			}
		})
	}
}

func TestDetectCUDAMapsTheDevicesAnswerToFlags(t *testing.T) {
	tests := []struct {
		name      string
		devices   []string
		archFlags []string
		arch      string
		target    string
	}{
		{name: "compute capability 8.0 builds for sm_80", devices: []string{a100},
			archFlags: []string{"-gencode=arch=compute_80,code=sm_80"}, arch: "sm_80", target: "sm_80 NVIDIA A100-SXM4-80GB"},
		{name: "compute capability 8.6 builds for sm_86", devices: []string{a10},
			archFlags: []string{"-gencode=arch=compute_86,code=sm_86"}, arch: "sm_86", target: "sm_86 NVIDIA A10"},
		{name: "compute capability 9.0 builds for sm_90a", devices: []string{h100},
			archFlags: []string{"-gencode=arch=compute_90a,code=sm_90a"}, arch: "sm_90a", target: "sm_90a NVIDIA H100 80GB HBM3"},
		{name: "eight identical devices build for one architecture", devices: []string{h100, h100, h100, h100, h100, h100, h100, h100},
			archFlags: []string{"-gencode=arch=compute_90a,code=sm_90a"}, arch: "sm_90a", target: "sm_90a NVIDIA H100 80GB HBM3"},
		{name: "devices of two kinds build for both, in device order", devices: []string{h100, a100, h100},
			archFlags: []string{"-gencode=arch=compute_90a,code=sm_90a", "-gencode=arch=compute_80,code=sm_80"},
			arch:      "sm_90a,sm_80", target: "sm_90a NVIDIA H100 80GB HBM3, sm_80 NVIDIA A100-SXM4-80GB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin := t.TempDir()
			nvcc := fakeNVCC{version: nvcc13Version, probeStdout: probeOutput(tt.devices...)}.write(t, bin, "nvcc")
			cudaTestEnv(t, bin)

			c, err := DetectCUDA(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			wantFlags := concat([]string{"-std=c++17", "-O3"}, tt.archFlags, []string{"-Xcompiler=-pthread"})
			if !slices.Equal(c.Flags, wantFlags) {
				t.Errorf("Flags = %q, want %q", c.Flags, wantFlags)
			}
			wantArchFlag := ""
			if len(tt.archFlags) == 1 {
				wantArchFlag = tt.archFlags[0]
			}
			if c.ArchFlag != wantArchFlag || c.Arch != tt.arch || c.Target != tt.target {
				t.Errorf("ArchFlag %q Arch %q Target %q, want %q %q %q", c.ArchFlag, c.Arch, c.Target, wantArchFlag, tt.arch, tt.target)
			}
			for _, f := range c.Flags {
				if strings.Contains(f, "fast") || strings.Contains(f, "ftz=true") {
					t.Errorf("flag %q relaxes floating point", f)
				}
			}
			if c.Backend != BackendCUDA || c.Name != "nvcc" || c.Path != nvcc || c.Invoke != nvcc ||
				c.Version != "nvcc 13.0.48" || c.VersionText != nvcc13Version {
				t.Errorf("got Backend %q Name %q Path %q Invoke %q Version %q", c.Backend, c.Name, c.Path, c.Invoke, c.Version)
			}
			if want := fingerprint(c.Path, c.VersionText, c.Flags, c.Env); c.Fingerprint != want {
				t.Errorf("Fingerprint = %s, want %s", c.Fingerprint, want)
			}
			if len(c.GPUs) != len(tt.devices) {
				t.Fatalf("GPUs = %+v, want %d", c.GPUs, len(tt.devices))
			}
		})
	}

	t.Run("the GPUs carry what the device said", func(t *testing.T) {
		bin := t.TempDir()
		fakeNVCC{version: nvcc13Version, probeStdout: strings.Replace(probeOutput(a10, h100), "driver 13000", "driver 12080", 1)}.write(t, bin, "nvcc")
		cudaTestEnv(t, bin)
		c, err := DetectCUDA(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		want := []GPU{
			{Index: 0, Name: "NVIDIA A10", Arch: "sm_86", ComputeCapability: "8.6", Multiprocessors: 72, MemoryBytes: 23609475072, DriverVersion: "12.8", RuntimeVersion: "13.0"},
			{Index: 1, Name: "NVIDIA H100 80GB HBM3", Arch: "sm_90a", ComputeCapability: "9.0", Multiprocessors: 132, MemoryBytes: 85045477376, DriverVersion: "12.8", RuntimeVersion: "13.0"},
		}
		if !slices.Equal(c.GPUs, want) {
			t.Errorf("GPUs =\n%+v\nwant\n%+v", c.GPUs, want)
		}
	})

	t.Run("another architecture gives another fingerprint", func(t *testing.T) {
		bin := t.TempDir()
		fakeNVCC{version: nvcc13Version, probeStdout: probeOutput(h100)}.write(t, bin, "nvcc")
		cudaTestEnv(t, bin)
		hopper, err := DetectCUDA(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv(cudaArchEnv, "80")
		ampere, err := DetectCUDA(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if hopper.Fingerprint == ampere.Fingerprint {
			t.Errorf("sm_90a and sm_80 builds share fingerprint %s", hopper.Fingerprint)
		}
	})
}

func TestDetectCUDAWithoutAGPU(t *testing.T) {
	noDevice := "vkern-cuda-probe: cudaGetDeviceCount failed: cudaErrorNoDevice (no CUDA-capable device is detected)"
	tests := []struct {
		name     string
		nvcc     fakeNVCC
		env      string   // VKERN_CUDA_ARCH
		flags    []string // the arch flags wanted; nil means an error
		arch     string   // Arch and Target wanted with flags
		is       error    // the error it must wrap
		wantErrs []string
	}{
		{name: "VKERN_CUDA_ARCH=90a compiles for Hopper without asking a device",
			nvcc: fakeNVCC{version: nvcc13Version, probeExit: 2, probeStderr: noDevice}, env: "90a",
			flags: []string{"-gencode=arch=compute_90a,code=sm_90a"}, arch: "sm_90a"},
		{name: "VKERN_CUDA_ARCH=sm_90a is the same",
			nvcc: fakeNVCC{version: nvcc13Version, probeExit: 2, probeStderr: noDevice}, env: "sm_90a",
			flags: []string{"-gencode=arch=compute_90a,code=sm_90a"}, arch: "sm_90a"},
		{name: "VKERN_CUDA_ARCH may list several architectures, each once",
			nvcc: fakeNVCC{version: nvcc13Version, probeExit: 2, probeStderr: noDevice}, env: "8.6, 90a,sm_86",
			flags: []string{"-gencode=arch=compute_86,code=sm_86", "-gencode=arch=compute_90a,code=sm_90a"}, arch: "sm_86,sm_90a"},
		{name: "a bad VKERN_CUDA_ARCH is reported with its value and the fix",
			nvcc: fakeNVCC{version: nvcc13Version}, env: "hopper",
			wantErrs: []string{`VKERN_CUDA_ARCH="hopper"`, `"hopper" is not a compute capability`, "such as 90a"}},
		{name: "a probe that finds no device is ErrNoDevice with its output and the hint",
			nvcc: fakeNVCC{version: nvcc13Version, probeExit: 2, probeStderr: noDevice}, is: ErrNoDevice,
			wantErrs: []string{"cudaErrorNoDevice", "no CUDA-capable device is detected", "exit status 2", "set VKERN_CUDA_ARCH", "VKERN_CUDA_ARCH=90a"}},
		{name: "a driver older than the runtime is ErrNoDevice with the probe's words",
			nvcc: fakeNVCC{version: nvcc13Version, probeExit: 2, probeStdout: "vkern-cuda-probe 1\ndriver 12020\nruntime 13000\n",
				probeStderr: "vkern-cuda-probe: cudaGetDeviceCount failed: cudaErrorInsufficientDriver (CUDA driver version is insufficient for CUDA runtime version)"},
			is: ErrNoDevice, wantErrs: []string{"cudaErrorInsufficientDriver", "driver 12020", "VKERN_CUDA_ARCH"}},
		{name: "a probe that prints nonsense is ErrNoDevice quoting it",
			nvcc: fakeNVCC{version: nvcc13Version, probeStdout: "hello\n"}, is: ErrNoDevice,
			wantErrs: []string{`does not start with "vkern-cuda-probe 1"`, "hello"}},
		{name: "a probe with a malformed device line is ErrNoDevice quoting it",
			nvcc: fakeNVCC{version: nvcc13Version, probeStdout: "vkern-cuda-probe 1\ndevice\t0\tnine\t0\t1\t1\tX\n"}, is: ErrNoDevice,
			wantErrs: []string{`bad number "nine"`}},
		{name: "an nvcc that cannot build the probe is ErrNoCompiler with its output and the fix",
			nvcc: fakeNVCC{version: nvcc13Version, buildFails: "nvcc fatal   : Failed to preprocess host compiler properties."}, is: ErrNoCompiler,
			wantErrs: []string{"cannot build a CUDA program", "Failed to preprocess host compiler properties", "apt-get install g++"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin := t.TempDir()
			log := filepath.Join(t.TempDir(), "calls")
			tt.nvcc.log = log
			tt.nvcc.write(t, bin, "nvcc")
			cudaTestEnv(t, bin)
			t.Setenv(cudaArchEnv, tt.env)

			c, err := DetectCUDA(context.Background())
			if tt.flags != nil {
				if err != nil {
					t.Fatal(err)
				}
				want := concat([]string{"-std=c++17", "-O3"}, tt.flags, []string{"-Xcompiler=-pthread"})
				if !slices.Equal(c.Flags, want) {
					t.Errorf("Flags = %q, want %q", c.Flags, want)
				}
				if c.Arch != tt.arch || c.Target != tt.arch {
					t.Errorf("Arch %q Target %q, want %q for both", c.Arch, c.Target, tt.arch)
				}
				if c.GPUs != nil {
					t.Errorf("GPUs = %+v, want nil: no device was asked", c.GPUs)
				}
				calls, _ := os.ReadFile(log)
				if strings.TrimSpace(string(calls)) != "--version" {
					t.Errorf("nvcc ran as %q; want only --version (no probe without a device)", calls)
				}
				return
			}
			if err == nil {
				t.Fatalf("DetectCUDA succeeded with %+v, want an error", c)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error does not wrap %v: %v", tt.is, err)
			}
			if tt.is == ErrNoDevice && errors.Is(err, ErrNoCompiler) {
				t.Errorf("a missing device also reads as a missing compiler: %v", err)
			}
			for _, want := range tt.wantErrs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
		})
	}
}

func TestDetectCUDAProbesOnce(t *testing.T) {
	bin := t.TempDir()
	tmp := t.TempDir()
	log, source := filepath.Join(tmp, "calls"), filepath.Join(tmp, "probe.cu")
	nvcc := fakeNVCC{version: nvcc13Version, probeStdout: probeOutput(h100), log: log, saveSource: source}
	nvcc.write(t, bin, "nvcc")
	cudaTestEnv(t, bin)
	t.Setenv("CUDA_VISIBLE_DEVICES", "0")
	calls := func() []string {
		t.Helper()
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}

	first, err := DetectCUDA(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Run("the probe is cudaProbeSource, built with no flags", func(t *testing.T) {
		if got := calls(); !slices.Equal(got, []string{"--version", "-o probe probe.cu"}) {
			t.Errorf("nvcc ran as %q", got)
		}
		b, err := os.ReadFile(source)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != cudaProbeSource || !strings.Contains(string(b), "cudaGetDeviceProperties") {
			t.Errorf("the probe built was not cudaProbeSource:\n%s", b)
		}
	})
	t.Run("a second detection runs nothing", func(t *testing.T) {
		second, err := DetectCUDA(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := calls(); len(got) != 2 {
			t.Errorf("nvcc ran again: %q", got)
		}
		if second.Fingerprint != first.Fingerprint || second.Target != first.Target {
			t.Errorf("second detection differs: %+v vs %+v", second, first)
		}
	})
	t.Run("other visible devices are probed again", func(t *testing.T) {
		t.Setenv("CUDA_VISIBLE_DEVICES", "1")
		if _, err := DetectCUDA(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := calls(); len(got) != 3 || got[2] != "-o probe probe.cu" {
			t.Errorf("nvcc calls %q, want one more probe build", got)
		}
	})
	t.Run("a failed probe is not kept", func(t *testing.T) {
		t.Setenv("CUDA_VISIBLE_DEVICES", "2")
		nvccPath := filepath.Join(bin, "nvcc")
		if err := os.WriteFile(nvccPath+".probe-stdout", []byte("garbage\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := DetectCUDA(context.Background()); !errors.Is(err, ErrNoDevice) {
			t.Fatalf("DetectCUDA with a garbled probe = %v, want ErrNoDevice", err)
		}
		if err := os.WriteFile(nvccPath+".probe-stdout", []byte(probeOutput(a100)), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := DetectCUDA(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if c.Arch != "sm_80" {
			t.Errorf("Arch = %q after the device answered, want sm_80", c.Arch)
		}
	})
}

func TestDetectCUDAStopsWhenTheContextIsCancelled(t *testing.T) {
	bin := t.TempDir()
	fakeNVCC{version: "nvcc cancelled", probeStdout: probeOutput(h100)}.write(t, bin, "nvcc")
	cudaTestEnv(t, bin)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := DetectCUDA(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("DetectCUDA with a cancelled context = %v, want context.Canceled", err)
	}
}

// buildUnits writes units (path under src/ → source) into a new folder,
// compiles each with c.CompileCommand and links the objects into server
// with c.LinkCommand, as package cache builds the kernel server. It returns
// the folder.
func buildUnits(t *testing.T, c *Compiler, units map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	var objects []string
	for _, unit := range slices.Sorted(maps.Keys(units)) {
		full := filepath.Join(dir, "src", filepath.FromSlash(unit))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(units[unit]), 0o644); err != nil {
			t.Fatal(err)
		}
		obj := strings.TrimSuffix(path.Base(unit), path.Ext(unit)) + ".o"
		objects = append(objects, obj)
		run(t, dir, c.CompileCommand("src", unit, obj))
	}
	run(t, dir, c.LinkCommand(objects, "server"))
	return dir
}

// run runs argv in dir and fails the test, quoting the output, if it fails.
func run(t *testing.T, dir string, argv []string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%q failed: %v\n%s", argv, err, out)
	}
}

// TestDetectCUDAOnTheRealGPU runs where nvcc and an NVIDIA GPU are: it
// detects them for real, then builds a small kernel with CompileCommand's
// and LinkCommand's argvs (two units, as the server) and runs it, which
// shows that nvcc takes the flags and that the -gencode target runs on the
// device. It skips elsewhere.
func TestDetectCUDAOnTheRealGPU(t *testing.T) {
	c, err := DetectCUDA(context.Background())
	if errors.Is(err, ErrNoCompiler) || errors.Is(err, ErrNoDevice) {
		t.Skipf("no nvcc or no GPU here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("found %s (%s) at %s, flags %q, target %q", c.Name, c.Version, c.Path, c.Flags, c.Target)
	for _, g := range c.GPUs {
		t.Logf("GPU %d: %+v", g.Index, g)
	}
	if c.GPUs == nil {
		t.Skipf("%s is set: no device was asked", cudaArchEnv)
	}
	g := c.GPUs[0]
	if g.Name == "" || g.ComputeCapability == "" || g.Multiprocessors < 1 || g.MemoryBytes == 0 || g.DriverVersion == "" || g.RuntimeVersion == "" {
		t.Errorf("incomplete GPU: %+v", g)
	}

	// Two units, as the kernel server is built: the kernel and its launch
	// in one, main in the other.
	dir := buildUnits(t, c, map[string]string{
		"cuda/put.cu": `#include <cuda_runtime.h>
__global__ void put(int* p) { p[threadIdx.x] = 40 + threadIdx.x; }
void launch_put(int* p) { put<<<1, 3>>>(p); }
`,
		"cuda/main.cu": `#include <cstdio>
#include <cuda_runtime.h>
void launch_put(int* p);
int main() {
  int* d = nullptr; int h[3] = {0, 0, 0};
  if (cudaMalloc(&d, sizeof h) != cudaSuccess) return 2;
  launch_put(d);
  cudaError_t e = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) { std::printf("%s\n", cudaGetErrorName(e)); return 3; }
  std::printf("%d %d %d\n", h[0], h[1], h[2]);
  return 0;
}
`,
	})
	out, err := exec.Command(filepath.Join(dir, "server")).CombinedOutput()
	if err != nil {
		t.Fatalf("the built program failed: %v\n%s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), "40 41 42"; got != want {
		t.Errorf("the built program printed %q, want %q", got, want)
	}
}
