package toolchain

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"runtime"
	"strings"
	"sync"
)

var hostTarget struct {
	once sync.Once
	s    string
}

// HostTarget describes the CPU this process runs on, which is the CPU that
// -march=native builds for: GOARCH, the CPU model, and the first 12 hex
// digits of the SHA-256 of the CPU's ISA feature list, all read from the
// first processor in /proc/cpuinfo. Two CPUs with the same model name but
// different features (a VM that hides AVX-512, say) get different targets.
// Where /proc/cpuinfo cannot be read (not Linux) the target is GOOS/GOARCH
// only, and binaries built on different CPUs of that system share a key.
func HostTarget() string {
	hostTarget.once.Do(func() {
		info, err := os.ReadFile("/proc/cpuinfo")
		if err != nil {
			hostTarget.s = runtime.GOOS + "/" + runtime.GOARCH + " (no /proc/cpuinfo: CPU model and features unknown)"
			return
		}
		hostTarget.s = targetFromCPUInfo(runtime.GOARCH, info)
	})
	return hostTarget.s
}

// targetFromCPUInfo builds a target from the first processor block of a
// /proc/cpuinfo text. It knows the x86 fields ("model name", "cpu family",
// "model", "flags"), the Arm ones ("CPU implementer", "CPU part", "CPU
// variant", "Features") and the RISC-V ones ("uarch", "isa").
func targetFromCPUInfo(goarch string, cpuinfo []byte) string {
	fields := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(cpuinfo))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	seenProcessor := false
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if k == "processor" {
			if seenProcessor {
				break // only the first processor's block
			}
			seenProcessor = true
			continue
		}
		if _, dup := fields[k]; !dup {
			fields[k] = v
		}
	}

	var model []string
	switch {
	case fields["model name"] != "":
		model = append(model, fields["model name"])
		if f := fields["cpu family"]; f != "" {
			model = append(model, "family "+f)
		}
		if m := fields["model"]; m != "" {
			model = append(model, "model "+m)
		}
	case fields["CPU implementer"] != "":
		model = append(model, "implementer "+fields["CPU implementer"], "part "+fields["CPU part"], "variant "+fields["CPU variant"])
	case fields["uarch"] != "":
		model = append(model, fields["uarch"])
	case fields["cpu model"] != "":
		model = append(model, fields["cpu model"])
	default:
		model = append(model, "unknown model")
	}

	features := ""
	for _, k := range []string{"flags", "Features", "isa"} {
		if v := fields[k]; v != "" {
			features = strings.Join(strings.Fields(v), " ")
			break
		}
	}
	featureHash := "none"
	if features != "" {
		sum := sha256.Sum256([]byte(features))
		featureHash = "sha256:" + hex.EncodeToString(sum[:])[:12]
	}
	return goarch + " " + strings.Join(model, " ") + " (features " + featureHash + ")"
}
