package kserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeConfig returns a Config that runs this test binary as the fake server
// in the given start mode. Timeouts are short so that a hang fails fast. The
// fake speaks the pipe transport only: its misbehaviours are bad frames,
// which travel the same way on either transport, and above the byte stream
// the host's code is the same for both. The real server's tests cover the
// rings.
func fakeConfig(t *testing.T, mode string, env ...string) Config {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Under -race a Go program sleeps a second at exit unless told not to,
	// which would look like a server that will not exit.
	gorace := strings.TrimSpace("atexit_sleep_ms=0 " + os.Getenv("GORACE"))
	return Config{
		Path:         exe,
		Env:          append([]string{fakeModeEnv + "=" + mode, "GORACE=" + gorace}, env...),
		CallTimeout:  5 * time.Second,
		StartTimeout: 5 * time.Second,
		CloseTimeout: time.Second,
		Pipes:        true,
	}
}

// liveConn is the live server, or nil.
func (c *Client) liveConn() *conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live
}

// lastProcess is the latest server process, live or not.
func (c *Client) lastProcess() process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// newClient returns a Client for cfg that is closed when the test ends.
func newClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	c := New(cfg)
	t.Cleanup(func() { c.Close() })
	return c
}

// serverPID starts the server if needed and returns the pid its HELLO reports.
func serverPID(t *testing.T, c *Client) int {
	t.Helper()
	h, err := c.Hello(context.Background())
	if err != nil {
		t.Fatalf("Hello: %v", err)
	}
	pid, err := h.Uint("pid")
	if err != nil {
		t.Fatal(err)
	}
	return int(pid)
}

// checkErr fails the test unless err wraps every target and says every phrase.
func checkErr(t *testing.T, err error, targets []error, phrases ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one wrapping %v", targets)
	}
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Errorf("error does not wrap %v:\n%v", target, err)
		}
	}
	for _, p := range phrases {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error does not say %q:\n%v", p, err)
		}
	}
}

// checkGone fails the test if pid is still a live or unreaped process.
func checkGone(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kill(%d, 0) = %v, want ESRCH: the server was not killed and reaped", pid, err)
	}
}

func withTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestAHealthyServerAnswersEveryCall(t *testing.T) {
	t.Parallel()
	c := newClient(t, fakeConfig(t, modeServe))
	ctx := context.Background()

	h, err := c.Hello(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Version != ProtocolVersion || h.Backend() != "fake" || h.Device() != "fake device" || h.SourceSHA256() != "fake-source-sha" {
		t.Errorf("Hello = %+v", h)
	}
	if mem, err := h.MemoryBytes(); err != nil || mem != 1<<30 {
		t.Errorf("MemoryBytes = %d, %v; want 1073741824", mem, err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	src, err := c.Alloc(ctx, 64)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := c.Alloc(ctx, 64)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 64)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := c.Write(ctx, src, 0, data); err != nil {
		t.Fatal(err)
	}
	ns, err := c.Run(ctx, opCopy, nil, []Handle{src, dst})
	if err != nil || ns != fakeKernelNs {
		t.Fatalf("Run = %d, %v; want %d, nil", ns, err, fakeKernelNs)
	}
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 60)
	if err := c.Read(ctx, dst, 4, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data[4:]) {
		t.Errorf("Read after copy = %v, want %v", got, data[4:])
	}
	if m, err := c.Memory(ctx); err != nil || m != (Memory{Free: fakeMemoryBytes - 128, Total: fakeMemoryBytes}) {
		t.Errorf("Memory with two 64-byte buffers = %+v, %v; want %d of %d bytes free", m, err, fakeMemoryBytes-128, fakeMemoryBytes)
	}
	if err := c.Free(ctx, src); err != nil {
		t.Fatal(err)
	}
	if got := c.Stderr(); got != "" {
		t.Errorf("Stderr = %q, want nothing from a quiet server", got)
	}
}

func TestAnErrorResponseKeepsTheServer(t *testing.T) {
	t.Parallel()
	c := newClient(t, fakeConfig(t, modeServe))
	ctx := context.Background()
	pid := serverPID(t, c)
	h, err := c.Alloc(ctx, 16)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		call   func() error
		status Status
		says   string
	}{
		{"an unknown op id", func() error { _, err := c.Run(ctx, 77, []int64{1}, []Handle{h}); return err }, StatusInvalidArgument, "unknown op id 77"},
		{"a write past the end", func() error { return c.Write(ctx, h, 10, make([]byte, 7)) }, StatusOutOfRange, "offset 10 + length 7"},
		{"an allocation that cannot be made", func() error { _, err := c.Alloc(ctx, 1<<40); return err }, StatusOutOfMemory, "1099511627776"},
		{"a zero-byte allocation", func() error { _, err := c.Alloc(ctx, 0); return err }, StatusInvalidArgument, "0 bytes"},
	}
	for _, tc := range cases {
		err := tc.call()
		var se *ServerError
		if !errors.As(err, &se) {
			t.Fatalf("%s: got %v, want a *ServerError", tc.name, err)
		}
		if Status(se.Status) != tc.status || se.StatusName != tc.status.String() || !strings.Contains(se.Message, tc.says) {
			t.Errorf("%s: got %+v, want status %v and a message with %q", tc.name, se, tc.status, tc.says)
		}
		if errors.Is(err, ErrServerDied) {
			t.Errorf("%s: %v wraps ErrServerDied, but the server keeps serving", tc.name, err)
		}
	}
	if err := c.Free(ctx, h); err != nil {
		t.Fatal(err)
	}
	var se *ServerError
	if err := c.Free(ctx, h); !errors.As(err, &se) || se.StatusName != "BAD_HANDLE" {
		t.Errorf("second Free = %v, want BAD_HANDLE", err)
	}
	if again := serverPID(t, c); again != pid {
		t.Errorf("server pid changed from %d to %d after error responses", pid, again)
	}
}

