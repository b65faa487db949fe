package oracle

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
)

// Matrix is a view of f16 data as a Rows×Cols matrix. Transposed says the
// data is stored Cols×Rows row-major, so element (i, j) is Data[j·Rows + i].
type Matrix struct {
	Data       []uint16
	Rows, Cols int
	Transposed bool
}

// at returns element (i, j) as float64.
func (m Matrix) at(i, j int) float64 {
	if m.Transposed {
		return f16.ToFloat64(m.Data[j*m.Rows+i])
	}
	return f16.ToFloat64(m.Data[i*m.Cols+j])
}

// panelWidth is the number of output columns the inner loop keeps in
// registers (see mulPanel); rowBlock rows of X share each panel while it is
// in cache.
const (
	panelWidth = 4
	rowBlock   = 16
)

// MatMul is the reference of C = X·Y for an M×L matrix X and an L×N matrix Y,
// the shape of all three GEMM ops (the gradient ops pass transposed views),
// for a backend whose kernels sum each dot product as acc describes.
//
// Bound. Every product pₖ = xₖ·yₖ of two f16 values is exact in binary32,
// so a binary32 kernel only errs in its additions. Write S = Σₖ|pₖ|, sⱼ for
// the exact partial sum after the j-th chunk of the reduction (chunks of 16
// terms from k = 0, or the model's step), and Pⱼ = Σ|pₖ| over that chunk.
//
//   - AnyOrder: a binary32 addition errs by less than u = 2⁻²³ of its result
//     in any rounding direction, and a fused step of b products aligned to
//     its largest term with 24 bits errs by less than u·(b·M + |x|), M the
//     largest term, x the result; both are at most the running Σ|terms|, and
//     the b + 1 ≤ 2b terms per step give |ĉ − c| ≤ γ(2L)·S.
//   - RNBlocked (blocks of B from zero, round to nearest, u₂₄ = 2⁻²⁴): each
//     addition errs by at most u₂₄ times its result, which lies within
//     |aⱼ| + Pⱼ of zero for the additions of chunk j (aⱼ the block's sum
//     before it) and is the running sum where a block's sum joins the ones
//     before: F = u₂₄·(Σⱼ nⱼ(|aⱼ| + Pⱼ) + Σ_blocks≥2 |s|), n additions in
//     all, and since each result also carries the error so far,
//     |ĉ − c| ≤ F/(1 − n·u₂₄). A product passes through at most
//     min(L, B) − 1 + ⌈L/B⌉ − 1 additions, so γ₂₄ of that times S holds too.
//   - TCFused (steps of b products, G extra alignment bits, truncation): in
//     step j the b + 1 terms are aligned to the largest, each truncated by
//     less than 2⁻ᴳ·u times it, and that largest is at most
//     Mⱼ = max(|sⱼ₋₁|, Pⱼ) plus the error so far; the exact sum is truncated
//     by less than u·|sⱼ| (plus 2⁻¹⁴⁹ below the normal range). With
//     F = u·Σⱼ(b·2⁻ᴳ(1+u)·Mⱼ + |sⱼ|) + steps·2⁻¹⁴⁹,
//     |ĉ − c| ≤ F/(1 − u·(L·2⁻ᴳ(1+u) + steps)).
//
// The structural bounds are running error bounds: they follow the partial
// sums of these inputs, which on zero-mean data grow like √k, not like the
// S of the order-free bound. Each is capped by that bound, so none is ever
// looser. (Accumulation.boundOf adds the float64 error of the oracle's own
// partial sums to them.) The oracle sums the same exact products in float64,
// off by at most γ₆₄(L)·S; Bound adds that too.
//
// Typical. Rounding errors of a long sum are nearly independent, so a correct
// kernel's error grows like √L·u·S, not L·u·S; Typical is √L·u·S. An error
// far above it is a sign of a lost or doubled term that the worst-case bound
// can hide when L is large.
//
// IEEE specials: a NaN product, or products of +Inf and −Inf in one sum,
// give NaN; otherwise an infinite product gives that infinity. The result is
// the same in every summation order and in binary32 and float64 alike, since
// sums of f16 products cannot overflow binary32 for L < 2⁸⁹.
func MatMul(ctx context.Context, x, y Matrix, acc Accumulation) (*Reference, error) {
	m, l, n := x.Rows, x.Cols, y.Cols
	// Pack X row-major and Y into column panels of panelWidth, both as
	// float64 with their magnitudes alongside, so the inner loop reads
	// memory in order whatever the layout of the operands.
	xv := make([]float64, m*l)
	for i := 0; i < m; i++ {
		for k := 0; k < l; k++ {
			xv[i*l+k] = x.at(i, k)
		}
	}
	panels := (n + panelWidth - 1) / panelWidth
	const stride = 2 * panelWidth // per k: the panel's values, then their magnitudes
	yv := make([]float64, panels*l*stride)
	for p := 0; p < panels; p++ {
		for k := 0; k < l; k++ {
			for t := 0; t < panelWidth; t++ {
				if j := p*panelWidth + t; j < n {
					v := y.at(k, j)
					yv[(p*l+k)*stride+t] = v
					yv[(p*l+k)*stride+panelWidth+t] = math.Abs(v)
				}
			}
		}
	}
	ref := &Reference{
		Value:   make([]float64, m*n),
		Bound:   make([]float64, m*n),
		Typical: make([]float64, m*n),
	}
	g64 := Gamma(int64(l), U64)
	oracleError := g64 * (1 + 2*g64)
	typicalFactor := math.Sqrt(float64(l)) * U32
	chunk := l // AnyOrder needs no partial sums
	if acc.Kind != AnyOrder {
		chunk = acc.chunk()
	}
	orderFree := Gamma(int64(l), U32) // the bound before it followed the structure
	var mu sync.Mutex
	var tightening tighteningSums
	err := parallelRows(ctx, m, l*n, func(lo, hi int) {
		var part tighteningSums
		defer func() {
			mu.Lock()
			tightening.add(part)
			mu.Unlock()
		}()
		// A block of rows meets each panel in turn, so the panel (2·4·L
		// values) stays in cache while the rows stream past it; the other
		// order would stream all of Y from memory for every row.
		for r0 := lo; r0 < hi; r0 += rowBlock {
			r1 := min(r0+rowBlock, hi)
			for p := 0; p < panels; p++ {
				panel := yv[p*l*stride : (p+1)*l*stride]
				for i := r0; i < r1; i++ {
					var c, s [panelWidth]float64
					var track [panelWidth]dotTracker
					row := xv[i*l : (i+1)*l]
					for k0 := 0; k0 < l; k0 += chunk {
						k1 := min(k0+chunk, l)
						before := s
						mulPanel(row[k0:k1], panel[k0*stride:k1*stride], &c, &s)
						if acc.Kind != AnyOrder {
							for t := range track {
								track[t].chunkDone(acc, k1-k0, k1, c[t], s[t]-before[t])
							}
						}
					}
					for t := 0; t < panelWidth; t++ {
						j := p*panelWidth + t
						if j >= n {
							break
						}
						ref.Value[i*n+j] = c[t]
						ref.Bound[i*n+j] = acc.boundOf(&track[t], int64(l), s[t]) + oracleError*s[t]
						ref.Typical[i*n+j] = typicalFactor * s[t]
						part.note(orderFree*s[t], ref.Bound[i*n+j])
					}
				}
			}
		}
	})
	if err != nil {
		return nil, err
	}
	ref.Tightening = tightening.summary()
	return ref, nil
}

