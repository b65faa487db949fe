package toolchain

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// As for cuda, nothing here has an AMD GPU: hipcc is played by fakeCompiler
// and rocminfo by a script that prints a canned listing (or fails as the real
// one does without the amdgpu driver). The real hipcc is run by
// TestHIPBuildsWithTheRealHipcc where it is installed.

// hipccVersion is `hipcc --version` of Debian 12's hipcc (ROCm 5.2).
const hipccVersion = `HIP version: 5.2.21153-0
Debian clang version 15.0.6
Target: x86_64-pc-linux-gnu
Thread model: posix
InstalledDir: /usr/lib/llvm-15/bin`

// rocminfoAgent renders one agent block as rocminfo prints it, with the ISA
// and pool sections whose own Name lines must not be taken for the agent's.
func rocminfoAgent(n int, name, marketing, deviceType string, computeUnits int) string {
	isa := ""
	if deviceType == "GPU" {
		isa = fmt.Sprintf("    ISA 1                    \n      Name:                    amdgcn-amd-amdhsa--%s:sramecc+:xnack-\n      Machine Models:          HSA_MACHINE_MODEL_LARGE            \n", name)
	}
	return fmt.Sprintf(`*******                  
Agent %d                  
*******                  
  Name:                    %s
  Uuid:                    %s-XX                             
  Marketing Name:          %s
  Vendor Name:             AMD                                
  Feature:                 KERNEL_DISPATCH                    
  Profile:                 BASE_PROFILE                       
  Node:                    %d                                  
  Device Type:             %s
  Cache Info:              
    L1:                      16(0x10) KB                        
  Max Clock Freq. (MHz):   2575                               
  Compute Unit:            %d
  Pool Info:               
    Pool 1                   
      Segment:                 GLOBAL; FLAGS: COARSE GRAINED      
      Size:                    16760832(0xffc000) KB              
  ISA Info:                
%s`, n, name, deviceType, marketing, n-1, deviceType, computeUnits, isa)
}

// rocminfoListing is a whole rocminfo output with the given agent blocks.
func rocminfoListing(agents ...string) string {
	return "ROCk module is loaded\n=====================    \nHSA System Attributes    \n=====================    \n" +
		"Runtime Version:         1.1\nMachine Model:           LARGE                              \n\n" +
		"==========               \nHSA Agents               \n==========               \n" +
		strings.Join(agents, "") + "*** Done ***             \n"
}

var (
	cpuAgent   = rocminfoAgent(1, "AMD Ryzen 9 5950X 16-Core Processor", "AMD Ryzen 9 5950X 16-Core Processor", "CPU", 32)
	rx6800     = rocminfoAgent(2, "gfx1030", "AMD Radeon RX 6800 XT", "GPU", 72)
	mi210      = rocminfoAgent(3, "gfx90a", "AMD Instinct MI210", "GPU", 104)
	secondRX   = rocminfoAgent(4, "gfx1030", "AMD Radeon RX 6800 XT", "GPU", 72)
	noROCkText = "\x1b[31mROCk module is NOT loaded, possibly no GPU devices\x1b[0m\n"
)