func TestTheChildGetsTheCookieAndTheExtraEnvironment(t *testing.T) {
	t.Setenv(CookieEnv, "a-stale-value-from-the-parent")
	c := newClient(t, fakeConfig(t, modeServe, fakeExtraEnv+"=from Config.Env"))
	h, err := c.Hello(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Fields["cookie"]; got != CookieValue {
		t.Errorf("the child saw %s=%q, want %q", CookieEnv, got, CookieValue)
	}
	if got := h.Fields["extra"]; got != "from Config.Env" {
		t.Errorf("the child saw %s=%q, want %q", fakeExtraEnv, got, "from Config.Env")
	}
}

func TestAMisbehavingServerIsEndedAndTheNextCallStartsAFreshOne(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		opID     uint32
		deadline time.Duration // of the call's ctx; 0 for none (CallTimeout applies)
		targets  []error
		phrases  []string
	}{
		{"a crash in the middle of a reply", opCrash, 0,
			[]error{ErrServerDied, io.ErrUnexpectedEOF}, []string{"died", "signal: terminated", "fake: crashing"}},
		{"a server that never replies is killed at the deadline", opHang, 300 * time.Millisecond,
			[]error{ErrServerDied, context.DeadlineExceeded}, []string{"killed by the host", "deadline", "signal: killed", "fake: hanging"}},
		{"a server that never replies is killed at CallTimeout", opHang, 0,
			[]error{ErrServerDied, context.DeadlineExceeded}, []string{"killed by the host", "deadline"}},
		{"a debug print on stdout", opGarbage, 0,
			[]error{ErrServerDied, ErrProtocol}, []string{`(the bytes "fake")`, "over the cap", "killed by the host", "hint: the server's stdout carries frames only"}},
		{"an oversized length prefix", opOversized, 0,
			[]error{ErrServerDied, ErrProtocol}, []string{"frame length 1048577 (the bytes", "is over the cap of 1048576 bytes"}},
		{"a length prefix shorter than the header", opShortLength, 0,
			[]error{ErrServerDied, ErrProtocol}, []string{`frame length 3 (the bytes "\x03\x00\x00\x00") is shorter than the 8-byte header`}},
		{"a reply with the wrong id", opWrongID, 0,
			[]error{ErrServerDied, ErrProtocol}, []string{"response has id"}},
		{"a reply with the wrong opcode", opWrongOpcode, 0,
			[]error{ErrServerDied, ErrProtocol}, []string{"has opcode PING"}},
		{"an OK reply with a short payload", opShortPayload, 0,
			[]error{ErrServerDied, ErrProtocol}, []string{"RUN response is 3 bytes, want 8"}},
		{"a device error", opDeviceError, 0,
			[]error{ErrServerDied}, []string{"DEVICE_ERROR", "fell off the bus", "exit status 4", "hint: status 4"}},
		{"an error not tied to a request", opFatalNoID, 0,
			[]error{ErrServerDied, ErrProtocol}, []string{"id 0", "over the cap", "exit status 3"}},
		{"an exit without a reply", opExitQuietly, 0,
			[]error{ErrServerDied, io.EOF}, []string{"died", "exit status 0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := fakeConfig(t, modeServe)
			cfg.CallTimeout = 300 * time.Millisecond
			c := newClient(t, cfg)
			oldPID := serverPID(t, c)
			old, err := c.Alloc(context.Background(), 8)
			if err != nil {
				t.Fatal(err)
			}

			ctx := context.Background()
			if tc.deadline > 0 {
				ctx = withTimeout(t, tc.deadline)
			}
			began := time.Now()
			_, err = c.Run(ctx, tc.opID, nil, nil)
			took := time.Since(began)
			checkErr(t, err, tc.targets, tc.phrases...)
			var died *DiedError
			if !errors.As(err, &died) || died.PID != oldPID || died.Gen != 1 {
				t.Errorf("error %#v is not a *DiedError for server #1 (pid %d)", err, oldPID)
			}
			if took > 3*time.Second {
				t.Errorf("the failing call took %v", took)
			}
			checkGone(t, oldPID)
			t.Logf("the error reads:\n%v", err)

			if err := c.Ping(context.Background()); err != nil {
				t.Fatalf("the next call: %v", err)
			}
			if pid := serverPID(t, c); pid == oldPID {
				t.Errorf("the next call reused pid %d", pid)
			}
			if err := c.Free(context.Background(), old); !errors.Is(err, ErrStaleHandle) {
				t.Errorf("Free of a handle from the dead server = %v, want ErrStaleHandle", err)
			}
		})
	}
}

