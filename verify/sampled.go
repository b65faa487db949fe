package verify

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
)

// Products larger than fullCheckMACs multiply-adds are not checked element
// by element (O(M·N·K) on the CPU) but by a sample, see checkSampled. A
// variable so that tests can force the sampled path on small shapes.
var fullCheckMACs int64 = 1 << 33

// The sample: full rows and columns checked element by element, and
// Freivalds projections of the whole product.
const (
	sampleRows      = 16
	sampleCols      = 16
	freivaldsTrials = 16
)

// Sample says how a large product was checked, and what that is worth.
type Sample struct {
	Rows, Cols int // full output rows and columns checked element by element
	Trials     int // Freivalds projections of the whole product
	// RowsProjected is how many output rows the projections covered: rows
	// whose products are all finite and whose outputs did not overflow f16.
	RowsProjected int
	// MissProbability bounds, for any one output row holding an element
	// whose error exceeds that row's projection tolerance, the chance that
	// every projection missed it: 2^−Trials.
	MissProbability float64
}

func (s *Sample) String() string {
	return fmt.Sprintf("%d full rows and %d full columns checked element by element; %d Freivalds projections over %d rows (a row holding an element off by more than its row tolerance is missed with probability ≤ %.2g)",
		s.Rows, s.Cols, s.Trials, s.RowsProjected, s.MissProbability)
}

// picks returns up to k distinct indices in [0, n): the first, the last and
// random others, sorted.
func picks(rng *rand.Rand, n, k int) []int {
	if n <= k {
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		return idx
	}
	seen := map[int]bool{0: true, n - 1: true}
	for len(seen) < k {
		seen[rng.IntN(n)] = true
	}
	idx := make([]int, 0, k)
	for i := range seen {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	return idx
}

// checkSampled checks a large matmul-family output: sampled full rows and
// columns exactly as Compare would (bit for bit on exact cases, else under
// each element's bound), then Freivalds projections of the whole output
// under a sound per-row tolerance (oracle.ProjectWith). The references and
// projections include the op's epilogue (oracle.EpilogueOf: a bias, the
// initial values of an output it adds into). outs are the op's outputs:
// the product, and its column sums where the op has them
// (op.MatmulSpec.ColumnSums), which are checked whole (they cost one pass
// over the R factor).
func checkSampled(ctx context.Context, c Case, inputs []oracle.Input, outs [][]byte, acc oracle.Accumulation) (Stats, error) {
	return sampledCheck(ctx, c, modeOf(c), inputs, outs, acc)
}

// sampledCheck is checkSampled under mode m.
func sampledCheck(ctx context.Context, c Case, m Mode, inputs []oracle.Input, outs [][]byte, acc oracle.Accumulation) (Stats, error) {
	o, s := c.Op, c.Shape
	p, out := o.Outputs()[0], outs[0]
	x, y := oracle.Factors(o, s, inputs)
	ep := oracle.EpilogueOf(o, s, inputs)
	rows, cols := x.Rows, y.Cols
	rng := rand.New(rand.NewPCG(c.Seed, 0x5a3b1e))
	ri, ci := picks(rng, rows, sampleRows), picks(rng, cols, sampleCols)
	size := p.DType.Size()
	mode := m

	refRows, err := oracle.MatMulWith(ctx, x.SelectRows(ri), y, ep.SelectRows(ri), acc)
	if err != nil {
		return Stats{}, err
	}
	gathered := make([]byte, 0, len(ri)*cols*size)
	for _, r := range ri {
		gathered = append(gathered, out[r*cols*size:(r+1)*cols*size]...)
	}
	t := compareElements(p, refRows, gathered, mode, func(i int) (int, int) { return ri[i/cols], i % cols })

	refCols, err := oracle.MatMulWith(ctx, x, y.SelectCols(ci), ep.SelectCols(ci), acc)
	if err != nil {
		return Stats{}, err
	}
	gathered = gathered[:0]
	for r := 0; r < rows; r++ {
		for _, j := range ci {
			gathered = append(gathered, out[(r*cols+j)*size:(r*cols+j+1)*size]...)
		}
	}
	t.add(compareElements(p, refCols, gathered, mode, func(i int) (int, int) { return i / len(ci), ci[i%len(ci)] }))
	sums, err := oracle.ColumnSums(ctx, o, s, inputs)
	if err != nil {
		return Stats{}, err
	}
	var sumElements int64
	if sums != nil {
		k := slices.IndexFunc(o.Outputs(), func(q op.Operand) bool { return q.Name == o.Matmul.ColumnSums })
		if len(outs) != len(o.Outputs()) || k < 0 {
			return Stats{}, fmt.Errorf("verify: %s's sampled check needs all %d outputs, %s among them; got %d", o.Name, len(o.Outputs()), o.Matmul.ColumnSums, len(outs))
		}
		q := o.Outputs()[k]
		t.add(compareElements(q, sums, outs[k], mode, func(i int) (int, int) { return 0, i }))
		sumElements = s.Elements(q)
	}
	st := t.stats()
	st.Tightening = refRows.Tightening.Merge(refCols.Tightening)
	if sums != nil {
		st.Tightening = st.Tightening.Merge(sums.Tightening)
	}

	sample := &Sample{Rows: len(ri), Cols: len(ci), Trials: freivaldsTrials, MissProbability: math.Exp2(-freivaldsTrials)}
	projected := make([]bool, rows)
	for t := 0; t < freivaldsTrials; t++ {
		v := make([]float64, cols)
		for j := range v {
			v[j] = float64(2*rng.IntN(2) - 1)
		}
		p, err := oracle.ProjectWith(ctx, x, y, ep, v)
		if err != nil {
			return Stats{}, err
		}
		// Every row on every core; the verdicts are gathered in row order,
		// so the first wrong row reported does not depend on the cores.
		bad := make([]string, rows)
		err = oracle.ParallelRows(ctx, rows, 2*cols, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				bad[i] = checkProjection(o, out, i, cols, v, p)
			}
		})
		if err != nil {
			return Stats{}, err
		}
		for i, b := range bad {
			if b != "" {
				st.Wrong++
				if st.FirstWrong == "" {
					st.FirstWrong = b
				}
			} else if isFinite(p.Value[i]) && isFinite(p.Magnitude[i]) {
				projected[i] = true
			}
		}
	}
	for _, ok := range projected {
		if ok {
			sample.RowsProjected++
		}
	}
	st.Elements = s.Elements(p) + sumElements
	st.Sample = sample
	return st, nil
}

