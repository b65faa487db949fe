package verify

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
)

// sums gathers n synthetic elements whose exact values are uniform in
// [1, 2)·2^e (so their ulp is known) and whose f16 results are got(c).
func sums(rng *rand.Rand, n int, preBoundULP float64, got func(c float64) float64) roundingSums {
	var s roundingSums
	for i := 0; i < n; i++ {
		c := (1 + rng.Float64()) * math.Exp2(float64(rng.IntN(20)-10))
		if rng.IntN(2) == 0 {
			c = -c
		}
		s.note(c, got(c), preBoundULP*oracle.ULP16(c))
	}
	return s
}

func nearest(c float64) float64    { return f16.ToFloat64(f16.FromFloat64(c)) }
func towardZero(c float64) float64 { return f16.ToFloat64(towardZero16(float32(c))) }

func TestRoundingStatisticHasNoFalseAlarms(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for trial := 0; trial < 300; trial++ {
		n := 256 + rng.IntN(20000)
		// The worst a correct kernel may do: its accumulation error pushes
		// every element the same way by its whole bound.
		acc := maxBiasAccULP * rng.Float64()
		st := sums(rng, n, acc, func(c float64) float64 {
			return nearest(c + math.Copysign(acc*oracle.ULP16(c), c))
		}).stats()
		if !st.Judged || st.Biased {
			t.Fatalf("trial %d: a correct rounding with accumulation %.3g ulp over %d elements judged %v, biased %v: %s",
				trial, acc, n, st.Judged, st.Biased, st.Problem())
		}
	}
}

func TestRoundingStatisticCatchesWrongRoundings(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	for _, tt := range []struct {
		name string
		n    int
		got  func(c float64) float64
		want string
	}{
		{"toward zero", minBiasElements, towardZero, "rounding bias"},
		{"twice, through 12 bits", 2000, func(c float64) float64 {
			// Round to 12 significant bits, then to f16's 11.
			u := oracle.ULP16(c) / 2
			return nearest(math.RoundToEven(c/u) * u)
		}, ""},
		{"with a sixth of an ulp added before rounding", 2000, func(c float64) float64 {
			return nearest(c + math.Copysign(oracle.ULP16(c)/6, c))
		}, "rounding bias"},
		{"through an f16 intermediate of a sum of two halves", 2000, func(c float64) float64 {
			h := c * (0.3 + 0.4*rng.Float64())
			return nearest(nearest(h) + nearest(c-h))
		}, "rounding error too large"},
	} {
		st := sums(rng, tt.n, 0, tt.got).stats()
		if !st.Biased {
			t.Errorf("rounding %s over %d elements: not judged biased (mean %.3g ≤ %.3g, mean square %.3g ≤ %.3g)",
				tt.name, tt.n, st.MeanULP, st.MeanLimit, st.MeanSquareULP, st.MeanSquareLimit)
			continue
		}
		if !strings.Contains(st.Problem(), tt.want) || !strings.Contains(st.Problem(), "predicts") {
			t.Errorf("rounding %s: message %q, want it to name %q and the prediction", tt.name, st.Problem(), tt.want)
		}
		t.Logf("%s: %s", tt.name, st.Problem())
	}
}

func TestRoundingStatisticNeedsEnoughElements(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 36))
	st := sums(rng, minBiasElements-1, 0, towardZero).stats()
	if st.Judged || st.Biased || st.Problem() != "" {
		t.Fatalf("%d elements: judged %v, biased %v; want neither", st.Elements, st.Judged, st.Biased)
	}
	// Elements whose accumulation bound passes 1/16 ulp do not count.
	if st := sums(rng, 1000, 2*maxBiasAccULP, towardZero).stats(); st != nil {
		t.Fatalf("elements dominated by accumulation were counted: %+v", st)
	}
}

// TestRoundingInputsAreExactAndNeedRounding checks the rounding
// distribution's promise on every GEMM layout and on softmax_grad: whole
// numbers (sixteenths for Y) exact in f16, every partial sum below 2²⁴ in
// any order, and results of which many need rounding, many of them ties,
// over several binades.
func TestRoundingInputsAreExactAndNeedRounding(t *testing.T) {
	for _, tt := range []struct {
		op, shape string
	}{
		{"gemm_grad_a", "1x1x1"}, {"gemm_grad_a", "17x31x129"}, {"gemm_grad_b", "4100x40x40"},
		{"gemm_grad_a", "40x4100x40"}, {"gemm", "40x40x4100"}, {"gemm_grad_b", "30000x3x2"},
		{"softmax_grad", "64x1000"}, {"softmax_grad", "1x1"},
	} {
		o, _ := op.Lookup(tt.op)
		s, err := o.ParseShape(tt.shape)
		if err != nil {
			t.Fatal(err)
		}
		inputs := Generate(o, s, Rounding, 3)
		ref, err := oracle.Compute(t.Context(), o, s, inputs, oracle.Arithmetic{})
		if err != nil {
			t.Fatal(err)
		}
		for i, in := range inputs {
			for _, h := range in.F16 {
				v := f16.ToFloat64(h)
				if o.Kind == op.MatMul && (v != math.Trunc(v) || math.Abs(v) > 2048) {
					t.Fatalf("%s %s: input %s holds %v, want a whole number of magnitude ≤ 2048", tt.op, tt.shape, o.Inputs[i].Name, v)
				}
				if v*256 != math.Trunc(v*256) {
					t.Fatalf("%s %s: input %s holds %v, not a multiple of 1/256", tt.op, tt.shape, o.Inputs[i].Name, v)
				}
			}
		}
		var rounded, ties, binades, nonzero int
		seen := map[int]bool{}
		values := ref[len(ref)-1].Value
		if o.Kind == op.MatMul {
			x, y := oracle.Factors(o, s, inputs)
			for i := 0; i < x.Rows; i++ {
				for j := 0; j < y.Cols; j++ {
					var sum float64
					for k := 0; k < x.Cols; k++ {
						sum += math.Abs(f16.ToFloat64(x.Data[index(x, i, k)]) * f16.ToFloat64(y.Data[index(y, k, j)]))
					}
					if sum >= exactSumLimit {
						t.Fatalf("%s %s: element (%d,%d) sums magnitudes to %v, not below 2^24", tt.op, tt.shape, i, j, sum)
					}
				}
			}
		}
		for _, c := range values {
			if c != 0 {
				nonzero++ // softmax_grad's rows are zero where Y is
			}
			if r := f16.ToFloat64(f16.FromFloat64(c)); r != c && !math.IsInf(r, 0) {
				rounded++
				if math.Abs(r-c) == oracle.ULP16(c)/2 {
					ties++
				}
				_, e := math.Frexp(c)
				seen[e] = true
			}
		}
		binades = len(seen)
		t.Logf("%s %s: %d of %d nonzero results need rounding, %d of them ties, in %d binades", tt.op, tt.shape, rounded, nonzero, ties, binades)
		if nonzero >= 100 && (rounded < nonzero/4 || ties < rounded/10 || binades < 3) {
			t.Errorf("%s %s: only %d of %d nonzero results need rounding (%d ties, %d binades)", tt.op, tt.shape, rounded, nonzero, ties, binades)
		}
	}
}

// index is where Matrix m keeps element (i, j).
func index(m oracle.Matrix, i, j int) int {
	if m.Transposed {
		return j*m.Rows + i
	}
	return i*m.Cols + j
}
