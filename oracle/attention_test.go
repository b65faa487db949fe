package oracle

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
)

// exp2Off is a binary32 exp2 that errs by up to two ulps, as the bounds
// allow for CUDA's exp2f: the correctly rounded value moved by 0, 1 or 2
// ulps either way at random.
func exp2Off(x float32, rng *rand.Rand) float32 {
	e := float32(math.Exp2(float64(x)))
	if e == 0 || math.IsInf(float64(e), 0) || math.IsNaN(float64(e)) {
		return e
	}
	for k := rng.IntN(5) - 2; k != 0; {
		if k > 0 {
			e = math.Nextafter32(e, float32(math.Inf(1)))
			k--
		} else {
			e = math.Nextafter32(e, 0)
			k++
		}
	}
	return e
}

// exp2Tile is a tile's exponential: exp2Off, and with flush, as the
// tensor-core kernels take it (exp2_tile in kernels/cuda/attention.cu, the
// instruction ex2.approx.ftz), 0 where the result would be under 2⁻¹²⁶,
// each such result counted in *flushed.
func exp2Tile(x float32, flush bool, flushed *int, rng *rand.Rand) float32 {
	e := exp2Off(x, rng)
	if flush && e != 0 && e < 0x1p-126 {
		*flushed++
		return 0
	}
	return e
}

// roundF16 is x rounded to f16, as a tensor-core kernel multiplies it.
func roundF16(x float32) float32 { return f16.ToFloat32(f16.FromFloat32(x)) }

// flashRow32 computes one query row the way a tiled GPU kernel does, in
// binary32: scores in base 2 with α·log₂e folded into one constant, an
// online max over key tiles with rescales, exp2 off by up to 2 ulps, and,
// when round, P·V with P rounded to f16 and the denominator summed from P
// in binary32, and P flushed to 0 under 2⁻¹²⁶ (exp2Tile), and o divided
// by l as a reciprocal and a product.
func flashRow32(q, k, v []float32, d, n, tile int, round bool, flushed *int, rng *rand.Rand) (y []float32, lse float32) {
	scale2 := float32(1 / math.Sqrt(float64(d)) * math.Log2E)
	m, l := float32(math.Inf(-1)), float32(0)
	o := make([]float32, d)
	p := make([]float32, tile)
	for j0 := 0; j0 < n; j0 += tile {
		j1 := min(j0+tile, n)
		mt := float32(math.Inf(-1))
		for j := j0; j < j1; j++ {
			var dot float32
			for c := 0; c < d; c++ {
				dot += q[c] * k[j*d+c]
			}
			p[j-j0] = dot * scale2
			mt = max(mt, p[j-j0])
		}
		mNew := max(m, mt)
		mUse := mNew
		if math.IsInf(float64(mUse), -1) {
			mUse = 0
		}
		r := exp2Off(m-mUse, rng)
		var sum float32
		for j := j0; j < j1; j++ {
			p[j-j0] = exp2Tile(p[j-j0]-mUse, round, flushed, rng)
			sum += p[j-j0]
		}
		l = l*r + sum
		// A tile whose V holds an infinity or a NaN takes the exact path, as
		// the kernels route any input with one.
		roundTile := round
		for e := j0 * d; e < j1*d; e++ {
			if math.IsNaN(float64(v[e])) || math.IsInf(float64(v[e]), 0) {
				roundTile = false
			}
		}
		for c := 0; c < d; c++ {
			var sum float32
			for j := j0; j < j1; j++ {
				if roundTile {
					sum += roundF16(p[j-j0]) * v[j*d+c]
				} else {
					sum += p[j-j0] * v[j*d+c]
				}
			}
			o[c] = o[c]*r + sum
		}
		m = mNew
	}
	y = make([]float32, d)
	inv := 1 / l // with round, the tensor-core kernels' reciprocal and product
	for c := range y {
		if round {
			y[c] = o[c] * inv
		} else {
			y[c] = o[c] / l
		}
	}
	return y, (m + float32(math.Log2(float64(l)))) * float32(math.Ln2)
}

func headF32(src []uint16, l AttentionLayout, width, part, b, h int) []float32 {
	out := make([]float32, l.T*l.D)
	for t := 0; t < l.T; t++ {
		for c := 0; c < l.D; c++ {
			out[t*l.D+c] = f16.ToFloat32(src[(b*l.T+t)*width+part*l.C+h*l.D+c])
		}
	}
	return out
}