// mulPanel adds, for the four columns of one packed panel, the dot products
// Σₖ row[k]·panel[k][t] to c[t] and the magnitudes Σₖ|row[k]|·|panel[k][t]|
// to s[t]. The panel holds each k's four values followed by their
// magnitudes, so the loop reads memory in order and takes no absolute values
// of its own; eight independent accumulators keep it out of memory. An
// Inf·0 product is NaN in c and in s alike.
func mulPanel(row, panel []float64, c, s *[panelWidth]float64) {
	const stride = 2 * panelWidth
	c0, c1, c2, c3 := c[0], c[1], c[2], c[3]
	s0, s1, s2, s3 := s[0], s[1], s[2], s[3]
	panel = panel[:len(row)*stride]
	for k, a := range row {
		q := panel[k*stride : k*stride+stride : k*stride+stride]
		m := math.Abs(a)
		c0 += a * q[0]
		c1 += a * q[1]
		c2 += a * q[2]
		c3 += a * q[3]
		s0 += m * q[4]
		s1 += m * q[5]
		s2 += m * q[6]
		s3 += m * q[7]
	}
	*c = [panelWidth]float64{c0, c1, c2, c3}
	*s = [panelWidth]float64{s0, s1, s2, s3}
}

// Set stores the f16 bit pattern v as element (i, j), wherever the layout
// puts it; it is how a generator fills an op's operands through the view of
// its product (Factors).
func (m Matrix) Set(i, j int, v uint16) {
	if m.Transposed {
		m.Data[j*m.Rows+i] = v
		return
	}
	m.Data[i*m.Cols+j] = v
}

