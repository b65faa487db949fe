package bench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
)

func TestMedianIsTheMiddleOfTheTimedRunsAfterWarmUp(t *testing.T) {
	calls := 0
	times := []time.Duration{100, 5, 3, 9, 1, 7} // the first is the warm-up
	m, err := Median(context.Background(), 5, 1, func() (time.Duration, error) {
		d := times[calls]
		calls++
		return d, nil
	})
	if err != nil || m != 5 || calls != 6 {
		t.Fatalf("median %v, err %v, %d calls; want 5 over 6 calls", m, err, calls)
	}
	m, _ = Median(context.Background(), 2, 0, func() (time.Duration, error) { calls++; return time.Duration(calls), nil })
	if m != 7 { // calls 7 and 8 → (7+8)/2 = 7 (integer nanoseconds)
		t.Errorf("even-count median %v, want 7", m)
	}
}

func TestMedianStopsAtTheFirstError(t *testing.T) {
	boom := errors.New("boom")
	_, err := Median(context.Background(), 3, 0, func() (time.Duration, error) { return 0, boom })
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	if _, err := Median(context.Background(), 0, 0, nil); err == nil {
		t.Fatal("0 repetitions accepted")
	}
}

func TestReadAnchorsReadsAnchorsPyLines(t *testing.T) {
	in := `{"op": "copy", "shape": "1073741824B", "impl": "tensor.copy_", "median_ms": 0.71, "gbps": 3003.6}
# a comment

{"op": "gemm", "shape": "4096x4096x4096", "impl": "torch.mm(out_dtype=float32)", "median_ms": 0.2055, "tflops": 668.7}
`
	anchors, err := ReadAnchors(strings.NewReader(in))
	if err != nil || len(anchors) != 2 {
		t.Fatalf("%d anchors, err %v", len(anchors), err)
	}
	a, ok := Find(anchors, "gemm", "4096x4096x4096")
	if !ok || a.MedianMs != 0.2055 {
		t.Fatalf("Find: %+v, %v", a, ok)
	}
	r := Result{MedianNs: 411000}
	r.Relate(a.Impl, a.MedianMs*1e6)
	if r.Ratio < 0.49 || r.Ratio > 0.51 || r.Anchor != a.Impl {
		t.Errorf("ratio %v to %q, want 0.5", r.Ratio, r.Anchor)
	}
	if _, err := ReadAnchors(strings.NewReader(`{"op": "gemm"}`)); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("a line without a median: err %v", err)
	}
	if _, err := ReadAnchors(strings.NewReader("not json")); err == nil {
		t.Error("garbage accepted")
	}
}

func TestWriteSVGDrawsABarPerAnchoredResult(t *testing.T) {
	var b strings.Builder
	results := []Result{
		{Name: "gemm_4096x4096x4096", Anchor: "torch.mm", Ratio: 0.47},
		{Name: "softmax_8192x32768", Anchor: "torch.softmax", Ratio: 1.28},
		{Name: "ping"}, // no anchor: no bar
	}
	if err := WriteSVG(&b, "H100 <test>", results); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	if strings.Count(svg, `<rect x=`) != 2 || !strings.Contains(svg, "0.47") || !strings.Contains(svg, "1.28") {
		t.Errorf("want two bars labelled 0.47 and 1.28:\n%s", svg)
	}
	if !strings.Contains(svg, "H100 &lt;test&gt;") || strings.Contains(svg, ">ping<") {
		t.Errorf("title not escaped, or a bar for a result without an anchor:\n%s", svg)
	}
}

func TestCeilingsComeFromTheAnchors(t *testing.T) {
	copyGBps, tflops := ceilings([]Anchor{
		{Op: "copy", GBps: 3003.6, MedianMs: 0.7},
		{Op: "gemm", TFLOPs: 668.7, MedianMs: 0.2},
		{Op: "gemm_f16out", TFLOPs: 684.6, MedianMs: 0.2},
		{Op: "softmax", GBps: 2240, MedianMs: 0.5},
	})
	if copyGBps != 3003.6 || tflops != 684.6 {
		t.Errorf("ceilings %v GB/s, %v TFLOP/s", copyGBps, tflops)
	}
}

func TestCrossEntropyIsAnchoredToTorchsFusedForwardAndBackward(t *testing.T) {
	ce, _ := op.Lookup("cross_entropy")
	softmax, _ := op.Lookup("softmax")
	if got := AnchorName(ce); got != "cross_entropy_fwd_bwd" {
		t.Errorf("AnchorName(cross_entropy) = %q, want anchors.py's cross_entropy_fwd_bwd", got)
	}
	if got := AnchorName(softmax); got != "softmax" {
		t.Errorf("AnchorName(softmax) = %q", got)
	}
	s, _ := ce.ParseShape("4x9")
	in, err := oracle.Generate(ce, s, oracle.Normal, 1) // as timeCase draws them
	if err != nil {
		t.Fatal(err)
	}
	for r, l := range in[1].I32 {
		if l < 0 || l >= 9 {
			t.Errorf("label %d of the bench inputs is %d, outside [0, 9)", r, l)
		}
	}
}