func TestAttentionForwardBoundHoldsForTiledBinary32Kernels(t *testing.T) {
	ctx := context.Background()
	for _, shape := range []string{"2x17x24x3", "1x64x64x4", "1x200x64x1"} {
		s := op.Attention.MustShape(shape)
		l := AttentionLayoutOf(s)
		for _, dist := range []Dist{Integer, Uniform, Normal, Wide, Special} {
			in, err := Generate(op.Attention, s, dist, 7)
			if err != nil {
				t.Fatal(err)
			}
			y, lse, err := AttentionForward(ctx, in[0].F16, l)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			worstY, worstL, flushed := 0.0, 0.0, 0
			for b := 0; b < l.B; b++ {
				for h := 0; h < l.H; h++ {
					q, k, v := headF32(in[0].F16, l, 3*l.C, 0, b, h), headF32(in[0].F16, l, 3*l.C, 1, b, h), headF32(in[0].F16, l, 3*l.C, 2, b, h)
					for i := 0; i < l.T; i++ {
						for _, variant := range []struct {
							tile  int
							round bool
						}{{1 << 20, false}, {16, true}, {64, true}, {64, false}} {
							y32, lse32 := flashRow32(q[i*l.D:(i+1)*l.D], k, v, l.D, i+1, variant.tile, variant.round, &flushed, rng)
							at := (b*l.H+h)*l.T + i
							if want := lse.Value[at]; !math.IsNaN(want) {
								e := math.Abs(float64(lse32) - want)
								if !(e <= lse.Bound[at]) {
									t.Fatalf("%s %s: lse[b=%d h=%d i=%d] = %g, reference %g, error %g > bound %g (tile %d)", shape, dist, b, h, i, lse32, want, e, lse.Bound[at], variant.tile)
								}
								worstL = max(worstL, e/lse.Bound[at])
							} else if !math.IsNaN(float64(lse32)) {
								t.Fatalf("%s %s: lse[b=%d h=%d i=%d] = %g, want NaN", shape, dist, b, h, i, lse32)
							}
							for c := 0; c < l.D; c++ {
								idx := (b*l.T+i)*l.C + h*l.D + c
								want, got := y.Value[idx], float64(y32[c])
								if math.IsNaN(want) || math.IsInf(want, 0) {
									if !(math.IsNaN(want) && math.IsNaN(got) || want == got) {
										t.Fatalf("%s %s: y[%d] = %g, want %g", shape, dist, idx, got, want)
									}
									continue
								}
								e := math.Abs(got - want)
								if !(e <= y.Bound[idx]) {
									t.Fatalf("%s %s: y[b=%d h=%d i=%d c=%d] = %g, reference %g, error %g > bound %g (tile %d, round %v)", shape, dist, b, h, i, c, got, want, e, y.Bound[idx], variant.tile, variant.round)
								}
								if y.Bound[idx] > 0 {
									worstY = max(worstY, e/y.Bound[idx])
								}
							}
						}
					}
				}
			}
			t.Logf("%s %s: worst error/bound y %.3g, lse %.3g; %d weights flushed", shape, dist, worstY, worstL, flushed)
		}
	}
}

