package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vkern/vkern/kserver"
)

// ServerOptions size the server suite. Zero values take the defaults.
type ServerOptions struct {
	// Calls is how many times each small call (ping, run_tiny,
	// run_batch100) is timed, after Calls/10 untimed (default 2000).
	Calls int
	// Oneshots is how many one-process-per-call runs are timed (default
	// 1000).
	Oneshots int
	// Sizes are the WRITE and READ sizes in bytes (default 1 MiB, 4, 16,
	// 64, 256 MiB and 1 GiB). Sizes whose buffers would not fit in half the
	// memory the machine has available are left out, with a note.
	Sizes []int64
	// TextBytes is the size of the decimal-text baseline (default 256
	// MiB, or the largest size that fits); its WRITE and READ are measured
	// at the same size.
	TextBytes int64
	// TextRuns is how many text transfers are timed each way (default 3).
	TextRuns int
	// Progress, if set, gets a line per case.
	Progress io.Writer
}

// QuickServerOptions sample the round trips in seconds (`vkern bench
// --suite server --quick`): 3000 of each small call, 1 MiB transfers, and
// the seed-style baselines at a token size.
var QuickServerOptions = ServerOptions{Calls: 3000, Oneshots: 3, Sizes: []int64{1 << 20}, TextBytes: 64 << 10, TextRuns: 1}

// tinyRows, tinyCols are the tiny RUN: a softmax of one f16 element.
const tinyRows, tinyCols = 1, 1

// softmaxOpID is softmax's RUN op id (PROTOCOL.md, "RUN").
const softmaxOpID = 4

// DefaultServerSizes are the transfer sizes the server suite measures.
var DefaultServerSizes = []int64{1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30}