func TestAServerThatDiesBetweenCallsIsReportedOnce(t *testing.T) {
	t.Parallel()
	c := newClient(t, fakeConfig(t, modeServe))
	pid := serverPID(t, c)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Wait until the Client's reaper has seen the exit, so the idle path is taken.
	if !c.lastProcess().wait(5 * time.Second) {
		t.Fatal("the killed server was not reaped")
	}
	err := c.Ping(context.Background())
	checkErr(t, err, []error{ErrServerDied}, "exited while idle", "signal: killed")
	if err := c.Ping(context.Background()); err != nil {
		t.Fatalf("the call after the report: %v", err)
	}
}

func TestStaleHandlesAreReportedNeverRecreated(t *testing.T) {
	t.Parallel()
	c := newClient(t, fakeConfig(t, modeServe))
	ctx := context.Background()
	h1, err := c.Alloc(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(ctx, opCrash, nil, nil); !errors.Is(err, ErrServerDied) {
		t.Fatalf("crash: %v", err)
	}
	// No server runs now; a stale handle must not start one.
	err = c.Write(ctx, h1, 0, []byte{1})
	checkErr(t, err, []error{ErrStaleHandle}, "buffer 1 of kernel server #1", "no server is running")
	if c.liveConn() != nil {
		t.Error("a call with a stale handle started a server")
	}
	h2, err := c.Alloc(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	if h2.ID() != h1.ID() {
		t.Fatalf("the fresh server's first handle is %d, want %d (the test relies on the ids colliding)", h2.ID(), h1.ID())
	}
	_, err = c.Run(ctx, opCopy, nil, []Handle{h1, h2})
	checkErr(t, err, []error{ErrStaleHandle}, "the live one is #2")
	err = c.Read(ctx, Handle{}, 0, make([]byte, 1))
	checkErr(t, err, []error{ErrStaleHandle}, "zero Handle")
	if err := c.Write(ctx, h2, 0, []byte{1}); err != nil {
		t.Errorf("the live handle: %v", err)
	}
}

func TestStartFailuresSayWhatHappened(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		mode    string
		config  func(*Config)
		targets []error
		phrases []string
	}{
		{"a wrong protocol version", modeOldVersion, nil,
			[]error{ErrProtocol, ErrServerDied}, []string{"server speaks protocol v1, this vkern speaks v2: rebuild with `vkern cache clean`"}},
		{"an exit before HELLO", modeExitBeforeHello, nil,
			[]error{ErrServerDied}, []string{"exit status 1", "fake: cannot open /dev/fake0", "hint: the server ended before its HELLO"}},
		{"an exit for want of the cookie", modeNoCookie, nil,
			[]error{ErrServerDied}, []string{"exit status 64", "VKERN_KERNEL_SERVER", "not run by hand"}},
		{"no HELLO within StartTimeout", modeSilent, func(c *Config) { c.StartTimeout = 300 * time.Millisecond },
			[]error{ErrServerDied, context.DeadlineExceeded}, []string{"no HELLO within StartTimeout (300ms)", "killed by the host", "hint: is"}},
		{"text instead of HELLO", modeGarbageHello, nil,
			[]error{ErrServerDied, ErrProtocol}, []string{"reading HELLO", "over the cap"}},
		{"a source hash that does not match", modeServe, func(c *Config) { c.ExpectSourceSHA256 = "0123abcd" },
			[]error{ErrServerDied}, []string{`SHA-256 "fake-source-sha"`, `embeds "0123abcd"`, "vkern cache clean"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			once := filepath.Join(t.TempDir(), "started-once")
			cfg := fakeConfig(t, tc.mode, fakeOnceEnv+"="+once)
			if tc.config != nil {
				tc.config(&cfg)
			}
			c := newClient(t, cfg)
			began := time.Now()
			err := c.Ping(context.Background())
			checkErr(t, err, tc.targets, tc.phrases...)
			if took := time.Since(began); took > 3*time.Second {
				t.Errorf("the failed start took %v", took)
			}
			var died *DiedError
			if errors.As(err, &died) {
				checkGone(t, died.PID)
			}
			if c.liveConn() != nil {
				t.Error("the Client kept a server whose start failed")
			}
			t.Logf("the error reads:\n%v", err)
			if tc.config != nil { // the fault is in the Config, not the server: it stays
				return
			}
			if err := c.Ping(context.Background()); err != nil {
				t.Errorf("the next call, with a server that starts well: %v", err)
			}
		})
	}
}

// Where a call's ctx has no deadline, StartTimeout alone bounds the start
// of its server (a server under a profiler may say HELLO only after
// CallTimeout has passed), and CallTimeout counts from the server's
// arrival: a request that hangs is given up after about CallTimeout more,
// not CallTimeout plus what was left of StartTimeout. The same in isolated
// mode, where every call starts a server.
func TestAStartTimeoutLongerThanTheCallTimeoutBoundsTheStartAlone(t *testing.T) {
	t.Parallel()
	for _, isolated := range []bool{false, true} {
		t.Run(fmt.Sprintf("isolated=%v", isolated), func(t *testing.T) {
			t.Parallel()
			cfg := fakeConfig(t, modeSlowHello) // HELLO after 1.5 s
			cfg.CallTimeout = 500 * time.Millisecond
			cfg.StartTimeout = 20 * time.Second
			cfg.Isolated = isolated
			c := newClient(t, cfg)
			if err := c.Ping(context.Background()); err != nil {
				t.Fatalf("Ping with HELLO after 1.5 s, CallTimeout 500ms, StartTimeout 20s: %v", err)
			}
			if !isolated {
				c.Close() // the next call starts a server again
				c = newClient(t, cfg)
			}
			// A request of 4 s on a server that takes 1.5 s to start.
			began := time.Now()
			_, err := c.Run(context.Background(), opSleep, []int64{4000}, nil)
			took := time.Since(began)
			if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "HELLO") {
				t.Fatalf("a 4 s request under CallTimeout 500ms, after a start of 1.5 s = %v, want the request's deadline error", err)
			}
			if took < 1500*time.Millisecond || took > 6*time.Second {
				t.Errorf("the request gave up after %v, want the start's 1.5 s and about CallTimeout (500ms) more", took)
			}
		})
	}
}

