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
	return MatMulWith(ctx, x, y, Epilogue{}, acc)
}

// MatMulWith is MatMul with an epilogue: the reference of C = X·Y + bias +
// C₀ (see Epilogue) for a backend whose kernels sum each dot product as acc
// describes. ep's view must match X's rows and Y's columns.
//
// Bound. Let B₀ be MatMul's bound on the dot product ĉ and t₁, …, tₙ the
// epilogue's terms (the bias bⱼ, then the initial value c₀ᵢⱼ), with exact
// partial results eₖ = c + t₁ + … + tₖ and oracle values vₖ.
//
//   - With no structure claimed (AnyOrder), a kernel may fold the terms
//     into the sum (start the accumulator from the bias or from C₀), in any
//     order and rounding: a sum of L + n terms, within γ(2(L+n))·(S + Σ|tₖ|)
//     as in MatMul, plus the oracle's γ₆₄(L+n) of the same. An epilogue
//     after the sum, in any rounding, is within that too.
//   - A backend that states a structure also states that its kernels add
//     the terms after the dot product, each in one binary32 addition
//     rounded to nearest (their epilogue): that adds
//     u₂₄·|ê₍ₖ₋₁₎ + tₖ| ≤ u₂₄·(|eₖ| + Bₖ₋₁), and with |eₖ| ≤ |vₖ| + Bₖ₋₁
//     and the float64 addition's own U64·|vₖ|,
//     Bₖ = Bₖ₋₁·(1 + 2u₂₄) + (u₂₄ + 2·U64)·|vₖ|,
//     or the first bound where that is smaller.
//
// Typical adds u·|vₖ| for each term (one rounding each, not a random walk)
// to √(L+n)·u·(S + Σ|tₖ|), the walk of a kernel that folds them.
// Specials follow IEEE in float64 as in the kernels' binary32: a NaN term
// makes the element NaN, an infinite one (or an infinite dot product) makes
// it that infinity, and opposite infinities make it NaN. The bias is f16
// and the generators keep C₀ far below 2¹²⁸, so no binary32 result
// overflows where the float64 one is finite.
func MatMulWith(ctx context.Context, x, y Matrix, ep Epilogue, acc Accumulation) (*Reference, error) {
	refs, err := matMulWith(ctx, x, y, ep, acc)
	if err != nil {
		return nil, err
	}
	return refs[0], nil
}

// matMulWith is MatMulWith with every reference the epilogue makes: the
// output's, then under GELUForward the pre-activation's (the value before
// the GELU, as MatMulWith bounds it).
func matMulWith(ctx context.Context, x, y Matrix, ep Epilogue, acc Accumulation) ([]*Reference, error) {
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
	terms := ep.Terms()
	orderFree := Gamma(int64(l+terms), U32) // the bound before it followed the structure
	var pre *Reference                      // GELUForward: the value before the GELU
	if ep.GELU == GELUForward {
		pre = &Reference{Value: make([]float64, m*n), Bound: make([]float64, m*n), Typical: make([]float64, m*n)}
	}
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
						v, magnitude := c[t], s[t]
						bound := acc.boundOf(&track[t], int64(l), magnitude) + oracleError*magnitude
						typical := typicalFactor * magnitude
						if terms > 0 {
							v, bound, typical, magnitude = ep.finish(i, j, v, bound, magnitude, l, acc.Kind != AnyOrder)
						}
						part.note(orderFree*magnitude, bound)
						switch ep.GELU {
						case GELUForward:
							pre.Value[i*n+j], pre.Bound[i*n+j], pre.Typical[i*n+j] = v, bound, typical
							v, bound, typical = geluOfInexact(v, bound, typical)
						case GELUBackward:
							row, col := ep.place(i, j)
							v, bound, typical = geluGradOfInexact(f16.ToFloat64(ep.Pre[row*ep.Cols+col]), v, bound, typical)
						}
						ref.Value[i*n+j] = v
						ref.Bound[i*n+j] = bound
						ref.Typical[i*n+j] = typical
					}
				}
			}
		}
	})
	if err != nil {
		return nil, err
	}
	ref.Tightening = tightening.summary()
	if pre != nil {
		pre.Tightening = ref.Tightening
		return []*Reference{ref, pre}, nil
	}
	return []*Reference{ref}, nil
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

