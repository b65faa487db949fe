package toolchain

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// ErrNoDevice is wrapped by every DetectCUDA and DetectHIP error that means
// "a compiler is here but no GPU answered", so the architecture to build for
// is unknown. Setting $VKERN_CUDA_ARCH or $VKERN_HIP_ARCH names it instead.
var ErrNoDevice = errors.New("no GPU device answered")

// GPU is what one device said about itself when it was probed.
type GPU struct {
	// Index is the device's number in the runtime's order: the CUDA device
	// ordinal, or the position among rocminfo's GPU agents.
	Index int
	// Name is the device's name: "NVIDIA H100 80GB HBM3" (cuda), or the
	// agent's marketing name, "AMD Radeon RX 6800 XT" (hip).
	Name string
	// Arch is the architecture vkern builds for it: "sm_90a", "gfx1030".
	Arch string
	// ComputeCapability is the CUDA compute capability, "9.0"; "" for hip.
	ComputeCapability string
	// Multiprocessors counts the streaming multiprocessors (cuda) or
	// compute units (hip).
	Multiprocessors int
	// MemoryBytes is the device's global memory; 0 where not known (hip).
	MemoryBytes uint64
	// DriverVersion and RuntimeVersion are the CUDA driver's and runtime's
	// versions as major.minor ("13.0"); "" for hip.
	DriverVersion, RuntimeVersion string
}

// Detect finds and probes the compiler for backend: "cpu" (DetectCPU),
// "cuda" (DetectCUDA) or "hip" (DetectHIP). Choosing among backends ("auto")
// is the caller's business: it can try them in turn and tell ErrNoCompiler
// and ErrNoDevice apart.
func Detect(ctx context.Context, backend string) (*Compiler, error) {
	switch backend {
	case BackendCPU:
		return DetectCPU(ctx)
	case BackendCUDA:
		return DetectCUDA(ctx)
	case BackendHIP:
		return DetectHIP(ctx)
	}
	return nil, fmt.Errorf("toolchain: unknown backend %q; want %q, %q or %q", backend, BackendCPU, BackendCUDA, BackendHIP)
}

// toolSearch says where one GPU tool (nvcc, hipcc, rocminfo) is looked for,
// in order: the file named by the override variable, alone when it is set;
// else bin/<name> under each root variable that is set, then <name> on
// PATH, then the fallback paths.
type toolSearch struct {
	name     string   // "nvcc"
	override string   // variable naming the tool itself: "NVCC"; "" for none
	roots    []string // variables naming an install root: "CUDA_HOME", "CUDA_PATH"
	dirs     []string // folders tried after the roots (hipcc's for rocminfo)
	fallback []string // absolute paths tried last
}

// foundTool is a tool that was found and answered --version (compilers) or
// at least exists (rocminfo).
type foundTool struct {
	name, invoke, resolved string
	versionText            string
}

// findCompiler finds a GPU compiler that answers --version. An error wraps
// ErrNoCompiler, names everything tried with the reason it failed, and ends
// with fix; a cancelled ctx is returned as such.
func (s toolSearch) findCompiler(ctx context.Context, backend, fix string) (foundTool, error) {
	answer := func(nameOrPath string) (foundTool, error) {
		invoke, resolved, err := lookup(nameOrPath)
		if err != nil {
			return foundTool{}, err
		}
		text, err := cachedVersionText(ctx, backend, invoke, resolved)
		if err != nil {
			return foundTool{}, err
		}
		return foundTool{name: filepath.Base(nameOrPath), invoke: invoke, resolved: resolved, versionText: text}, nil
	}
	if s.override != "" {
		if v := strings.TrimSpace(os.Getenv(s.override)); v != "" {
			t, err := answer(v)
			if err != nil {
				if ctx.Err() != nil {
					return foundTool{}, fmt.Errorf("toolchain: %s: probing %s=%q: %w", backend, s.override, v, ctx.Err())
				}
				return foundTool{}, fmt.Errorf("toolchain: %s: %w: %s=%q: %w; fix: set %s to %s's path, or unset it to search %s",
					backend, ErrNoCompiler, s.override, v, err, s.override, s.name, s.where())
			}
			return t, nil
		}
	}
	var tried []string
	for _, c := range s.candidates() {
		t, err := answer(c.path)
		if err == nil {
			return t, nil
		}
		if ctx.Err() != nil {
			return foundTool{}, fmt.Errorf("toolchain: %s: looking for %s: %w", backend, s.name, ctx.Err())
		}
		tried = append(tried, fmt.Sprintf("%s (%v)", c.label, err))
	}
	return foundTool{}, fmt.Errorf("toolchain: %s: %w: no working %s; tried %s; fix: %s",
		backend, ErrNoCompiler, s.name, strings.Join(tried, ", "), fix)
}

// findFile finds the tool without running it: the first candidate that
// exists. It is for tools with no --version (rocminfo). When none exists it
// returns what was tried.
func (s toolSearch) findFile() (invoke, resolved string, tried []string) {
	for _, c := range s.candidates() {
		invoke, resolved, err := lookup(c.path)
		if err == nil {
			return invoke, resolved, nil
		}
		tried = append(tried, fmt.Sprintf("%s (%v)", c.label, err))
	}
	return "", "", tried
}

type toolCandidate struct{ label, path string }