// A call with a deadline of its own keeps it for the start, and the error
// says that the call's deadline, not StartTimeout, ended the wait.
func TestAStartCutShortByTheCallsDeadlineSaysSo(t *testing.T) {
	t.Parallel()
	cfg := fakeConfig(t, modeSlowHello)
	cfg.StartTimeout = 20 * time.Second
	c := newClient(t, cfg)
	err := c.Ping(withTimeout(t, 300*time.Millisecond))
	checkErr(t, err, []error{ErrServerDied, context.DeadlineExceeded}, "no HELLO before the call's deadline", "give the call a later deadline")
	if strings.Contains(err.Error(), "VKERN_START_TIMEOUT") {
		t.Errorf("the hint names StartTimeout's setting, which would not have helped:\n%v", err)
	}
}

// A wrapper starts the server as its child and hands on its pipes,
// descriptors and environment (so the rings work through it); a kill at a
// call's deadline takes the wrapper's process group, the server with it.
func TestAWrapperRunsTheServerAsItsChild(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mark := filepath.Join(dir, "mark")
	wrapper := filepath.Join(dir, "wrap")
	// Its flag, then the server, run not by exec: the shell stays the
	// server's parent, as a profiler does.
	script := "#!/bin/sh\necho \"$$ $*\" > \"$WRAP_MARK\"\nshift\n\"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := fakeConfig(t, modeServe, "WRAP_MARK="+mark)
	cfg.Wrapper = []string{wrapper, "--a-flag"}
	c := newClient(t, cfg)
	server := serverPID(t, c)
	got, err := os.ReadFile(mark)
	if err != nil {
		t.Fatalf("the wrapper did not run: %v", err)
	}
	var shell int
	var args string
	if _, err := fmt.Sscanf(string(got), "%d %s", &shell, &args); err != nil || args != "--a-flag" ||
		!strings.HasSuffix(strings.TrimSpace(string(got)), " "+cfg.Path) {
		t.Fatalf("the wrapper was run as %q, want its pid, --a-flag and then the server's path %s", got, cfg.Path)
	}
	if shell == server {
		t.Fatalf("the server's HELLO pid %d is the wrapper's: the server is not its child", server)
	}
	if err := c.Ping(context.Background()); err != nil {
		t.Fatalf("Ping through the wrapper: %v", err)
	}
	// Without the group kill the host's read of the server's stdout would
	// never end (the server holds it open): fail rather than hang.
	done := make(chan error, 1)
	go func() {
		_, err := c.Run(withTimeout(t, 300*time.Millisecond), opHang, nil, nil)
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("a call to a hung server under a wrapper did not end 15 s after its 300ms deadline")
	}
	checkErr(t, err, []error{ErrServerDied})
	for _, pid := range []int{shell, server} {
		waitGone(t, pid)
	}
}

