package oracle

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
)

func init() {
	mustRegister(op.Embedding, Spec{Compute: embeddingCompute, Generate: embeddingGenerate})
	mustRegister(op.EmbeddingGrad, Spec{Compute: embeddingGradCompute, Generate: embeddingGradGenerate})
}

// embeddingDims are an embedding op's B, T, C and V.
func embeddingDims(s op.Shape) (b, t, c, v int) {
	return int(s.Dims[0]), int(s.Dims[1]), int(s.Dims[2]), int(s.Dims[3])
}

// checkTokens finds the first token id outside [0, V): the kernels refuse
// such a call, so the oracle has no reference for it.
func checkTokens(name string, tokens []int32, v int) error {
	for p, id := range tokens {
		if id < 0 || int(id) >= v {
			return fmt.Errorf("oracle: %s: tokens[%d] = %d is outside [0, V) = [0, %d)", name, p, id, v)
		}
	}
	return nil
}

// embeddingCompute is the reference of embedding:
// x[b·T + t] = wte[tokens[b·T + t]] + wpe[t].
//
// Bound. As add's: the sum of two f16 values is exact in float64 (each has
// 11 significant bits and their exponents differ by at most 40), so Value
// is exact. A binary32 kernel rounds the sum once (|error| ≤ u₂₄·|v|)
// before rounding it to f16. IEEE specials follow the formula: NaN and
// +Inf + −Inf give NaN; a sum of 65520 or more overflows f16 to Inf.
func embeddingCompute(ctx context.Context, s op.Shape, in []Input, _ Arithmetic) ([]*Reference, error) {
	tokens, wte, wpe := in[0].I32, in[1].F16, in[2].F16
	_, t, c, v := embeddingDims(s)
	if err := checkTokens("embedding", tokens, v); err != nil {
		return nil, err
	}
	return elementwise(ctx, len(tokens)*c, func(i int) (float64, float64) {
		p, ch := i/c, i%c
		sum := f16.ToFloat64(wte[int(tokens[p])*c+ch]) + f16.ToFloat64(wpe[(p%t)*c+ch])
		return sum, u24 * math.Abs(sum)
	})
}

// embeddingGenerate draws the tokens (drawTokens, the same for every
// distribution), then wte and wpe: under Rounding, wte whole numbers in
// [−2048, 2048] and wpe quarters in [−256, 256], exact in f16, whose sums
// (exact in binary32) land where f16 must round: ties, and quarters past
// 1024 that round to the nearer whole number; under Special,
// plantEmbeddingSpecials; each distribution's values otherwise.
func embeddingGenerate(g *Gen) []Input {
	tokens := drawTokens(g.Shape, g.Rand())
	draw, drawPosition := g.Dist.Draw, g.Dist.Draw
	switch g.Dist {
	case Rounding:
		draw = func(r *rand.Rand) float64 { return float64(r.IntN(4097) - 2048) }
		drawPosition = func(r *rand.Rand) float64 { return float64(r.IntN(2049)-1024) / 4 }
	case Special:
		draw, drawPosition = Normal.Draw, Normal.Draw
	}
	wte, wpe := g.F16(1, draw), g.F16(2, drawPosition)
	if g.Dist == Special {
		plantEmbeddingSpecials(g, tokens, wte, wpe)
	}
	return []Input{{I32: tokens}, {F16: wte}, {F16: wpe}}
}

// plantEmbeddingSpecials scatters subnormals, a NaN, a +Inf and a −Inf
// into wte and wpe (Gen.Scatter); puts a NaN in row 0 of wte and a +Inf in
// its row V−1, the rows drawTokens uses most, and a −Inf in a row of wpe,
// so that they reach many outputs; and makes a few positions' terms both
// 60000, whose sum overflows f16.
func plantEmbeddingSpecials(g *Gen, tokens []int32, wte, wpe []uint16) {
	_, t, c, v := embeddingDims(g.Shape)
	rng := g.Rand()
	g.Scatter(wte)
	g.Scatter(wpe)
	wte[rng.IntN(c)] = f16.NaN
	wte[(v-1)*c+rng.IntN(c)] = f16.PosInf
	wpe[rng.IntN(t*c)] = f16.NegInf
	for k := 0; k < max(1, len(tokens)/16); k++ {
		p, ch := rng.IntN(len(tokens)), rng.IntN(c)
		wte[int(tokens[p])*c+ch], wpe[(p%t)*c+ch] = big, big
	}
}

// drawTokens makes the B·T token ids of shape s (B×T×C×V), the same for
// every distribution: uniform in [0, V), except that position 0 and every
// 8th position from 3 hold id 0, and the last position and every 8th from
// 5 hold id V−1, the first and last rows of wte, where an off-by-one would
// read or write outside them. The two ids each take an eighth of the
// positions, so that embedding_grad sums long runs into their rows.
func drawTokens(s op.Shape, rng *rand.Rand) []int32 {
	b, t, _, v := embeddingDims(s)
	tokens := make([]int32, b*t)
	for p := range tokens {
		switch {
		case p == 0 || p%8 == 3:
			tokens[p] = 0
		case p == len(tokens)-1 || p%8 == 5:
			tokens[p] = int32(v - 1)
		default:
			tokens[p] = int32(rng.IntN(v))
		}
	}
	return tokens
}

