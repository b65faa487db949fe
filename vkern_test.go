package vkern

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/kerneltest"
	"github.com/vkern/vkern/kserver"
	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
	"github.com/vkern/vkern/toolchain"
)

// testCache is one cache folder for the whole test binary, so the real cpu
// server is compiled once however many tests open it: $VKERN_CACHE when set
// (CI sets a fresh one, which package gpt's tests share, planted defects
// and all), else a temporary folder removed at the end.
var (
	testCacheOnce sync.Once
	testCacheDir  string
	ownCacheDir   bool
)

func cacheDir(t *testing.T) string {
	t.Helper()
	testCacheOnce.Do(func() {
		if dir := os.Getenv("VKERN_CACHE"); dir != "" {
			testCacheDir = dir
			return
		}
		dir, err := os.MkdirTemp("", "vkern-test-cache-")
		if err != nil {
			t.Fatal(err)
		}
		testCacheDir, ownCacheDir = dir, true
	})
	return testCacheDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if ownCacheDir {
		os.RemoveAll(testCacheDir)
	}
	os.Exit(code)
}

// openCPU opens the real cpu backend, skipping when no C++ compiler exists.
func openCPU(t *testing.T, opts Options) *Device {
	t.Helper()
	return openBackend(t, "cpu", opts)
}