// ServerSuite measures the kernel server itself on the binary at
// serverPath (built from sources with the given SHA-256): the round trip of
// a PING, and of the untimed tiny RUN, through the rings against the same on
// the pipes, and the pipes' PING against a bare pipe round trip; a tiny RUN,
// timed and untimed; a
// batch of 100 tiny RUNs and its overhead per run beyond the kernels' own
// time; the same tiny
// RUN with one fresh server process per call, as the seed ran kernels; and
// WRITE and READ bandwidth through the shared-memory arena at each size,
// against the seed's decimal text in frames at TextBytes. Each result that
// has a baseline measured in this run carries it as its anchor, with the
// ratio baseline time / this time (above 1: faster than the baseline).
func ServerSuite(ctx context.Context, serverPath string, sourceSHA string, opts ServerOptions) ([]Result, error) {
	opts.Calls = orDefault(opts.Calls, 2000)
	opts.Oneshots = orDefault(opts.Oneshots, 1000)
	opts.TextRuns = orDefault(opts.TextRuns, 3)
	if opts.Sizes == nil {
		opts.Sizes = DefaultServerSizes
	}
	if opts.TextBytes <= 0 {
		opts.TextBytes = 256 << 20
	}
	say := func(format string, args ...any) {
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, format+"\n", args...)
		}
	}
	sizes, textBytes, skipped := fitSizes(opts.Sizes, opts.TextBytes)
	for _, s := range skipped {
		say("leaving out %s transfers: %s", sizeName(s.bytes), s.why)
	}

	cfg := kserver.Config{Path: serverPath, ExpectSourceSHA256: sourceSHA, CallTimeout: 10 * time.Minute}
	c := kserver.New(cfg)
	defer c.Close()
	hello, err := c.Hello(ctx)
	if err != nil {
		return nil, err
	}
	say("server: %s backend on %s, protocol v%d", hello.Backend(), hello.Device(), hello.Version)
	var results []Result
	warm := opts.Calls / 10

	say("timing %d pipe round trips and %d pings", opts.Calls, opts.Calls)
	echo, err := pipeEcho(ctx, opts.Calls)
	if err != nil {
		return nil, err
	}
	ping, err := Median(ctx, opts.Calls, warm, Wall(func() error { return c.Ping(ctx) }))
	if err != nil {
		return nil, err
	}
	results = append(results, Result{Name: "pipe_echo_blocking", N: opts.Calls, MedianNs: float64(echo),
		Note: "12 bytes to `cat` and back over pipes in blocking mode, as kserver uses them: the floor under a PING"})
	r := Result{Name: "ping", N: opts.Calls, MedianNs: float64(ping), Note: "PING frame and its answer, through kserver.Client, the frames in the shared-memory rings"}

	x, y, err := tinyBuffers(ctx, c)
	if err != nil {
		return nil, err
	}
	tiny := kserver.RunRequest{OpID: softmaxOpID, Params: []int64{tinyRows, tinyCols}, Buffers: []kserver.Handle{x, y}}

	say("timing %d tiny runs (softmax %dx%d)", opts.Calls, tinyRows, tinyCols)
	var kernels []time.Duration
	runTiny, err := Median(ctx, opts.Calls, warm, func() (time.Duration, error) {
		start := time.Now()
		ns, err := c.Run(ctx, tiny.OpID, tiny.Params, tiny.Buffers)
		took := time.Since(start)
		kernels = append(kernels, time.Duration(ns))
		return took, err
	})
	if err != nil {
		return nil, err
	}
	tinyKernel := medianOf(kernels[warm:])
	runTinyResult := Result{Name: "run_tiny", N: opts.Calls, MedianNs: float64(runTiny),
		Note: fmt.Sprintf("RUN of softmax %dx%d, round trip; the kernel itself: median %v", tinyRows, tinyCols, tinyKernel)}

	say("timing %d untimed tiny runs", opts.Calls)
	runUntimed, err := Median(ctx, opts.Calls, warm, Wall(func() error {
		return c.RunUntimed(ctx, tiny.OpID, tiny.Params, tiny.Buffers)
	}))
	if err != nil {
		return nil, err
	}
	runUntimedResult := Result{Name: "run_tiny_untimed", N: opts.Calls, MedianNs: float64(runUntimed),
		Note: "the same RUN with the untimed flag: the server waits for the kernel but records no timing events"}

	say("timing %d pings and untimed tiny runs with the frames on the pipes", opts.Calls)
	pipes, err := pipeTransport(ctx, cfg, tiny.OpID, tiny.Params, opts.Calls, warm)
	if err != nil {
		return nil, err
	}
	r.Relate(pipes[0].Name, pipes[0].MedianNs)
	pipes[0].Relate("pipe_echo_blocking", float64(echo))
	runUntimedResult.Relate(pipes[1].Name, pipes[1].MedianNs)

	const batch = 100
	runs := make([]kserver.RunRequest, batch)
	for i := range runs {
		runs[i] = tiny
	}
	say("timing %d batches of %d tiny runs", opts.Calls, batch)
	var kernelSums, overheads []time.Duration
	batchTime, err := Median(ctx, opts.Calls, warm, func() (time.Duration, error) {
		start := time.Now()
		times, err := c.RunBatch(ctx, runs)
		took := time.Since(start)
		var sum time.Duration
		for _, ns := range times {
			sum += time.Duration(ns)
		}
		kernelSums = append(kernelSums, sum)
		overheads = append(overheads, (took-sum)/batch)
		return took, err
	})
	if err != nil {
		return nil, err
	}
	kernelSum := medianOf(kernelSums[warm:])
	perOp := medianOf(overheads[warm:])
	batchResults := []Result{
		{Name: "run_batch100", N: opts.Calls, MedianNs: float64(batchTime),
			Note: fmt.Sprintf("one RUN_BATCH of %d tiny runs, round trip; the kernels: median sum %v", batch, kernelSum)},
		Result{Name: "run_batch100_overhead_per_op", N: opts.Calls, MedianNs: float64(perOp),
			Note: fmt.Sprintf("median of (batch round trip − its kernels' own time) / %d", batch)},
	}

	say("timing %d tiny runs with one server process per call", opts.Oneshots)
	oneshot, err := oneshotRun(ctx, cfg, tiny, opts.Oneshots)
	if err != nil {
		return nil, err
	}
	runTinyResult.Relate("oneshot_run_tiny", float64(oneshot))
	results = append(results, r, pipes[0], runTinyResult, runUntimedResult, pipes[1])
	results = append(results, batchResults...)
	results = append(results, Result{Name: "oneshot_run_tiny", N: opts.Oneshots, MedianNs: float64(oneshot),
		Note: "the seed's one-shot: start a server, HELLO, ALLOC+WRITE both buffers, RUN, READ both back, SHUTDOWN, exit"})

	transfers, err := transferCases(ctx, c, sizes, textBytes, opts, say)
	if err != nil {
		return nil, err
	}
	results = append(results, transfers...)
	for _, s := range skipped {
		for _, dir := range []string{"write_", "read_"} {
			results = append(results, Result{Name: dir + sizeName(s.bytes), Note: "not measured: " + s.why})
		}
	}
	return results, nil
}

