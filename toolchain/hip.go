package toolchain

import (
	"bufio"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// hipArchEnv names the HIP architectures instead of rocminfo's answer.
const hipArchEnv = "VKERN_HIP_ARCH"

// hipccSearch is where DetectHIP looks for hipcc.
var hipccSearch = toolSearch{
	name:     "hipcc",
	override: "HIPCC",
	roots:    []string{"ROCM_PATH"},
	fallback: []string{"/opt/rocm/bin/hipcc"},
}

// rocminfoFallback is where DetectHIP looks for rocminfo last.
var rocminfoFallback = []string{"/opt/rocm/bin/rocminfo"}

const hipccFix = "install ROCm's hipcc (apt-get install hipcc on Debian 12) and put it on PATH, or set HIPCC=/path/to/hipcc or ROCM_PATH=/opt/rocm"

// hipNoDeviceFix is the hint every ErrNoDevice from DetectHIP ends with.
const hipNoDeviceFix = "run on a machine whose AMD GPU answers rocminfo, or set " + hipArchEnv +
	" to the GPU architectures to compile without one (" + hipArchEnv + "=gfx1030 or " + hipArchEnv + "=gfx1030,gfx90a)"

// hipBaseFlags come before the --offload-arch flags, hipTailFlags after
// them. hipcc is clang, which takes -pthread itself.
var (
	hipBaseFlags = []string{"-std=c++17", "-O3"}
	hipTailFlags = []string{"-pthread"}
)

// DetectHIP finds hipcc and the AMD GPU architectures to build for.
//
// hipcc is the file named by $HIPCC when that is set (nothing else is
// tried), else the first that answers --version of $ROCM_PATH/bin/hipcc,
// hipcc on PATH and /opt/rocm/bin/hipcc; when none does, the error wraps
// ErrNoCompiler.
//
// The architectures come from $VKERN_HIP_ARCH when that is set (a
// comma-separated list, "gfx1030,gfx90a"; see ParseHIPArch), else from the
// gfx names of rocminfo's GPU agents (CPU agents are skipped), each once,
// in rocminfo's order. rocminfo is looked for in $ROCM_PATH/bin, beside
// hipcc, on PATH and in /opt/rocm/bin. When rocminfo is missing, fails or
// lists no GPU agent, the error wraps ErrNoDevice, quotes the end of its
// output and says how to set $VKERN_HIP_ARCH. Each architecture gets its own
// --offload-arch flag. A cancelled ctx is returned as such.
func DetectHIP(ctx context.Context) (*Compiler, error) {
	hipcc, err := hipccSearch.findCompiler(ctx, BackendHIP, hipccFix)
	if err != nil {
		return nil, err
	}
	var (
		archs  []string
		target string
		gpus   []GPU
	)
	if archs, err = archsFromEnv(BackendHIP, hipArchEnv, ParseHIPArch,
		"set it to gfx names separated by commas (gfx1030,gfx90a), or unset it to ask rocminfo"); err != nil {
		return nil, err
	}
	if archs != nil {
		target = strings.Join(archs, ",")
	} else {
		gpus, err = hipDevices(ctx, hipcc)
		if err != nil {
			return nil, err
		}
		archs, target = distinctArchs(gpus)
	}

	var archFlags []string
	for _, a := range archs {
		archFlags = append(archFlags, "--offload-arch="+a)
	}
	flags := concat(hipBaseFlags, archFlags, hipTailFlags)
	return gpuCompiler(BackendHIP, hipcc, hipccVersionOf(hipcc.versionText), flags, archFlags, archs, target, gpus), nil
}

// hipccVersion is Compiler.Version for hipcc: "hipcc (HIP version:
// 5.2.21153-0)". The line is looked for, not assumed first: Debian's hipcc
// prints a rocm_agent_enumerator traceback before it on machines without an
// AMD GPU.
func hipccVersionOf(text string) string {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "HIP version:"); ok {
			return "hipcc (HIP " + strings.TrimSpace(v) + ")"
		}
	}
	first, _, _ := strings.Cut(text, "\n")
	return strings.TrimSpace(first)
}

// hipArchRE matches an AMD GPU target ID: a processor ("gfx90a", "gfx1030",
// "gfx9-generic") and optional features ("gfx90a:xnack-:sramecc+").
var hipArchRE = regexp.MustCompile(`^gfx[0-9a-z]+(-generic)?(:[a-z0-9]+[+-])*$`)