// Epilogue is what a matmul-family op adds to each element of its product
// after the dot product (op.MatmulSpec): an f16 bias, one per output
// column, then the output's initial values C₀ when the op adds into its
// output, or an f16 residual of the output's shape. The zero Epilogue adds
// nothing (gemm and its gradients). A view (SelectRows, SelectCols)
// follows the product's sampled rows or columns.
type Epilogue struct {
	Bias     []uint16  // f16 bits, one per column of the whole output; nil: none
	Init     []float32 // the whole output's initial values, row-major; nil: none
	Residual []uint16  // f16 bits of the whole output's shape, row-major; nil: none
	Cols     int       // columns of the whole output: Init's, Residual's and Pre's row length
	// GELU, after the additions: GELUForward gives two references, the
	// value so far (the op's pre-activation output) and gelu of it (its
	// first output); GELUBackward multiplies the value by gelu′(Pre).
	GELU GELUEpilogue
	Pre  []uint16 // GELUBackward: the whole output's pre-activations (f16 bits), row-major

	rows, cols []int // the whole output's rows and columns this view holds; nil: all
}

// EpilogueOf returns the epilogue of a matmul-family op at s, as a view of
// its inputs: the bias operand when it is not empty, the output's initial
// values when the op's accumulate parameter is 1, and the residual operand
// when its switch is 1.
func EpilogueOf(o *op.Op, s op.Shape, inputs []Input) Epilogue {
	m := o.Matmul
	ep := Epilogue{Cols: int(s.Int(m.Cols))}
	if m.Bias != "" {
		if b := inputs[inputIndex(o, m.Bias)].F16; len(b) > 0 {
			ep.Bias = b
		}
	}
	if m.Accumulate != "" && s.Int(m.Accumulate) == 1 {
		ep.Init = inputs[inputIndex(o, o.Outputs()[0].Name)].F32
	}
	if m.Residual != "" && s.Int(m.Residual) == 1 {
		ep.Residual = inputs[inputIndex(o, m.ResidualIn)].F16
	}
	if !m.Linear(s) {
		ep.GELU = GELUForward
		if p, _ := o.Operand(m.Pre); p.Role == op.In {
			ep.GELU, ep.Pre = GELUBackward, inputs[inputIndex(o, m.Pre)].F16
		}
	}
	return ep
}

// GELUEpilogue is the GELU a matmul-family op applies to its product
// (op.MatmulSpec.GELU), if any.
type GELUEpilogue uint8

const (
	NoGELU       GELUEpilogue = iota
	GELUForward               // out = gelu(v), pre = v
	GELUBackward              // out = v·gelu′(pre)
)

// geluSlope bounds |gelu′| over the reals: its supremum is 1.12899…, near
// x = 1.4185 (gelu′ tends to 1 as x → ∞ and to 0 as x → −∞;
// TestGELUConstants checks it on a fine grid).
const geluSlope = 1.13

// geluOfInexact is the reference of a kernel's binary32 gelu(v̂) where the
// kernel's v̂ is within e of the exact v: the value gelu(v), its bound and
// its typical error (typical, v̂'s). The kernel evaluates gelu at v̂ as the
// gelu op does (geluCompute), within ½|v̂|·(E_S + u₂₄·(|1 + T̂| + E_S)) of
// gelu(v̂), E_S = E + u₂₄·(|1 + T̂| + E), E geluParts' error (the larger of
// the tanh and logistic forms'), which over every argument is at most
// geluEMax; and |1 + T̂| ≤ 2, |v̂| ≤ |v| + e. gelu(v̂) is within
// geluSlope·e of gelu(v). Specials follow IEEE as in geluCompute: NaN stays
// NaN, +Inf gives +Inf and −Inf NaN.
func geluOfInexact(v, e, typical float64) (value, bound, newTypical float64) {
	_, T, _ := geluParts(v)
	value = 0.5 * v * (1 + T)
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return value, 0, 0
	}
	eS := geluEMax + u24*(2+geluEMax)
	eval := 0.5 * (math.Abs(v) + e) * (eS + u24*(2+eS))
	return value, eval + geluSlope*e + own(value), geluSlope*typical + eval
}

