package oracle

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/vkern/vkern/f16"
)

func TestParseAccumulationReadsTheHandshakeGrammar(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Accumulation
	}{
		{"", Accumulation{}},
		{"any", Accumulation{}},
		{"rn-blocked:256", Accumulation{Kind: RNBlocked, Block: 256}},
		{"tc-fused:16:2", Accumulation{Kind: TCFused, Block: 16, Guard: 2}},
	} {
		got, err := ParseAccumulation(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseAccumulation(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
		if tt.in != "" && got.String() != tt.in {
			t.Errorf("%+v.String() = %q, want %q", got, got.String(), tt.in)
		}
	}
	for _, bad := range []string{"rn-blocked", "rn-blocked:0", "rn-blocked:x", "tc-fused:16", "tc-fused:0:2", "any:3", "kahan", "rn-blocked:-4"} {
		if got, err := ParseAccumulation(bad); err == nil {
			t.Errorf("ParseAccumulation(%q) = %+v, want an error", bad, got)
		}
	}
}

// rnBlocked32 sums the products of one dot product as the cpu backend's
// kernel does: in order, in blocks of block terms from zero, binary32
// round-to-nearest, then the block sums in order.
func rnBlocked32(products []float32, block int) float32 {
	var sums float32
	for b0 := 0; b0 < len(products); b0 += block {
		var acc float32
		for _, p := range products[b0:min(b0+block, len(products))] {
			acc += p
		}
		if b0 == 0 {
			sums = acc
		} else {
			sums += acc
		}
	}
	return sums
}

// tcFused32 sums the products as the published model of the Hopper tensor
// cores does (see TCFused): per step, the running sum and the step's
// products are aligned to the largest exponent E keeping bits down to
// 2^(E−23−guard), truncated toward zero, summed exactly, and the sum
// truncated to binary32.
func tcFused32(products []float32, step, guard int) float32 {
	var acc float32
	for k0 := 0; k0 < len(products); k0 += step {
		terms := append([]float64{float64(acc)}, toFloat64(products[k0:min(k0+step, len(products))])...)
		e := math.MinInt
		for _, v := range terms {
			if v != 0 {
				_, exp := math.Frexp(v) // |v| = frac·2^exp, frac in [0.5, 1)
				e = max(e, exp-1)
			}
		}
		if e == math.MinInt {
			acc = 0
			continue
		}
		quantum := math.Ldexp(1, e-23-guard)
		var sum float64 // exact: at most step+1 integers below 2^(25+guard), times a power of two
		for _, v := range terms {
			sum += math.Trunc(v/quantum) * quantum
		}
		acc = truncate32(sum)
	}
	return acc
}

func toFloat64(xs []float32) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}

// truncate32 rounds x to binary32 toward zero.
func truncate32(x float64) float32 {
	f := float32(x)
	if math.Abs(float64(f)) > math.Abs(x) {
		f = math.Nextafter32(f, 0)
	}
	return f
}

// TestStructuredBoundsHoldForSimulatedKernels sums random products the way
// each backend's structure says, and checks every element against the
// structural bound; the distributions include wide magnitudes, where one term
// dominates a step, and a drifting sum, where cancellation is rare and the
// partial sums grow like k.
func TestStructuredBoundsHoldForSimulatedKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	type sim struct {
		acc Accumulation
		sum func([]float32) float32
	}
	sims := map[string]sim{
		"rn-blocked:256 (cpu)": {Accumulation{Kind: RNBlocked, Block: 256}, func(p []float32) float32 { return rnBlocked32(p, 256) }},
		"rn-blocked:48":        {Accumulation{Kind: RNBlocked, Block: 48}, func(p []float32) float32 { return rnBlocked32(p, 48) }},
		"tc-fused:16:2, g=2":   {Accumulation{Kind: TCFused, Block: 16, Guard: 2}, func(p []float32) float32 { return tcFused32(p, 16, 2) }},
		"tc-fused:16:2, g=3":   {Accumulation{Kind: TCFused, Block: 16, Guard: 2}, func(p []float32) float32 { return tcFused32(p, 16, 3) }},
		"tc-fused:8:0, g=0":    {Accumulation{Kind: TCFused, Block: 8, Guard: 0}, func(p []float32) float32 { return tcFused32(p, 8, 0) }},
	}
	worst := map[string]float64{}
	for _, k := range []int{1, 15, 16, 17, 300, 1000, 4099} {
		for _, dist := range []string{"uniform", "normal", "wide", "drift"} {
			const m, n = 3, 5
			a, b := randomF16(rng, m*k, dist), randomF16(rng, k*n, dist)
			if dist == "drift" {
				a, b = randomF16(rng, m*k, "uniform"), randomF16(rng, k*n, "uniform")
				for i := range a {
					a[i] &^= 0x8000 // all products of one sign
				}
				for i := range b {
					b[i] &^= 0x8000
				}
			}
			for name, sm := range sims {
				ref, err := MatMul(context.Background(), Matrix{a, m, k, false}, Matrix{b, k, n, false}, sm.acc)
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < m; i++ {
					for j := 0; j < n; j++ {
						products := make([]float32, k)
						for kk := range products {
							products[kk] = f16.ToFloat32(a[i*k+kk]) * f16.ToFloat32(b[kk*n+j])
						}
						idx := i*n + j
						e := math.Abs(float64(sm.sum(products)) - ref.Value[idx])
						if e > ref.Bound[idx] {
							t.Fatalf("%s, K=%d, %s: element (%d,%d) errs by %g, over its bound %g", name, k, dist, i, j, e, ref.Bound[idx])
						}
						worst[name] = max(worst[name], e/ref.Bound[idx])
					}
				}
			}
		}
	}
	for name, w := range worst {
		t.Logf("%s: worst error/bound %.3g", name, w)
	}
}

// TestStructuredBoundsAreTighterAtDepth4096 reports, and holds a floor
// under, how much tighter each structure's bound is than the order-free one
// at K = 4096 on zero-mean inputs (the ratio BENCHMARKS.md quotes for 4096³).
func TestStructuredBoundsAreTighterAtDepth4096(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	const m, n, k = 4, 64, 4096
	for _, tt := range []struct {
		acc      Accumulation
		minRatio float64
	}{
		{Accumulation{Kind: RNBlocked, Block: 256}, 20},
		{Accumulation{Kind: TCFused, Block: 16, Guard: 2}, 10},
	} {
		for _, dist := range []string{"uniform", "normal"} {
			a, b := randomF16(rng, m*k, dist), randomF16(rng, k*n, dist)
			x, y := Matrix{a, m, k, false}, Matrix{b, k, n, false}
			old, err := MatMul(context.Background(), x, y, Accumulation{})
			if err != nil {
				t.Fatal(err)
			}
			tight, err := MatMul(context.Background(), x, y, tt.acc)
			if err != nil {
				t.Fatal(err)
			}
			ratios := make([]float64, len(old.Bound))
			for i := range ratios {
				// The order-free bound of the previous release, γ(K)·S,
				// against the structural one.
				ratios[i] = (old.Bound[i] / 2) / tight.Bound[i]
			}
			slices.Sort(ratios)
			median, least := ratios[len(ratios)/2], ratios[0]
			t.Logf("%s, %s: γ(K)·S over the structural bound: median %.1f, least %.1f", tt.acc, dist, median, least)
			if least < tt.minRatio {
				t.Errorf("%s, %s: the structural bound is only %.1f× tighter somewhere, want at least %.0f×", tt.acc, dist, least, tt.minRatio)
			}
		}
	}
}