// Dims returns the matrix's rows and columns.
func (m Matrix) Dims() (rows, cols int) { return m.Rows, m.Cols }

// SelectRows returns rows idx of m as a new row-major matrix.
func (m Matrix) SelectRows(idx []int) Matrix {
	out := Matrix{Data: make([]uint16, len(idx)*m.Cols), Rows: len(idx), Cols: m.Cols}
	for r, i := range idx {
		for j := 0; j < m.Cols; j++ {
			out.Data[r*m.Cols+j] = m.bits(i, j)
		}
	}
	return out
}

// SelectCols returns columns idx of m as a new row-major matrix.
func (m Matrix) SelectCols(idx []int) Matrix {
	out := Matrix{Data: make([]uint16, m.Rows*len(idx)), Rows: m.Rows, Cols: len(idx)}
	for i := 0; i < m.Rows; i++ {
		for c, j := range idx {
			out.Data[i*len(idx)+c] = m.bits(i, j)
		}
	}
	return out
}

func (m Matrix) bits(i, j int) uint16 {
	if m.Transposed {
		return m.Data[j*m.Rows+i]
	}
	return m.Data[i*m.Cols+j]
}

// Projection is X·(Y·v) for the Freivalds check of a product C = X·Y, with
// the magnitudes that bound its rounding.
type Projection struct {
	// Value[i] = Σⱼ cᵢⱼ·vⱼ, computed as X·(Y·v) in float64.
	Value []float64
	// Magnitude[i] = Σⱼ Sᵢⱼ·|vⱼ| with Sᵢⱼ = Σₖ|xᵢₖ·yₖⱼ|, computed as
	// |X|·(|Y|·|v|): the sum of the elements' MatMul magnitudes, weighted.
	Magnitude []float64
}