// geluGradOfInexact is the reference of a kernel's binary32 v̂·ĝ, ĝ its
// gelu′(x) for an exact f16 x (geluGradFactor: within e_g of g) and v̂
// within e of the exact v: |v̂·ĝ·(1 + δ) − v·g| ≤ e_g·(|v| + e) + |g|·e +
// u₂₄·(|g| + e_g)·(|v| + e). Specials follow IEEE in float64 as the kernel's
// binary32: x = ±Inf makes g NaN, a NaN v stays NaN; an infinite v where
// |g| ≤ e_g is left undetermined, as in geluGradCompute.
func geluGradOfInexact(x, v, e, typical float64) (value, bound, newTypical float64) {
	g, eg, second := geluGradFactor(x)
	value = v * g
	if infTimesNearZero(v, g, eg) {
		value, bound = undetermined()
		return value, bound, 0
	}
	if math.IsInf(v, 0) || math.IsNaN(value) {
		return value, 0, 0
	}
	av, ag := math.Abs(v)+e, math.Abs(g)
	bound = eg*av + ag*e + u24*(ag+eg)*av + own(value) + own(av*second)
	return value, bound, ag*typical + eg*av
}

// Terms is the number of terms the epilogue adds to each element.
func (e Epilogue) Terms() int {
	n := 0
	if e.Bias != nil {
		n++
	}
	if e.Init != nil || e.Residual != nil {
		n++
	}
	return n
}

// SelectRows is the view of rows idx of e's view, as Matrix.SelectRows.
func (e Epilogue) SelectRows(idx []int) Epilogue {
	e.rows = compose(e.rows, idx)
	return e
}

// SelectCols is the view of columns idx of e's view, as Matrix.SelectCols.
func (e Epilogue) SelectCols(idx []int) Epilogue {
	e.cols = compose(e.cols, idx)
	return e
}

// compose maps idx, indices into a view, through the view's own indices
// (nil: the identity).
func compose(view, idx []int) []int {
	out := make([]int, len(idx))
	for k, i := range idx {
		if view != nil {
			i = view[i]
		}
		out[k] = i
	}
	return out
}

// place maps element (i, j) of the view to the whole output's row and column.
func (e Epilogue) place(i, j int) (row, col int) {
	if e.rows != nil {
		i = e.rows[i]
	}
	if e.cols != nil {
		j = e.cols[j]
	}
	return i, j
}

// term returns the k-th epilogue term of element (i, j) of the view: the
// bias first, then the initial value or the residual.
func (e Epilogue) term(k, i, j int) float64 {
	row, col := e.place(i, j)
	if k == 0 && e.Bias != nil {
		return f16.ToFloat64(e.Bias[col])
	}
	return e.old(row, col)
}

// old is the term after the bias at (row, col) of the whole output: its
// initial value, or its residual.
func (e Epilogue) old(row, col int) float64 {
	if e.Init != nil {
		return float64(e.Init[row*e.Cols+col])
	}
	return f16.ToFloat64(e.Residual[row*e.Cols+col])
}

