package kserver

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The fake kernel server is this test binary run again: TestMain plays it
// when fakeModeEnv is set. (The protocol starts the server with no
// arguments, so the usual -test.run=TestHelperProcess cannot be passed.)
// fakeModeEnv picks how it starts; RUN op ids from opCrash on pick how it
// misbehaves in the middle of a call.
const (
	fakeModeEnv  = "VKERN_KSERVER_FAKE"
	fakeOnceEnv  = "VKERN_KSERVER_FAKE_ONCE"  // a path: the start mode applies only while it does not exist, and creates it
	fakeExtraEnv = "VKERN_KSERVER_FAKE_EXTRA" // echoed in HELLO's "extra" field
)

// Start modes.
const (
	modeServe           = "serve"             // a well-behaved server
	modeOldVersion      = "old-version"       // HELLO says protocol version 1
	modeExitBeforeHello = "exit-before-hello" // explains on stderr and exits 1
	modeNoCookie        = "no-cookie"         // behaves as if the cookie were missing: exit 64
	modeSilent          = "silent"            // never sends HELLO
	modeGarbageHello    = "garbage-hello"     // prints text on stdout instead of HELLO
	modeFloodFirst      = "flood-first"       // 2.5 MiB of stderr, then HELLO
	modeSlowHello       = "slow-hello"        // HELLO after 1.5 s, as a server under a profiler
	modeIgnoreShutdown  = "ignore-shutdown"   // answers SHUTDOWN but does not exit
)

// RUN op ids the fake understands. opCopy is ordinary; the rest misbehave.
const (
	opCopy         = 1    // copies buffer 0 into buffer 1; kernel time 1234 ns
	opCrash        = 1001 // half a frame, then death by SIGTERM
	opHang         = 1002 // never replies
	opGarbage      = 1003 // a debug print on stdout, then serves on
	opOversized    = 1004 // a length prefix of MaxFrameBytes+1
	opShortLength  = 1005 // a length prefix of 3
	opWrongID      = 1006 // replies with the wrong id
	opWrongOpcode  = 1007 // replies with PING's opcode
	opStderrFlood  = 1008 // params[0] bytes of stderr, then an OK reply
	opDeviceError  = 1009 // DEVICE_ERROR, then exit 4
	opFatalNoID    = 1010 // MALFORMED with id 0, then exit 3
	opSleep        = 1011 // sleeps params[0] ms, then an OK reply
	opExitQuietly  = 1012 // exit 0 without a reply
	opShortPayload = 1013 // an OK reply with a 3-byte payload
)

const fakeKernelNs = 1234

// fakeMemoryBytes is the fake device's memory: HELLO's memory_bytes, and
// MEMORY's total, whose free part is what the live buffers leave.
const fakeMemoryBytes = 1 << 30

func TestMain(m *testing.M) {
	if mode, ok := os.LookupEnv(fakeModeEnv); ok {
		os.Exit(fakeServer(mode))
	}
	if bin, ok := os.LookupEnv(testHostEnv); ok {
		os.Exit(busyWrappedHost(bin))
	}
	code := m.Run()
	if realDir != "" {
		os.RemoveAll(realDir)
	}
	os.Exit(code)
}

