package gpt

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/vkern/vkern"
)

// The whole-step check (TRAINING.md, level 2): the loss and every
// parameter's gradient of one nano batch, from the device's real step
// program, against the float64 reference GPT (reference.go).
//
// The tolerance is derived, not chosen. Each op's verifier accepts any
// output within its bound of the exact value (then rounded once); the
// reference is run once rounding every stored output to nearest and
// perturbedRuns times moving each by its full bound, in random directions,
// before rounding: trajectories the per-op checks would all accept. A
// tensor's tolerance is twice the largest distance (L2, over the tensor) of
// a perturbed run's gradient from the nearest-rounded one's, plus one f32
// rounding of its norm; the loss's likewise. A correct device lands among
// those trajectories; a defect that changes a result by more than the
// bounds allow moves it far outside.
const perturbedRuns = 3

// stepCheck is the outcome of one comparison.
type stepCheck struct {
	worst     float64 // the largest error/tolerance over the loss and the tensors (≤ 1 passes)
	worstName string
	failures  []string
}

func (c stepCheck) String() string {
	return fmt.Sprintf("worst %.3g of its tolerance (%s); %d outside: %v", c.worst, c.worstName, len(c.failures), c.failures)
}

func l2(a, b []float32) float64 {
	var s float64
	for i := range a {
		var d float64
		if b == nil {
			d = float64(a[i])
		} else {
			d = float64(a[i]) - float64(b[i])
		}
		s += d * d
	}
	return math.Sqrt(s)
}

// wholeStep runs nano's gradients program for one batch of b sequences on
// dev and compares it with the reference.
func wholeStep(t *testing.T, dev *vkern.Device, b int) stepCheck {
	t.Helper()
	ctx := context.Background()
	m := newModel(t, dev, Nano, b, 1, 7)
	c := goCorpus(t)
	inputs, targets := c.Batch(3, 0, b, Nano.T)
	const scale = 1024
	loss, grads := gradients(t, m, inputs, targets, scale)
	master, _, _, err := m.Params(ctx)
	if err != nil {
		t.Fatal(err)
	}
	arith, err := dev.Arithmetic(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := Reference(ctx, Nano, b, master, inputs, targets, scale, arith, 0)
	if err != nil {
		t.Fatal(err)
	}
	var runs []*ReferenceResult
	for j := 1; j <= perturbedRuns; j++ {
		r, err := Reference(ctx, Nano, b, master, inputs, targets, scale, arith, uint64(j))
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	var out stepCheck
	judge := func(name string, err, spread, norm float64) {
		tol := 2*spread + 0x1p-23*norm
		r := err / tol
		if testing.Verbose() {
			t.Logf("%-40s rel err %.3g  rel tol %.3g", name, err/norm, tol/norm)
		}
		if math.IsNaN(r) || r > 1 {
			out.failures = append(out.failures, fmt.Sprintf("%s: off by %.3g, tolerance %.3g", name, err, tol))
			r = math.Inf(1)
		}
		if r > out.worst || out.worstName == "" {
			out.worst, out.worstName = r, name
		}
	}
	var spread float64
	for _, r := range runs {
		spread = math.Max(spread, math.Abs(r.Loss-ref.Loss))
	}
	judge("the loss", math.Abs(loss-ref.Loss), spread, math.Abs(ref.Loss))
	for _, tn := range m.lay.tensors {
		span := func(a []float32) []float32 { return a[tn.offset : tn.offset+tn.elements()] }
		var spread float64
		for _, r := range runs {
			spread = math.Max(spread, l2(span(r.Grads), span(ref.Grads)))
		}
		judge(tn.name, l2(span(grads), span(ref.Grads)), spread, l2(span(ref.Grads), nil))
	}
	return out
}

func TestStepGradientsMatchTheFloat64Model(t *testing.T) {
	dev := openCPU(t, vkern.Options{})
	got := wholeStep(t, dev, 4)
	t.Logf("nano, B = 4, on the cpu backend: %s", got)
	if len(got.failures) > 0 {
		t.Fatalf("the step's results are outside the derived tolerance: %s", got)
	}
}

// TestGradientsAreTheLossDerivative checks the step program's wiring
// against calculus rather than against a second program: for several
// tensors, L(θ + εg) − L(θ − εg) = 2ε‖g‖² to first order, g the tensor's
// own gradient from the device (a central difference, whose second-order
// terms cancel). ε is set for a change of 0.02 nats,
// far above the loss's f16 rounding noise.
func TestGradientsAreTheLossDerivative(t *testing.T) {
	ctx := context.Background()
	dev := openCPU(t, vkern.Options{})
	m := newModel(t, dev, Nano, 2, 1, 11)
	inputs, targets := goCorpus(t).Batch(4, 0, 2, Nano.T)
	const scale = 1024
	_, g := gradients(t, m, inputs, targets, scale)
	master, m1, m2, err := m.Params(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lossAt := func(p []float32) float64 {
		if err := m.SetParams(ctx, p, m1, m2); err != nil {
			t.Fatal(err)
		}
		l, _ := gradients(t, m, inputs, targets, scale)
		return l
	}
	const change = 0.02
	for _, name := range []string{
		"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.attn.c_attn.weight",
		"transformer.h.1.attn.c_attn.bias", "transformer.h.2.attn.c_proj.weight", "transformer.h.3.mlp.c_fc.weight",
		"transformer.h.3.mlp.c_proj.bias", "transformer.h.0.ln_1.weight", "transformer.h.2.ln_2.bias", "transformer.ln_f.weight",
	} {
		tn := m.lay.tensors[m.lay.byName[name]]
		grad := make([]float64, tn.elements())
		var sq float64
		for i := range grad {
			grad[i] = float64(g[tn.offset+int64(i)]) / scale
			sq += grad[i] * grad[i]
		}
		eps := change / (2 * sq)
		moved := func(sign float64) []float32 {
			p := append([]float32(nil), master...)
			for i, d := range grad {
				p[tn.offset+int64(i)] += float32(sign * eps * d)
			}
			return p
		}
		measured := lossAt(moved(+1)) - lossAt(moved(-1))
		t.Logf("%-38s ‖g‖ %.3g: the loss changed by %.5f, predicted %.5f", name, math.Sqrt(sq), measured, change)
		if math.Abs(measured-change) > 0.03*change {
			t.Errorf("%s: moving along its gradient changed the loss by %.5f, where the gradient predicts %.5f", name, measured, change)
		}
	}
}