// A server that its wrapper put in a process group of its own (setsid) is
// still killed at a call's deadline: the host signals the pid its HELLO
// named, not only the wrapper's group.
func TestAServerOutsideItsWrappersGroupIsStillKilled(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid here")
	}
	cfg := fakeConfig(t, modeServe)
	cfg.Wrapper = []string{"sh", "-c", `setsid "$@"; exit $?`, "sh"}
	c := newClient(t, cfg)
	server := serverPID(t, c)
	if own, _ := syscall.Getpgid(server); own != server {
		t.Fatalf("the server's group is %d, want its own (%d): setsid did not move it", own, server)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Run(withTimeout(t, 300*time.Millisecond), opHang, nil, nil)
		done <- err
	}()
	select {
	case err := <-done:
		checkErr(t, err, []error{ErrServerDied})
	case <-time.After(15 * time.Second):
		syscall.Kill(server, syscall.SIGKILL) // what the host should have done
		t.Fatal("a call to a hung server outside its wrapper's group did not end 15 s after its 300ms deadline")
	}
	waitGone(t, server)
}

// A server whose wrapper exits first is killed with the wrapper's process
// group, not left running without it.
func TestAServerOutlivingItsWrapperIsKilled(t *testing.T) {
	t.Parallel()
	wrapper := filepath.Join(t.TempDir(), "wrap")
	// The server in the background (its stdin kept: sh gives a background
	// command /dev/null), and the wrapper gone half a second on.
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\n\"$@\" <&0 &\nsleep 0.5\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := fakeConfig(t, modeServe)
	cfg.Wrapper = []string{wrapper}
	c := newClient(t, cfg)
	server := serverPID(t, c)
	waitGone(t, server)
	if err := c.Ping(withTimeout(t, 10*time.Second)); !errors.Is(err, ErrServerDied) {
		t.Errorf("Ping after the wrapper exited = %v, want the server's death reported", err)
	}
}