// candidates lists the places to look when the override is unset, each
// once, labelled for an error message.
func (s toolSearch) candidates() []toolCandidate {
	var out []toolCandidate
	seen := map[string]bool{}
	add := func(label, path string) {
		if seen[path] {
			return
		}
		seen[path] = true
		out = append(out, toolCandidate{label, path})
	}
	for _, r := range s.roots {
		if v := strings.TrimSpace(os.Getenv(r)); v != "" {
			p := filepath.Join(v, "bin", s.name)
			add(fmt.Sprintf("$%s/bin/%s = %s", r, s.name, p), p)
		}
	}
	for _, d := range s.dirs {
		p := filepath.Join(d, s.name)
		add(p, p)
	}
	add(fmt.Sprintf("%s on PATH=%q", s.name, os.Getenv("PATH")), s.name)
	for _, p := range s.fallback {
		add(p, p)
	}
	return out
}

// where says in words where the search looks when the override is unset.
func (s toolSearch) where() string {
	var parts []string
	for _, r := range s.roots {
		parts = append(parts, "$"+r+"/bin")
	}
	parts = append(parts, "PATH")
	parts = append(parts, s.fallback...)
	return strings.Join(parts, ", ")
}

// cachedVersionText runs `invoke --version` once per compiler binary and
// process; the binary is known by its resolved path, size and modification
// time, so one replaced in place is asked again.
func cachedVersionText(ctx context.Context, backend, invoke, resolved string) (string, error) {
	key, err := fileKey(backend, invoke, resolved)
	if err != nil {
		return "", err
	}
	probeCache.Lock()
	p, ok := probeCache.m[key]
	probeCache.Unlock()
	if ok {
		return p.versionText, nil
	}
	text, err := versionText(ctx, invoke)
	if err != nil {
		return "", err
	}
	probeCache.Lock()
	if probeCache.m == nil {
		probeCache.m = make(map[probeKey]probed)
	}
	probeCache.m[key] = probed{versionText: text}
	probeCache.Unlock()
	return text, nil
}

// fileKey identifies one binary, as found, for the probe caches.
func fileKey(backend, invoke, resolved string) (probeKey, error) {
	fi, err := os.Stat(resolved)
	if err != nil {
		return probeKey{}, err
	}
	if fi.IsDir() {
		return probeKey{}, fmt.Errorf("%s is a directory", resolved)
	}
	return probeKey{backend, invoke, resolved, fi.Size(), fi.ModTime()}, nil
}

// deviceProbeKey identifies one device probe: the tool that ran it and the
// environment that decides which devices it sees.
type deviceProbeKey struct {
	tool    probeKey
	visible string
}

// deviceCache keeps what each successful device probe saw, for the life of
// the process. Failures are not kept: a GPU that was busy or a driver that
// was loading may answer the next time.
var deviceCache struct {
	sync.Mutex
	m map[deviceProbeKey][]GPU
}

// cachedDevices answers from deviceCache or runs probe and keeps its answer.
func cachedDevices(key deviceProbeKey, probe func() ([]GPU, error)) ([]GPU, error) {
	deviceCache.Lock()
	gpus, ok := deviceCache.m[key]
	deviceCache.Unlock()
	if ok {
		return append([]GPU(nil), gpus...), nil
	}
	gpus, err := probe()
	if err != nil {
		return nil, err
	}
	deviceCache.Lock()
	if deviceCache.m == nil {
		deviceCache.m = make(map[deviceProbeKey][]GPU)
	}
	deviceCache.m[key] = gpus
	deviceCache.Unlock()
	return append([]GPU(nil), gpus...), nil
}

// visibleEnv renders the variables that decide which devices a probe sees,
// for deviceProbeKey.
func visibleEnv(names ...string) string {
	var b strings.Builder
	for _, n := range names {
		v, ok := os.LookupEnv(n)
		fmt.Fprintf(&b, "%s=%t:%q;", n, ok, v)
	}
	return b.String()
}

// distinctArchs returns each GPU's Arch once, in device order, and the
// Target that names them with the device that asked for each.
func distinctArchs(gpus []GPU) (archs []string, target string) {
	var parts []string
	seenArch := map[string]bool{}
	seenPart := map[string]bool{}
	for _, g := range gpus {
		if !seenArch[g.Arch] {
			seenArch[g.Arch] = true
			archs = append(archs, g.Arch)
		}
		part := strings.TrimSpace(g.Arch + " " + g.Name)
		if !seenPart[part] {
			seenPart[part] = true
			parts = append(parts, part)
		}
	}
	return archs, strings.Join(parts, ", ")
}

// gpuCompiler fills a Compiler for a GPU backend from what was found.
func gpuCompiler(backend string, t foundTool, version string, flags, archFlags, archs []string, target string, gpus []GPU) *Compiler {
	archFlag := ""
	if len(archFlags) == 1 {
		archFlag = archFlags[0]
	}
	c := &Compiler{
		Backend:     backend,
		Name:        t.name,
		Path:        t.resolved,
		Invoke:      t.invoke,
		Version:     version,
		VersionText: t.versionText,
		Flags:       flags,
		ArchFlag:    archFlag,
		Arch:        strings.Join(archs, ","),
		Target:      target,
		GPUs:        gpus,
	}
	c.Env = driverEnv()
	c.Fingerprint = fingerprint(c.Path, c.VersionText, c.Flags, c.Env)
	return c
}
