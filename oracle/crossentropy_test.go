package oracle

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
)

// crossEntropy32 is a binary32 cross_entropy row the way a GPU kernel
// computes it: exp through exp2 (with flush, a term under 2⁻¹²⁶ taken as +0,
// as the CUDA row kernel's EX2 takes it), logf, and the gradient either as
// e·(c/S) − c (scaleFirst) or as (e/S − 1)·c.
func crossEntropy32(x []uint16, label int, c float32, scaleFirst, flush bool) (loss float32, grad []float32) {
	m := float32(math.Inf(-1))
	for _, h := range x {
		m = max(m, f16.ToFloat32(h))
	}
	e := make([]float32, len(x))
	var sum float32
	for j, h := range x {
		e[j] = float32(math.Exp2(float64((f16.ToFloat32(h) - m) * float32(math.Log2E))))
		if flush && e[j] < 0x1p-126 {
			e[j] = 0
		}
		sum += e[j]
	}
	loss = (m - f16.ToFloat32(x[label])) + float32(math.Log(float64(sum)))
	grad = make([]float32, len(x))
	scaled := c / sum
	for j := range e {
		if scaleFirst {
			grad[j] = e[j] * scaled
			if j == label {
				grad[j] -= c
			}
			continue
		}
		y := e[j] / sum
		if j == label {
			y--
		}
		grad[j] = y * c
	}
	return loss, grad
}

func TestCrossEntropyBoundHoldsForBinary32Kernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	const rows, cols = 7, 3001
	for _, dist := range []string{"uniform", "normal", "wide", "far"} {
		x := rowsF16(rng, rows, cols, dist)
		labels := make([]int32, rows)
		for r := range labels {
			labels[r] = int32(rng.IntN(cols))
		}
		labels[0], labels[rows-1], labels[3] = 0, cols-1, -100
		loss, grad, err := CrossEntropyRows(context.Background(), x, labels, rows, cols, -100, 1)
		if err != nil {
			t.Fatal(err)
		}
		c := float32(1.0 / float64(rows-1))
		worstLoss, worstGrad := 0.0, 0.0
		for r := 0; r < rows; r++ {
			if labels[r] == -100 {
				if loss.Value[r] != 0 || grad.Value[r*cols] != 0 {
					t.Fatalf("%s: ignored row %d has loss %v and gradient %v, want 0", dist, r, loss.Value[r], grad.Value[r*cols])
				}
				continue
			}
			for _, way := range []struct{ scaleFirst, flush bool }{{true, false}, {false, false}, {true, true}, {false, true}} {
				scaleFirst := way.scaleFirst
				l32, g32 := crossEntropy32(x[r*cols:(r+1)*cols], int(labels[r]), c, scaleFirst, way.flush)
				if e := math.Abs(float64(l32) - loss.Value[r]); e > loss.Bound[r] {
					t.Fatalf("%s: loss[%d] error %g exceeds bound %g", dist, r, e, loss.Bound[r])
				} else {
					worstLoss = max(worstLoss, e/loss.Bound[r])
				}
				for j, g := range g32 {
					idx := r*cols + j
					e := math.Abs(float64(g) - grad.Value[idx])
					if e > grad.Bound[idx] {
						t.Fatalf("%s, scaleFirst=%v: dLogits[%d,%d] = %g, reference %g: error %g exceeds bound %g",
							dist, scaleFirst, r, j, g, grad.Value[idx], e, grad.Bound[idx])
					}
					worstGrad = max(worstGrad, e/grad.Bound[idx])
				}
			}
		}
		t.Logf("%s: worst error/bound: loss %.3g, gradient %.3g", dist, worstLoss, worstGrad)
	}
}

func TestCrossEntropySpecialRows(t *testing.T) {
	nan, inf, ninf, zero := f16.NaN, f16.PosInf, f16.NegInf, f16.FromFloat32(0)
	x := []uint16{
		zero, ninf, zero, // label 1 at −Inf: loss +Inf, gradient (1/2, −1, 1/2)·c
		ninf, ninf, ninf, // only −Inf: NaN
		zero, nan, zero, // NaN: NaN
		zero, inf, zero, // +Inf: NaN
		nan, inf, ninf, // ignored: zeros whatever the logits hold
	}
	labels := []int32{1, 0, 2, 0, 7}
	loss, grad, err := CrossEntropyRows(context.Background(), x, labels, 5, 3, 7, 1)
	if err != nil {
		t.Fatal(err)
	}
	c := 1.0 / 4
	if !math.IsInf(loss.Value[0], 1) {
		t.Errorf("loss[0] = %v, want +Inf", loss.Value[0])
	}
	for j, want := range []float64{c / 2, -c, c / 2} {
		if math.Abs(grad.Value[j]-want) > 1e-15 {
			t.Errorf("dLogits[0,%d] = %v, want %v", j, grad.Value[j], want)
		}
	}
	for r := 1; r < 4; r++ {
		if !math.IsNaN(loss.Value[r]) {
			t.Errorf("loss[%d] = %v, want NaN", r, loss.Value[r])
		}
		for j := 0; j < 3; j++ {
			if !math.IsNaN(grad.Value[r*3+j]) {
				t.Errorf("dLogits[%d,%d] = %v, want NaN", r, j, grad.Value[r*3+j])
			}
		}
	}
	for i, b := range append(append([]float64(nil), loss.Bound...), grad.Bound...) {
		if math.IsNaN(b) || b < 0 {
			t.Errorf("bound %d is %v, want a number >= 0", i, b)
		}
	}
	if loss.Value[4] != 0 || grad.Value[12] != 0 || grad.Value[13] != 0 || grad.Value[14] != 0 {
		t.Errorf("ignored row: loss %v, gradient %v, want zeros", loss.Value[4], grad.Value[12:])
	}
}

func TestCrossEntropyWithEveryRowIgnoredIsAllZeros(t *testing.T) {
	x := randomF16(rand.New(rand.NewPCG(15, 16)), 3*4, "normal")
	loss, grad, err := CrossEntropyRows(context.Background(), x, []int32{-100, -100, -100}, 3, 4, -100, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range append(append([]float64(nil), loss.Value...), grad.Value...) {
		if v != 0 {
			t.Fatalf("element %d = %v, want 0", i, v)
		}
	}
}

func TestCrossEntropyRefusesALabelOutsideTheRange(t *testing.T) {
	x := make([]uint16, 2*4)
	for _, tt := range []struct {
		labels []int32
		ignore int64
		want   string
	}{
		{[]int32{0, 4}, op.Unset, "labels[1] = 4 is outside [0, V) = [0, 4)"},
		{[]int32{-100, 1}, op.Unset, "labels[0] = -100"},
		{[]int32{-1, 1}, -100, "labels[0] = -1"},
	} {
		_, _, err := CrossEntropyRows(context.Background(), x, tt.labels, 2, 4, tt.ignore, 1)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("labels %v, ignore %d: error %v, want one containing %q", tt.labels, tt.ignore, err, tt.want)
		}
	}
}
