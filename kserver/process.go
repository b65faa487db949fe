package kserver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// process is one incarnation of the kernel server. The Client sees only this
// interface; execProcess below holds every os/exec detail.
type process interface {
	// stdin and stdout are the host's ends of the child's pipes, in
	// blocking mode: a read or write ties up a thread, not the poller, and
	// ends when the data moves or the child dies.
	stdin() *os.File
	stdout() *os.File
	pid() int
	// kill sends SIGKILL (under a wrapper, to the wrapper's process group
	// until the wrapper exits), which ends any blocked read or write on the
	// pipes. It is safe at any time, from any goroutine, any number of
	// times, before or after the child exits.
	kill()
	// wait waits up to timeout for the child to exit and its stderr to be
	// drained; it reports whether that happened. A timeout of 0 only looks.
	wait(timeout time.Duration) bool
	// diagnose says how the child ended ("exit status 3", "signal: killed",
	// or "still running") and gives a hint for the exit status, if any.
	diagnose() (exit, hint string)
	// stderrTail is the tail of the child's stderr so far.
	stderrTail() string
	// release closes the host's pipe ends. Call it after the child has exited
	// or been killed; a read or write still in progress then fails.
	release()
}

// wrappedEnv tells a server started under a wrapper to watch for its
// host's death itself.
const wrappedEnv = "VKERN_WRAPPED"

// waitDelay bounds how long Wait waits for the child's stderr to close after
// the child itself has exited (a grandchild could hold it open).
const waitDelay = 2 * time.Second

type execProcess struct {
	cmd     *exec.Cmd
	in      *os.File // host end of the child's stdin
	out     *os.File // host end of the child's stdout
	stderr  *tailBuffer
	done    chan struct{}
	waitErr error // set before done is closed
	wrapped bool  // the child is a wrapper whose own child is the server: kill takes its process group

	// Under a wrapper: groupGone says the group was killed when the
	// wrapper exited, before it was reaped (its pid, the group's id, then
	// free for reuse: no signal to the group after that).
	groupMu   sync.Mutex
	groupGone bool
	// serverFD is a pidfd of the server its HELLO named (adopt), or -1:
	// kill signals it too, should the wrapper have moved it to another
	// group.
	serverFD int
}