// embeddingGradCompute is the reference of embedding_grad:
// dwte[v] = dwte₀[v] + Σ_{p: tokens[p] = v} dx[p] and
// dwpe[t] = dwpe₀[t] + Σ_b dx[b·T + t].
//
// Bound. Each output element is a sum of n + 1 terms, its initial f32
// value and n f16 values of dx (n = the count of positions holding token v,
// or B), and a kernel makes it with n binary32 additions rounded to nearest
// (a partial sum started from 0 makes one more, 0 + x, which is exact). In
// any order, any tree of them, |ŝ − s| ≤ γ₂₄(n)·S, S the sum of the terms'
// magnitudes (Higham, §4.2): the bound holds whatever order the kernels
// fix for determinism. The oracle's float64 sum adds γ₆₄(n)·S. An element
// no position adds to (n = 0) must keep its initial value exactly. IEEE
// specials follow the formula: a NaN term or +Inf and −Inf terms give NaN.
func embeddingGradCompute(ctx context.Context, s op.Shape, in []Input, _ Arithmetic) ([]*Reference, error) {
	dx, tokens, dwte0, dwpe0 := in[0].F16, in[1].I32, in[2].F32, in[3].F32
	b, t, c, v := embeddingDims(s)
	if err := checkTokens("embedding_grad", tokens, v); err != nil {
		return nil, err
	}
	// The positions of each token, ascending: a counting sort.
	start := make([]int, v+1)
	for _, id := range tokens {
		start[id+1]++
	}
	for k := 0; k < v; k++ {
		start[k+1] += start[k]
	}
	positions := make([]int, len(tokens))
	next := append([]int(nil), start[:v]...)
	for p, id := range tokens {
		positions[next[id]] = p
		next[id]++
	}
	dwte := &Reference{Value: make([]float64, v*c), Bound: make([]float64, v*c)}
	err := parallelRows(ctx, v, 2*c*max(1, len(tokens)/v), func(lo, hi int) {
		for id := lo; id < hi; id++ {
			sumRows(dwte0[id*c:(id+1)*c], dx, c, positions[start[id]:start[id+1]],
				dwte.Value[id*c:(id+1)*c], dwte.Bound[id*c:(id+1)*c])
		}
	})
	if err != nil {
		return nil, err
	}
	dwpe := &Reference{Value: make([]float64, t*c), Bound: make([]float64, t*c)}
	err = parallelRows(ctx, t, 2*c*b, func(lo, hi int) {
		rows := make([]int, b)
		for tt := lo; tt < hi; tt++ {
			for bb := range rows {
				rows[bb] = bb*t + tt
			}
			sumRows(dwpe0[tt*c:(tt+1)*c], dx, c, rows, dwpe.Value[tt*c:(tt+1)*c], dwpe.Bound[tt*c:(tt+1)*c])
		}
	})
	if err != nil {
		return nil, err
	}
	return []*Reference{dwte, dwpe}, nil
}

// sumRows sets value to initial plus the rows of dx (c columns each) listed
// in rows, and bound to (γ₂₄(n) + γ₆₄(n))·S per element, n = len(rows).
func sumRows(initial []float32, dx []uint16, c int, rows []int, value, bound []float64) {
	for ch, w := range initial {
		value[ch] = float64(w)
		bound[ch] = math.Abs(float64(w))
	}
	for _, p := range rows {
		for ch, h := range dx[p*c : (p+1)*c] {
			d := f16.ToFloat64(h)
			value[ch] += d
			bound[ch] += math.Abs(d)
		}
	}
	n := int64(len(rows))
	gamma := Gamma(n, u24) + Gamma(n, U64)
	for ch := range bound {
		bound[ch] *= gamma
	}
}

// embeddingGradGenerate draws dx and the initial dwte and dwpe from the
// distribution, and the tokens as embedding's (drawTokens). Under Special,
// dx gets Gen.Scatter's specials, and +Inf and −Inf in one column of two
// positions of token 0 (positions 0 and 3), whose sum in dwte is NaN; the
// initial dwte gets a NaN in row V−1 and the initial dwpe a −Inf.
func embeddingGradGenerate(g *Gen) []Input {
	_, _, c, v := embeddingDims(g.Shape)
	tokens := drawTokens(g.Shape, g.Rand())
	draw := g.Dist.Draw
	if g.Dist == Special {
		draw = Normal.Draw
	}
	dx := g.F16(0, draw)
	dwte, dwpe := g.F32(2, draw), g.F32(3, draw)
	if g.Dist == Special {
		rng := g.Rand()
		g.Scatter(dx)
		if len(tokens) > 3 {
			ch := rng.IntN(c)
			dx[ch], dx[3*c+ch] = f16.PosInf, f16.NegInf
		}
		dwte[(v-1)*c+rng.IntN(c)] = float32(math.NaN())
		dwpe[rng.IntN(len(dwpe))] = float32(math.Inf(-1))
	}
	return []Input{{F16: dx}, {I32: tokens}, {F32: dwte}, {F32: dwpe}}
}
