package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
)

// OpCase is one op at one shape.
type OpCase struct {
	Op    *op.Op
	Shape op.Shape
}

// OpsOptions size the ops suite.
type OpsOptions struct {
	Open    vkern.Options
	Cases   []OpCase
	Anchors []Anchor // anchors.py output from the same run: per-case anchors, "copy" and the GEMM rates
	Runs    int      // timed runs per case (default 50)
	Warmup  int      // untimed runs first (default 5)
	// RotateBytes is how much memory the rotated input and output sets of
	// a case span together, so that no run finds its operands in the cache
	// a previous run left them in (default 4 × the device's L2, else
	// 256 MiB). Every case gets at least two sets where MaxBytes allows.
	RotateBytes int64
	// MaxBytes caps the memory one case's sets may take (default 16 GiB).
	MaxBytes int64
}

// OpsSuite times each case by the kernel time the server measures on the
// device (CUDA events around the launches on GPUs), the median of Runs after
// Warmup, all in one RUN_BATCH (back to back), cycling through enough copies of the operands that each run starts
// with its inputs out of the L2 cache. Each result carries GB/s (the
// minimum traffic: inputs read once, output written once), TFLOP/s for the
// GEMMs, the ratio to the case's anchor, and the floor: the larger of the
// traffic over the measured copy bandwidth and the flops over the fastest
// measured GEMM rate, both from the anchors file, with the case's share of it.
func OpsSuite(ctx context.Context, opt OpsOptions, progress io.Writer) ([]Result, error) {
	opt.Runs = orDefault(opt.Runs, 50)
	opt.Warmup = orDefault(opt.Warmup, 5)
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = 16 << 30
	}
	dev, err := vkern.Open(ctx, opt.Open)
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	if opt.RotateBytes <= 0 {
		opt.RotateBytes = 256 << 20
		if info, err := dev.Info(ctx); err == nil {
			if l2, err := strconv.ParseInt(info.Device["l2_bytes"], 10, 64); err == nil && l2 > 0 {
				opt.RotateBytes = 4 * l2
			}
		}
	}
	copyGBps, matrixTFLOPs := ceilings(opt.Anchors)
	var results []Result
	for _, c := range opt.Cases {
		if progress != nil {
			fmt.Fprintf(progress, "timing %s %s\n", c.Op.Name, c.Shape)
		}
		r, err := timeCase(ctx, dev, c, opt)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", c.Op.Name, c.Shape, err)
		}
		if a, ok := Find(opt.Anchors, AnchorName(c.Op), c.Shape.String()); ok {
			r.Relate(a.Impl, a.MedianMs*1e6)
		}
		var floor float64
		if copyGBps > 0 {
			floor = float64(r.Bytes) / copyGBps
		}
		if flops := c.Op.FlopsAt(c.Shape); flops > 0 && matrixTFLOPs > 0 {
			floor = math.Max(floor, flops/(matrixTFLOPs*1e3))
		}
		if floor > 0 {
			r.FloorNs, r.FloorShare = floor, floor/r.MedianNs
		}
		results = append(results, r)
	}
	return results, nil
}

// AnchorName is the op name under which the anchor scripts (anchors.py,
// bench/op_anchors.py) report o's PyTorch equivalent: the contract's
// Anchor, else the op's own name.
func AnchorName(o *op.Op) string {
	if o.Anchor != "" {
		return o.Anchor
	}
	return o.Name
}

// ceilings reads the measured copy bandwidth (GB/s) and the fastest GEMM
// rate (TFLOP/s) from the anchors.
func ceilings(anchors []Anchor) (copyGBps, matrixTFLOPs float64) {
	for _, a := range anchors {
		switch {
		case a.Op == "copy":
			copyGBps = math.Max(copyGBps, a.GBps)
		case a.TFLOPs > 0:
			matrixTFLOPs = math.Max(matrixTFLOPs, a.TFLOPs)
		}
	}
	return copyGBps, matrixTFLOPs
}

// timeCase allocates the rotated sets of one case, fills the inputs with
// N(0, 1) data, and times the runs.
func timeCase(ctx context.Context, dev *vkern.Device, c OpCase, opt OpsOptions) (Result, error) {
	o, s := c.Op, c.Shape
	footprint := o.MovedBytes(s)
	// At least two sets: between two runs on one set, the whole other set
	// passes through the cache, so even a case larger than the rotation
	// span never finds the tail of its own last run there.
	sets := int(min(64, max(2, (opt.RotateBytes+footprint-1)/footprint)))
	if int64(sets)*footprint > opt.MaxBytes {
		sets = int(max(1, opt.MaxBytes/footprint))
	}
	inputs, err := oracle.Generate(o, s, oracle.Normal, 1)
	if err != nil {
		return Result{}, err
	}
	var all []*vkern.Buffer
	defer func() {
		for _, b := range all {
			b.Free(context.WithoutCancel(ctx))
		}
	}()
	calls := make([][]*vkern.Buffer, sets)
	for k := range calls {
		in := 0
		for _, p := range o.Operands {
			b, err := dev.Alloc(ctx, max(1, s.Bytes(p)))
			if err != nil {
				return Result{}, err
			}
			all = append(all, b)
			calls[k] = append(calls[k], b)
			if p.Reads() {
				if err := writeInput(ctx, b, inputs[in]); err != nil {
					return Result{}, err
				}
				in++
			}
		}
	}
	// The runs go back to back in one RUN_BATCH, the way a training step
	// issues them. On a GPU each entry's time is then the device's between
	// events recorded just before and after its launch, with its launch
	// already queued behind the entry before it, so the host's launch
	// latency (3-4 µs on an H100) is not counted: the way triton's
	// do_bench, which anchors.py uses, times back-to-back launches.
	batch := make([]vkern.Call, opt.Warmup+opt.Runs)
	for i := range batch {
		batch[i] = vkern.Call{Op: o, Shape: s, Buffers: calls[(i+1)%sets]}
	}
	times, err := dev.RunBatch(ctx, batch)
	if err != nil {
		return Result{}, err
	}
	median := medianOf(times[opt.Warmup:])
	if median <= 0 {
		return Result{}, fmt.Errorf("the server measured a median kernel time of %v", median)
	}
	r := Result{
		Name: o.Name + "_" + s.String(), N: opt.Runs, MedianNs: float64(median), Bytes: footprint,
		GBps: float64(footprint) / float64(median),
		Note: fmt.Sprintf("device-measured kernel time, back to back in one RUN_BATCH; %d rotated operand sets", sets),
	}
	if flops := o.FlopsAt(s); flops > 0 {
		r.GFLOPs = flops / float64(median)
	}
	return r, nil
}