// startProcess starts path with no arguments and the environment env. Its
// stdin and stdout are pipes the host reads and writes directly, so nothing
// is lost when it exits; its stderr goes through exec's copying goroutine
// into a ring of stderrBytes, so a chatty child never blocks. The arena
// file, if any, becomes the child's file descriptor 3, and the ring file,
// if any, its descriptor 4 (with the variable that tells it so). With a
// wrapper (Config.Wrapper), the child is the wrapper's first word, found in
// $PATH, run with its other words and then path: it inherits the pipes and
// descriptors and hands them on to the server it starts.
func startProcess(path string, wrapper []string, env []string, stderrBytes int, arena, rings *os.File) (*execProcess, error) {
	if rings != nil && arena == nil {
		return nil, errors.New("kserver: the ring file goes on descriptor 4, after an arena on 3")
	}
	program, args := path, []string{path}
	if len(wrapper) > 0 {
		found, err := exec.LookPath(wrapper[0])
		if err != nil {
			return nil, fmt.Errorf("the server's wrapper %q: %w", wrapper[0], err)
		}
		program, args = found, append(append([]string{wrapper[0]}, wrapper[1:]...), path)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	p := &execProcess{
		// Built by hand, not with exec.Command, so that a bare name is never
		// looked up in $PATH: the binary that runs is the one whose hash
		// BeforeStart checked.
		cmd: &exec.Cmd{Path: program, Args: args, Env: env, Stdin: inR, Stdout: outW, WaitDelay: waitDelay,
			// A process group of its own: a terminal's Ctrl-C (SIGINT to the
			// foreground group) reaches the host alone, which finishes its
			// call, saves and closes the server, rather than the server dying
			// mid-call. The server still ends with the host: its stdin closes
			// when the host exits, and when the host is killed (a group
			// SIGKILL from torchrun or job control no longer reaches the
			// server) the kernel's parent-death signal kills it at once, not
			// after its call in flight. That signal follows the thread that
			// started the child: Start runs on a locked thread, which the
			// runtime keeps after the unlock. Under a wrapper it reaches the
			// wrapper; the server, told by wrappedEnv, ends itself 2 s after
			// its stdin hangs up.
			SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}},
		in:       inW,
		out:      outR,
		stderr:   newTailBuffer(stderrBytes),
		done:     make(chan struct{}),
		wrapped:  len(wrapper) > 0,
		serverFD: -1,
	}
	p.cmd.Stderr = p.stderr
	if arena != nil {
		p.cmd.ExtraFiles = []*os.File{arena}
	}
	if p.wrapped {
		// The server's own watch for the host's death, which the
		// parent-death signal no longer covers (server.cc,
		// watch_host_when_wrapped).
		p.cmd.Env = append(slices.Clip(p.cmd.Env), wrappedEnv+"=1")
	}
	if rings != nil {
		p.cmd.ExtraFiles = append(p.cmd.ExtraFiles, rings)
		p.cmd.Env = append(slices.Clip(p.cmd.Env), fmt.Sprintf("%s=%d", ringsEnv, ringsFd))
	}
	runtime.LockOSThread()
	err = p.cmd.Start()
	runtime.UnlockOSThread()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	// Blocking mode (which Fd sets): a round trip is then one write and one
	// read, without the poller's wake-ups in between.
	inW.Fd()
	outR.Fd()
	go func() {
		if p.wrapped {
			p.endGroup()
		}
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// endGroup waits for the wrapper to exit without reaping it (its pid stays
// taken, and with it the group's id), then kills what is left of its process
// group: a server whose wrapper died first, say.
func (p *execProcess) endGroup() {
	var info unix.Siginfo
	for unix.Waitid(unix.P_PID, p.cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil) == unix.EINTR {
	}
	p.groupMu.Lock()
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	p.groupGone = true
	p.groupMu.Unlock()
}

func (p *execProcess) stdin() *os.File    { return p.in }
func (p *execProcess) stdout() *os.File   { return p.out }
func (p *execProcess) pid() int           { return p.cmd.Process.Pid }
func (p *execProcess) stderrTail() string { return p.stderr.String() }

// adopt takes a pidfd of the server a wrapper started (pid, from its HELLO),
// so that kill reaches it wherever the wrapper put it. Without pidfds
// (Linux before 5.3) kill has the wrapper's group alone.
func (p *execProcess) adopt(pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	p.groupMu.Lock()
	defer p.groupMu.Unlock()
	if p.serverFD >= 0 {
		unix.Close(p.serverFD)
	}
	p.serverFD = fd
}

func (p *execProcess) kill() {
	if p.wrapped {
		// The wrapper's process group (its own, Setpgid), with the server
		// in it. Only until the wrapper has exited: endGroup kills the group
		// then, before the wrapper is reaped and its pid (the group's id)
		// can be taken by another process.
		p.groupMu.Lock()
		if !p.groupGone {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		}
		if p.serverFD >= 0 { // the very process, however long since its exit
			_ = unix.PidfdSendSignal(p.serverFD, unix.SIGKILL, nil, 0)
		}
		p.groupMu.Unlock()
	}
	// After the child has exited, Kill returns os.ErrProcessDone: nothing to do.
	_ = p.cmd.Process.Kill()
}

func (p *execProcess) wait(timeout time.Duration) bool {
	if timeout <= 0 {
		select {
		case <-p.done:
			return true
		default:
			return false
		}
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

func (p *execProcess) diagnose() (exit, hint string) {
	select {
	case <-p.done:
	default:
		return "still running", ""
	}
	state := p.cmd.ProcessState
	if state == nil { // Wait failed before the child was reaped
		return fmt.Sprintf("unknown status (%v)", p.waitErr), ""
	}
	exit = state.String()
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		switch ws.Signal() {
		case syscall.SIGKILL:
			hint = "SIGKILL comes from the host's own kill, the OOM killer, or a person"
		case syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGILL, syscall.SIGFPE, syscall.SIGABRT:
			hint = "the server crashed; a kernel reading or writing out of bounds is the usual cause"
		}
		return exit, hint
	}
	switch state.ExitCode() {
	case ExitTruncated:
		hint = "status 2: the server saw its input end inside a frame"
	case ExitOverCap:
		hint = fmt.Sprintf("status 3: the server saw a length prefix over the %d-byte cap", MaxFrameBytes)
	case ExitDeviceError:
		hint = "status 4: the device reported an error it cannot recover from; the next call starts a fresh server"
	case ExitNoCookie:
		hint = "status 64: the server did not see " + CookieEnv + " in its environment"
	}
	if p.waitErr != nil && !errors.As(p.waitErr, new(*exec.ExitError)) {
		exit += fmt.Sprintf(" (%v)", p.waitErr) // exec.ErrWaitDelay and the like
	}
	return exit, hint
}

func (p *execProcess) release() {
	p.groupMu.Lock()
	if p.serverFD >= 0 {
		unix.Close(p.serverFD)
		p.serverFD = -1
	}
	p.groupMu.Unlock()
	p.in.Close()
	p.out.Close()
}

// startHint says what to do about an error from startProcess.
func startHint(err error) string {
	var lookup *exec.Error // only the wrapper is looked up in $PATH
	switch {
	case errors.As(err, &lookup):
		return "the server's wrapper (Config.Wrapper; vkern: $VKERN_SERVER_WRAPPER) is not a program in $PATH: install it, or name it by its path"
	case errors.Is(err, fs.ErrNotExist):
		return "the kernel-server binary is missing; `vkern cache clean` rebuilds it"
	case errors.Is(err, fs.ErrPermission):
		return "the kernel-server binary is not executable (or its folder is not searchable); `vkern cache clean` rebuilds it"
	case errors.Is(err, syscall.ENOEXEC):
		return "the file is not a program for this machine (a partial build, or built for another architecture); `vkern cache clean` rebuilds it"
	}
	return ""
}

// childEnv is the child's environment: the host's, then extra, then the
// cookie, with any other value of the cookie variable removed, and without
// the rings and wrapped variables, which startProcess sets when it passes
// rings or starts a wrapper.
func childEnv(extra []string) []string {
	env := make([]string, 0, len(os.Environ())+len(extra)+1)
	for _, kv := range append(os.Environ(), extra...) {
		if !strings.HasPrefix(kv, CookieEnv+"=") && !strings.HasPrefix(kv, ringsEnv+"=") && !strings.HasPrefix(kv, wrappedEnv+"=") {
			env = append(env, kv)
		}
	}
	return append(env, CookieEnv+"="+CookieValue)
}

// tailBuffer keeps the last len(ring) bytes written to it. Writes never block
// and never fail, so the goroutine that drains the child's stderr never stalls.
type tailBuffer struct {
	mu    sync.Mutex
	ring  []byte
	next  int   // where the next byte goes
	total int64 // bytes ever written
}

func newTailBuffer(size int) *tailBuffer {
	return &tailBuffer{ring: make([]byte, max(size, 1))}
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	b.total += int64(n)
	if len(p) > len(b.ring) {
		p = p[len(p)-len(b.ring):]
	}
	c := copy(b.ring[b.next:], p)
	copy(b.ring, p[c:])
	b.next = (b.next + len(p)) % len(b.ring)
	return n, nil
}

// String returns the tail, prefixed by a note when earlier bytes were dropped.
func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.total <= int64(len(b.ring)) {
		return string(b.ring[:b.total])
	}
	return fmt.Sprintf("[%d earlier bytes dropped]\n", b.total-int64(len(b.ring))) +
		string(b.ring[b.next:]) + string(b.ring[:b.next])
}