// openBackend opens a real backend, skipping when its toolchain or device
// does not answer here (the GPU backends, on CI).
func openBackend(t *testing.T, backend string, opts Options) *Device {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := toolchain.Detect(ctx, backend); err != nil {
		t.Skipf("the %s backend cannot be built or run here: %v", backend, err)
	}
	opts.Backend = backend
	if opts.CacheDir == "" {
		opts.CacheDir = cacheDir(t)
	}
	dev, err := Open(ctx, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

func TestCPUBackendConformance(t *testing.T) {
	dev := openCPU(t, Options{})
	kerneltest.All(t, dev)
	t.Run("add in place", func(t *testing.T) { checkAddInPlace(t, dev) })
	t.Run("layernorm_grad in place", func(t *testing.T) { checkLayerNormGradInPlace(t, dev) })
}

// The real server runs under a wrapper that stays its parent (as Nsight
// Compute does): the arena, the rings and the cookie reach it through the
// wrapper, and its kernels answer.
func TestTheServerRunsUnderAWrapper(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "mark")
	// "; exit $?": a shell may exec its last command, which would leave no
	// wrapper.
	dev := openCPU(t, Options{ServerWrapper: []string{"sh", "-c", `echo "$0" > "` + mark + `"; "$@"; exit $?`, "wrapper"}})
	if got, err := os.ReadFile(mark); err != nil || strings.TrimSpace(string(got)) != "wrapper" {
		t.Fatalf("the wrapper's mark: %q, %v; want it to have run", got, err)
	}
	checkAddInPlace(t, dev)
}

func TestOpenReportsWhatBuiltAndRunsTheServer(t *testing.T) {
	dev := openCPU(t, Options{})
	info, err := dev.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Backend != "cpu" || info.Device["backend"] != "cpu" {
		t.Errorf("backend %q, server says %q", info.Backend, info.Device["backend"])
	}
	if info.Device["source_sha256"] != info.SourceSHA256 || len(info.SourceSHA256) != 64 {
		t.Errorf("server reports sources %q, cache built %q", info.Device["source_sha256"], info.SourceSHA256)
	}
	if got := info.Device["dot_accumulation"]; got != "rn-blocked:256" {
		t.Errorf("server reports dot_accumulation %q, want rn-blocked:256 (the cpu gemm's depth blocks)", got)
	}
	if len(info.BinarySHA256) != 64 || info.CacheKey == "" || info.Compiler == nil {
		t.Errorf("incomplete info: %+v", info)
	}
}

func TestMemoryOnTheCPUBackendIsTheHosts(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts Options
	}{
		{"from a persistent server", Options{}},
		{"from isolated servers", Options{Isolated: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dev := openCPU(t, tt.opts)
			ctx := context.Background()
			info, err := dev.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			total, err := strconv.ParseInt(info.Device["memory_bytes"], 10, 64)
			if err != nil {
				t.Fatalf("HELLO's memory_bytes: %v", err)
			}
			m, err := dev.Memory(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !m.Host || m.Free <= 0 || m.Free > m.Total || m.Total != total {
				t.Errorf("Memory = %+v, want Host and 0 < Free <= Total = memory_bytes %d", m, total)
			}
		})
	}
}

func TestBadBackendNamesAreRejected(t *testing.T) {
	if _, err := Open(context.Background(), Options{Backend: "tpu", CacheDir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), `"tpu"`) {
		t.Errorf("Open(tpu) error = %v", err)
	}
	// This test runs where no GPU toolchain answers (CI); a named GPU
	// backend must then fail, saying what is missing, not fall back.
	for _, name := range []string{"cuda", "hip"} {
		if _, err := toolchain.Detect(context.Background(), name); err == nil {
			continue
		}
		_, err := Open(context.Background(), Options{Backend: name, CacheDir: t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), name) ||
			!(errors.Is(err, toolchain.ErrNoCompiler) || errors.Is(err, toolchain.ErrNoDevice)) {
			t.Errorf("Open(%q) error = %v", name, err)
		}
	}
}

func TestRunChecksBuffersAgainstTheContract(t *testing.T) {
	dev := openCPU(t, Options{})
	ctx := context.Background()
	gemm, _ := op.Lookup("gemm")
	s, _ := gemm.ParseShape("4x4x4")
	a, _ := dev.Alloc(ctx, 32)
	b, _ := dev.Alloc(ctx, 32)
	small, _ := dev.Alloc(ctx, 60) // C needs 64 bytes
	_, err := dev.Run(ctx, gemm, s, a, b, small)
	if err == nil || !strings.Contains(err.Error(), "buffer C has 60 bytes, want at least 64") {
		t.Fatalf("error = %v", err)
	}
	if _, err := dev.Alloc(ctx, 0); err == nil {
		t.Fatal("Alloc(0) succeeded")
	}
	if err := a.Write(ctx, 30, make([]byte, 4)); err == nil {
		t.Fatal("a write past the end succeeded")
	}
}

// serverPID is the pid the running server prints in its start-up line. (Not
// a search of /proc by binary path: CI shares one cache folder between the
// packages' test binaries, so another package's server runs the same file,
// and killing it failed that package's tests.)
func serverPID(t *testing.T, dev *Device) int {
	t.Helper()
	if err := dev.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The line comes through a pipe another goroutine drains: wait for it.
	line := regexp.MustCompile(`kernel server: pid (\d+)`)
	var m [][]string
	for deadline := time.Now().Add(10 * time.Second); len(m) == 0; time.Sleep(10 * time.Millisecond) {
		if m = line.FindAllStringSubmatch(dev.Stderr(), -1); len(m) == 0 && time.Now().After(deadline) {
			t.Fatalf("no pid in the server's stderr: %q", dev.Stderr())
		}
	}
	pid, _ := strconv.Atoi(m[len(m)-1][1])
	return pid
}

func TestAKilledServerIsReportedAndReplaced(t *testing.T) {
	dev := openCPU(t, Options{})
	ctx := context.Background()
	buf, err := dev.Alloc(ctx, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(serverPID(t, dev), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The first call after the death reports it; a buffer of the dead
	// server stays dead; then a fresh server serves.
	var died error
	for i := 0; i < 3 && died == nil; i++ {
		died = dev.Ping(ctx)
	}
	if died == nil || !strings.Contains(died.Error(), "killed") {
		t.Errorf("after kill -9, calls returned %v; want an error saying the server was killed", died)
	}
	if err := buf.Write(ctx, 0, make([]byte, 8)); !errors.Is(err, ErrStaleBuffer) {
		t.Errorf("writing a dead server's buffer: %v, want ErrStaleBuffer", err)
	}
	if err := dev.Ping(ctx); err != nil {
		t.Fatalf("the next server does not answer: %v", err)
	}
	kerneltest.Op(t, dev, "softmax")
}

// The server runs in a process group of its own, so that a terminal's
// Ctrl-C (SIGINT to the foreground group) reaches the host alone, which
// then finishes its call and saves (vkern train), instead of the server
// dying under it.
func TestTheServerHasAProcessGroupOfItsOwn(t *testing.T) {
	dev := openCPU(t, Options{})
	pid := serverPID(t, dev)
	pgid, err := syscall.Getpgid(pid)
	if err != nil {
		t.Fatal(err)
	}
	if pgid == syscall.Getpgrp() {
		t.Errorf("the server (pid %d) is in the host's process group %d: a Ctrl-C would kill it too", pid, pgid)
	}
}

func TestATamperedBinaryIsRebuiltNotRun(t *testing.T) {
	dir := t.TempDir()
	dev := openCPU(t, Options{CacheDir: dir})
	info, _ := dev.Info(context.Background())
	dev.Close()
	f, err := os.OpenFile(info.BinaryPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("tampered"))
	f.Close()
	dev2 := openCPU(t, Options{CacheDir: dir})
	info2, err := dev2.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info2.BinarySHA256 != info.BinarySHA256 {
		t.Errorf("rebuilt binary hash %s, first build %s", info2.BinarySHA256, info.BinarySHA256)
	}
	if len(info2.Notes) == 0 || !strings.Contains(strings.Join(info2.Notes, " "), "rebuilt") {
		t.Errorf("notes %q do not say the entry was rebuilt", info2.Notes)
	}
}

func TestABatchRunsInOrderAndNamesItsFailingCall(t *testing.T) {
	dev := openCPU(t, Options{})
	ctx := context.Background()
	softmax, _ := op.Lookup("softmax")
	s, _ := softmax.ParseShape("2x3")
	x, _ := dev.Alloc(ctx, 12)
	y, _ := dev.Alloc(ctx, 12)
	z, _ := dev.Alloc(ctx, 12)
	if err := x.WriteF16(ctx, []uint16{0x3c00, 0x4000, 0x4200, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	// softmax(softmax(x)): the second call reads what the first wrote.
	times, err := dev.RunBatch(ctx, []Call{{Op: softmax, Shape: s, Buffers: []*Buffer{x, y}}, {Op: softmax, Shape: s, Buffers: []*Buffer{y, z}}})
	if err != nil || len(times) != 2 {
		t.Fatalf("RunBatch: %v, %v", times, err)
	}
	got := make([]uint16, 6)
	if err := z.ReadF16(ctx, got); err != nil {
		t.Fatal(err)
	}
	if got[3] != 0x3555 { // row 1 is all zeros: softmax gives 1/3 twice over, 0x3555 in f16
		t.Errorf("z[1,0] = %#04x, want 0x3555 (1/3)", got[3])
	}
	// The same two calls untimed, and the one-call form: same results, no times.
	if err := z.WriteF16(ctx, make([]uint16, 6)); err != nil {
		t.Fatal(err)
	}
	times, err = dev.RunBatch(ctx, []Call{{Op: softmax, Shape: s, Buffers: []*Buffer{x, y}, Untimed: true}, {Op: softmax, Shape: s, Buffers: []*Buffer{y, z}, Untimed: true}})
	if err != nil || len(times) != 2 || times[0] != 0 || times[1] != 0 {
		t.Fatalf("an untimed RunBatch: %v, %v; want two zero times", times, err)
	}
	if err := dev.RunUntimed(ctx, softmax, s, y, z); err != nil {
		t.Fatalf("RunUntimed: %v", err)
	}
	if err := z.ReadF16(ctx, got); err != nil {
		t.Fatal(err)
	}
	if got[3] != 0x3555 {
		t.Errorf("z[1,0] after the untimed calls = %#04x, want 0x3555 (1/3)", got[3])
	}
	// A Shape written by hand (not from ParseShape or Op.Shape) is checked
	// and measured as the call's op's: it runs, or is refused, never a panic.
	if _, err := dev.RunBatch(ctx, []Call{{Op: softmax, Shape: op.Shape{Dims: []int64{2, 3}}, Buffers: []*Buffer{x, y}}}); err != nil {
		t.Errorf("a hand-written shape 2x3: %v", err)
	}
	_, err = dev.RunBatch(ctx, []Call{{Op: softmax, Shape: op.Shape{Dims: []int64{2, 3, 4}}, Buffers: []*Buffer{x, y}}})
	if err == nil || !strings.Contains(err.Error(), "3 dimensions, want 2") {
		t.Errorf("a hand-written shape of three dimensions: %v; want an error counting them", err)
	}
	small, _ := dev.Alloc(ctx, 4)
	_, err = dev.RunBatch(ctx, []Call{{Op: softmax, Shape: s, Buffers: []*Buffer{x, y}}, {Op: softmax, Shape: s, Buffers: []*Buffer{y, small}}})
	if err == nil || !strings.Contains(err.Error(), "batch call 1 of 2") {
		t.Errorf("a bad second call: %v", err)
	}
}

// A prepared batch runs as often as it is asked to, reading the buffers'
// contents at each run; a call that breaks its contract is refused by
// Prepare, naming it; a buffer freed after Prepare is refused when the
// batch runs, not used.
func TestAPreparedBatchRunsAgainAndRefusesAFreedBuffer(t *testing.T) {
	dev := openCPU(t, Options{})
	ctx := context.Background()
	softmax, _ := op.Lookup("softmax")
	s, _ := softmax.ParseShape("1x2")
	x, _ := dev.Alloc(ctx, 4)
	y, _ := dev.Alloc(ctx, 4)
	b, err := dev.Prepare([]Call{{Op: softmax, Shape: s, Buffers: []*Buffer{x, y}}})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]uint16, 2)
	for _, c := range []struct {
		in   []uint16
		want uint16
	}{{[]uint16{0, 0}, 0x3800}, {[]uint16{0xfc00, 0}, 0x0000}} { // softmax(0, 0)[0] = ½; softmax(−Inf, 0)[0] = 0
		if err := x.WriteF16(ctx, c.in); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if err := y.ReadF16(ctx, got); err != nil {
			t.Fatal(err)
		}
		if got[0] != c.want {
			t.Errorf("softmax(%#04x)[0] = %#04x from the prepared batch, want %#04x", c.in, got[0], c.want)
		}
	}
	small, _ := dev.Alloc(ctx, 2)
	if _, err := dev.Prepare([]Call{{Op: softmax, Shape: s, Buffers: []*Buffer{x, y}}, {Op: softmax, Shape: s, Buffers: []*Buffer{x, small}}}); err == nil || !strings.Contains(err.Error(), "batch call 1 of 2") {
		t.Errorf("preparing a call with too small a buffer: %v; want an error naming call 1 of 2", err)
	}
	if err := y.Free(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Run(ctx); err == nil {
		t.Error("a prepared batch ran with a buffer freed since")
	}
}

func TestIsolatedModeGivesTheSameResults(t *testing.T) {
	dev := openCPU(t, Options{Isolated: true})
	kerneltest.Op(t, dev, "gemm_grad_b")
}

func TestABinaryTamperedWhileServingIsRebuiltBeforeTheRestart(t *testing.T) {
	dev := openCPU(t, Options{CacheDir: t.TempDir()})
	ctx := context.Background()
	info, err := dev.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A running binary cannot be written (ETXTBSY): kill the server, let the
	// next call report its death, then tamper before anything restarts it.
	if err := syscall.Kill(serverPID(t, dev), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := dev.Ping(ctx); err == nil {
		t.Fatal("the first call after kill -9 did not report the death")
	}
	f, err := os.OpenFile(info.BinaryPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("tampered"))
	f.Close()
	// The restart must recheck the binary, find it changed, rebuild it, and
	// only then run it.
	if err := dev.Ping(ctx); err != nil {
		t.Fatalf("no server after the restart: %v", err)
	}
	after, err := dev.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.BinarySHA256 != info.BinarySHA256 || !strings.Contains(strings.Join(after.Notes, " "), "rebuilt before the server was started") {
		t.Errorf("binary %s (was %s), notes %q", after.BinarySHA256, info.BinarySHA256, after.Notes)
	}
}

// checkAddInPlace runs add with y in a's buffer, as the residual stream
// does, and checks the sums; y in b's buffer, which the contract does not
// allow, must be refused.
func checkAddInPlace(t *testing.T, d *Device) {
	t.Helper()
	ctx := context.Background()
	const n = 4103
	s, err := op.Add.Shape([]int64{n})
	if err != nil {
		t.Fatal(err)
	}
	av, bv := make([]uint16, n), make([]uint16, n)
	for i := range av {
		av[i] = f16.FromFloat64(float64(i%97) - 48.25)
		bv[i] = f16.FromFloat64(0.125 * float64(i%13))
	}
	a, err := d.Alloc(ctx, 2*n)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Free(ctx)
	b, err := d.Alloc(ctx, 2*n)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(ctx)
	if err := a.WriteF16(ctx, av); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteF16(ctx, bv); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Run(ctx, op.Add, s, a, b, a); err != nil {
		t.Fatalf("add with y in a's buffer: %v", err)
	}
	got := make([]uint16, n)
	if err := a.ReadF16(ctx, got); err != nil {
		t.Fatal(err)
	}
	for i := range got {
		want := f16.FromFloat64(f16.ToFloat64(av[i]) + f16.ToFloat64(bv[i]))
		if got[i] != want {
			t.Fatalf("in place: y[%d] = %v, want %v", i, f16.ToFloat64(got[i]), f16.ToFloat64(want))
		}
	}
	_, err = d.Run(ctx, op.Add, s, a, b, b)
	var se *kserver.ServerError
	if !errors.As(err, &se) || se.StatusName != "INVALID_ARGUMENT" || !strings.Contains(err.Error(), "outputs must not alias") {
		t.Errorf("add with y in b's buffer: %v, want INVALID_ARGUMENT (only a may be shared)", err)
	}
}

// TestViewsNamePartsOfABuffer: a view reads and writes its buffer's bytes,
// may be viewed again, obeys the alias rule by memory rather than by
// handle, and dies with its buffer.
func TestViewsNamePartsOfABuffer(t *testing.T) {
	ctx := context.Background()
	d := openCPU(t, Options{})
	parent, err := d.Alloc(ctx, 4096)
	if err != nil {
		t.Fatal(err)
	}
	v, err := parent.View(ctx, 512, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Write(ctx, 0, []byte{7, 8, 9}); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 3)
	if err := parent.Read(ctx, 512, got); err != nil || !bytes.Equal(got, []byte{7, 8, 9}) {
		t.Fatalf("the parent at 512 holds %v (%v), want what the view wrote", got, err)
	}
	vv, err := v.View(ctx, 256, 256)
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Write(ctx, 768, []byte{42}); err != nil {
		t.Fatal(err)
	}
	if err := vv.Read(ctx, 0, got[:1]); err != nil || got[0] != 42 {
		t.Fatalf("a view of a view reads %d (%v), want the parent's byte 768", got[0], err)
	}
	if err := v.Write(ctx, 1000, make([]byte, 25)); err == nil {
		t.Error("a write past a view's end was accepted")
	}

	for _, c := range []struct{ off, n int64 }{{100, 8}, {0, 0}, {3840, 512}, {-256, 8}} {
		if _, err := parent.View(ctx, c.off, c.n); err == nil {
			t.Errorf("View(%d, %d) of 4096 bytes was accepted", c.off, c.n)
		}
	}
	// The server refuses what the host would have: a start off the 256-byte
	// grid (a view at 256 viewed at 16), a range past the end.
	if _, err := d.client.View(ctx, v.handle, 16, 8); err == nil || !strings.Contains(err.Error(), "528 bytes into its allocation") {
		t.Errorf("the server took a misaligned view: %v", err)
	}
	if _, err := d.client.View(ctx, v.handle, 768, 512); err == nil || !strings.Contains(err.Error(), "OUT_OF_RANGE") {
		t.Errorf("the server took a view past its buffer's end: %v", err)
	}

	// add in place through two views of the same bytes is allowed; an
	// output that overlaps an input partway is not.
	s := op.Add.MustShape("256")
	a, _ := parent.View(ctx, 0, 512)
	aAgain, _ := parent.View(ctx, 0, 512)
	b, _ := parent.View(ctx, 2048, 512)
	av := make([]uint16, 256)
	for i := range av {
		av[i] = f16.FromFloat64(float64(i))
	}
	if err := a.WriteF16(ctx, av); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteF16(ctx, av); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Run(ctx, op.Add, s, a, b, aAgain); err != nil {
		t.Fatalf("add in place through two views: %v", err)
	}
	sum := make([]uint16, 256)
	if err := a.ReadF16(ctx, sum); err != nil {
		t.Fatal(err)
	}
	if f16.ToFloat64(sum[255]) != 510 {
		t.Fatalf("in place through views: y[255] = %v, want 510", f16.ToFloat64(sum[255]))
	}
	shifted, _ := parent.View(ctx, 256, 512)
	if _, err := d.Run(ctx, op.Add, s, a, b, shifted); err == nil || !strings.Contains(err.Error(), "overlaps a") {
		t.Errorf("an output overlapping a by half: %v, want a refusal naming the overlap", err)
	}
	if _, err := d.Run(ctx, op.Add, s, a, shifted, b); err != nil {
		t.Errorf("inputs may overlap each other: %v", err)
	}

	if err := vv.Free(ctx); err != nil {
		t.Fatal(err)
	}
	if err := v.Read(ctx, 0, got); err != nil {
		t.Fatalf("freeing a view freed its parent: %v", err)
	}
	if err := parent.Free(ctx); err != nil {
		t.Fatal(err)
	}
	var se *kserver.ServerError
	if err := v.Read(ctx, 0, got); !errors.As(err, &se) || se.StatusName != "BAD_HANDLE" {
		t.Fatalf("a view of a freed buffer: %v, want BAD_HANDLE", err)
	}
}

// checkLayerNormGradInPlace runs layernorm_grad with residual=1 (and
// dx_sum=1) twice on the same inputs, dx in a buffer of its own and then in
// r's (as package gpt runs it): the same bits, and r may be only dx's
// buffer.
func checkLayerNormGradInPlace(t *testing.T, d *Device) {
	t.Helper()
	ctx := context.Background()
	o := op.LayerNormGrad
	s, err := o.ParseShape("67x768:residual=1,dx_sum=1")
	if err != nil {
		t.Fatal(err)
	}
	inputs, err := oracle.Generate(o, s, oracle.Normal, 3)
	if err != nil {
		t.Fatal(err)
	}
	// run gives each operand a buffer holding its input (outputs poisoned),
	// dx r's own when inPlace, and returns what the call writes (dx, dw, db
	// and dxs).
	run := func(inPlace bool) [][]byte {
		bufs := make([]*Buffer, len(o.Operands))
		for i, data := range kerneltest.CallBuffers(o, s, inputs) {
			if o.Operands[i].Name == "dx" && inPlace {
				bufs[i] = bufs[i-1]
				continue
			}
			if len(data) == 0 {
				continue // an operand empty at this shape takes no buffer
			}
			b, err := d.Alloc(ctx, int64(len(data)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Free(ctx) })
			if err := b.Write(ctx, 0, data); err != nil {
				t.Fatal(err)
			}
			bufs[i] = b
		}
		if _, err := d.Run(ctx, o, s, bufs...); err != nil {
			t.Fatalf("layernorm_grad %s, dx in r's buffer %v: %v", s, inPlace, err)
		}
		var out [][]byte
		for i, p := range o.Operands {
			if p.Writes() && bufs[i] != nil {
				got := make([]byte, bufs[i].Bytes)
				if err := bufs[i].Read(ctx, 0, got); err != nil {
					t.Fatal(err)
				}
				out = append(out, got)
			}
		}
		return out
	}
	apart, shared := run(false), run(true)
	for i := range apart {
		if !bytes.Equal(apart[i], shared[i]) {
			t.Errorf("layernorm_grad %s: output %d differs with dx in r's buffer", s, i)
		}
	}
}

// TestTypedTransfersInChunks: WriteF32 and its kin convert a tensor a
// chunk at a time (convertChunk); every element crosses intact, chunk
// edges and the short last chunk included, the byte layouts agree with
// Read and Write, and a transfer past the buffer's end is refused whole,
// with nothing written; an empty transfer still reaches the server.
func TestTypedTransfersInChunks(t *testing.T) {
	dev := openCPU(t, Options{})
	ctx := context.Background()
	n := 5*convertChunk/8 + 3 // 2.5 chunks of f32 and a tail; 1.25 of f16
	buf, err := dev.Alloc(ctx, int64(4*n))
	if err != nil {
		t.Fatal(err)
	}
	f32 := make([]float32, n)
	for i := range f32 {
		f32[i] = float32(i) - 0.5
	}
	if err := buf.WriteF32(ctx, f32); err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 4*n)
	if err := buf.Read(ctx, 0, raw); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1, convertChunk/4 - 1, convertChunk / 4, 2 * convertChunk / 4, n - 1} {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); got != f32[i] {
			t.Fatalf("WriteF32: element %d reads back as bytes of %v, want %v", i, got, f32[i])
		}
	}
	back := make([]float32, n)
	if err := buf.ReadF32(ctx, back); err != nil {
		t.Fatal(err)
	}
	for i := range back {
		if back[i] != f32[i] {
			t.Fatalf("ReadF32: element %d is %v, want %v", i, back[i], f32[i])
		}
	}
	// From an element on: across a chunk's boundary, and up to the end.
	for _, at := range []int{1, convertChunk/4 - 5, n - 3} {
		part := make([]float32, min(n-at, convertChunk/4+9))
		if err := buf.ReadF32At(ctx, int64(at), part); err != nil {
			t.Fatal(err)
		}
		for i := range part {
			if part[i] != f32[at+i] {
				t.Fatalf("ReadF32At(%d): element %d is %v, want %v", at, i, part[i], f32[at+i])
			}
		}
	}
	if err := buf.ReadF32At(ctx, int64(n-1), make([]float32, 2)); err == nil || !strings.Contains(err.Error(), "runs past its end") {
		t.Fatalf("ReadF32At of 2 elements from the last: %v, want a refusal", err)
	}
	if err := buf.ReadF32At(ctx, -1, make([]float32, 1)); err == nil || !strings.Contains(err.Error(), "want a value index ≥ 0") {
		t.Fatalf("ReadF32At(-1): %v, want a refusal", err)
	}
	halves := make([]uint16, 2*n)
	for i := range halves {
		halves[i] = uint16(i * 7)
	}
	if err := buf.WriteF16(ctx, halves); err != nil {
		t.Fatal(err)
	}
	gotHalves := make([]uint16, 2*n)
	if err := buf.ReadF16(ctx, gotHalves); err != nil {
		t.Fatal(err)
	}
	for i := range gotHalves {
		if gotHalves[i] != halves[i] {
			t.Fatalf("ReadF16: element %d is %#x, want %#x", i, gotHalves[i], halves[i])
		}
	}
	ints := make([]int32, n)
	for i := range ints {
		ints[i] = int32(-3 * i)
	}
	if err := buf.WriteI32(ctx, ints); err != nil {
		t.Fatal(err)
	}
	if err := buf.Read(ctx, 0, raw); err != nil {
		t.Fatal(err)
	}
	for i := range ints {
		if got := int32(binary.LittleEndian.Uint32(raw[4*i:])); got != ints[i] {
			t.Fatalf("WriteI32: element %d is %d, want %d", i, got, ints[i])
		}
	}
	// One element too many: refused before any chunk goes.
	err = buf.WriteF32(ctx, make([]float32, n+1))
	if err == nil || !strings.Contains(err.Error(), "runs past its end") {
		t.Fatalf("WriteF32 of n+1 elements into n: %v, want a refusal", err)
	}
	if err := buf.ReadF32(ctx, make([]float32, n+1)); err == nil || !strings.Contains(err.Error(), "runs past its end") {
		t.Fatalf("ReadF32 of n+1 elements from n: %v, want a refusal", err)
	}
	after := make([]byte, 4*n)
	if err := buf.Read(ctx, 0, after); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after, raw) {
		t.Fatal("a refused WriteF32 changed the buffer")
	}
	// No elements still go to the server, which refuses a freed buffer.
	if err := buf.Free(ctx); err != nil {
		t.Fatal(err)
	}
	if err := buf.WriteF32(ctx, nil); err == nil || !strings.Contains(err.Error(), "BAD_HANDLE") {
		t.Errorf("WriteF32 of no elements into a freed buffer: %v, want BAD_HANDLE", err)
	}
	if err := buf.ReadF16(ctx, nil); err == nil || !strings.Contains(err.Error(), "BAD_HANDLE") {
		t.Errorf("ReadF16 of no elements from a freed buffer: %v, want BAD_HANDLE", err)
	}
}

func TestStartTimeoutComesFromOptionsThenTheEnvironment(t *testing.T) {
	env := func(v string, ok bool) func(string) (string, bool) {
		return func(name string) (string, bool) {
			if name != StartTimeoutEnv {
				t.Errorf("looked up %q, want %q", name, StartTimeoutEnv)
			}
			return v, ok
		}
	}
	for _, tt := range []struct {
		name  string
		set   time.Duration
		value string
		ok    bool
		want  time.Duration
	}{
		{"unset: kserver's default", 0, "", false, 0},
		{"empty: kserver's default", 0, " ", true, 0},
		{"from the environment", 0, "2m", true, 2 * time.Minute},
		{"options first", 30 * time.Second, "2m", true, 30 * time.Second},
	} {
		got, err := startTimeout(tt.set, env(tt.value, tt.ok))
		if err != nil || got != tt.want {
			t.Errorf("%s: startTimeout = %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
	for _, bad := range []string{"ten", "10", "-1s", "0s"} {
		_, err := startTimeout(0, env(bad, true))
		if err == nil || !strings.Contains(err.Error(), StartTimeoutEnv+"=") || !strings.Contains(err.Error(), strconv.Quote(bad)) {
			t.Errorf("%s=%q: error %v, want one naming the variable and its value", StartTimeoutEnv, bad, err)
		}
	}
	if _, err := startTimeout(-time.Second, env("", false)); err == nil {
		t.Error("a negative Options.StartTimeout was accepted")
	}
}

func TestServerWrapperComesFromOptionsThenTheEnvironment(t *testing.T) {
	env := func(v string) func(string) (string, bool) {
		return func(name string) (string, bool) {
			if name != ServerWrapperEnv {
				t.Errorf("looked up %q, want %q", name, ServerWrapperEnv)
			}
			return v, v != ""
		}
	}
	for _, tt := range []struct {
		name  string
		set   []string
		value string
		want  []string
	}{
		{"unset: none", nil, "", nil},
		{"blank: none", nil, "  \t ", nil},
		{"from the environment, by words", nil, " ncu  --log-file /tmp/l -o /tmp/r\t-c 1 ", []string{"ncu", "--log-file", "/tmp/l", "-o", "/tmp/r", "-c", "1"}},
		{"options first", []string{"env"}, "ncu -c 1", []string{"env"}},
	} {
		if got := serverWrapper(tt.set, env(tt.value)); !slices.Equal(got, tt.want) {
			t.Errorf("%s: serverWrapper = %q, want %q", tt.name, got, tt.want)
		}
	}
}
