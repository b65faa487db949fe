package toolchain

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNoCompiler is wrapped by every DetectCPU error that means "no usable
// compiler here": none on PATH, or $CXX names one that is missing or broken.
var ErrNoCompiler = errors.New("no usable C++ compiler")

const (
	// versionTimeout bounds one `--version` run.
	versionTimeout = 10 * time.Second
	// probeTimeout bounds one probe build of probeSource.
	probeTimeout = 60 * time.Second
	// waitDelay bounds how long a probe's pipes may stay open after the
	// compiler exits or is killed (a stray grandchild holding them).
	waitDelay = 2 * time.Second
	// outputTailLines is how much of a failed probe's output an error quotes.
	outputTailLines = 8
)

// probeSource is the program probes build. Throwing an exception needs the
// C++ runtime library (__cxa_throw and friends), which the optimizer cannot
// remove because the throw depends on argc, so linking fails with a C
// compiler driver (CXX=gcc, or clang called as clang): such drivers compile
// .cc files as C++ but do not link the C++ library.
const probeSource = `int main(int argc, char**) {
  try { if (argc > 100) throw argc; } catch (int n) { return n; }
  return 0;
}
`

// cpuCandidates are the compilers DetectCPU tries on PATH, in order.
var cpuCandidates = []string{"g++", "clang++", "c++"}

// cpuBaseFlags come before the architecture flag; cpuTailFlags after it.
var (
	cpuBaseFlags = []string{"-std=c++17", "-O3"}
	cpuTailFlags = []string{"-pthread"}
	cpuArchFlags = []string{"-march=native", "-mcpu=native"}
)

const cxxFix = "set CXX to a working compiler's name or path (CXX=g++ or CXX=/usr/bin/clang++), or unset CXX to search PATH for g++, clang++ and c++"

// DetectCPU finds and probes the C++ compiler for the cpu backend.
//
// When $CXX is set it names the compiler (a name looked up on PATH, or a
// path); if that compiler is missing or cannot build a program the error
// names $CXX's value and the fix, and no other compiler is tried. Otherwise
// g++, clang++ and c++ are tried on PATH in that order. Every error that means
// no compiler could be used wraps ErrNoCompiler; a cancelled ctx is returned
// as such.
func DetectCPU(ctx context.Context) (*Compiler, error) {
	if cxx := strings.TrimSpace(os.Getenv("CXX")); cxx != "" {
		c, err := probeCPU(ctx, cxx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("toolchain: probing CXX=%q: %w", cxx, ctx.Err())
			}
			return nil, fmt.Errorf("toolchain: %w: CXX=%q: %w; fix: %s", ErrNoCompiler, cxx, err, cxxFix)
		}
		return c, nil
	}
	var tried []string
	for _, name := range cpuCandidates {
		c, err := probeCPU(ctx, name)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("toolchain: looking for a C++ compiler: %w", ctx.Err())
		}
		tried = append(tried, fmt.Sprintf("%s (%v)", name, err))
	}
	return nil, fmt.Errorf("toolchain: %w: CXX is unset, and on PATH=%q tried %s; fix: install g++ (apt-get install g++) or set CXX=/path/to/compiler",
		ErrNoCompiler, os.Getenv("PATH"), strings.Join(tried, ", "))
}

// probeKey identifies one compiler binary for the process-wide probe cache.
type probeKey struct {
	backend, invoke, resolved string
	size                      int64
	modTime                   time.Time
}

// probed is what probing learned about one compiler binary.
type probed struct {
	versionText string
	flags       []string
	archFlag    string
}

var probeCache struct {
	sync.Mutex
	m map[probeKey]probed
}

// probeCPU looks nameOrPath up and probes it as a cpu compiler, or answers
// from the probe cache.
func probeCPU(ctx context.Context, nameOrPath string) (*Compiler, error) {
	invoke, resolved, err := lookup(nameOrPath)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(resolved)
	if err != nil {
		return nil, err
	}
	key := probeKey{BackendCPU, invoke, resolved, fi.Size(), fi.ModTime()}

	probeCache.Lock()
	p, ok := probeCache.m[key]
	probeCache.Unlock()
	if !ok {
		// Two goroutines may probe the same compiler at once; both get the
		// same answer, so the duplicate work is harmless.
		p, err = probeCPUFlags(ctx, invoke)
		if err != nil {
			return nil, err
		}
		probeCache.Lock()
		if probeCache.m == nil {
			probeCache.m = make(map[probeKey]probed)
		}
		probeCache.m[key] = p
		probeCache.Unlock()
	}

	version, _, _ := strings.Cut(p.versionText, "\n")
	c := &Compiler{
		Backend:     BackendCPU,
		Name:        filepath.Base(nameOrPath),
		Path:        resolved,
		Invoke:      invoke,
		Version:     strings.TrimSpace(version),
		VersionText: p.versionText,
		Flags:       append([]string(nil), p.flags...),
		ArchFlag:    p.archFlag,
		Target:      HostTarget(),
	}
	c.Env = driverEnv()
	c.Fingerprint = fingerprint(c.Path, c.VersionText, c.Flags, c.Env)
	return c, nil
}