// backward32 computes attention_grad for one head in binary32, as the cpu
// kernel does, or, when round, with P and dS rounded to f16 as a
// tensor-core kernel does: P as is (it lies in [0, 1]), dS scaled per row
// of a 64-key tile (dq) or a 64-query tile (dk) by a power of two, and P
// flushed to 0 under 2⁻¹²⁶ (exp2Tile).
func backward32(l AttentionLayout, q, k, v, g, y []float32, lse []float32, round bool, flushed *int, rng *rand.Rand) (dq, dk, dv []float32) {
	d, t := l.D, l.T
	scale := float32(1 / math.Sqrt(float64(d)))
	scale2 := float32(1 / math.Sqrt(float64(d)) * math.Log2E)
	dS := make([]float32, t*t)
	dq, dk, dv = make([]float32, t*d), make([]float32, t*d), make([]float32, t*d)
	dot := func(a, b []float32) float32 {
		var s float32
		for c := range a {
			s += a[c] * b[c]
		}
		return s
	}
	for i := 0; i < t; i++ {
		dRow := dot(g[i*d:(i+1)*d], y[i*d:(i+1)*d])
		lse2 := lse[i] * float32(math.Log2E)
		for j := 0; j <= i; j++ {
			s2 := dot(q[i*d:(i+1)*d], k[j*d:(j+1)*d]) * scale2
			p := exp2Tile(s2-lse2, round, flushed, rng)
			dp := dot(g[i*d:(i+1)*d], v[j*d:(j+1)*d])
			dS[i*t+j] = p * (dp - dRow)
			for c := 0; c < d; c++ {
				if round && !math.IsNaN(float64(g[i*d+c])) && !math.IsInf(float64(g[i*d+c]), 0) {
					dv[j*d+c] += roundF16(p) * g[i*d+c]
				} else {
					dv[j*d+c] += p * g[i*d+c]
				}
			}
		}
	}
	// dq[i] = Σⱼ dS[i,j]·k[j], dk[j] = Σᵢ dS[i,j]·q[i], scaled by α.
	accumulate := func(out []float32, row int, terms func(x int) (float32, []float32), from, to int) {
		const tile = 64
		for x0 := from; x0 < to; x0 += tile {
			x1 := min(x0+tile, to)
			if !round {
				for x := x0; x < x1; x++ {
					w, vec := terms(x)
					for c := 0; c < d; c++ {
						out[row*d+c] += w * vec[c]
					}
				}
				continue
			}
			var largest float32
			finite := true
			for x := x0; x < x1; x++ {
				w, vec := terms(x)
				largest = max(largest, float32(math.Abs(float64(w))))
				for _, e := range append([]float32{w}, vec...) {
					finite = finite && !math.IsNaN(float64(e)) && !math.IsInf(float64(e), 0)
				}
			}
			if !finite { // the exact path, as above
				for x := x0; x < x1; x++ {
					w, vec := terms(x)
					for c := 0; c < d; c++ {
						out[row*d+c] += w * vec[c]
					}
				}
				continue
			}
			exp := 0
			if largest > 0 {
				_, e := math.Frexp(float64(largest)) // largest in [2^(e−1), 2^e)
				exp = e - 15
			}
			for c := 0; c < d; c++ {
				var sum float32
				for x := x0; x < x1; x++ {
					w, vec := terms(x)
					sum += roundF16(float32(math.Ldexp(float64(w), -exp))) * vec[c]
				}
				out[row*d+c] += float32(math.Ldexp(float64(sum), exp))
			}
		}
	}
	for i := 0; i < t; i++ {
		accumulate(dq, i, func(j int) (float32, []float32) { return dS[i*t+j], k[j*d : (j+1)*d] }, 0, i+1)
	}
	for j := 0; j < t; j++ {
		accumulate(dk, j, func(i int) (float32, []float32) { return dS[i*t+j], q[i*d : (i+1)*d] }, j, t)
	}
	for e := range dq {
		dq[e] *= scale
		dk[e] *= scale
	}
	return dq, dk, dv
}

func TestAttentionBackwardBoundHoldsForBinary32Kernels(t *testing.T) {
	ctx := context.Background()
	for _, shape := range []string{"2x17x24x3", "1x64x64x4", "1x150x64x1"} {
		s := op.AttentionGrad.MustShape(shape)
		l := AttentionLayoutOf(s)
		for _, dist := range []Dist{Integer, Uniform, Normal, Wide, Special} {
			in, err := Generate(op.AttentionGrad, s, dist, 9)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := AttentionBackward(ctx, in[0].F16, in[1].F16, in[2].F16, in[3].F32, l)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(3, 4))
			worst := [3]float64{}
			nonFinite, flushed := 0, 0
			for b := 0; b < l.B; b++ {
				for h := 0; h < l.H; h++ {
					q, k, v := headF32(in[1].F16, l, 3*l.C, 0, b, h), headF32(in[1].F16, l, 3*l.C, 1, b, h), headF32(in[1].F16, l, 3*l.C, 2, b, h)
					g, y := headF32(in[0].F16, l, l.C, 0, b, h), headF32(in[2].F16, l, l.C, 0, b, h)
					lse := in[3].F32[(b*l.H+h)*l.T : (b*l.H+h+1)*l.T]
					for _, round := range []bool{false, true} {
						dq, dk, dv := backward32(l, q, k, v, g, y, lse, round, &flushed, rng)
						for part, got := range [][]float32{dq, dk, dv} {
							for i := 0; i < l.T; i++ {
								for c := 0; c < l.D; c++ {
									idx := (b*l.T+i)*3*l.C + part*l.C + h*l.D + c
									want, have := ref.Value[idx], float64(got[i*l.D+c])
									if math.IsNaN(want) || math.IsInf(want, 0) {
										nonFinite++
										if !(math.IsNaN(want) && math.IsNaN(have) || want == have) {
											t.Fatalf("%s %s round=%v: part %d [b=%d h=%d t=%d c=%d] = %g, want %g", shape, dist, round, part, b, h, i, c, have, want)
										}
										continue
									}
									e := math.Abs(have - want)
									if !(e <= ref.Bound[idx]) {
										t.Fatalf("%s %s round=%v: part %d [b=%d h=%d t=%d c=%d] = %g, reference %g, error %g > bound %g", shape, dist, round, part, b, h, i, c, have, want, e, ref.Bound[idx])
									}
									if ref.Bound[idx] > 0 {
										worst[part] = max(worst[part], e/ref.Bound[idx])
									}
								}
							}
						}
					}
				}
			}
			t.Logf("%s %s: worst error/bound dq %.3g, dk %.3g, dv %.3g; %d non-finite, %d of P flushed", shape, dist, worst[0], worst[1], worst[2], nonFinite, flushed)
		}
	}
}