// checkProjection compares row i of the output, projected on v, with the
// reference projection. It returns a sentence when they disagree by more than
// the row's tolerance, and "" when they agree or the row cannot be projected:
// its reference is not finite (a NaN or Inf input reaches it; the sampled
// rows and columns check those), or an f16 output overflowed to ±Inf.
//
// Tolerance: Σⱼ|ĉᵢⱼ − cᵢⱼ| ≤ γ(2T)·Magnitude[i] before rounding, whatever
// the summation structure and wherever the epilogue's terms join the sum
// (oracle.ProjectWith; T = p.Terms, the depth L plus those terms), f16
// rounding adds Σⱼ (2⁻¹¹/(1 − 2⁻¹¹)·|oᵢⱼ| + 2⁻²⁵), and both float64
// evaluations add γ₆₄(T+N) times the magnitudes involved.
func checkProjection(o *op.Op, out []byte, i, cols int, v []float64, p *oracle.Projection) string {
	want, magnitude := p.Value[i], p.Magnitude[i]
	if !isFinite(want) || !isFinite(magnitude) {
		return ""
	}
	output := o.Outputs()[0]
	dtype := output.DType
	var got, outMagnitude float64
	for j := 0; j < cols; j++ {
		e, unwritten := element(dtype, out, i*cols+j)
		switch {
		case unwritten:
			return fmt.Sprintf("%s[%d,%d] was never written (still holds the poison pattern), found by a Freivalds projection", output.Name, i, j)
		case math.IsNaN(e) || (math.IsInf(e, 0) && dtype != op.F16):
			return fmt.Sprintf("%s[%d,%d] = %g where every term of the row is finite, found by a Freivalds projection", output.Name, i, j, e)
		case math.IsInf(e, 0):
			return "" // an f16 overflow the sampled rows and columns judge
		}
		got += e * v[j]
		outMagnitude += math.Abs(e)
	}
	g64 := oracle.Gamma(int64(p.Terms+cols), oracle.U64)
	tolerance := (oracle.Gamma(2*int64(p.Terms), oracle.U32)+3*g64)*magnitude + g64*outMagnitude
	if dtype == op.F16 {
		tolerance += 0x1p-11/(1-0x1p-11)*outMagnitude + float64(cols)*0x1p-25
	}
	if d := math.Abs(got - want); d > tolerance {
		return fmt.Sprintf("row %d of %s, projected on a random ±1 vector, is %g where the reference gives %g: off by %.3g, more than the row's tolerance %.3g (Freivalds check)",
			i, output.Name, got, want, d, tolerance)
	}
	return ""
}

func isFinite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