// fakeServer serves the protocol on stdin and stdout and returns its exit status.
func fakeServer(mode string) int {
	if os.Getenv(CookieEnv) != CookieValue {
		fmt.Fprintln(os.Stderr, "this is the vkern kernel server; vkern starts it, it is not run by hand")
		return ExitNoCookie
	}
	if once := os.Getenv(fakeOnceEnv); once != "" {
		if _, err := os.Stat(once); err == nil {
			mode = modeServe
		} else {
			os.WriteFile(once, nil, 0o644)
		}
	}
	out := bufio.NewWriter(os.Stdout)
	send := func(f Frame) {
		out.Write(appendHeader(nil, len(f.Payload), f.ID, f.Opcode, f.Status))
		out.Write(f.Payload)
		out.Flush()
	}
	fail := func(req Frame, status Status, format string, args ...any) {
		send(Frame{ID: req.ID, Opcode: req.Opcode, Status: status, Payload: fmt.Appendf(nil, format, args...)})
	}

	version := uint32(ProtocolVersion)
	switch mode {
	case modeServe, modeIgnoreShutdown:
	case modeOldVersion:
		version = 1
	case modeExitBeforeHello:
		fmt.Fprintln(os.Stderr, "fake: cannot open /dev/fake0: no such device")
		return 1
	case modeNoCookie:
		fmt.Fprintln(os.Stderr, "this is the vkern kernel server; vkern starts it, it is not run by hand")
		return ExitNoCookie
	case modeSilent:
		time.Sleep(time.Hour)
	case modeGarbageHello:
		fmt.Println("fake: hello world, this is not a frame")
		time.Sleep(time.Hour)
	case modeFloodFirst:
		floodStderr(5 << 19)
	case modeSlowHello:
		time.Sleep(1500 * time.Millisecond)
	default:
		fmt.Fprintf(os.Stderr, "fake: unknown mode %q\n", mode)
		return 1
	}
	hello, _ := AppendHello(nil, Hello{Version: version, Fields: map[string]string{
		KeyBackend: "fake", KeyDevice: "fake device", KeyArch: runtime.GOARCH,
		KeyCores: strconv.Itoa(runtime.NumCPU()), KeyMemoryBytes: strconv.Itoa(fakeMemoryBytes),
		KeySourceSHA256: "fake-source-sha", "pid": strconv.Itoa(os.Getpid()),
		"cookie": os.Getenv(CookieEnv), "extra": os.Getenv(fakeExtraEnv),
	}})
	send(Frame{Opcode: OpHello, Payload: hello})

	in := bufio.NewReader(os.Stdin)
	arena := &fakeArena{file: os.NewFile(3, "arena")}
	buffers := map[uint64][]byte{}
	nextHandle := uint64(1)
	var reqBuf []byte
	for {
		req, err := ReadFrame(in, reqBuf[:0])
		reqBuf = req.Payload
		switch {
		case err == io.EOF:
			return ExitClean
		case errors.Is(err, ErrProtocol):
			send(Frame{Opcode: 0, Status: StatusMalformed, Payload: []byte(err.Error())})
			return ExitOverCap
		case err != nil:
			fmt.Fprintln(os.Stderr, "fake:", err)
			return ExitTruncated
		}
		ok := func(payload []byte) { send(Frame{ID: req.ID, Opcode: req.Opcode, Payload: payload}) }
		buffer := func(h uint64) ([]byte, bool) {
			b, found := buffers[h]
			if !found {
				fail(req, StatusBadHandle, "no live buffer has handle %d", h)
			}
			return b, found
		}
		inRange := func(b []byte, off, n uint64) bool {
			if off > uint64(len(b)) || n > uint64(len(b))-off {
				fail(req, StatusOutOfRange, "offset %d + length %d is outside the buffer of %d bytes", off, n, len(b))
				return false
			}
			return true
		}
		switch req.Opcode {
		case OpPing, OpSync:
			ok(nil)
		case OpMemory:
			free := uint64(fakeMemoryBytes)
			for _, b := range buffers {
				free -= min(free, uint64(len(b)))
			}
			ok(AppendMemoryResponse(nil, Memory{Free: free, Total: fakeMemoryBytes}))
		case OpShutdown:
			ok(nil)
			if mode == modeIgnoreShutdown {
				time.Sleep(time.Hour)
			}
			fmt.Fprintln(os.Stderr, "fake: shutting down")
			return ExitClean
		case OpAlloc:
			n, err := DecodeAllocRequest(req.Payload)
			switch {
			case err != nil:
				fail(req, StatusMalformed, "%v", err)
			case n == 0:
				fail(req, StatusInvalidArgument, "ALLOC of 0 bytes; want at least 1")
			case n > 1<<30:
				fail(req, StatusOutOfMemory, "cannot allocate %d bytes", n)
			default:
				buffers[nextHandle] = make([]byte, n)
				ok(AppendAllocResponse(nil, nextHandle))
				nextHandle++
			}
		case OpFree:
			h, err := DecodeFreeRequest(req.Payload)
			if err != nil {
				fail(req, StatusMalformed, "%v", err)
			} else if _, found := buffer(h); found {
				delete(buffers, h)
				ok(nil)
			}
		case OpWrite, OpRead:
			r, err := DecodeTransferRequest(req.Payload)
			if err != nil {
				fail(req, StatusMalformed, "%v", err)
			} else if b, found := buffer(r.Handle); found && inRange(b, r.Offset, r.Length) {
				a, err := arena.span(r.ArenaOffset, r.Length)
				switch {
				case err != nil:
					fail(req, StatusOutOfRange, "%v", err)
				case req.Opcode == OpWrite:
					copy(b[r.Offset:], a)
					ok(nil)
				default:
					copy(a, b[r.Offset:])
					ok(nil)
				}
			}
		case OpRun:
			r, err := DecodeRunPayload(req.Payload)
			if err != nil {
				fail(req, StatusMalformed, "%v", err)
				continue
			}
			if code := fakeRun(r, req, send, buffers); code >= 0 {
				return code
			}
		case OpRunBatch:
			runs, err := DecodeRunBatchRequest(req.Payload)
			if err != nil {
				send(Frame{ID: req.ID, Opcode: req.Opcode, Status: StatusMalformed, Payload: AppendRunBatchError(nil, NoBatchEntry, err.Error())})
				continue
			}
			times := make([]uint64, len(runs))
			failed := false
			for i, r := range runs {
				if r.OpID != opCopy || len(r.Buffers) != 2 || buffers[r.Buffers[0]] == nil || buffers[r.Buffers[1]] == nil {
					send(Frame{ID: req.ID, Opcode: req.Opcode, Status: StatusInvalidArgument,
						Payload: AppendRunBatchError(nil, uint32(i), fmt.Sprintf("RUN_BATCH entry %d of %d: the fake runs only copy on live buffers", i, len(runs)))})
					failed = true
					break
				}
				times[i] = fakeKernelNs
			}
			if !failed {
				for _, r := range runs {
					copy(buffers[r.Buffers[1]], buffers[r.Buffers[0]])
				}
				ok(AppendRunBatchResponse(nil, times))
			}
		default:
			fail(req, StatusUnknownOpcode, "no opcode %d", uint16(req.Opcode))
		}
	}
}

