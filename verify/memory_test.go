package verify

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
)

// fakeHost makes HostMemory report free bytes for the rest of the test.
func fakeHost(t *testing.T, free int64) {
	t.Helper()
	saved := HostMemory
	HostMemory = func() (int64, string, error) { return free, "a test's fake limit", nil }
	t.Cleanup(func() { HostMemory = saved })
}

func caseOf(t *testing.T, name, shape string) Case {
	t.Helper()
	o, err := op.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	s, err := o.ParseShape(shape)
	if err != nil {
		t.Fatal(err)
	}
	return Case{Op: o, Shape: s, Dist: oracle.Uniform, Seed: 1}
}

func TestFitRefusesWhatCannotFitBeforeAllocating(t *testing.T) {
	fakeHost(t, 1<<30) // 1 GiB
	for _, tt := range []struct {
		op, shape string
		want      []string
	}{
		{"gemm", "100000x100000x100000", []string{"gemm 100000x100000x100000", "of host memory", "1.00 GiB is free", "a test's fake limit", "use a smaller shape", "sampled check"}},
		{"gemm", "1x1x4294967297", []string{"gemm 1x1x4294967297", "of host memory", "inputs 16.0 GiB twice", "use a smaller shape"}},
		{"softmax", "100000x100000", []string{"softmax 100000x100000", "reference", "use a smaller shape"}},
	} {
		c := caseOf(t, tt.op, tt.shape)
		_, err := Fit(context.Background(), []Case{c}, nil)
		var tooLarge *TooLargeError
		if !errors.As(err, &tooLarge) {
			t.Fatalf("%s %s: error %v, want a *TooLargeError", tt.op, tt.shape, err)
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s %s: %q does not say %q", tt.op, tt.shape, err, w)
			}
		}
		if tooLarge.Need <= tooLarge.Free || tooLarge.Free != 1<<30 {
			t.Errorf("%s %s: need %d, free %d", tt.op, tt.shape, tooLarge.Need, tooLarge.Free)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s %s: the error spans lines: %q", tt.op, tt.shape, err)
		}
	}
}

func TestFitSamplesAGemmWhoseFullReferenceDoesNotFit(t *testing.T) {
	// 8192×8192×64: the full reference is 8192² elements × 24 B = 1.5 GiB;
	// the sampled check needs the packed factors only.
	c := caseOf(t, "gemm", "8192x8192x64")
	full, sampled := needOf(c, false), needOf(c, true)
	fakeHost(t, (full.host+sampled.host)/2)
	fitted, err := Fit(context.Background(), []Case{c}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !fitted[0].Sampled || c.Sampled {
		t.Fatalf("Sampled = %v (input left %v), want the fitted case sampled and the input unchanged", fitted[0].Sampled, c.Sampled)
	}
	// A row op has no sampled check: refused.
	if _, err := Fit(context.Background(), []Case{caseOf(t, "softmax", "8192x8192")}, nil); err == nil {
		t.Fatal("a softmax whose reference does not fit was not refused")
	}
}

func TestFitChecksTheDevice(t *testing.T) {
	fakeHost(t, 1<<40)
	c := caseOf(t, "softmax", "1024x1024") // 4 MiB of buffers
	device := func(free int64, host bool) func(context.Context) (int64, bool, error) {
		return func(context.Context) (int64, bool, error) { return free, host, nil }
	}
	if _, err := Fit(context.Background(), []Case{c}, device(1<<20, false)); err == nil || !strings.Contains(err.Error(), "of device memory") {
		t.Fatalf("1 MiB of device memory: %v, want a device refusal", err)
	}
	if _, err := Fit(context.Background(), []Case{c}, device(1<<30, false)); err != nil {
		t.Fatalf("1 GiB of device memory: %v", err)
	}
	// The cpu backend's buffers are host memory: they count there too.
	need := needOf(c, false)
	fakeHost(t, need.host+need.device/2)
	if _, err := Fit(context.Background(), []Case{c}, device(1<<30, true)); err == nil || !strings.Contains(err.Error(), "of host memory") {
		t.Fatalf("buffers in host memory: %v, want a host refusal", err)
	}
	failing := func(context.Context) (int64, bool, error) { return 0, false, errors.New("server gone") }
	if _, err := Fit(context.Background(), []Case{c}, failing); err == nil || !strings.Contains(err.Error(), "server gone") {
		t.Fatalf("a failing memory query: %v", err)
	}
}

func TestRunRefusesATooLargeCaseWithoutRunningAnything(t *testing.T) {
	fakeHost(t, 1<<20)
	ran := false
	dev := deviceFunc(func([][]byte) { ran = true })
	_, err := Run(context.Background(), dev, []Case{caseOf(t, "gemm", "1024x1024x1024")}, Options{})
	var tooLarge *TooLargeError
	if !errors.As(err, &tooLarge) || ran {
		t.Fatalf("Run: %v (ran %v), want a *TooLargeError before anything ran", err, ran)
	}
}

func TestHostMemoryReadsMeminfoAndTheCgroup(t *testing.T) {
	dir := t.TempDir()
	meminfo := filepath.Join(dir, "meminfo")
	os.WriteFile(meminfo, []byte("MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:   2000000 kB\n"), 0o644)
	if got, err := memAvailable(meminfo); err != nil || got != 2000000*1024 {
		t.Fatalf("memAvailable = %d, %v; want %d", got, err, 2000000*1024)
	}
	os.WriteFile(meminfo, []byte("MemTotal: 1 kB\n"), 0o644)
	if _, err := memAvailable(meminfo); !errors.Is(err, errUnknownMemory) {
		t.Fatalf("no MemAvailable line: %v, want errUnknownMemory", err)
	}
	os.WriteFile(filepath.Join(dir, "memory.max"), []byte("1073741824\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "memory.current"), []byte("73741824\n"), 0o644)
	if room, ok := cgroupRoom(dir); !ok || room != 1000000000 {
		t.Fatalf("cgroupRoom = %d, %v", room, ok)
	}
	os.WriteFile(filepath.Join(dir, "memory.max"), []byte("max\n"), 0o644)
	if _, ok := cgroupRoom(dir); ok {
		t.Fatal(`memory.max "max" read as a limit`)
	}
	if free, _, err := HostMemory(); err == nil && free <= 0 {
		t.Fatalf("this machine's HostMemory = %d", free)
	}
}