// probeCPUFlags reads the compiler's version, checks that it can build a
// program with the base flags, and finds the architecture flag it accepts.
func probeCPUFlags(ctx context.Context, invoke string) (probed, error) {
	text, err := versionText(ctx, invoke)
	if err != nil {
		return probed{}, err
	}
	base := concat(cpuBaseFlags, cpuTailFlags)
	if ok, out, err := compiles(ctx, invoke, base, true); err != nil {
		return probed{}, err
	} else if !ok {
		return probed{}, fmt.Errorf("cannot build a C++ program with %s: %s", strings.Join(base, " "), tail(out))
	}
	arch := ""
	for _, f := range cpuArchFlags {
		ok, _, err := compiles(ctx, invoke, concat(cpuBaseFlags, []string{f, "-Werror"}, cpuTailFlags), false)
		if err != nil {
			return probed{}, err
		}
		if ok {
			arch = f
			break
		}
	}
	flags := concat(cpuBaseFlags, cpuTailFlags)
	if arch != "" {
		flags = concat(cpuBaseFlags, []string{arch}, cpuTailFlags)
	}
	return probed{versionText: text, flags: flags, archFlag: arch}, nil
}

// lookup finds nameOrPath as exec would and returns its absolute path with
// symlinks kept (invoke) and resolved (resolved).
func lookup(nameOrPath string) (invoke, resolved string, err error) {
	p, err := exec.LookPath(nameOrPath)
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) && !strings.ContainsRune(nameOrPath, filepath.Separator) {
			return "", "", errors.New("not found on PATH")
		}
		return "", "", err
	}
	if invoke, err = filepath.Abs(p); err != nil {
		return "", "", err
	}
	if resolved, err = filepath.EvalSymlinks(invoke); err != nil {
		return "", "", err
	}
	return invoke, resolved, nil
}

// versionText runs `invoke --version` and returns its trimmed output.
func versionText(ctx context.Context, invoke string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	cmd := probeCommand(ctx, invoke, "--version")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return "", fmt.Errorf("%s --version did not answer within %v: %w", invoke, versionTimeout, ctx.Err())
	}
	if err != nil {
		return "", fmt.Errorf("%s --version failed (%v): %s", invoke, err, tail(out))
	}
	text := strings.TrimSpace(string(out))
	if text == "" {
		return "", fmt.Errorf("%s --version printed nothing", invoke)
	}
	return text, nil
}

// compiles reports whether invoke builds probeSource with flags: linked
// into an executable when link is set, else compiled to an object file. err is
// set only when the probe itself could not run (timeout, cancelled context,
// no temporary folder); a compiler that ran and refused gives ok false and its
// output.
func compiles(ctx context.Context, invoke string, flags []string, link bool) (ok bool, out []byte, err error) {
	dir, err := os.MkdirTemp("", "vkern-probe-")
	if err != nil {
		return false, nil, fmt.Errorf("probing the compiler: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "probe.cc"), []byte(probeSource), 0o644); err != nil {
		return false, nil, fmt.Errorf("probing the compiler: %w", err)
	}
	args := append([]string(nil), flags...)
	if link {
		args = append(args, "-o", "probe", "probe.cc")
	} else {
		args = append(args, "-c", "-o", "probe.o", "probe.cc")
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cmd := inFolder(probeCommand(ctx, invoke, args...), dir)
	out, runErr := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return false, out, fmt.Errorf("%s %s did not finish within %v: %w", invoke, strings.Join(args, " "), probeTimeout, ctx.Err())
	}
	var exitErr *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exitErr) {
		return false, out, fmt.Errorf("running %s: %w", invoke, runErr)
	}
	return runErr == nil, out, nil
}

// probeCommand is the one place probes are set up: the C locale so that the
// version text, and with it the fingerprint, does not depend on the user's
// language; a process group killed whole when it is cancelled
// (GroupCommand); and a WaitDelay so a stray grandchild cannot hold a
// probe open.
func probeCommand(ctx context.Context, invoke string, args ...string) *exec.Cmd {
	cmd := GroupCommand(ctx, invoke, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.WaitDelay = waitDelay
	return cmd
}

// GroupCommand is exec.CommandContext for a compiler (or a probe of one):
// it runs in a process group of its own, and when ctx ends the whole group
// is killed, since killing the driver alone (g++, nvcc) would leave its
// children (cc1plus, as, ld) running and holding the output pipes open.
func GroupCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd
}

// inFolder runs cmd in dir with dir as its TMPDIR too, so that what a
// compiler killed mid-probe leaves behind goes when dir does.
func inFolder(cmd *exec.Cmd, dir string) *exec.Cmd {
	cmd.Dir = dir
	cmd.Env = append(cmd.Env, "TMPDIR="+dir)
	return cmd
}

// tail returns the last outputTailLines lines of out, on one line each
// separated by " | ", for quoting in an error.
func tail(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(bytes.ToValidUTF8(out, []byte("?")))), "\n")
	if len(lines) > outputTailLines {
		lines = lines[len(lines)-outputTailLines:]
	}
	s := strings.Join(lines, " | ")
	if s == "" {
		return "(no output)"
	}
	return s
}

func concat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
