package verify

import (
	"strings"
	"testing"

	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
)

// sampledCases forces the sampled path (rows, columns, Freivalds) on shapes
// small enough for the Go kernels.
func sampledCases(t *testing.T, ops []*op.Op, specs ...string) []Case {
	t.Helper()
	saved := fullCheckMACs
	fullCheckMACs = 1000
	t.Cleanup(func() { fullCheckMACs = saved })
	plan := Plan{Ops: ops, Seed: 3, Shapes: specs}
	cases, err := plan.Cases()
	if err != nil {
		t.Fatal(err)
	}
	return cases
}

var gemmOps = []*op.Op{op.Gemm, op.GemmGradA, op.GemmGradB}

// epilogueOps are the matmul family's members with an epilogue.
var epilogueOps = []*op.Op{op.Linear, op.LinearGradW}

func TestSampledChecksPassCorrectKernels(t *testing.T) {
	res := mustRun(t, goKernels{}, sampledCases(t, gemmOps, "40x50x60", "70x20x33"))
	for _, r := range res.Cases {
		if r.Verdict != Passed {
			t.Errorf("%s: %s: %s", r.Case, r.Verdict, r.Reason)
		}
		if r.Stats.Sample == nil || r.Stats.Sample.Trials != freivaldsTrials {
			t.Fatalf("%s was not checked by sampling: %+v", r.Case, r.Stats)
		}
	}
	t.Logf("example: %s", res.Cases[1].Stats.Sample)
}

// With a bias or an accumulated output, the sampled references and the
// projections include the epilogue: a correct kernel passes with and
// without it, and one that drops it is caught.
func TestSampledChecksFollowTheEpilogue(t *testing.T) {
	cases := sampledCases(t, epilogueOps, "40x50x60", "70x20x33", "40x50x60:bias=0", "70x20x33:accumulate=0")
	res := mustRun(t, goKernels{}, cases)
	for _, r := range res.Cases {
		if r.Verdict != Passed {
			t.Errorf("%s: %s: %s", r.Case, r.Verdict, r.Reason)
		}
		if r.Stats.Sample == nil || (r.Dist != oracle.Special && r.Stats.Sample.RowsProjected == 0) {
			t.Fatalf("%s was not checked by sampling and projection: %+v", r.Case, r.Stats.Sample)
		}
	}
	dropped := goKernels{mutate: func(o *op.Op, s op.Shape, in [][]float32, out []float32, write []bool) {
		cols := int(s.Dims[1])
		for i := range out {
			switch {
			case o == op.Linear && s.Int("bias") == 1:
				out[i] -= in[2][i%cols]
			case o == op.LinearGradW && s.Int("accumulate") == 1:
				out[i] -= in[2][i]
			}
		}
	}}
	res = mustRun(t, dropped, sampledCases(t, epilogueOps, "40x50x60"))
	for _, r := range res.Cases {
		if r.Dist != oracle.Special && r.Verdict != Incorrect {
			t.Errorf("%s without its epilogue: %s, want incorrect", r.Case, r.Verdict)
		}
	}
}

// linear_grad_w's column sums (bias 1: db += dy's column sums) are checked
// whole on the sampled path, beside the product's sample: a correct kernel
// passes, and one that overwrites db where it should add into it is caught
// there, by name.
func TestSampledChecksCheckTheColumnSums(t *testing.T) {
	specs := []string{"40x50x60:bias=1", "70x20x33:bias=1,accumulate=0"}
	res := mustRun(t, goKernels{}, sampledCases(t, []*op.Op{op.LinearGradW}, specs...))
	for _, r := range res.Cases {
		if r.Verdict != Passed {
			t.Errorf("%s: %s: %s", r.Case, r.Verdict, r.Reason)
		}
		if r.Stats.Sample == nil {
			t.Fatalf("%s was not checked by sampling: %+v", r.Case, r.Stats)
		}
		k, n := r.Shape.Dims[2], r.Shape.Dims[1]
		if r.Stats.Elements != k*n+n {
			t.Errorf("%s: %d elements counted, want dW's %d and db's %d", r.Case, r.Stats.Elements, k*n, n)
		}
	}
	overwritten := goKernels{mutate: func(o *op.Op, s op.Shape, in [][]float32, out []float32, write []bool) {
		k, n := int(s.Dims[2]), int(s.Dims[1])
		for j := 0; j < n; j++ {
			out[k*n+j] -= in[3][j]
		}
	}}
	res = mustRun(t, overwritten, sampledCases(t, []*op.Op{op.LinearGradW}, specs...))
	for _, r := range res.Cases {
		if r.Dist == oracle.Special {
			continue // db's NaN and infinities are not taken back out
		}
		if r.Verdict != Incorrect || !strings.Contains(r.Reason, "db[") {
			t.Errorf("%s with db overwritten: %s (%s), want incorrect at db", r.Case, r.Verdict, r.Reason)
		}
	}
}

