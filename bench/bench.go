// Package bench measures vkern: medians of repeated timings after a
// warm-up, figures per case (GFLOP/s, GB/s), and ratios to anchors — the same
// work done by a reference implementation, measured in the same run.
//
// It never asserts on time: benchmarks report, tests judge. Anchors come
// either from this package (for the host side: a pipe round trip, a process
// spawn) or from an anchors file written by a script in the same run
// (../shared/bench/anchors.py on GPUs, bench/cpu_anchors.py here; for
// training steps, bench/train_anchors.py).
package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// Result is one measured case.
type Result struct {
	Name     string  `json:"name"`
	N        int     `json:"n"`         // timed repetitions
	MedianNs float64 `json:"median_ns"` // median of the timed repetitions
	Bytes    int64   `json:"bytes,omitempty"`
	GBps     float64 `json:"gbps,omitempty"`
	GFLOPs   float64 `json:"gflops,omitempty"`
	// Anchor names the reference measured in the same run, and Ratio is the
	// anchor's median time over this case's: above 1, this case is faster.
	Anchor string  `json:"anchor,omitempty"`
	Ratio  float64 `json:"ratio,omitempty"`
	// FloorNs is the least time the case could take on this device: its
	// bytes over the measured copy bandwidth or its flops over the fastest
	// measured GEMM rate, whichever is larger; FloorShare is FloorNs over
	// the median (1 would be at the floor).
	FloorNs    float64 `json:"floor_ns,omitempty"`
	FloorShare float64 `json:"floor_share,omitempty"`
	// TokensPerSecond is a training case's throughput.
	TokensPerSecond float64 `json:"tokens_per_second,omitempty"`
	// Relations are a case's ratios to several anchors (the training
	// suite's PyTorch eager and torch.compile), where Anchor and Ratio hold
	// one.
	Relations []Relation `json:"relations,omitempty"`
	// PhasesMs are a training case's timed steps split as the host saw them
	// (gpt.Phases): the median of each of write, gradients, read and update,
	// in ms; their sum need not equal the median step.
	PhasesMs map[string]float64 `json:"phases_ms,omitempty"`
	Note     string             `json:"note,omitempty"`
}

// Relation is a case's ratio to one anchor: the anchor's median time over
// the case's (above 1, the case is faster), and for a training anchor its
// tokens/s.
type Relation struct {
	Anchor          string  `json:"anchor"`
	Ratio           float64 `json:"ratio"`
	TokensPerSecond float64 `json:"tokens_per_second,omitempty"`
}

// Ratios are r's ratios to its anchors: its Relations, else its Anchor and
// Ratio, else none.
func (r Result) Ratios() []Relation {
	if len(r.Relations) > 0 {
		return r.Relations
	}
	if r.Anchor != "" && r.Ratio > 0 {
		return []Relation{{Anchor: r.Anchor, Ratio: r.Ratio}}
	}
	return nil
}

// Median runs fn warmup times untimed, then n times, and returns the median
// of the durations fn reports (its own measure: a kernel time, or the wall
// time it took). It stops at the first error or when ctx is done.
func Median(ctx context.Context, n, warmup int, fn func() (time.Duration, error)) (time.Duration, error) {
	if n < 1 {
		return 0, fmt.Errorf("bench: %d repetitions: want at least 1", n)
	}
	for i := 0; i < warmup; i++ {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if _, err := fn(); err != nil {
			return 0, err
		}
	}
	times := make([]time.Duration, n)
	for i := range times {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		d, err := fn()
		if err != nil {
			return 0, err
		}
		times[i] = d
	}
	slices.Sort(times)
	if n%2 == 1 {
		return times[n/2], nil
	}
	return (times[n/2-1] + times[n/2]) / 2, nil
}

// Wall times fn by the wall clock, for Median.
func Wall(fn func() error) func() (time.Duration, error) {
	return func() (time.Duration, error) {
		start := time.Now()
		err := fn()
		return time.Since(start), err
	}
}

// Anchor is one line of an anchors file: a reference implementation's
// median for an op at a shape, measured on the same machine in the same run.
type Anchor struct {
	Op       string  `json:"op"`
	Shape    string  `json:"shape"`
	Impl     string  `json:"impl"`
	MedianMs float64 `json:"median_ms"`
	TFLOPs   float64 `json:"tflops,omitempty"`
	GBps     float64 `json:"gbps,omitempty"`
	Device   string  `json:"device,omitempty"`
}

// ReadAnchors reads JSON lines as written by anchors.py; blank lines and
// lines starting with # are skipped.
func ReadAnchors(r io.Reader) ([]Anchor, error) {
	var anchors []Anchor
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		var a Anchor
		if err := json.Unmarshal([]byte(text), &a); err != nil {
			return nil, fmt.Errorf("bench: anchors line %d: %w", line, err)
		}
		if a.Op == "" || a.MedianMs <= 0 {
			return nil, fmt.Errorf("bench: anchors line %d: want an op and a positive median_ms, got %q", line, text)
		}
		anchors = append(anchors, a)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bench: reading anchors: %w", err)
	}
	return anchors, nil
}

// ReadAnchorsFile reads an anchors file.
func ReadAnchorsFile(path string) ([]Anchor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer f.Close()
	return ReadAnchors(f)
}

// Find returns the anchor for op at shape, if the file has one.
func Find(anchors []Anchor, op, shape string) (Anchor, bool) {
	for _, a := range anchors {
		if a.Op == op && a.Shape == shape {
			return a, true
		}
	}
	return Anchor{}, false
}

// Relate sets r's anchor and ratio from an anchor median.
func (r *Result) Relate(anchor string, anchorNs float64) {
	if anchorNs <= 0 || r.MedianNs <= 0 {
		return
	}
	r.Anchor = anchor
	r.Ratio = anchorNs / r.MedianNs
}
