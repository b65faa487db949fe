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

// sums gathers n synthetic elements: exact values c uniform in [1, 2)·2^e
// (or, with repeat, one value for all), a kernel's binary32 result c + a
// with |a| ≤ bound ulps, and its f16 result got(c + a).
func sums(rng *rand.Rand, n int, bound float64, repeat bool, got func(float64) float64) roundingSums {
	var s roundingSums
	c := 1 + 0.7*0x1p-10 // repeated: 0.7 ulp above 1, rounded up by nearest, down toward zero
	for i := 0; i < n; i++ {
		if !repeat {
			c = (1 + rng.Float64()) * math.Exp2(float64(rng.IntN(20)-10))
			if rng.IntN(2) == 0 {
				c = -c
			}
		}
		b := bound * oracle.ULP16(c)
		lo, hi := roundedInterval(c, b)
		s.note(c, got(c+b*(2*rng.Float64()-1)), lo, hi)
	}
	return s
}

func nearest(c float64) float64    { return f16.ToFloat64(f16.FromFloat64(c)) }
func towardZero(c float64) float64 { return f16.ToFloat64(towardZero16(float32(c))) }

func TestRoundingStatisticHasNoFalseAlarms(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for trial := 0; trial < 300; trial++ {
		n, repeat := 1+rng.IntN(20000), trial%3 == 0
		bound := 0.3 * rng.Float64()
		if trial%5 == 0 {
			bound = 0
		}
		st := sums(rng, n, bound, repeat, nearest).stats()
		if st == nil || st.Biased {
			t.Fatalf("trial %d: correct rounding with bounds of %.3g ulp over %d elements (repeat %v) judged %+v: %s", trial, bound, n, repeat, st, st.Problem())
		}
	}
}

func TestRoundingStatisticCatchesWrongRoundings(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	for _, tt := range []struct {
		name   string
		repeat bool
		got    func(float64) float64
		want   string
	}{
		{"toward zero", false, towardZero, "rounding bias"},
		{"toward zero, one value repeated", true, towardZero, "rounding bias"},
		{"twice, through 12 bits", false, func(c float64) float64 {
			u := oracle.ULP16(c) / 2
			return nearest(math.RoundToEven(c/u) * u)
		}, "rounding"},
		{"with a sixth of an ulp added before rounding", false, func(c float64) float64 {
			return nearest(c + math.Copysign(oracle.ULP16(c)/6, c))
		}, "rounding bias"},
		{"through an f16 intermediate of a sum of two halves", false, func(c float64) float64 {
			h := c * (0.3 + 0.4*rng.Float64())
			return nearest(nearest(h) + nearest(c-h))
		}, "rounding"},
	} {
		st := sums(rng, 2000, 0.05, tt.repeat, tt.got).stats()
		if !st.Biased {
			t.Errorf("rounding %s: not judged biased (%+v)", tt.name, st)
			continue
		}
		if !strings.Contains(st.Problem(), tt.want) || !strings.Contains(st.Problem(), "gives") {
			t.Errorf("rounding %s: message %q, want it to name %q and the prediction", tt.name, st.Problem(), tt.want)
		}
		t.Logf("%s: %s", tt.name, st.Problem())
	}
	// Ties away from zero: exact values on rounding midpoints, bound 0.
	var s roundingSums
	for i := 0; i < 1000; i++ {
		c := float64(2049 + 2*rng.IntN(1000)) // odd, in [2048, 4096): every one a tie
		s.note(c, f16.ToFloat64(halfAway16(float32(c))), nearest(c), nearest(c))
	}
	if st := s.stats(); !st.Biased || !strings.Contains(st.Problem(), "rounding bias") {
		t.Errorf("ties away from zero not judged biased: %+v", st)
	}
}

func TestRoundingStatisticSkipsWideIntervals(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 36))
	// A bound of several ulps leaves rounding many possible results: those
	// elements do not enter the statistic.
	if st := sums(rng, 1000, 3, false, towardZero).stats(); st != nil {
		t.Fatalf("elements with wide intervals were counted: %+v", st)
	}
}

// TestRoundingInputsAreExactAndNeedRounding checks the rounding
// distribution's promise on every GEMM layout, linear (with its bias) and
// softmax_grad: whole
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
		{"linear", "17x31x129"}, {"linear", "40x40x4100"}, {"linear", "3x1000x5:bias=0"},
	} {
		o, _ := op.Lookup(tt.op)
		s, err := o.ParseShape(tt.shape)
		if err != nil {
			t.Fatal(err)
		}
		inputs, err := oracle.Generate(o, s, oracle.Rounding, 3)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := oracle.Compute(t.Context(), o, s, inputs, oracle.Arithmetic{})
		if err != nil {
			t.Fatal(err)
		}
		for i, in := range inputs {
			for _, h := range in.F16 {
				v := f16.ToFloat64(h)
				if o.Matmul != nil && (v != math.Trunc(v) || math.Abs(v) > 2048) {
					t.Fatalf("%s %s: input %s holds %v, want a whole number of magnitude ≤ 2048", tt.op, tt.shape, o.Inputs()[i].Name, v)
				}
				if v*256 != math.Trunc(v*256) {
					t.Fatalf("%s %s: input %s holds %v, not a multiple of 1/256", tt.op, tt.shape, o.Inputs()[i].Name, v)
				}
			}
		}
		var rounded, ties, binades, nonzero int
		seen := map[int]bool{}
		values := ref[len(ref)-1].Value
		if o.Matmul != nil {
			x, y := oracle.Factors(o, s, inputs)
			for i := 0; i < x.Rows; i++ {
				for j := 0; j < y.Cols; j++ {
					var sum float64
					for k := 0; k < x.Cols; k++ {
						sum += math.Abs(f16.ToFloat64(x.Data[index(x, i, k)]) * f16.ToFloat64(y.Data[index(y, k, j)]))
					}
					if sum >= 1<<24 {
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
