package oracle

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
)

func TestEmbeddingTokensStayInTheVocabulary(t *testing.T) {
	for _, o := range []*op.Op{op.Embedding, op.EmbeddingGrad} {
		for _, shape := range []string{"1x1x1x1", "2x5x7x11", "3x17x9x1000", "8x512x4x3"} {
			s := o.MustShape(shape)
			for _, d := range Dists() {
				if d == Rounding && o.NoExactRounding != "" {
					continue
				}
				in, err := Generate(o, s, d, 1)
				if err != nil {
					t.Fatal(err)
				}
				tokens := in[inputIndex(o, "tokens")].I32
				v := int32(s.Dims[3])
				for p, id := range tokens {
					if id < 0 || id >= v {
						t.Fatalf("%s %s %s: tokens[%d] = %d, outside [0, %d)", o.Name, shape, d, p, id, v)
					}
				}
				if tokens[0] != 0 || tokens[len(tokens)-1] != v-1 && len(tokens) > 1 {
					t.Errorf("%s %s %s: the first and last ids are %d and %d, want 0 and V−1 = %d", o.Name, shape, d, tokens[0], tokens[len(tokens)-1], v-1)
				}
				if _, err := Compute(context.Background(), o, s, in, Arithmetic{}); err != nil {
					t.Fatalf("%s %s %s: %v", o.Name, shape, d, err)
				}
			}
		}
	}
}

// TestEmbeddingGradBoundHoldsForEveryOrder sums each output element as a
// binary32 kernel would, in ascending and descending position order, in
// pieces of 32 sorted positions combined afterwards (the GPU's order), and
// as a random tree, and checks every result against the bound.
func TestEmbeddingGradBoundHoldsForEveryOrder(t *testing.T) {
	o := op.EmbeddingGrad
	for _, shape := range []string{"4x64x64x256", "8x512x16x3", "3x17x33x1000"} {
		s := o.MustShape(shape)
		for _, d := range []Dist{Uniform, Normal, Wide, Integer} {
			in, err := Generate(o, s, d, 2)
			if err != nil {
				t.Fatal(err)
			}
			refs, err := Compute(context.Background(), o, s, in, Arithmetic{})
			if err != nil {
				t.Fatal(err)
			}
			b, tt, c, v := embeddingDims(s)
			dx, tokens := in[0].F16, in[1].I32
			rows := make([][]int, v) // the positions of each token, ascending
			for p, id := range tokens {
				rows[id] = append(rows[id], p)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			worst := 0.0
			check := func(name string, initial float32, positions []int, ch int, ref *Reference, i int) {
				terms := []float32{initial}
				for _, p := range positions {
					terms = append(terms, float32(f16.ToFloat64(dx[p*c+ch])))
				}
				for order, got := range []float32{sumAscending(terms), sumDescending(terms), pieces(terms, 32), randomTree(terms, rng)} {
					e := math.Abs(float64(got) - ref.Value[i])
					if e > ref.Bound[i] || d == Integer && e != 0 {
						t.Fatalf("%s %s: %s element %d, order %d: %v is %g from %v, over the bound %g", shape, d, name, i, order, got, e, ref.Value[i], ref.Bound[i])
					}
					if ref.Bound[i] > 0 {
						worst = math.Max(worst, e/ref.Bound[i])
					}
				}
			}
			for id := 0; id < v; id++ {
				for ch := 0; ch < c; ch++ {
					check("dwte", in[2].F32[id*c+ch], rows[id], ch, refs[0], id*c+ch)
				}
			}
			for pos := 0; pos < tt; pos++ {
				positions := make([]int, b)
				for bb := range positions {
					positions[bb] = bb*tt + pos
				}
				for ch := 0; ch < c; ch++ {
					check("dwpe", in[3].F32[pos*c+ch], positions, ch, refs[1], pos*c+ch)
				}
			}
			t.Logf("%s %s: worst error/bound %.3g", shape, d, worst)
		}
	}
}

func sumAscending(terms []float32) float32 {
	s := terms[0]
	for _, x := range terms[1:] {
		s += x
	}
	return s
}

func sumDescending(terms []float32) float32 {
	s := terms[0]
	for k := len(terms) - 1; k > 0; k-- {
		s += terms[k]
	}
	return s
}

// pieces adds the terms after the first in pieces of n, each summed from 0,
// then the piece sums to the first term in order.
func pieces(terms []float32, n int) float32 {
	s := terms[0]
	for lo := 1; lo < len(terms); lo += n {
		var piece float32
		for _, x := range terms[lo:min(lo+n, len(terms))] {
			piece += x
		}
		s += piece
	}
	return s
}

// randomTree adds two random partial sums until one is left.
func randomTree(terms []float32, rng *rand.Rand) float32 {
	sums := append([]float32(nil), terms...)
	for len(sums) > 1 {
		i := rng.IntN(len(sums))
		j := rng.IntN(len(sums) - 1)
		if j >= i {
			j++
		}
		sums[i] += sums[j]
		sums[j] = sums[len(sums)-1]
		sums = sums[:len(sums)-1]
	}
	return sums[0]
}

func TestEmbeddingRoundingCasesNeedRounding(t *testing.T) {
	s := op.Embedding.MustShape("4x64x64x256")
	in, err := Generate(op.Embedding, s, Rounding, 3)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := Compute(context.Background(), op.Embedding, s, in, Arithmetic{})
	if err != nil {
		t.Fatal(err)
	}
	var rounded, ties int
	for _, v := range refs[0].Value {
		if r := f16.ToFloat64(f16.FromFloat64(v)); r != v {
			rounded++
			if math.Abs(r-v) == ULP16(v)/2 {
				ties++
			}
		}
	}
	n := len(refs[0].Value)
	t.Logf("%d of %d results need rounding, %d of them ties", rounded, n, ties)
	if rounded < n/4 || ties < rounded/10 || rounded-ties < rounded/10 {
		t.Errorf("only %d of %d results need rounding (%d ties)", rounded, n, ties)
	}
}

func TestEmbeddingSpecialsFollowTheFormula(t *testing.T) {
	o := op.EmbeddingGrad
	s := o.MustShape("2x5x7x11")
	in, err := Generate(o, s, Special, 1)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := Compute(context.Background(), o, s, in, Arithmetic{})
	if err != nil {
		t.Fatal(err)
	}
	// Positions 0 and 3 hold token 0, and +Inf and −Inf in one column.
	dx := in[0].F16
	for ch := 0; ch < 7; ch++ {
		if dx[ch] == f16.PosInf && dx[3*7+ch] == f16.NegInf && !math.IsNaN(refs[0].Value[ch]) {
			t.Errorf("dwte[0,%d] = %v, want NaN (+Inf + −Inf)", ch, refs[0].Value[ch])
		}
	}
	nan := 0
	for _, v := range refs[0].Value {
		if math.IsNaN(v) {
			nan++
		}
	}
	if nan == 0 {
		t.Error("no NaN in dwte under the special distribution")
	}
}