// Project computes X·(Y·v) and |X|·(|Y|·|v|) in O(M·L + L·N) operations
// instead of the product's O(M·N·L).
//
// Bound. A correct kernel's binary32 result ĉᵢⱼ is within γ(2L)·Sᵢⱼ of cᵢⱼ
// in any summation structure (see MatMul, AnyOrder), so
// |Σⱼ(ĉᵢⱼ − cᵢⱼ)·vⱼ| ≤ γ(2L)·Magnitude[i]. The float64
// evaluation of both sides adds at most γ₆₄(L+N) times the same magnitudes;
// callers add that too.
func Project(ctx context.Context, x, y Matrix, v []float64) (*Projection, error) {
	l, n := y.Rows, y.Cols
	yv, ya := make([]float64, l), make([]float64, l)
	err := parallelRows(ctx, l, 2*n, func(lo, hi int) {
		for k := lo; k < hi; k++ {
			var s, a float64
			for j := 0; j < n; j++ {
				e := y.at(k, j)
				s += e * v[j]
				a += math.Abs(e) * math.Abs(v[j])
			}
			yv[k], ya[k] = s, a
		}
	})
	if err != nil {
		return nil, err
	}
	p := &Projection{Value: make([]float64, x.Rows), Magnitude: make([]float64, x.Rows)}
	err = parallelRows(ctx, x.Rows, 2*l, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			var s, a float64
			for k := 0; k < l; k++ {
				e := x.at(i, k)
				s += e * yv[k]
				a += math.Abs(e) * ya[k]
			}
			p.Value[i], p.Magnitude[i] = s, a
		}
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

func init() {
	for _, o := range []*op.Op{op.Gemm, op.GemmGradA, op.GemmGradB} {
		mustRegister(o, Spec{Compute: matmulCompute, Generate: matmulGenerate})
	}
}

// matmulCompute is the reference of every matmul-family op: MatMul of its
// two factors.
func matmulCompute(ctx context.Context, s op.Shape, in []Input, a Arithmetic) ([]*Reference, error) {
	x, y := Factors(s.Op(), s, in)
	ref, err := MatMul(ctx, x, y, a.Dot)
	if err != nil {
		return nil, err
	}
	return []*Reference{ref}, nil
}

// matmulGenerate draws a matmul-family op's inputs: each distribution's
// values, the rounding distribution's whole numbers (roundingMatMul), and
// under Special, in the first factor's operand a NaN, a +Inf and a −Inf in
// its first three rows and in the second's its last three columns,
// subnormals everywhere at random, and a block of ±60000 in the middle rows
// (or middle column) that pushes f16 outputs past 65520.
func matmulGenerate(g *Gen) []Input {
	if g.Dist == Rounding {
		return roundingMatMul(g)
	}
	if g.Dist != Special {
		return g.Default()
	}
	inputs := make([]Input, len(g.Op.Inputs()))
	for i := range inputs {
		in := g.F16(i, Normal.Draw)
		inputs[i].F16 = in
		rows, cols := g.Size(i)
		set := func(r, c int, v uint16) {
			if r >= 0 && r < rows && c >= 0 && c < cols {
				in[r*cols+c] = v
			}
		}
		for t := 0; t < max(1, len(in)/50); t++ {
			in[g.Rand().IntN(len(in))] = g.Subnormal()
		}
		first := i == 0
		for k, v := range []uint16{f16.NaN, f16.PosInf, f16.NegInf} {
			if first {
				set(k, g.Rand().IntN(cols), v)
			} else {
				set(g.Rand().IntN(rows), cols-1-k, v)
			}
		}
		for r := rows / 2; r < min(rows, rows/2+2); r++ {
			for c := 0; c < cols; c++ {
				if first || c == cols/2 {
					v := big
					if g.Rand().IntN(4) == 0 {
						v |= 0x8000
					}
					set(r, c, v)
				}
			}
		}
	}
	return inputs
}

// exactSumLimit bounds every partial sum of a rounding case: below 2²⁴ every
// whole number (and, scaled, every multiple of 1/256 below 2¹⁶) is exact in
// binary32, in any summation order.
const exactSumLimit = 1 << 24

// RoundingApplies says whether the rounding distribution gives o exact
// results at s, and why not when it does not.
func RoundingApplies(o *op.Op, s op.Shape) (bool, string) {
	if o.NoExactRounding != "" {
		return false, o.NoExactRounding
	}
	if o.Matmul != nil {
		if l := s.Int(o.Matmul.Depth); l >= exactSumLimit {
			return false, fmt.Sprintf("a reduction of %d terms can reach 2^24 even with inputs of ±1, where binary32 sums stop being exact", l)
		}
	}
	return true, ""
}

// roundingMatMul fills the two factors of a matmul-family op's product, X
// (rows × L) and Y (L × cols), through their views of the wire operands.
// Row i of X holds whole numbers uniform in [−Rᵢ, Rᵢ] and Y whole numbers in
// [−R, R], with R and Rᵢ chosen so that element (i, j) has a spread of about
// 2^tᵢ, tᵢ between 11 and 14.5 by row: most results land in the binades
// where f16 has an ulp of 2 to 32, and odd products make a quarter to a half
// of them ties there. Every |xᵢₖ|, |yₖⱼ| ≤ 2048 is exact in f16, every
// product in binary32, and L·Rᵢ·R < 2²⁴ keeps every partial sum, in any
// order, below 2²⁴ and so exact.
func roundingMatMul(g *Gen) []Input {
	o, s := g.Op, g.Shape
	inputs := make([]Input, len(o.Inputs()))
	for i, p := range o.Inputs() {
		inputs[i] = Input{F16: make([]uint16, s.Elements(p))}
	}
	x, y := Factors(o, s, inputs)
	rows, l, cols := x.Rows, x.Cols, y.Cols
	root := math.Sqrt(float64(l))
	// The spread of Σₖ xₖyₖ with x, y uniform on [−Rx, Rx], [−R, R] is about
	// √L·Rx·R/3; R puts the middle target 2^12.5 at Rx ≈ R.
	r := clampInt(int64(math.Round(math.Sqrt(3*math.Exp2(12.5)/root))), 1, min(2048, (exactSumLimit-1)/int64(l)))
	scale := make([]int64, rows)
	for i := range scale {
		t := 11 + 3.5*math.Mod(float64(i+1)*0.6180339887498949, 1)
		scale[i] = clampInt(int64(3*math.Exp2(t)/(root*float64(r))), 1, min(2048, (exactSumLimit-1)/(int64(l)*r)))
	}
	draw := func(rng *rand.Rand, limit int64) uint16 {
		return f16.FromFloat64(float64(rng.Int64N(2*limit+1) - limit))
	}
	ForChunks(rows*l, func(c, lo, hi int) {
		rng := rand.New(rand.NewPCG(g.Seed+uint64(c), g.stream^0x726f756e64))
		for e := lo; e < hi; e++ {
			x.Set(e/l, e%l, draw(rng, scale[e/l]))
		}
	})
	ForChunks(l*cols, func(c, lo, hi int) {
		rng := rand.New(rand.NewPCG(g.Seed+uint64(c), g.stream^0x726f756e65))
		for e := lo; e < hi; e++ {
			y.Set(e/cols, e%cols, draw(rng, r))
		}
	})
	return inputs
}

func clampInt(v, lo, hi int64) int64 { return max(lo, min(v, hi)) }