// pipeEcho is the median round trip of a 12-byte message (a PING frame's
// size) through `cat`, over pipes in blocking mode (os.File.Fd sets it),
// which is how kserver talks to its server: one write and one read per round
// trip, without the poller.
func pipeEcho(ctx context.Context, n int) (time.Duration, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return 0, err
	}
	cmd := exec.CommandContext(ctx, "cat")
	cmd.Stdin, cmd.Stdout = inR, outW
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return 0, fmt.Errorf("bench: starting cat for the pipe anchor: %w", err)
	}
	inW.Fd()
	outR.Fd()
	defer func() {
		inW.Close()
		cmd.Wait()
		outR.Close()
	}()
	msg, back := make([]byte, 12), make([]byte, 12)
	return Median(ctx, n, n/10, Wall(func() error {
		if _, err := inW.Write(msg); err != nil {
			return err
		}
		_, err := io.ReadFull(outR, back)
		return err
	}))
}

// tinyBuffers allocates the tiny RUN's input and output.
func tinyBuffers(ctx context.Context, c *kserver.Client) (x, y kserver.Handle, err error) {
	if x, err = c.Alloc(ctx, 2*tinyRows*tinyCols); err != nil {
		return x, y, err
	}
	y, err = c.Alloc(ctx, 2*tinyRows*tinyCols)
	return x, y, err
}

// pipeTransport times PING and the untimed tiny RUN through a second server
// whose frames travel on the pipes (kserver.Config.Pipes), the transport
// before the rings: the baseline the rings are measured against.
func pipeTransport(ctx context.Context, cfg kserver.Config, op uint32, params []int64, n, warm int) ([]Result, error) {
	cfg.Pipes = true
	c := kserver.New(cfg)
	defer c.Close()
	x, y, err := tinyBuffers(ctx, c)
	if err != nil {
		return nil, err
	}
	ping, err := Median(ctx, n, warm, Wall(func() error { return c.Ping(ctx) }))
	if err != nil {
		return nil, err
	}
	run, err := Median(ctx, n, warm, Wall(func() error { return c.RunUntimed(ctx, op, params, []kserver.Handle{x, y}) }))
	if err != nil {
		return nil, err
	}
	return []Result{
		{Name: "ping_pipes", N: n, MedianNs: float64(ping), Note: "PING with the frames on the pipes instead of the rings (kserver.Config.Pipes)"},
		{Name: "run_tiny_untimed_pipes", N: n, MedianNs: float64(run), Note: "the untimed tiny RUN with the frames on the pipes"},
	}, nil
}

// oneshotRun times runs of tiny, each in a fresh server (kserver's isolated mode).
func oneshotRun(ctx context.Context, cfg kserver.Config, tiny kserver.RunRequest, n int) (time.Duration, error) {
	cfg.Isolated = true
	iso := kserver.New(cfg)
	defer iso.Close()
	x, y, err := tinyBuffers(ctx, iso)
	if err != nil {
		return 0, err
	}
	return Median(ctx, n, max(1, n/100), Wall(func() error {
		_, err := iso.Run(ctx, tiny.OpID, tiny.Params, []kserver.Handle{x, y})
		return err
	}))
}

