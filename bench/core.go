package bench

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"time"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
)

// CoreOptions size the core suite.
type CoreOptions struct {
	Open    vkern.Options
	Anchors []Anchor // from an anchors file; cases without one get no ratio
	Pings   int      // PING round trips timed (default 2000)
	Starts  int      // server starts timed (default 20)
	GemmN   int      // the GEMMs are GemmN³ (default 1024)
	Runs    int      // timed runs per GEMM (default 5)
}

// CoreSuite measures the figures of the core issue on one device: the
// server's PING round trip against a bare pipe round trip, its start-up and
// handshake against a bare process spawn, the three GEMM layouts at GemmN³
// against the anchors file, and the float64 oracle.
func CoreSuite(ctx context.Context, opt CoreOptions, progress io.Writer) ([]Result, error) {
	opt.Pings = orDefault(opt.Pings, 2000)
	opt.Starts = orDefault(opt.Starts, 20)
	opt.GemmN = orDefault(opt.GemmN, 1024)
	opt.Runs = orDefault(opt.Runs, 5)
	say := func(format string, args ...any) {
		if progress != nil {
			fmt.Fprintf(progress, format+"\n", args...)
		}
	}
	var results []Result

	say("opening the device (the first Open in a process probes the compiler)")
	firstStart := time.Now()
	dev, err := vkern.Open(ctx, opt.Open)
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	results = append(results, Result{Name: "open_first_in_process", N: 1, MedianNs: float64(time.Since(firstStart)),
		Note: "compiler probe + cache lookup + SHA-256 recheck + server start + HELLO"})

	say("timing %d pings and %d bare pipe round trips", opt.Pings, opt.Pings)
	echo, err := pipeEcho(ctx, opt.Pings)
	if err != nil {
		return nil, err
	}
	ping, err := Median(ctx, opt.Pings, opt.Pings/10, Wall(func() error { return dev.Ping(ctx) }))
	if err != nil {
		return nil, err
	}
	r := Result{Name: "ping", N: opt.Pings, MedianNs: float64(ping)}
	r.Relate("pipe_echo", float64(echo))
	results = append(results, Result{Name: "pipe_echo", N: opt.Pings, MedianNs: float64(echo),
		Note: "12 bytes to `cat` and back over blocking pipes, as kserver talks: the floor under any request/reply"}, r)

	say("timing %d server starts and %d bare process spawns", opt.Starts, opt.Starts)
	spawn, err := Median(ctx, opt.Starts, 2, Wall(func() error { return exec.CommandContext(ctx, "true").Run() }))
	if err != nil {
		return nil, err
	}
	start, err := Median(ctx, opt.Starts, 2, Wall(func() error {
		d, err := vkern.Open(ctx, opt.Open)
		if err != nil {
			return err
		}
		return d.Close()
	}))
	if err != nil {
		return nil, err
	}
	r = Result{Name: "open_warm", N: opt.Starts, MedianNs: float64(start),
		Note: "vkern.Open on a warm cache: cache lookup + SHA-256 recheck + server start + HELLO, then Close"}
	r.Relate("spawn_true", float64(spawn))
	results = append(results, Result{Name: "spawn_true", N: opt.Starts, MedianNs: float64(spawn),
		Note: "fork+exec+wait of `true`: the floor under any start"}, r)

	n := int64(opt.GemmN)
	shape := fmt.Sprintf("%dx%dx%d", n, n, n)
	for _, name := range []string{"gemm", "gemm_grad_a", "gemm_grad_b"} {
		say("timing %s %s (%d runs)", name, shape, opt.Runs)
		res, err := gemmCase(ctx, dev, name, shape, opt.Runs)
		if err != nil {
			return nil, err
		}
		if a, ok := Find(opt.Anchors, name, shape); ok {
			res.Relate(a.Impl, a.MedianMs*1e6)
		}
		results = append(results, res)
	}

	say("timing the float64 oracle at %s", shape)
	o, _ := op.Lookup("gemm")
	s, _ := o.ParseShape(shape)
	in, err := oracle.Generate(o, s, oracle.Normal, 1)
	if err != nil {
		return nil, err
	}
	oracleTime, err := Median(ctx, 3, 0, Wall(func() error {
		_, err := oracle.Compute(ctx, o, s, in, oracle.Arithmetic{})
		return err
	}))
	if err != nil {
		return nil, err
	}
	r = Result{Name: "oracle_gemm_" + shape, N: 3, MedianNs: float64(oracleTime), GFLOPs: o.FlopsAt(s) / float64(oracleTime),
		Note: "pure Go float64 reference, value + Σ|a·b| bound, all cores"}
	if a, ok := Find(opt.Anchors, "gemm_f64", shape); ok {
		r.Relate(a.Impl, a.MedianMs*1e6)
	}
	results = append(results, r)
	return results, nil
}

// gemmCase times one GEMM layout by the kernel time the server reports.
func gemmCase(ctx context.Context, dev *vkern.Device, name, shape string, runs int) (Result, error) {
	o, err := op.Lookup(name)
	if err != nil {
		return Result{}, err
	}
	s, err := o.ParseShape(shape)
	if err != nil {
		return Result{}, err
	}
	var buffers []*vkern.Buffer
	defer func() {
		for _, b := range buffers {
			b.Free(context.WithoutCancel(ctx))
		}
	}()
	inputs, err := oracle.Generate(o, s, oracle.Normal, 1)
	if err != nil {
		return Result{}, err
	}
	in := 0
	for _, p := range o.Operands {
		b, err := dev.Alloc(ctx, s.Bytes(p))
		if err != nil {
			return Result{}, err
		}
		buffers = append(buffers, b)
		if p.Reads() {
			if err := writeInput(ctx, b, inputs[in]); err != nil {
				return Result{}, err
			}
			in++
		}
	}
	median, err := Median(ctx, runs, 1, func() (time.Duration, error) { return dev.Run(ctx, o, s, buffers...) })
	if err != nil {
		return Result{}, err
	}
	return Result{Name: name + "_" + shape, N: runs, MedianNs: float64(median), GFLOPs: o.FlopsAt(s) / float64(median),
		Note: "kernel time reported by the server"}, nil
}

// writeInput uploads one input into b.
func writeInput(ctx context.Context, b *vkern.Buffer, in oracle.Input) error {
	switch {
	case in.I32 != nil:
		return b.WriteI32(ctx, in.I32)
	case in.F32 != nil:
		return b.WriteF32(ctx, in.F32)
	}
	return b.WriteF16(ctx, in.F16)
}

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}