// finish adds the epilogue's terms to element (i, j) of the view, whose dot
// product of l terms is c with bound and magnitude s (as MatMul has them),
// and returns the element's value, bound, typical error and magnitude
// S + Σ|tₖ| (see MatMulWith). structured says the backend stated a
// summation structure, and with it an epilogue rounded to nearest.
func (e Epilogue) finish(i, j int, c, bound, s float64, l int, structured bool) (value, newBound, typical, magnitude float64) {
	n := e.Terms()
	value, magnitude = c, s
	for k := 0; k < n; k++ {
		t := e.term(k, i, j)
		value += t
		magnitude += math.Abs(t)
		bound = bound*(1+2*u24) + (u24+2*U64)*math.Abs(value)
		typical += U32 * math.Abs(value)
	}
	// A kernel that folds the terms into the sum walks over all L + n.
	typical += math.Sqrt(float64(l+n)) * U32 * magnitude
	g64 := Gamma(int64(l+n), U64)
	folded := (Gamma(int64(2*(l+n)), U32) + g64) * (1 + 2*g64) * magnitude
	if !structured {
		return value, folded, typical, magnitude
	}
	return value, min(bound, folded), typical, magnitude
}

// Projection is X·(Y·v) (plus the epilogue's terms projected on v) for the
// Freivalds check of a product C = X·Y, with the magnitudes that bound its
// rounding.
type Projection struct {
	// Value[i] = Σⱼ cᵢⱼ·vⱼ, computed as X·(Y·v) + bias·v + C₀·v in float64.
	Value []float64
	// Magnitude[i] = Σⱼ Sᵢⱼ·|vⱼ| with Sᵢⱼ = Σₖ|xᵢₖ·yₖⱼ| + Σ|tₖ|, computed as
	// |X|·(|Y|·|v|) + |bias|·|v| + |C₀|·|v|: the sum of the elements'
	// MatMulWith magnitudes, weighted.
	Magnitude []float64
	// Terms is the length of each element's sum: the depth L plus the
	// epilogue's terms.
	Terms int
}

// Project computes X·(Y·v) and |X|·(|Y|·|v|) in O(M·L + L·N) operations
// instead of the product's O(M·N·L).
func Project(ctx context.Context, x, y Matrix, v []float64) (*Projection, error) {
	return ProjectWith(ctx, x, y, Epilogue{}, v)
}