func TestFreivaldsCatchesOneWrongElementOutsideTheSample(t *testing.T) {
	// More rows and columns than the sample holds, and the damaged element
	// chosen in every row: whichever rows are sampled, most damage is not.
	cases := sampledCases(t, append(gemmOps, epilogueOps...), "64x64x64")
	dev := goKernels{mutate: func(o *op.Op, s op.Shape, in [][]float32, out []float32, write []bool) {
		cols := int(s.Cols(o.Outputs()[0]))
		out[(len(out)/cols/2)*cols+cols/2+1] += 0.5
	}}
	res := mustRun(t, dev, cases)
	caught := 0
	for _, r := range res.Cases {
		if r.Verdict == Incorrect && strings.Contains(r.Reason, "Freivalds") {
			caught++
		}
	}
	if caught == 0 || res.Verdict != Incorrect {
		t.Fatalf("verdict %s; %d of %d cases caught the wrong element by projection", res.Verdict, caught, len(res.Cases))
	}
	t.Logf("%d of %d cases caught it by projection", caught, len(res.Cases))
}

func TestSampledChecksCatchAnUnwrittenElement(t *testing.T) {
	dev := goKernels{mutate: func(o *op.Op, s op.Shape, in [][]float32, out []float32, write []bool) {
		write[len(write)/2+3] = false
	}}
	res := mustRun(t, dev, sampledCases(t, gemmOps, "48x40x30"))
	for _, r := range res.Cases {
		if r.Dist != oracle.Special && r.Verdict != Incorrect {
			t.Errorf("%s: %s, want incorrect", r.Case, r.Verdict)
		}
	}
}

// A product through a GELU is not affine, so a sampled case of it is
// checked on whole slices of its rows, never by Freivalds' projections: a
// correct kernel passes, and one element of the output doubled (plus one)
// in every row is caught.
func TestSampledGELUProductsAreCheckedBySlices(t *testing.T) {
	geluOps := []*op.Op{op.Linear, op.LinearGradX}
	res := mustRun(t, goKernels{}, sampledCases(t, geluOps, "40x50x60:gelu=1", "70x20x33:gelu=1"))
	for _, r := range res.Cases {
		if r.Verdict != Passed {
			t.Errorf("%s: %s: %s", r.Case, r.Verdict, r.Reason)
		}
		if r.Stats.Sample != nil {
			t.Errorf("%s was checked by Freivalds' projections: %+v", r.Case, r.Stats.Sample)
		}
	}
	moved := goKernels{mutate: func(o *op.Op, s op.Shape, in [][]float32, out []float32, write []bool) {
		rows, cols := int(s.Dims[0]), int(s.Dims[1])
		if o == op.LinearGradX {
			cols = int(s.Dims[2])
		}
		for i := 0; i < rows; i++ {
			out[i*cols+i%cols] = 2*out[i*cols+i%cols] + 1
		}
	}}
	res = mustRun(t, moved, sampledCases(t, geluOps, "40x50x60:gelu=1"))
	for _, r := range res.Cases {
		// Under wide, products of ±10⁴ reach 10⁹: the positive ones
		// overflow f16 and the negative ones' GELU is 0 within ½|v| times
		// the bound's tanh error near −1 (hundreds), so doubling hides there.
		if r.Dist != oracle.Special && r.Dist != oracle.Wide && r.Verdict != Incorrect {
			t.Errorf("%s with one element a row doubled: %s, want incorrect", r.Case, r.Verdict)
		}
	}
}