// writeROCmInfo puts a fake rocminfo at dir/rocminfo that prints output and
// exits with status, logging each run to log when that is set.
func writeROCmInfo(t *testing.T, dir, output string, status int, log string) string {
	t.Helper()
	listing := filepath.Join(dir, "rocminfo.out")
	if err := os.WriteFile(listing, []byte(output), 0o644); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\nPATH=/usr/bin:/bin\n"
	if log != "" {
		script += fmt.Sprintf("echo run >> '%s'\n", log)
	}
	script += fmt.Sprintf("cat '%s'\nexit %d\n", listing, status)
	path := filepath.Join(dir, "rocminfo")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// hipTestEnv gives the test an environment with nothing of the caller's
// ROCm settings: PATH is bin alone, the fallback paths are the ones given,
// and the variables DetectHIP reads are unset (empty).
func hipTestEnv(t *testing.T, bin, hipccFallback, rocminfoFallbackPath string) {
	t.Helper()
	t.Setenv("PATH", bin)
	for _, v := range []string{"HIPCC", "ROCM_PATH", hipArchEnv} {
		t.Setenv(v, "")
	}
	savedHipcc, savedROCmInfo := hipccSearch.fallback, rocminfoFallback
	hipccSearch.fallback = []string{hipccFallback}
	rocminfoFallback = []string{rocminfoFallbackPath}
	t.Cleanup(func() { hipccSearch.fallback, rocminfoFallback = savedHipcc, savedROCmInfo })
}

func TestDetectHIPSearchOrder(t *testing.T) {
	tests := []struct {
		name     string
		places   []string          // where fake hipccs are put: "hipcc-env", "rocm", "path", "fallback"
		env      map[string]string // "$place" becomes that place's folder (HIPCC: its hipcc)
		want     string            // "" means ErrNoCompiler
		wantErrs []string
	}{
		{name: "HIPCC is used before everything else", places: []string{"hipcc-env", "rocm", "path"},
			env: map[string]string{"HIPCC": "$hipcc-env", "ROCM_PATH": "$rocm"}, want: "hipcc-env"},
		{name: "a missing HIPCC is an error naming it", places: []string{"path"},
			env: map[string]string{"HIPCC": "/nonexistent/hipcc"}, wantErrs: []string{`HIPCC="/nonexistent/hipcc"`, "unset it to search $ROCM_PATH/bin, PATH"}},
		{name: "ROCM_PATH comes before PATH", places: []string{"rocm", "path", "fallback"},
			env: map[string]string{"ROCM_PATH": "$rocm"}, want: "rocm"},
		{name: "PATH comes before /opt/rocm/bin", places: []string{"path", "fallback"}, want: "path"},
		{name: "/opt/rocm/bin is tried last", places: []string{"fallback"}, want: "fallback"},
		{name: "no hipcc anywhere names the places tried and the fix", places: nil,
			wantErrs: []string{"no working hipcc", "hipcc on PATH=", "/fallback/bin/hipcc", "apt-get install hipcc", "HIPCC=/path/to/hipcc"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			dirs, paths := map[string]string{}, map[string]string{}
			for _, place := range []string{"hipcc-env", "rocm", "path", "fallback"} {
				dirs[place] = filepath.Join(root, place)
				if err := os.MkdirAll(filepath.Join(dirs[place], "bin"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for _, place := range tt.places {
				paths[place] = fakeCompiler{version: "hipcc at " + place}.write(t, filepath.Join(dirs[place], "bin"), "hipcc")
			}
			hipTestEnv(t, filepath.Join(dirs["path"], "bin"), filepath.Join(dirs["fallback"], "bin", "hipcc"), "/nonexistent/rocminfo")
			t.Setenv(hipArchEnv, "gfx1030")
			for k, v := range tt.env {
				if strings.HasPrefix(v, "$") {
					if k == "HIPCC" {
						v = paths[v[1:]]
					} else {
						v = dirs[v[1:]]
					}
				}
				t.Setenv(k, v)
			}

			c, err := DetectHIP(context.Background())
			if tt.want == "" {
				if !errors.Is(err, ErrNoCompiler) {
					t.Fatalf("DetectHIP = %+v, %v; want ErrNoCompiler", c, err)
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
			if c.VersionText != "hipcc at "+tt.want || c.Path != paths[tt.want] || c.Name != "hipcc" || c.Backend != BackendHIP {
				t.Errorf("got %q at %s named %q (%s), want the hipcc at %s", c.VersionText, c.Path, c.Name, c.Backend, tt.want)
			}
		})
	}
}

func TestDetectHIPArchitectures(t *testing.T) {
	tests := []struct {
		name      string
		arch      string // VKERN_HIP_ARCH
		rocminfo  string // rocminfo's output; "" means there is no rocminfo
		status    int    // rocminfo's exit status
		archFlags []string
		target    string
		gpus      []GPU
		is        error
		wantErrs  []string
	}{
		{name: "VKERN_HIP_ARCH names one architecture without asking rocminfo", arch: "gfx1030", rocminfo: noROCkText, status: 1,
			archFlags: []string{"--offload-arch=gfx1030"}, target: "gfx1030"},
		{name: "VKERN_HIP_ARCH may list several, trimmed, lowered and each once", arch: " gfx1030 , GFX90A,gfx1030", rocminfo: noROCkText, status: 1,
			archFlags: []string{"--offload-arch=gfx1030", "--offload-arch=gfx90a"}, target: "gfx1030,gfx90a"},
		{name: "VKERN_HIP_ARCH takes target features", arch: "gfx90a:xnack-",
			archFlags: []string{"--offload-arch=gfx90a:xnack-"}, target: "gfx90a:xnack-"},
		{name: "a bad VKERN_HIP_ARCH is reported with its value and the fix", arch: "gfx1030,sm_90",
			wantErrs: []string{`VKERN_HIP_ARCH="gfx1030,sm_90"`, `"sm_90" is not an AMD GPU architecture`, "gfx1030,gfx90a"}},
		{name: "rocminfo's one GPU agent is used and its CPU agent ignored", rocminfo: rocminfoListing(cpuAgent, rx6800),
			archFlags: []string{"--offload-arch=gfx1030"}, target: "gfx1030 AMD Radeon RX 6800 XT",
			gpus: []GPU{{Index: 0, Name: "AMD Radeon RX 6800 XT", Arch: "gfx1030", Multiprocessors: 72}}},
		{name: "rocminfo's GPU agents of two kinds give two arch flags, each once",
			rocminfo:  rocminfoListing(cpuAgent, rx6800, mi210, secondRX),
			archFlags: []string{"--offload-arch=gfx1030", "--offload-arch=gfx90a"},
			target:    "gfx1030 AMD Radeon RX 6800 XT, gfx90a AMD Instinct MI210",
			gpus: []GPU{
				{Index: 0, Name: "AMD Radeon RX 6800 XT", Arch: "gfx1030", Multiprocessors: 72},
				{Index: 1, Name: "AMD Instinct MI210", Arch: "gfx90a", Multiprocessors: 104},
				{Index: 2, Name: "AMD Radeon RX 6800 XT", Arch: "gfx1030", Multiprocessors: 72},
			}},
		{name: "rocminfo without the amdgpu driver is ErrNoDevice with its words and the hint", rocminfo: noROCkText, status: 1,
			is: ErrNoDevice, wantErrs: []string{"ROCk module is NOT loaded, possibly no GPU devices", "exit status 1", "set VKERN_HIP_ARCH", "VKERN_HIP_ARCH=gfx1030,gfx90a"}},
		{name: "rocminfo with only a CPU agent is ErrNoDevice", rocminfo: rocminfoListing(cpuAgent),
			is: ErrNoDevice, wantErrs: []string{"lists 1 agents and no GPU", "VKERN_HIP_ARCH"}},
		{name: "no rocminfo is ErrNoDevice naming the places tried and both fixes",
			is: ErrNoDevice, wantErrs: []string{"rocminfo, which names the GPU's architecture, is missing", "rocminfo on PATH=", "apt-get install rocminfo", "VKERN_HIP_ARCH"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin := t.TempDir()
			log := filepath.Join(t.TempDir(), "rocminfo-runs")
			hipcc := fakeCompiler{version: hipccVersion}.write(t, bin, "hipcc")
			if tt.rocminfo != "" {
				writeROCmInfo(t, bin, tt.rocminfo, tt.status, log)
			}
			hipTestEnv(t, bin, "/nonexistent/hipcc", "/nonexistent/rocminfo")
			t.Setenv(hipArchEnv, tt.arch)

			c, err := DetectHIP(context.Background())
			if tt.archFlags == nil {
				if err == nil {
					t.Fatalf("DetectHIP succeeded with %+v, want an error", c)
				}
				if tt.is != nil && !errors.Is(err, tt.is) {
					t.Errorf("error does not wrap %v: %v", tt.is, err)
				}
				if strings.Contains(err.Error(), "\x1b") {
					t.Errorf("error holds terminal escapes: %q", err)
				}
				for _, want := range tt.wantErrs {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error lacks %q:\n%v", want, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := concat([]string{"-std=c++17", "-O3"}, tt.archFlags, []string{"-pthread"})
			if !slices.Equal(c.Flags, want) {
				t.Errorf("Flags = %q, want %q", c.Flags, want)
			}
			if c.Target != tt.target || !slices.Equal(c.GPUs, tt.gpus) {
				t.Errorf("Target %q GPUs %+v, want %q %+v", c.Target, c.GPUs, tt.target, tt.gpus)
			}
			if c.Backend != BackendHIP || c.Path != hipcc || c.Version != "hipcc (HIP 5.2.21153-0)" {
				t.Errorf("Backend %q Path %q Version %q", c.Backend, c.Path, c.Version)
			}
			if want := fingerprint(c.Path, c.VersionText, c.Flags, c.Env); c.Fingerprint != want {
				t.Errorf("Fingerprint = %s, want %s", c.Fingerprint, want)
			}
			if tt.arch != "" {
				if _, err := os.Stat(log); err == nil {
					t.Errorf("rocminfo ran although %s was set", hipArchEnv)
				}
			}
		})
	}
}

func TestDetectHIPFindsROCmInfoBesideHipcc(t *testing.T) {
	rocm := t.TempDir()
	hipcc := fakeCompiler{version: hipccVersion}.write(t, rocm, "hipcc")
	log := filepath.Join(t.TempDir(), "rocminfo-runs")
	writeROCmInfo(t, rocm, rocminfoListing(cpuAgent, mi210), 0, log)
	hipTestEnv(t, t.TempDir(), "/nonexistent/hipcc", "/nonexistent/rocminfo")
	t.Setenv("HIPCC", hipcc)

	c, err := DetectHIP(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if c.Arch != "gfx90a" {
		t.Errorf("Arch = %q, want gfx90a from the rocminfo beside hipcc", c.Arch)
	}
	t.Run("a second detection does not run rocminfo again", func(t *testing.T) {
		if _, err := DetectHIP(context.Background()); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(log); strings.Count(string(b), "run") != 1 {
			t.Errorf("rocminfo ran %d times, want 1", strings.Count(string(b), "run"))
		}
	})
}

func TestParseROCmInfo(t *testing.T) {
	t.Run("an empty listing has no agents", func(t *testing.T) {
		if gpus, n := parseROCmInfo(nil); gpus != nil || n != 0 {
			t.Errorf("parseROCmInfo(nil) = %+v, %d", gpus, n)
		}
	})
	t.Run("a GPU agent whose name is not a gfx name is skipped", func(t *testing.T) {
		odd := rocminfoAgent(2, "aie2", "AMD NPU", "GPU", 8)
		gpus, n := parseROCmInfo([]byte(rocminfoListing(cpuAgent, odd, mi210)))
		if n != 3 || len(gpus) != 1 || gpus[0].Arch != "gfx90a" || gpus[0].Index != 0 {
			t.Errorf("got %+v of %d agents, want only the gfx90a", gpus, n)
		}
	})
	t.Run("the ISA section's Name is not taken for the agent's", func(t *testing.T) {
		gpus, _ := parseROCmInfo([]byte(rocminfoListing(rx6800)))
		if len(gpus) != 1 || gpus[0].Arch != "gfx1030" {
			t.Errorf("got %+v", gpus)
		}
	})
}

func TestParseHIPArch(t *testing.T) {
	for _, ok := range []string{"gfx1030", "gfx90a", "gfx942", "gfx1101", "gfx90a:xnack-", "gfx90a:sramecc+:xnack-", "gfx9-generic", " GFX1030 "} {
		t.Run(fmt.Sprintf("%q is an architecture", ok), func(t *testing.T) {
			if got, err := ParseHIPArch(ok); err != nil || got != strings.ToLower(strings.TrimSpace(ok)) {
				t.Errorf("ParseHIPArch(%q) = %q, %v", ok, got, err)
			}
		})
	}
	for _, bad := range []string{"", "1030", "sm_90a", "gfx", "gfx1030 gfx90a", "gfx90a:xnack", "--offload-arch=gfx1030"} {
		t.Run(fmt.Sprintf("%q is refused", bad), func(t *testing.T) {
			if got, err := ParseHIPArch(bad); err == nil {
				t.Errorf("ParseHIPArch(%q) = %q, want an error", bad, got)
			}
		})
	}
}

// TestHIPBuildsWithTheRealHipcc runs where hipcc is installed (CI installs
// Debian's): it builds a small kernel for gfx1030 and gfx90a with
// CompileCommand's and LinkCommand's argvs (two units, as the server),
// which shows that hipcc takes the flags and writes a code object for each
// architecture. No AMD GPU is needed, or used: the program is built, not run
// on a device.
func TestHIPBuildsWithTheRealHipcc(t *testing.T) {
	t.Setenv(hipArchEnv, "gfx1030,gfx90a")
	c, err := DetectHIP(context.Background())
	if errors.Is(err, ErrNoCompiler) {
		t.Skipf("no hipcc here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("found %s (%s) at %s, flags %q", c.Name, c.Version, c.Path, c.Flags)
	dir := buildUnits(t, c, map[string]string{
		"hip/put.cu": `#include <hip/hip_runtime.h>
__global__ void put(int* p) { p[threadIdx.x] = 40 + threadIdx.x; }
bool has_put() { return put != nullptr; }
`,
		"hip/main.cu": `#include <cstdio>
bool has_put();
int main() { std::printf("put\n"); return has_put() ? 0 : 1; }
`,
	})
	binary, err := os.ReadFile(filepath.Join(dir, "server"))
	if err != nil {
		t.Fatal(err)
	}
	for _, arch := range []string{"gfx1030", "gfx90a"} {
		if !strings.Contains(string(binary), arch) {
			t.Errorf("the built program holds no code object for %s", arch)
		}
	}
}

func TestHipccVersionSkipsATracebackBeforeIt(t *testing.T) {
	text := "Traceback (most recent call last):\n  File \"/usr/bin/rocm_agent_enumerator\", line 257\nFileNotFoundError: ...\nHIP version: 5.2.21153-0\nDebian clang version 15.0.6\n"
	if got, want := hipccVersionOf(text), "hipcc (HIP 5.2.21153-0)"; got != want {
		t.Errorf("hipccVersionOf = %q, want %q", got, want)
	}
	if got := hipccVersionOf("some other compiler 1.0\nmore"); got != "some other compiler 1.0" {
		t.Errorf("without a HIP line: %q", got)
	}
}