// ProjectWith is Project for a product with an epilogue (ep's view must be
// the whole output): the bias adds bias·v to every row and the initial
// values (or the residual) C₀·v, in O(M·N) more operations.
//
// Bound. A correct kernel's binary32 result ĉᵢⱼ is within γ(2T)·Sᵢⱼ of cᵢⱼ
// in any summation structure, T = Terms (see MatMulWith: the terms folded
// into the sum, which the epilogue's bound never exceeds), so
// |Σⱼ(ĉᵢⱼ − cᵢⱼ)·vⱼ| ≤ γ(2T)·Magnitude[i]. The float64 evaluation of both
// sides adds at most γ₆₄(T+N) times the same magnitudes; callers add that
// too.
func ProjectWith(ctx context.Context, x, y Matrix, ep Epilogue, v []float64) (*Projection, error) {
	l, n := y.Rows, y.Cols
	va := make([]float64, n)
	for j, e := range v {
		va[j] = math.Abs(e)
	}
	yv, ya, err := rowDots(ctx, y, v, va)
	if err != nil {
		return nil, err
	}
	var biasValue, biasMagnitude float64
	if ep.Bias != nil {
		for j := 0; j < n; j++ {
			_, col := ep.place(0, j)
			b := f16.ToFloat64(ep.Bias[col])
			biasValue += b * v[j]
			biasMagnitude += math.Abs(b) * math.Abs(v[j])
		}
	}
	xv, xa, err := rowDots(ctx, x, yv, ya)
	if err != nil {
		return nil, err
	}
	p := &Projection{Value: make([]float64, x.Rows), Magnitude: make([]float64, x.Rows), Terms: l + ep.Terms()}
	err = parallelRows(ctx, x.Rows, 2*n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			s := xv[i] + biasValue
			a := xa[i] + biasMagnitude
			if ep.Init != nil || ep.Residual != nil {
				var is, ia float64
				for j := 0; j < n; j++ {
					c0 := ep.old(ep.place(i, j))
					is += c0 * v[j]
					ia += math.Abs(c0) * math.Abs(v[j])
				}
				s += is
				a += ia
			}
			p.Value[i], p.Magnitude[i] = s, a
		}
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// rowDots returns, for each row i of m, Σⱼ m(i, j)·w[j] and
// Σⱼ |m(i, j)|·wa[j], each summed in ascending j. A transposed view is
// walked in storage order, a block of its rows at a time (each stored row
// holds one column of the view, contiguous over the block), which gives the
// same sums in the same order without a cache miss per element.
func rowDots(ctx context.Context, m Matrix, w, wa []float64) (s, a []float64, err error) {
	s, a = make([]float64, m.Rows), make([]float64, m.Rows)
	err = parallelRows(ctx, m.Rows, 2*m.Cols, func(lo, hi int) {
		if !m.Transposed {
			for i := lo; i < hi; i++ {
				var si, ai float64
				for j, h := range m.Data[i*m.Cols : (i+1)*m.Cols] {
					e := f16.ToFloat64(h)
					si += e * w[j]
					ai += math.Abs(e) * wa[j]
				}
				s[i], a[i] = si, ai
			}
			return
		}
		sb, ab := s[lo:hi], a[lo:hi]
		for j := 0; j < m.Cols; j++ {
			wj, waj := w[j], wa[j]
			for t, h := range m.Data[j*m.Rows+lo : j*m.Rows+hi] {
				e := f16.ToFloat64(h)
				sb[t] += e * wj
				ab[t] += math.Abs(e) * waj
			}
		}
	})
	return s, a, err
}

func init() {
	for _, o := range []*op.Op{op.Gemm, op.GemmGradA, op.GemmGradB} {
		mustRegister(o, Spec{Compute: matmulCompute, Generate: matmulGenerate})
	}
}

// matmulCompute is the reference of every matmul-family op: MatMulWith of
// its two factors and its epilogue (none for gemm and its gradients).
func matmulCompute(ctx context.Context, s op.Shape, in []Input, a Arithmetic) ([]*Reference, error) {
	o := s.Op()
	x, y := Factors(o, s, in)
	refs, err := matMulWith(ctx, x, y, EpilogueOf(o, s, in), a.Dot)
	if err != nil {
		return nil, err
	}
	// An op with a forward GELU has its pre-activation output, empty
	// without the GELU; one with column sums has them last, empty when off.
	sums := o.Matmul.ColumnSums != ""
	want := len(o.Outputs())
	if sums {
		want--
	}
	for len(refs) < want {
		refs = append(refs, &Reference{})
	}
	if sums {
		ref, err := ColumnSums(ctx, o, s, in)
		if err != nil {
			return nil, err
		}
		if ref == nil {
			ref = &Reference{}
		}
		refs = append(refs, ref)
	}
	return refs, nil
}

// matmulGenerate draws a matmul-family op's inputs: each distribution's
// values, the rounding distribution's whole numbers (roundingMatMul), and
// under Special, in the first factor's operand a NaN, a +Inf and a −Inf in
// its first three rows and in the second's its last three columns,
// subnormals everywhere at random, and a block of ±60000 in the middle rows
// (or middle column) that pushes f16 outputs past 65520; a bias, a
// residual and an output's initial values get a NaN, a +Inf, a −Inf and subnormals at
// random places (specialEpilogue).
func matmulGenerate(g *Gen) []Input {
	if g.Dist == Rounding {
		return roundingMatMul(g)
	}
	if g.Dist != Special {
		return g.Default()
	}
	lhs, rhs := inputIndex(g.Op, g.Op.Matmul.L), inputIndex(g.Op, g.Op.Matmul.R)
	inputs := make([]Input, len(g.Op.Inputs()))
	for i := range inputs {
		if i != lhs && i != rhs {
			inputs[i] = specialEpilogue(g, i)
			continue
		}
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
		first := i == lhs
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

// specialEpilogue draws input i of a matmul-family op that is not a factor
// (a bias, a residual, or the initial values of an output the op adds into) under
// Special: normal values with a NaN, a +Inf, a −Inf and subnormals (one in
// 50) at random places. Each reaches only its own column (a bias) or
// element.
func specialEpilogue(g *Gen, i int) Input {
	if g.Op.Inputs()[i].DType == op.F16 {
		in := g.F16(i, Normal.Draw)
		if len(in) > 0 {
			g.Scatter(in)
		}
		return Input{F16: in}
	}
	in := g.F32(i, Normal.Draw)
	if len(in) == 0 {
		return Input{F32: in}
	}
	for t := 0; t < max(1, len(in)/50); t++ {
		sign := uint32(g.rng.IntN(2)) << 31
		in[g.rng.IntN(len(in))] = math.Float32frombits(sign | uint32(1+g.rng.IntN(0x7fffff)))
	}
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		in[g.rng.IntN(len(in))] = float32(v)
	}
	return Input{F32: in}
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
		if !o.Matmul.Linear(s) {
			return false, "GELU's tanh makes no result exact"
		}
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
// order, below 2²⁴ and so exact. The epilogue's operands (a bias, a
// residual, an output's initial values) hold whole numbers in [−2048, 2048], exact in
// f16, and the limit on L·Rᵢ·R leaves room for them, so the results with
// the epilogue stay exact too.
func roundingMatMul(g *Gen) []Input {
	o, s := g.Op, g.Shape
	lhs, rhs := inputIndex(o, o.Matmul.L), inputIndex(o, o.Matmul.R)
	inputs := make([]Input, len(o.Inputs()))
	var room int64 = exactSumLimit - 1 // what the dot products may reach
	for i, p := range o.Inputs() {
		if p.DType == op.F32 {
			inputs[i] = Input{F32: make([]float32, s.Elements(p))}
		} else {
			inputs[i] = Input{F16: make([]uint16, s.Elements(p))}
		}
		if i != lhs && i != rhs {
			room -= epilogueLimit
		}
	}
	x, y := Factors(o, s, inputs)
	rows, l, cols := x.Rows, x.Cols, y.Cols
	root := math.Sqrt(float64(l))
	// The spread of Σₖ xₖyₖ with x, y uniform on [−Rx, Rx], [−R, R] is about
	// √L·Rx·R/3; R puts the middle target 2^12.5 at Rx ≈ R.
	r := clampInt(int64(math.Round(math.Sqrt(3*math.Exp2(12.5)/root))), 1, min(2048, room/int64(l)))
	scale := make([]int64, rows)
	for i := range scale {
		t := 11 + 3.5*math.Mod(float64(i+1)*0.6180339887498949, 1)
		scale[i] = clampInt(int64(3*math.Exp2(t)/(root*float64(r))), 1, min(2048, room/(int64(l)*r)))
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
	for i := range inputs {
		if i == lhs || i == rhs {
			continue
		}
		in := inputs[i]
		ForChunks(in.Len(), func(c, lo, hi int) {
			rng := rand.New(rand.NewPCG(g.operandSeed(i)+uint64(c), g.stream^0x726f756e66))
			for e := lo; e < hi; e++ {
				v := float64(rng.Int64N(2*epilogueLimit+1) - epilogueLimit)
				if in.F32 != nil {
					in.F32[e] = float32(v)
				} else {
					in.F16[e] = f16.FromFloat64(v)
				}
			}
		})
	}
	return inputs
}

// epilogueLimit bounds the whole numbers of a rounding case's bias and
// initial values: every one is exact in f16.
const epilogueLimit = 2048

func clampInt(v, lo, hi int64) int64 { return max(lo, min(v, hi)) }