// transferCases times WRITE and READ at each size, and the text baseline.
func transferCases(ctx context.Context, c *kserver.Client, sizes []int64, textBytes int64, opts ServerOptions, say func(string, ...any)) ([]Result, error) {
	var writes, reads []Result
	byName := map[string]int{}
	for _, size := range sizes {
		n := transferRuns(size)
		say("timing %d writes and %d reads of %s", n, n, sizeName(size))
		h, err := c.Alloc(ctx, uint64(size))
		if err != nil {
			return nil, err
		}
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i * 7)
		}
		w, err := Median(ctx, n, 1, Wall(func() error { return c.Write(ctx, h, 0, data) }))
		if err == nil {
			var rd time.Duration
			rd, err = Median(ctx, n, 1, Wall(func() error { return c.Read(ctx, h, 0, data) }))
			reads = append(reads, transferResult("read_", size, n, rd, "READ: server copies buffer → arena, host copies arena → the caller's slice"))
		}
		if err != nil {
			c.Free(ctx, h)
			return nil, err
		}
		writes = append(writes, transferResult("write_", size, n, w, "WRITE: host copies the caller's slice → arena, server copies arena → buffer"))
		byName[sizeName(size)] = len(writes) - 1
		if err := c.Free(ctx, h); err != nil {
			return nil, err
		}
	}

	say("timing %d text writes and reads of %s (the seed's decimal payload)", opts.TextRuns, sizeName(textBytes))
	tw, tr, err := textCase(ctx, c, textBytes, opts.TextRuns)
	if err != nil {
		return nil, err
	}
	name := sizeName(textBytes)
	textWrite := transferResult("text_write_", textBytes, opts.TextRuns, tw,
		"baseline: u16 values as decimal text in 1 MiB frames (Go strconv), parsed by the server with std::istringstream as the seed did; 2 frames in flight")
	textRead := transferResult("text_read_", textBytes, opts.TextRuns, tr,
		"baseline: the server formats u16 values as decimal text with std::ostringstream, the host parses them; 2 frames in flight")
	if i, ok := byName[name]; ok {
		writes[i].Relate(textWrite.Name, textWrite.MedianNs)
		reads[i].Relate(textRead.Name, textRead.MedianNs)
	}
	return append(append(writes, reads...), textWrite, textRead), nil
}

func transferResult(prefix string, size int64, n int, d time.Duration, note string) Result {
	return Result{Name: prefix + sizeName(size), N: n, MedianNs: float64(d), Bytes: size,
		GBps: float64(size) / float64(d), Note: note}
}

// transferRuns is how many times a transfer of size is timed: about 4 GiB
// moved in all, at least 5 and at most 200 times.
func transferRuns(size int64) int {
	return int(min(200, max(5, (4<<30)/size)))
}

// textCase times the text path each way on a buffer of size bytes.
func textCase(ctx context.Context, c *kserver.Client, size int64, runs int) (write, read time.Duration, err error) {
	h, err := c.Alloc(ctx, uint64(size))
	if err != nil {
		return 0, 0, err
	}
	defer c.Free(ctx, h)
	values := make([]uint16, size/2)
	for i := range values {
		values[i] = uint16(i * 40503) // all widths of decimal, 1 to 5 digits
	}
	// No warm-up: parsing text has nothing to warm, and a run takes seconds.
	if write, err = Median(ctx, runs, 0, Wall(func() error { return c.TextWrite(ctx, h, 0, values) })); err != nil {
		return 0, 0, err
	}
	read, err = Median(ctx, runs, 0, Wall(func() error { return c.TextRead(ctx, h, 0, values) }))
	return write, read, err
}

// skippedSize is a transfer size left out, and why.
type skippedSize struct {
	bytes int64
	why   string
}

// fitSizes drops the sizes whose transfer (a host slice, the server's
// buffer, and room for the arena) would not fit in half the memory the
// machine has available, and caps the text size the same way.
func fitSizes(sizes []int64, text int64) (fit []int64, textFit int64, skipped []skippedSize) {
	avail := memAvailable()
	const arenaRoom = 64 << 20
	fits := func(s int64) bool { return avail == 0 || 2*s+arenaRoom <= avail/2 }
	for _, s := range sizes {
		if fits(s) {
			fit = append(fit, s)
			continue
		}
		skipped = append(skipped, skippedSize{s, fmt.Sprintf("a host slice and a server buffer of %s each would pass half of the %s available", sizeName(s), sizeName(avail))})
	}
	textFit = text
	for textFit > 1<<20 && !fits(textFit) {
		textFit /= 2
	}
	have := false
	for _, s := range fit {
		have = have || s == textFit
	}
	if !have {
		fit = append(fit, textFit)
	}
	return fit, textFit, skipped
}

// memAvailable is MemAvailable from /proc/meminfo, or 0 if unknown.
func memAvailable() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// sizeName writes a size as the result names do: 1MiB, 256MiB, 1GiB.
func sizeName(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// medianOf is the median of ds (0 for none).
func medianOf(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
