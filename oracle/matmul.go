package oracle

import (
	"context"
	"math"

	"github.com/vkern/vkern/f16"
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
// registers; see mulPanel.
const panelWidth = 4

// MatMul is the reference of C = X·Y for an M×L matrix X and an L×N matrix Y,
// the shape of all three GEMM ops (the gradient ops pass transposed views).
//
// Bound. Every product xₖ·yₖ of two f16 values is exact in binary32, so a
// binary32 kernel only rounds in the L−1 additions of each dot product. In
// any summation order, each partial sum is at most S = Σₖ|xₖ·yₖ| in
// magnitude and each addition is off by at most u times its result, so
//
//	|ĉ − c| ≤ γ(L)·S,  γ(L) = L·u/(1 − L·u),  u = 2⁻²³.
//
// The oracle sums the same exact products in float64, off by at most
// γ₆₄(L)·S, and S itself is computed in float64 with a relative error under
// γ₆₄(L); both are added, so Bound = (γ(L) + γ₆₄(L))·S·(1 + 2γ₆₄(L)).
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
func MatMul(ctx context.Context, x, y Matrix) (*Reference, error) {
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
	yv := make([]float64, panels*l*panelWidth)
	for p := 0; p < panels; p++ {
		for k := 0; k < l; k++ {
			for t := 0; t < panelWidth; t++ {
				if j := p*panelWidth + t; j < n {
					yv[(p*l+k)*panelWidth+t] = y.at(k, j)
				}
			}
		}
	}
	ref := &Reference{
		Value:   make([]float64, m*n),
		Bound:   make([]float64, m*n),
		Typical: make([]float64, m*n),
	}
	boundFactor := (Gamma(int64(l), U32) + Gamma(int64(l), U64)) * (1 + 2*Gamma(int64(l), U64))
	typicalFactor := math.Sqrt(float64(l)) * U32
	err := parallelRows(ctx, m, l*n, func(lo, hi int) {
		var c, s [panelWidth]float64
		for i := lo; i < hi; i++ {
			row := xv[i*l : (i+1)*l]
			for p := 0; p < panels; p++ {
				mulPanel(row, yv[p*l*panelWidth:(p+1)*l*panelWidth], &c, &s)
				for t := 0; t < panelWidth; t++ {
					j := p*panelWidth + t
					if j >= n {
						break
					}
					ref.Value[i*n+j] = c[t]
					ref.Bound[i*n+j] = boundFactor * s[t]
					ref.Typical[i*n+j] = typicalFactor * s[t]
				}
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return ref, nil
}

// mulPanel computes, for the four columns of one packed panel, the dot
// products c[t] = Σₖ row[k]·panel[k][t] and the magnitudes s[t] =
// Σₖ|row[k]·panel[k][t]|. Eight independent accumulators keep the loop out
// of memory; the magnitude is taken of the exact product so that specials
// (Inf·0 = NaN) propagate into s the same way as into c.
func mulPanel(row, panel []float64, c, s *[panelWidth]float64) {
	var c0, c1, c2, c3, s0, s1, s2, s3 float64
	panel = panel[:len(row)*panelWidth]
	for k, a := range row {
		q := panel[k*panelWidth : k*panelWidth+panelWidth : k*panelWidth+panelWidth]
		p0, p1, p2, p3 := a*q[0], a*q[1], a*q[2], a*q[3]
		c0 += p0
		c1 += p1
		c2 += p2
		c3 += p3
		s0 += math.Abs(p0)
		s1 += math.Abs(p1)
		s2 += math.Abs(p2)
		s3 += math.Abs(p3)
	}
	*c = [panelWidth]float64{c0, c1, c2, c3}
	*s = [panelWidth]float64{s0, s1, s2, s3}
}