// Where StartTimeout is longer than CallTimeout and the call's context has
// no deadline, a start that runs out says StartTimeout did, and names its
// setting.
func TestAStartPastStartTimeoutNamesIt(t *testing.T) {
	t.Parallel()
	cfg := fakeConfig(t, modeSilent)
	cfg.CallTimeout = 200 * time.Millisecond
	cfg.StartTimeout = 500 * time.Millisecond
	err := newClient(t, cfg).Ping(context.Background())
	checkErr(t, err, []error{ErrServerDied, context.DeadlineExceeded}, "no HELLO within StartTimeout (500ms)", "VKERN_START_TIMEOUT")
}

// A wrapper that is not in $PATH is named, with what to do.
func TestAMissingWrapperSaysSo(t *testing.T) {
	t.Parallel()
	cfg := fakeConfig(t, modeServe)
	cfg.Wrapper = []string{"vkern-no-such-wrapper", "-x"}
	err := newClient(t, cfg).Ping(context.Background())
	checkErr(t, err, nil, `the server's wrapper "vkern-no-such-wrapper"`, "not a program in $PATH")
}

// waitGone waits up to 5 s for pid to be gone or a zombie (the wrapper's
// child, orphaned by the kill, is reaped by whichever process adopts it).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); ; {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
		if time.Now().After(end) {
			t.Errorf("process %d still runs after the kill: %s", pid, stat)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestABinaryThatCannotRunSaysSo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notExecutable := filepath.Join(dir, "server")
	if err := os.WriteFile(notExecutable, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	notAProgram := filepath.Join(dir, "garbage")
	if err := os.WriteFile(notAProgram, []byte("\x7fELF but not really"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, path string
		target     error
		hint       string
	}{
		{"a missing binary", filepath.Join(dir, "missing"), fs.ErrNotExist, "is missing"},
		{"a file that is not executable", notExecutable, fs.ErrPermission, "not executable"},
		{"a file that is not a program", notAProgram, syscall.ENOEXEC, "not a program for this machine"},
		{"a bare name is not looked up in $PATH", "sh", fs.ErrNotExist, "is missing"},
	}
	for _, tc := range cases {
		c := newClient(t, Config{Path: tc.path})
		err := c.Ping(context.Background())
		checkErr(t, err, []error{tc.target}, tc.path, "hint: the", tc.hint, "vkern cache clean")
		if errors.Is(err, ErrServerDied) {
			t.Errorf("%s: %v wraps ErrServerDied, but nothing ran", tc.name, err)
		}
	}
}

func TestBeforeStartRunsBeforeEveryStart(t *testing.T) {
	t.Parallel()
	cfg := fakeConfig(t, modeServe)
	var calls int
	refuse := errors.New("sha256 of the binary changed")
	cfg.BeforeStart = func(ctx context.Context) error {
		calls++
		if calls == 2 {
			return refuse
		}
		return nil
	}
	c := newClient(t, cfg)
	ctx := context.Background()
	if err := c.Ping(ctx); err != nil || calls != 1 {
		t.Fatalf("first Ping: %v, BeforeStart calls = %d", err, calls)
	}
	if err := c.Ping(ctx); err != nil || calls != 1 {
		t.Fatalf("second Ping: %v, BeforeStart calls = %d; want 1, the server is already up", err, calls)
	}
	if _, err := c.Run(ctx, opCrash, nil, nil); !errors.Is(err, ErrServerDied) {
		t.Fatalf("crash: %v", err)
	}
	err := c.Ping(ctx)
	checkErr(t, err, []error{refuse}, "not starting")
	if c.liveConn() != nil || c.gen != 1 {
		t.Errorf("a refused start started server #%d", c.gen)
	}
	if err := c.Ping(ctx); err != nil || calls != 3 {
		t.Errorf("Ping after the refusal: %v, BeforeStart calls = %d; want 3", err, calls)
	}
}

func TestAStderrFloodNeverStalls(t *testing.T) {
	t.Parallel()
	for _, when := range []string{"before HELLO", "during a call"} {
		t.Run(when, func(t *testing.T) {
			t.Parallel()
			mode := modeServe
			if when == "before HELLO" {
				mode = modeFloodFirst
			}
			cfg := fakeConfig(t, mode)
			cfg.StderrTail = 32 << 10
			c := newClient(t, cfg)
			ctx := withTimeout(t, 5*time.Second)
			if when == "during a call" {
				if _, err := c.Run(ctx, opStderrFlood, []int64{3 << 20}, nil); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Ping(ctx); err != nil {
				t.Fatal(err)
			}
			// The last of the flood may still be in the pipe: Close drains it.
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			tail := c.Stderr()
			if !strings.Contains(tail, "fake: end of the flood") || !strings.Contains(tail, "earlier bytes dropped") {
				t.Errorf("stderr tail (%d bytes) lacks the flood's end or the drop note:\n%.300s", len(tail), tail)
			}
			if len(tail) > cfg.StderrTail+100 {
				t.Errorf("stderr tail is %d bytes, want at most %d and a note", len(tail), cfg.StderrTail)
			}
		})
	}
}

func TestCloseShutsDownPolitelyAndIsSafeToRepeat(t *testing.T) {
	t.Parallel()
	c := New(fakeConfig(t, modeServe))
	if err := c.Close(); err != nil {
		t.Fatalf("Close before any call: %v", err)
	}
	if err := c.Ping(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Ping after Close = %v, want ErrClosed", err)
	}

	c = New(fakeConfig(t, modeServe))
	pid := serverPID(t, c)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = c.Close() })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Close #%d: %v", i, err)
		}
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close once more: %v", err)
	}
	checkGone(t, pid)
	if tail := c.Stderr(); !strings.Contains(tail, "fake: shutting down") {
		t.Errorf("the server's stderr %q does not show it shut down by itself", tail)
	}
	if _, err := c.Alloc(context.Background(), 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Alloc after Close = %v, want ErrClosed", err)
	}
}