// fakeRun serves one RUN request; it returns an exit status to exit with, or -1.
func fakeRun(r RunPayload, req Frame, send func(Frame), buffers map[uint64][]byte) int {
	reply := func(id uint32, op Opcode, status Status, payload []byte) {
		send(Frame{ID: id, Opcode: op, Status: status, Payload: payload})
	}
	param := func(i int, def int64) int64 {
		if i < len(r.Params) {
			return r.Params[i]
		}
		return def
	}
	switch r.OpID {
	case opCopy:
		if len(r.Buffers) != 2 {
			reply(req.ID, OpRun, StatusInvalidArgument, fmt.Appendf(nil, "copy takes 2 buffers, got %d", len(r.Buffers)))
			return -1
		}
		src, dst := buffers[r.Buffers[0]], buffers[r.Buffers[1]]
		if src == nil || dst == nil || len(src) != len(dst) {
			reply(req.ID, OpRun, StatusInvalidArgument, fmt.Appendf(nil, "copy: buffers %v missing or of different sizes", r.Buffers))
			return -1
		}
		copy(dst, src)
	case opCrash:
		fmt.Fprintln(os.Stderr, "fake: crashing in the middle of a reply")
		os.Stdout.Write([]byte{20, 0, 0, 0, 1})
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
		time.Sleep(time.Hour)
	case opHang:
		fmt.Fprintln(os.Stderr, "fake: hanging")
		time.Sleep(time.Hour)
	case opGarbage:
		fmt.Println("fake: debug print that went to stdout by mistake")
		return -1
	case opOversized:
		os.Stdout.Write(appendHeader(nil, MaxFrameBytes+1-HeaderBytes, req.ID, OpRun, StatusOK))
		time.Sleep(time.Hour)
	case opShortLength:
		os.Stdout.Write([]byte{3, 0, 0, 0, 1, 2, 3})
		time.Sleep(time.Hour)
	case opWrongID:
		reply(req.ID+1, OpRun, StatusOK, AppendRunResponse(nil, fakeKernelNs))
		return -1
	case opWrongOpcode:
		reply(req.ID, OpPing, StatusOK, nil)
		return -1
	case opStderrFlood:
		floodStderr(int(param(0, 5<<19)))
	case opDeviceError:
		reply(req.ID, OpRun, StatusDeviceError, []byte("fake: the device fell off the bus"))
		return ExitDeviceError
	case opFatalNoID:
		reply(0, 0, StatusMalformed, []byte("frame length 4294967295 is over the cap of 33554432 bytes"))
		return ExitOverCap
	case opSleep:
		time.Sleep(time.Duration(param(0, 0)) * time.Millisecond)
	case opExitQuietly:
		return ExitClean
	case opShortPayload:
		reply(req.ID, OpRun, StatusOK, []byte{1, 2, 3})
		return -1
	default:
		reply(req.ID, OpRun, StatusInvalidArgument, fmt.Appendf(nil, "unknown op id %d", r.OpID))
		return -1
	}
	reply(req.ID, OpRun, StatusOK, AppendRunResponse(nil, fakeKernelNs))
	return -1
}

// floodStderr writes n bytes of numbered lines to stderr, ending with a line
// the tests look for.
func floodStderr(n int) {
	w := bufio.NewWriterSize(os.Stderr, 64<<10)
	for i := 0; n > 0; i++ {
		line := fmt.Sprintf("fake: chatter line %d %s\n", i, strings.Repeat("x", 60))
		w.WriteString(line)
		n -= len(line)
	}
	w.WriteString("fake: end of the flood\n")
	w.Flush()
}

// fakeArena is the fake server's view of the arena on file descriptor 3.
type fakeArena struct {
	file *os.File
	mem  []byte
}

// span returns arena bytes [off, off+n), remapping after the host grew it.
func (a *fakeArena) span(off, n uint64) ([]byte, error) {
	if off <= uint64(len(a.mem)) && n <= uint64(len(a.mem))-off {
		return a.mem[off : off+n], nil
	}
	fi, err := a.file.Stat()
	if err != nil {
		return nil, fmt.Errorf("fake: no arena: %v", err)
	}
	size := uint64(fi.Size())
	if off > size || n > size-off {
		return nil, fmt.Errorf("fake: arena range of %d bytes at %d overruns the arena of %d bytes", n, off, size)
	}
	if a.mem != nil {
		unix.Munmap(a.mem)
	}
	if a.mem, err = unix.Mmap(int(a.file.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return nil, fmt.Errorf("fake: mapping the arena: %v", err)
	}
	return a.mem[off : off+n], nil
}
