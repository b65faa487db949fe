package oracle

import (
	"context"
	"math"
	"math/rand/v2"

	"github.com/vkern/vkern/op"
)

func init() {
	mustRegister(op.GlobalNorm, Spec{Compute: globalNormCompute, Generate: globalNormGenerate})
}

// maxNonfiniteCount is where global_norm's count of non-finite elements saturates:
// the largest i32.
const maxNonfiniteCount = math.MaxInt32

// globalNormCompute is the reference of global_norm: sumsq = Σ g² rounded
// once to binary32, and nonfinite = #{i : g[i] is ±Inf or NaN}.
//
// Bound. Each g² of a binary32 g is exact in binary64 (48 significant bits,
// exponents from −298 to 256), and every term is ≥ 0, so a kernel's binary64
// sum in any order is within e = γ₆₄(N−1)·S of S = Σ g² (Higham §4.2).
// Rounding it to binary32 adds u₂₄·(S + e), or at most 2⁻¹⁵⁰ where it lands
// among the subnormals:
//
//	|ŝ − S| ≤ e + u₂₄·(S + e) + 2⁻¹⁵⁰,
//
// to which the oracle adds its own error, γ₆₄(c + N/c)·S for its sum in
// chunks of c = ChunkSize, each summed in order, then the chunks in order.
// A sum past binary32's range is +Inf in Value, as rounding it gives (a
// sum within the bound of that threshold is not claimed). The count is
// exact (bound 0), saturating at 2³¹ − 1. IEEE specials follow the
// formula: a NaN makes the sum NaN; otherwise an infinite g makes it +Inf.
func globalNormCompute(ctx context.Context, s op.Shape, in []Input, _ Arithmetic) ([]*Reference, error) {
	g := in[0].F32
	n := len(g)
	chunks := (n + ChunkSize - 1) / ChunkSize
	sums := make([]float64, chunks)
	counts := make([]int64, chunks)
	ForChunks(n, func(c, lo, hi int) {
		var sum float64
		var count int64
		for _, x := range g[lo:hi] {
			d := float64(x)
			sum += d * d
			if math.IsInf(d, 0) || math.IsNaN(d) {
				count++
			}
		}
		sums[c], counts[c] = sum, count
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var sum float64
	var count int64
	for c := range sums {
		sum += sums[c]
		count += counts[c]
	}
	e := Gamma(int64(n-1), U64) * sum
	bound := e + u24*(sum+e) + 0x1p-150 + Gamma(int64(ChunkSize+chunks), U64)*sum
	value := sum
	if math.IsInf(float64(float32(sum)), 0) {
		value = math.Inf(1)
	}
	if math.IsNaN(value) || math.IsInf(value, 0) {
		bound = 0
	}
	return []*Reference{
		{Value: []float64{value}, Bound: []float64{bound}},
		{Value: []float64{float64(min(count, maxNonfiniteCount))}, Bound: []float64{0}},
	}, nil
}

// globalNormGenerate draws g from the distribution (whole numbers under
// Integer, whose squares sum exactly). Under Special it adds subnormals and
// negative zeros (one in 50 elements each: finite, not counted), a +Inf and
// a −Inf, and in half the cases a NaN, so that the count sees both kinds of
// non-finite value and the sum is checked as +Inf as well as NaN.
func globalNormGenerate(g *Gen) []Input {
	if g.Dist != Special {
		return []Input{{F32: g.F32(0, g.Dist.Draw)}}
	}
	x := g.F32(0, Normal.Draw)
	r := g.Rand()
	for t := 0; t < max(1, len(x)/50); t++ {
		x[r.IntN(len(x))] = randomSubnormal32(r)
		x[r.IntN(len(x))] = float32(math.Copysign(0, -1))
	}
	x[r.IntN(len(x))] = float32(math.Inf(1))
	x[r.IntN(len(x))] = float32(math.Inf(-1))
	if r.IntN(2) == 0 {
		x[r.IntN(len(x))] = float32(math.NaN())
	}
	return []Input{{F32: x}}
}

// randomSubnormal32 is a random binary32 subnormal of either sign.
func randomSubnormal32(r *rand.Rand) float32 {
	bits := uint32(1+r.IntN(1<<23-1)) | uint32(r.IntN(2))<<31
	return math.Float32frombits(bits)
}