func TestCloseKillsAServerThatIgnoresShutdown(t *testing.T) {
	t.Parallel()
	cfg := fakeConfig(t, modeIgnoreShutdown)
	cfg.CloseTimeout = 200 * time.Millisecond
	c := New(cfg)
	pid := serverPID(t, c)
	began := time.Now()
	err := c.Close()
	if err == nil || !strings.Contains(err.Error(), "had not exited") {
		t.Errorf("Close = %v, want an error saying the server had to be killed", err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("Close took %v", took)
	}
	checkGone(t, pid)
}

func TestCloseEndsACallInFlight(t *testing.T) {
	t.Parallel()
	cfg := fakeConfig(t, modeServe)
	cfg.CloseTimeout = 200 * time.Millisecond
	c := New(cfg)
	pid := serverPID(t, c)
	callErr := make(chan error)
	go func() {
		_, err := c.Run(withTimeout(t, time.Minute), opHang, nil, nil)
		callErr <- err
	}()
	time.Sleep(100 * time.Millisecond) // let the call get in flight
	began := time.Now()
	c.Close()
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("Close took %v with a call in flight", took)
	}
	select {
	case err := <-callErr:
		checkErr(t, err, []error{ErrClosed, ErrServerDied})
	case <-time.After(5 * time.Second):
		t.Fatal("the call in flight did not return after Close")
	}
	checkGone(t, pid)
}

