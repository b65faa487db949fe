package gpt

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/kerneltest"
	"github.com/vkern/vkern/toolchain"
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

// paddedNano is nano with a vocabulary that is not a multiple of 64: V = 300,
// Vp = 320, so the device's head masks 20 padded columns and wte carries 20
// rows of zeros that the float64 reference does not have. The tokens are
// bytes: rows 256 … 299 are real tokens that never occur, whose gradient
// (from the softmax) is not zero, unlike the padded rows'.
var paddedNano = Config{Name: "nano-v300", Layers: 4, Heads: 4, C: 64, T: 64, V: 300}

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

// wholeStep takes one real training step of cfg on dev (two micro-batches
// of b sequences, accumulated) and compares its loss, every gradient, the
// gradient norm and every parameter after the update with the
// reference's. The parameters are GPT-2's initialisation with the biases
// and LayerNorm parameters moved off their initial 0 and 1, so that a
// defect that only touches them shows; the gradient accumulators hold
// garbage before the step, as they do after one, so that clearing (or
// overwriting) them matters: values of about 10⁶, which stand out against
// the loss-scaled gradients wherever the step leaves even one.
func wholeStep(t *testing.T, dev *vkern.Device, cfg Config, b int) (stepCheck, error) {
	t.Helper()
	ctx := context.Background()
	const k = 2
	m, err := New(ctx, dev, cfg, b, k)
	if err != nil {
		return stepCheck{}, err
	}
	defer m.Close(ctx)
	before := m.lay.initial(7)
	rng := rand.New(rand.NewPCG(7, 8))
	for _, tn := range m.lay.tensors {
		if tn.std == 0 {
			for i := tn.offset; i < tn.offset+tn.elements(); i++ {
				before[i] += float32(0.1 * rng.NormFloat64())
			}
		}
	}
	m1, m2 := make([]float32, len(before)), make([]float32, len(before))
	if err := m.SetParams(ctx, before, m1, m2); err != nil {
		return stepCheck{}, err
	}
	garbage := make([]float32, m.lay.total)
	for i := range garbage {
		garbage[i] = float32(1e6 * rng.NormFloat64())
	}
	if err := m.grad.WriteF32(ctx, garbage); err != nil {
		return stepCheck{}, err
	}
	var inputs, targets [][]int32
	c := fixedCorpus(t)
	if err := c.Check(cfg.T, cfg.V); err != nil {
		t.Fatal(err)
	}
	for j := 0; j < k; j++ {
		in, tg := c.Batch(3, int64(j), b, cfg.T)
		inputs, targets = append(inputs, in), append(targets, tg)
	}
	h := DefaultHyper(10)
	st := NewState()
	stepped := st
	res, err := m.Step(ctx, h, &stepped, inputs, targets)
	if err != nil {
		return stepCheck{}, err
	}
	grads := make([]float32, m.lay.total)
	if err := m.grad.ReadF32(ctx, grads); err != nil {
		return stepCheck{}, err
	}
	after, _, _, err := m.Params(ctx)
	if err != nil {
		return stepCheck{}, err
	}
	work := make([]uint16, m.lay.total)
	if err := m.work.ReadF16(ctx, work); err != nil {
		return stepCheck{}, err
	}
	arith, err := dev.Arithmetic(ctx)
	if err != nil {
		return stepCheck{}, err
	}
	reference := func(perturb uint64) *ReferenceResult {
		r, err := Reference(ctx, cfg, b, before, m1, m2, inputs, targets, h, st, arith, perturb)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ref := reference(0)
	var runs []*ReferenceResult
	for j := 1; j <= perturbedRuns; j++ {
		runs = append(runs, reference(uint64(j)))
	}
	var out stepCheck
	judge := func(name string, err, spread, norm, carried float64) {
		tol := 2*spread + 0x1p-23*norm + carried
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
	scalar := func(name string, got float64, want func(*ReferenceResult) float64) {
		var spread float64
		for _, r := range runs {
			spread = math.Max(spread, math.Abs(want(r)-want(ref)))
		}
		judge(name, math.Abs(got-want(ref)), spread, math.Abs(want(ref)), 0)
	}
	scalar("the loss", res.Loss, func(r *ReferenceResult) float64 { return r.Loss })
	scalar("the gradient norm", res.GradNorm, func(r *ReferenceResult) float64 { return r.GradNorm })
	if res.Skipped || ref.Skipped {
		out.failures = append(out.failures, fmt.Sprintf("the step was skipped: device %v, reference %v", res.Skipped, ref.Skipped))
	}
	// Each tensor's whole span in the arenas: wte's padded rows, zero in
	// the reference, are held to it too.
	// The error is over the elements judged (all, when judged is nil);
	// the spread and the norm are over the whole span.
	// carried (nil: none) is an element's share of the tolerance that the
	// judged inputs of the result carry into it (see the update below).
	tensors := func(what string, got []float32, want func(*ReferenceResult) []float32, judged func(i int64) bool,
		carried func(i int64) float64) {
		for _, tn := range m.lay.tensors {
			var extra float64
			if carried != nil {
				for i := tn.offset; i < tn.offset+tn.arenaElements(); i++ {
					if judged == nil || judged(i) {
						c := carried(i)
						extra += c * c
					}
				}
				extra = math.Sqrt(extra)
			}
			span := func(a []float32) []float32 { return a[tn.offset : tn.offset+tn.arenaElements()] }
			var spread float64
			for _, r := range runs {
				spread = math.Max(spread, l2(span(want(r)), span(want(ref))))
			}
			g, w := span(got), span(want(ref))
			if judged != nil {
				var gj, wj []float32
				for i := range g {
					if judged(tn.offset + int64(i)) {
						gj, wj = append(gj, g[i]), append(wj, w[i])
					}
				}
				g, w = gj, wj
			}
			judge(what+" "+tn.name, l2(g, w), spread, l2(span(want(ref)), nil), extra)
		}
	}
	tensors("gradient of", grads, func(r *ReferenceResult) []float32 { return r.Grads }, nil, nil)
	// The update is judged by how far each tensor moved: its norm is
	// the change's, not the parameters'.
	moved := func(p []float32) []float32 {
		d := make([]float32, len(p))
		for i := range p {
			d[i] = p[i] - before[i]
		}
		return d
	}
	// AdamW's first step from zero moments (t = 1) moves an element by
	// lr·g/(|g| + eps) besides the decay: about ±lr by the sign of g, a
	// step function of the gradient. Where the device and the reference
	// give an element gradients of opposite signs (or one of them 0), each
	// within the gradient's tolerance judged above, the two updates may
	// lie 2·lr apart, which no perturbed run need show; the update is
	// judged on the other elements.
	sign := func(x float32) int {
		switch {
		case x > 0:
			return 1
		case x < 0:
			return -1
		}
		return 0
	}
	sameSign := func(i int64) bool { return sign(grads[i]) == sign(ref.Grads[i]) }
	// Where the signs agree the step is still lr·x/(|x| + eps) of the
	// multiplied gradient x = g·clip/scale, whose slope lr·eps/(|x| + eps)²
	// is steep for |x| within a few hundred eps: an element whose gradient
	// is that small (a sum that nearly cancels) and off by a share of
	// itself that the gradient's tolerance allows moves the update by up
	// to |u(x_device) − u(x_reference)|, which the perturbed runs, each
	// drawn from the reference's own gradient, need not show. That
	// difference is carried into the update's tolerance, element by
	// element; away from zero it vanishes.
	multiplier := 1 / st.LossScale
	if h.Clip > 0 {
		multiplier = min(1, h.Clip/(ref.GradNorm+1e-6)) / st.LossScale
	}
	step := func(g float32) float64 {
		x := float64(g) * multiplier
		return h.LRAt(st.Step) * x / (math.Abs(x) + h.Eps)
	}
	carried := func(i int64) float64 { return math.Abs(step(grads[i]) - step(ref.Grads[i])) }
	tensors("update of", moved(after), func(r *ReferenceResult) []float32 { return moved(r.Master) }, sameSign, carried)
	// The kernels' working copy is each new master rounded to nearest,
	// exactly.
	for i, p := range after {
		if want := f16.FromFloat64(float64(p)); work[i] != want {
			out.failures = append(out.failures, fmt.Sprintf("the f16 working copy's element %d is %#04x after the update, want %#04x (the master %v rounded)", i, work[i], want, p))
			break
		}
	}
	return out, nil
}

// TestAStepMatchesTheFloat64Model at nano, and at nano with a vocabulary
// the device pads (V = 300, Vp = 320): there the device's head runs over
// 320 columns, the reference's over 300.
func TestAStepMatchesTheFloat64Model(t *testing.T) {
	dev := openCPU(t, vkern.Options{})
	for _, cfg := range []Config{Nano, paddedNano} {
		t.Run(fmt.Sprintf("%s, V %d padded to %d", cfg.Name, cfg.V, cfg.Vp()), func(t *testing.T) {
			got, err := wholeStep(t, dev, cfg, 2)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s, 2 micro-batches of B = 2, on the cpu backend: %s", cfg.Name, got)
			if len(got.failures) > 0 || got.worstName == "" {
				t.Fatalf("the step's results are outside the derived tolerance: %s", got)
			}
		})
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
	inputs, targets := fixedCorpus(t).Batch(4, 0, 2, Nano.T)
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

// levelOneOnly are the planted defects a step cannot show, and why; the
// per-op verifier catches each of them.
var levelOneOnly = map[string]string{
	"global_norm sums in f32":                                         "over a nano step's 220 K gradients an f32 sum errs by less than the norm's own rounding spread",
	"global_norm counts only NaN as non-finite":                       "a step with finite gradients has no infinity to count",
	"global_norm drops the last element of a chunk's tail":            "the gradient arena's last element is alignment padding, always 0",
	"fill writes only its first chunk":                                "a step's fills (wpe's gradient, the vectors') are each under one 65,536-element chunk",
	"ignore_index not honoured in cross_entropy":                      "a training step ignores no row",
	"ignored rows counted in cross_entropy's n":                       "a training step ignores no row",
	"add leaves the last element of a short run unwritten":            "a step's adds are whole multiples of the kernel's 1024-element runs",
	"gelu with erf where the tanh approximation belongs":              "erf's and tanh's GELU differ by under 10⁻³, within what f16 storage moves a step",
	"f16 outputs rounded half away from zero (scalar conversion)":     "it differs from ties-to-even only on exact ties, which a step's activations rarely hit",
	"f16 outputs rounded half away from zero (eight-lane conversion)": "it differs from ties-to-even only on exact ties, which a step's activations rarely hit",
}

// TestPlantedDefectsFailTheWholeStep: with any of kerneltest.CPUDefects
// planted in a kernel the step uses (but those levelOneOnly lists), the
// whole-step comparison fails, or the step itself does. The per-op
// verifier catches every planted defect; this shows that the level-2 check
// catches these on its own. The step is paddedNano's, whose head masks its
// padded columns with linear_nt's bias (at nano that bias is all zeros).
func TestPlantedDefectsFailTheWholeStep(t *testing.T) {
	if testing.Short() {
		t.Skip("builds one server per planted defect")
	}
	used := map[string]bool{}
	for _, c := range newModelProgramOps() {
		used[c] = true
	}
	seen := map[string]bool{}
	for _, m := range kerneltest.CPUDefects {
		if !used[m.Op] || levelOneOnly[m.Name] != "" {
			continue
		}
		seen[m.Op] = true
		t.Run(m.Op+": "+m.Name, func(t *testing.T) {
			t.Parallel()
			dev := openCPU(t, vkern.Options{EditSources: m.Plant(), QuickBuild: true})
			got, err := wholeStep(t, dev, paddedNano, 2)
			switch {
			case err != nil:
				t.Logf("the step failed: %v", err)
			case len(got.failures) == 0:
				t.Errorf("the whole-step comparison passed with the defect planted: %s", got)
			default:
				t.Logf("%d outside the tolerance, first %s", len(got.failures), got.failures[0])
			}
		})
	}
	for op := range used {
		if !seen[op] {
			t.Errorf("no planted cpu defect for %s, which a step uses", op)
		}
	}
}

// newModelProgramOps names the ops a training step calls.
func newModelProgramOps() []string {
	m := &Model{Config: Nano, B: 1, K: 1, lay: newLayout(Nano)}
	var s slab
	var dummy *vkern.Buffer
	m.planActs(&s, func(**vkern.Buffer) **vkern.Buffer { return &dummy })
	m.w16 = make([]*vkern.Buffer, len(m.lay.tensors))
	m.g32 = m.w16
	for _, r := range m.lay.cleared() {
		m.cleared = append(m.cleared, &vkern.Buffer{Bytes: 4 * (r[1] - r[0])})
	}
	m.loss = make([]*vkern.Buffer, 1)
	m.groups[0] = group{decay: true, n: m.lay.decayEnd}
	m.groups[1] = group{n: m.lay.total - m.lay.decayEnd}
	var names []string
	for _, p := range []program{m.gradients(1), m.update(DefaultHyper(1), 1e-3, 1, 1)} {
		for _, c := range p.calls {
			names = append(names, c.Op.Name)
		}
	}
	return names
}

// TestAStepOnCUDAMatchesTheFloat64Model is the whole-step check of char on
// the cuda backend (TRAINING.md: char on a GPU), and of paddedNano, whose
// head runs over a padded vocabulary; it skips where there is no CUDA
// device.
func TestAStepOnCUDAMatchesTheFloat64Model(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := toolchain.Detect(ctx, "cuda"); err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	dev, err := vkern.Open(ctx, vkern.Options{Backend: "cuda", CacheDir: testCache(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for _, cfg := range []Config{Char, paddedNano} {
		t.Run(cfg.Name, func(t *testing.T) {
			got, err := wholeStep(t, dev, cfg, 2)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s, 2 micro-batches of B = 2, on the cuda backend: %s", cfg.Name, got)
			if len(got.failures) > 0 || got.worstName == "" {
				t.Fatalf("the step's results are outside the derived tolerance: %s", got)
			}
		})
	}
}
