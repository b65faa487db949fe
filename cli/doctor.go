package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/cache"
	"github.com/vkern/vkern/kernels"
	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/toolchain"
)

const doctorHelp = `Usage: vkern doctor

Checks, in order, what vkern needs here and says for each: ok, or what is
missing and the fix. It builds (or finds in the cache) the cpu kernel server,
starts it and pings it. GPU toolchains are probed too: a compiler alone is not
enough, the device must answer. Ops a program declared (package userop) are
listed with the backends they have kernels for; their cpu kernels are in the
server it builds, so a compiler error in one shows here. Where a GPU answers,
its kernel server is built and asked for its collective engine (NCCL, or RCCL
on AMD), which data-parallel training needs: its version, or why it is
missing.

Exit status: 0 the cpu backend works · 1 it does not
`

// doctorTimeout bounds the whole check, a cold compile included.
const doctorTimeout = 5 * time.Minute

func runDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if code, done := parseFlags(fs, args, doctorHelp, stdout, stderr); done {
		return code
	}
	ctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	ok := true
	line := func(status, what, detail string) {
		fmt.Fprintf(stdout, "%-8s %-18s %s\n", status, what, detail)
	}

	compiler, err := toolchain.Detect(ctx, "cpu")
	if err != nil {
		ok = false
		line("missing", "C++ compiler", err.Error())
	} else {
		line("ok", "C++ compiler", fmt.Sprintf("%s (%s), flags %s", compiler.Path, compiler.Version, strings.Join(compiler.Flags, " ")))
		line("ok", "build target", compiler.Target)
	}

	var gpuBackends []string
	for _, gpu := range []struct{ backend, what string }{{"cuda", "CUDA (nvcc)"}, {"hip", "HIP (hipcc)"}} {
		c, err := toolchain.Detect(ctx, gpu.backend)
		switch {
		case err == nil:
			gpuBackends = append(gpuBackends, gpu.backend)
			line("ok", gpu.what, fmt.Sprintf("%s (%s), target %s: `vkern verify --backend %s` will run", c.Path, c.Version, c.Target, gpu.backend))
			for _, g := range c.GPUs {
				line("ok", fmt.Sprintf("GPU %d", g.Index), fmt.Sprintf("%s, %s, %d multiprocessors, %d MiB, driver %s, runtime %s",
					g.Name, g.Arch, g.Multiprocessors, g.MemoryBytes>>20, orUnknown(g.DriverVersion), orUnknown(g.RuntimeVersion)))
			}
		case errors.Is(err, toolchain.ErrNoDevice):
			line("no GPU", gpu.what, err.Error())
		default:
			line("absent", gpu.what, err.Error())
		}
	}
	if out, err := exec.CommandContext(ctx, "nvidia-smi", "-L").Output(); err == nil {
		line("found", "NVIDIA GPUs", strings.TrimSpace(string(out)))
	} else {
		line("absent", "NVIDIA GPUs", "nvidia-smi not found or found no GPU")
	}

	dir, err := cache.DefaultDir()
	if err == nil {
		var store *cache.Store
		if store, err = cache.Open(dir); err == nil {
			entries, _ := store.List()
			line("ok", "cache", fmt.Sprintf("%s (%d entries)", dir, len(entries)))
		}
	}
	if err != nil {
		ok = false
		line("broken", "cache", err.Error())
	}

	for _, o := range op.All() {
		if o.ID < op.FirstUserID {
			continue
		}
		line("declared", "op "+o.Name, fmt.Sprintf("wire id %d, kernels for %s: built into the servers here", o.ID, strings.Join(kernels.DeclaredBackends(o.Name), " and ")))
	}

	if ok {
		start := time.Now()
		dev, err := vkern.Open(ctx, vkern.Options{Backend: "cpu"})
		if err == nil {
			defer dev.Close()
			err = dev.Ping(ctx)
		}
		if err != nil {
			ok = false
			line("broken", "cpu kernel server", err.Error())
		} else {
			info, _ := dev.Info(ctx)
			line("ok", "cpu kernel server", fmt.Sprintf("%s on %s, answered in %s (build or cache lookup included)",
				short(info.CacheKey), info.Device["device"], time.Since(start).Round(time.Millisecond)))
		}
	}
	collectivesLines(ctx, gpuBackends, line)
	if !ok {
		fmt.Fprintln(stdout, "\nvkern cannot run here until the lines above marked missing or broken are fixed.")
		return exitFailure
	}
	fmt.Fprintln(stdout, "\nThe cpu backend works: `vkern verify --backend cpu` will run.")
	return exitOK
}

// collectivesLines reports the collective engine of each GPU backend
// that answered: its server is built (or found in the cache) and asked
// (COMM_INFO), so the version is what ncclGetVersion says.
func collectivesLines(ctx context.Context, backends []string, line func(status, what, detail string)) {
	if len(backends) == 0 {
		line("absent", "NCCL", "no GPU answered here; a cuda kernel server loads NCCL at run time ($VKERN_NCCL, else libnccl.so.2, else Python's nvidia-nccl-cu12), for `vkern train --gpus N`")
		return
	}
	for _, b := range backends {
		what := map[string]string{"cuda": "NCCL", "hip": "RCCL"}[b]
		dev, err := vkern.Open(ctx, vkern.Options{Backend: b})
		if err != nil {
			line("broken", b+" kernel server", err.Error())
			continue
		}
		eng, err := dev.CollectiveEngine(ctx)
		dev.Close()
		if err != nil {
			line("missing", what, fmt.Sprintf("%v; `vkern train --gpus N` needs it", err))
			continue
		}
		line("ok", what, eng.Description)
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func short(h string) string {
	if len(h) > 16 {
		return h[:16]
	}
	return h
}