func TestAWaitForTheLockDoesNotKillTheServer(t *testing.T) {
	t.Parallel()
	c := newClient(t, fakeConfig(t, modeServe))
	pid := serverPID(t, c)
	slow := make(chan error)
	go func() {
		_, err := c.Run(context.Background(), opSleep, []int64{400}, nil)
		slow <- err
	}()
	time.Sleep(100 * time.Millisecond)
	err := c.Ping(withTimeout(t, 50*time.Millisecond))
	checkErr(t, err, []error{context.DeadlineExceeded}, "gave up waiting for the call in flight")
	if errors.Is(err, ErrServerDied) {
		t.Errorf("waiting for the lock ended the server: %v", err)
	}
	if err := <-slow; err != nil {
		t.Errorf("the slow call: %v", err)
	}
	if again := serverPID(t, c); again != pid {
		t.Errorf("the server changed from pid %d to %d", pid, again)
	}
}

func TestConcurrentCallsAreSafe(t *testing.T) {
	t.Parallel()
	c := newClient(t, fakeConfig(t, modeServe))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			ctx := context.Background()
			for round := range 20 {
				want := bytes.Repeat([]byte{byte(g), byte(round)}, 100+g)
				h, err := c.Alloc(ctx, uint64(len(want)))
				if err == nil {
					err = c.Write(ctx, h, 0, want)
				}
				got := make([]byte, len(want))
				if err == nil {
					err = c.Read(ctx, h, 0, got)
				}
				if err == nil && !bytes.Equal(got, want) {
					err = fmt.Errorf("goroutine %d round %d read back other data", g, round)
				}
				if err == nil {
					err = c.Free(ctx, h)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestTransfersLargerThanAPieceAreSplit(t *testing.T) {
	t.Parallel()
	cfg := fakeConfig(t, modeServe)
	cfg.ArenaBytes = 1 << 20
	c := newClient(t, cfg)
	piece := c.pieceBytes()
	ctx := withTimeout(t, 10*time.Second)
	size := 5*piece + 12345 // six pieces, more than the window holds
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i*131 + i>>16)
	}
	h, err := c.Alloc(ctx, uint64(size+10))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, h, 10, want); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, size)
	if err := c.Read(ctx, h, 10, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("a split transfer read back other data")
	}
	if used := c.arena.inUse(); used != 0 {
		t.Errorf("%d bytes of the arena still reserved after the transfers", used)
	}
	// A piece that fails names its offset.
	err = c.Write(ctx, h, 11, want)
	var se *ServerError
	if !errors.As(err, &se) || se.StatusName != "OUT_OF_RANGE" || !strings.Contains(err.Error(), "piece at offset "+strconv.Itoa(11+5*piece)) {
		t.Errorf("a write one byte too long = %v, want OUT_OF_RANGE in its last piece", err)
	}
	if err := c.Write(ctx, h, 1<<63, make([]byte, 1<<20)); err == nil || !strings.Contains(err.Error(), "outside the buffer") {
		t.Errorf("a write far past the end = %v", err)
	}
	if err := c.Read(ctx, h, ^uint64(0), make([]byte, 2)); err == nil || !strings.Contains(err.Error(), "does not fit in a u64") {
		t.Errorf("a read whose end overflows = %v", err)
	}
	if used := c.arena.inUse(); used != 0 {
		t.Errorf("%d bytes of the arena still reserved after failed transfers", used)
	}
}

func TestARequestOverTheCapIsRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	c := newClient(t, fakeConfig(t, modeServe))
	pid := serverPID(t, c)
	_, err := c.Run(context.Background(), opCopy, make([]int64, MaxFrameBytes/8), nil)
	checkErr(t, err, nil, "over the frame cap")
	if errors.Is(err, ErrServerDied) {
		t.Errorf("a request that was never sent ended the server: %v", err)
	}
	if again := serverPID(t, c); again != pid {
		t.Errorf("the server changed from pid %d to %d", pid, again)
	}
}