// TestAttentionBoundsHoldWhereExponentialsFlush gives rows whose scores lie
// between 126 and 149 apart in base 2, so that a tensor-core kernel's tile
// exponentials flush what binary32 holds as subnormals (exp2Tile): against
// q = 4, keys k_j = 3·(j mod 3 − 1) score −48, 0 and 48 (D = 16, α = ¼),
// about −69, 0 and 69 in base 2, and from key 3 on every key j ≡ 0 (mod
// 3) is flushed in every row that reaches it, so its dk comes only from
// flushed P. The binary32 emulations must stay within the
// forward's and the backward's bounds, and must have flushed.
func TestAttentionBoundsHoldWhereExponentialsFlush(t *testing.T) {
	ctx := context.Background()
	l := AttentionLayoutOf(op.AttentionGrad.MustShape("1x64x64x4"))
	rng := rand.New(rand.NewPCG(5, 6))
	qkv, dy := make([]uint16, l.T*3*l.C), make([]uint16, l.T*l.C)
	for tok := 0; tok < l.T; tok++ {
		for c := 0; c < l.C; c++ {
			qkv[tok*3*l.C+c] = f16.FromFloat32(4)
			qkv[tok*3*l.C+l.C+c] = f16.FromFloat32(float32(3 * (tok%3 - 1)))
			qkv[tok*3*l.C+2*l.C+c] = f16.FromFloat32(float32(rng.NormFloat64()))
			dy[tok*l.C+c] = f16.FromFloat32(float32(rng.NormFloat64()))
		}
	}
	y, lse, err := AttentionForward(ctx, qkv, l)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, idx int, got float32, ref *Reference) {
		t.Helper()
		if e := math.Abs(float64(got) - ref.Value[idx]); !(e <= ref.Bound[idx]) {
			t.Fatalf("%s[%d] = %g, reference %g, error %g > bound %g", what, idx, got, ref.Value[idx], e, ref.Bound[idx])
		}
	}
	flushed := 0
	for h := 0; h < l.H; h++ {
		q, k, v := headF32(qkv, l, 3*l.C, 0, 0, h), headF32(qkv, l, 3*l.C, 1, 0, h), headF32(qkv, l, 3*l.C, 2, 0, h)
		for i := 0; i < l.T; i++ {
			y32, lse32 := flashRow32(q[i*l.D:(i+1)*l.D], k, v, l.D, i+1, 64, true, &flushed, rng)
			check("lse", h*l.T+i, lse32, lse)
			for c := 0; c < l.D; c++ {
				check("y", i*l.C+h*l.D+c, y32[c], y)
			}
		}
	}
	if flushed == 0 {
		t.Fatal("the forward flushed no weight: the test's scores no longer reach below 2⁻¹²⁶")
	}
	t.Logf("forward: %d weights flushed", flushed)

	y16, lse32 := make([]uint16, len(y.Value)), make([]float32, len(lse.Value))
	for i, v := range y.Value {
		y16[i] = f16.FromFloat64(v)
	}
	for i, v := range lse.Value {
		lse32[i] = float32(v)
	}
	ref, err := AttentionBackward(ctx, dy, qkv, y16, lse32, l)
	if err != nil {
		t.Fatal(err)
	}
	flushed = 0
	for h := 0; h < l.H; h++ {
		q, k, v := headF32(qkv, l, 3*l.C, 0, 0, h), headF32(qkv, l, 3*l.C, 1, 0, h), headF32(qkv, l, 3*l.C, 2, 0, h)
		g, yh := headF32(dy, l, l.C, 0, 0, h), headF32(y16, l, l.C, 0, 0, h)
		dq, dk, dv := backward32(l, q, k, v, g, yh, lse32[h*l.T:(h+1)*l.T], true, &flushed, rng)
		for part, got := range [][]float32{dq, dk, dv} {
			for i := 0; i < l.T; i++ {
				for c := 0; c < l.D; c++ {
					check("dqkv", i*3*l.C+part*l.C+h*l.D+c, got[i*l.D+c], ref)
				}
			}
		}
	}
	if flushed == 0 {
		t.Fatal("the backward flushed no P: the test's scores no longer reach below 2⁻¹²⁶")
	}
	t.Logf("backward: %d of P flushed", flushed)
}