// ParseHIPArch checks one entry of $VKERN_HIP_ARCH, an AMD GPU target as
// --offload-arch takes it ("gfx1030", "gfx90a:xnack-"), and returns it
// trimmed and in lower case.
func ParseHIPArch(s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if !hipArchRE.MatchString(s) {
		return "", fmt.Errorf("%q is not an AMD GPU architecture (gfx1030, gfx90a, gfx90a:xnack-)", s)
	}
	return s, nil
}

// hipDevices finds rocminfo, runs it (once per process while it succeeds)
// and returns its GPU agents.
func hipDevices(ctx context.Context, hipcc foundTool) ([]GPU, error) {
	search := toolSearch{
		name:     "rocminfo",
		roots:    []string{"ROCM_PATH"},
		dirs:     []string{filepath.Dir(hipcc.invoke)},
		fallback: rocminfoFallback,
	}
	invoke, resolved, tried := search.findFile()
	if invoke == "" {
		return nil, fmt.Errorf("toolchain: hip: %w: rocminfo, which names the GPU's architecture, is missing; tried %s; fix: install rocminfo (apt-get install rocminfo), or %s",
			ErrNoDevice, strings.Join(tried, ", "), hipNoDeviceFix)
	}
	key, err := fileKey(BackendHIP, invoke, resolved)
	if err != nil {
		return nil, fmt.Errorf("toolchain: hip: %w", err)
	}
	dk := deviceProbeKey{key, visibleEnv("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL")}
	return cachedDevices(dk, func() ([]GPU, error) { return runROCmInfo(ctx, invoke) })
}

// runROCmInfo runs rocminfo and parses its GPU agents.
func runROCmInfo(ctx context.Context, rocminfo string) ([]GPU, error) {
	rctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	out, err := probeCommand(rctx, rocminfo).CombinedOutput()
	// rocminfo colours its complaints ("\x1b[31mROCk module is NOT loaded");
	// an error message quotes them without the escapes.
	out = ansiEscapeRE.ReplaceAll(out, nil)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("toolchain: hip: running rocminfo: %w", ctx.Err())
	}
	if rctx.Err() != nil {
		return nil, fmt.Errorf("toolchain: hip: %w: %s did not answer within %v: %s; fix: %s", ErrNoDevice, rocminfo, probeTimeout, tail(out), hipNoDeviceFix)
	}
	if err != nil {
		return nil, fmt.Errorf("toolchain: hip: %w: %s failed (%v): %s; fix: %s", ErrNoDevice, rocminfo, err, tail(out), hipNoDeviceFix)
	}
	gpus, agents := parseROCmInfo(out)
	if len(gpus) == 0 {
		return nil, fmt.Errorf("toolchain: hip: %w: %s lists %d agents and no GPU among them: %s; fix: %s", ErrNoDevice, rocminfo, agents, tail(out), hipNoDeviceFix)
	}
	return gpus, nil
}

// ansiEscapeRE matches a terminal colour or cursor sequence.
var ansiEscapeRE = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

// rocminfoAgentRE matches the line that opens an agent's block ("Agent 2").
var rocminfoAgentRE = regexp.MustCompile(`^\s*Agent\s+[0-9]+\s*$`)

// gfxNameRE matches a GPU agent's Name as rocminfo prints it.
var gfxNameRE = regexp.MustCompile(`^gfx[0-9a-z]+$`)

// parseROCmInfo returns the GPU agents of a rocminfo output, and how many
// agents it lists in all. An agent's own fields are the first "Name:",
// "Marketing Name:", "Device Type:" and "Compute Unit:" of its block; later
// ones (the ISA and pool sections) are not the agent's. A GPU agent whose
// Name is not a gfx name is skipped.
func parseROCmInfo(out []byte) (gpus []GPU, agents int) {
	type agent struct{ fields map[string]string }
	var all []agent
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rocminfoAgentRE.MatchString(line) {
			all = append(all, agent{fields: map[string]string{}})
			continue
		}
		if len(all) == 0 {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "Name", "Marketing Name", "Device Type", "Compute Unit":
			if _, seen := all[len(all)-1].fields[k]; !seen {
				all[len(all)-1].fields[k] = v
			}
		}
	}
	for _, a := range all {
		name := strings.ToLower(a.fields["Name"])
		if a.fields["Device Type"] != "GPU" || !gfxNameRE.MatchString(name) {
			continue
		}
		g := GPU{Index: len(gpus), Name: a.fields["Marketing Name"], Arch: name}
		if g.Name == "" {
			g.Name = name
		}
		if n, err := strconv.Atoi(a.fields["Compute Unit"]); err == nil {
			g.Multiprocessors = n
		}
		gpus = append(gpus, g)
	}
	return gpus, len(all)
}
