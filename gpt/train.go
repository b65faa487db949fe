package gpt

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/internal/le"
	"github.com/vkern/vkern/op"
)

// Hyper are a run's hyperparameters. The defaults (DefaultHyper) follow
// nanoGPT's and PyTorch's.
type Hyper struct {
	// LR is the peak learning rate, MinLR the floor the cosine decays to.
	LR    float64 `json:"lr"`
	MinLR float64 `json:"min_lr"`
	// Warmup is the steps of linear warm-up; the cosine then runs to
	// Steps, the schedule's length (a run's total unless set apart).
	Warmup int64 `json:"warmup"`
	Steps  int64 `json:"lr_steps"`
	// AdamW's (torch.optim.AdamW's names). WeightDecay applies to the
	// matrices only.
	Beta1       float64 `json:"beta1"`
	Beta2       float64 `json:"beta2"`
	Eps         float64 `json:"eps"`
	WeightDecay float64 `json:"weight_decay"`
	// Clip is the largest global gradient norm (after unscaling); 0 turns
	// clipping off.
	Clip float64 `json:"clip"`
}

// DefaultHyper returns the hyperparameters for a run of steps steps.
func DefaultHyper(steps int64) Hyper {
	return Hyper{
		LR: 1e-3, MinLR: 1e-4, Warmup: min(100, steps/10), Steps: steps,
		Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Clip: 1,
	}
}

// Validate checks h against the ranges the optimizer's contract takes.
func (h Hyper) Validate() error {
	for _, c := range []struct {
		name, param string
		v           float64
	}{{"learning rate", "lr", h.LR}, {"floor of the learning rate", "lr", h.MinLR}, {"beta1", "beta1", h.Beta1},
		{"beta2", "beta2", h.Beta2}, {"eps", "eps", h.Eps}, {"weight decay", "weight_decay", h.WeightDecay}} {
		if lo, hi := AdamWRange(c.param); !(c.v >= lo && c.v <= hi) {
			return fmt.Errorf("gpt: %s %g is outside AdamW's range [%g, %g]", c.name, c.v, lo, hi)
		}
	}
	switch {
	case h.Steps < 1:
		return fmt.Errorf("gpt: --steps %d: a run needs at least 1 step", h.Steps)
	case h.Warmup < 0:
		return fmt.Errorf("gpt: warm-up of %d steps must not be negative", h.Warmup)
	case h.MinLR > h.LR:
		return fmt.Errorf("gpt: the floor of the schedule (%g) is above the peak learning rate (%g)", h.MinLR, h.LR)
	case !(h.Clip >= 0) || math.IsInf(h.Clip, 0):
		return fmt.Errorf("gpt: clip %g must be a finite norm ≥ 0 (0: no clipping)", h.Clip)
	}
	return nil
}

// AdamWRange is the range the adamw op takes its parameter name in (lr,
// beta1, beta2, eps, weight_decay), as its contract states it.
func AdamWRange(name string) (lo, hi float64) {
	for _, p := range op.AdamW.Params {
		if p.Name == name {
			return p.Min, p.Max
		}
	}
	return math.NaN(), math.NaN()
}

// LRAt is the learning rate of step s (from 0): nanoGPT's schedule,
// LR·(s+1)/(Warmup+1) during the warm-up, then a cosine from LR down to
// MinLR at step Steps.
func (h Hyper) LRAt(s int64) float64 {
	if s < h.Warmup {
		return h.LR * float64(s+1) / float64(h.Warmup+1)
	}
	if s >= h.Steps || h.Steps <= h.Warmup {
		return h.MinLR
	}
	ratio := float64(s-h.Warmup) / float64(h.Steps-h.Warmup)
	return h.MinLR + 0.5*(1+math.Cos(math.Pi*ratio))*(h.LR-h.MinLR)
}

// Dynamic loss scaling, as PyTorch's GradScaler by default.
const (
	InitialLossScale = 65536
	growthInterval   = 2000
)

// State is where a run stands: what a checkpoint keeps besides the
// tensors, and all a resumed run needs to continue bit for bit.
type State struct {
	Step      int64   `json:"step"`       // steps taken; the next step's index
	Updates   int64   `json:"updates"`    // AdamW updates applied (skipped steps apply none): its t
	LossScale float64 `json:"loss_scale"` // the dynamic loss scale
	Good      int64   `json:"good_steps"` // clean steps since the scale last changed
}

// NewState is a run's start.
func NewState() State { return State{LossScale: InitialLossScale} }

// StepResult is what one training step reports.
type StepResult struct {
	Step      int64   // the step's index
	Loss      float64 // the mean training loss over its K·B·T tokens
	LossScale float64 // the scale the step ran under
	Skipped   bool    // a gradient was not finite: no update, the scale halves
	GradNorm  float64 // the global gradient norm, unscaled, before clipping
	LR        float64
	Time      time.Duration
	// Phases is where Time went, as the host saw it.
	Phases Phases
}

// Phases splits a step's time as the host saw it: writing the batch; the
// device program of the forward, backward and norm (with a data-parallel
// step's collectives); reading the losses and norms back; and the
// decision with the update. The device idles in all but Gradients and
// the update's share of Update.
type Phases struct {
	Write, Gradients, Read, Update time.Duration
}

// Step runs one training step on K micro-batches (inputs[k], targets[k],
// B·T tokens each): the gradients program, then, unless a gradient was not
// finite, the update. It advances st.
func (m *Model) Step(ctx context.Context, h Hyper, st *State, inputs, targets [][]int32) (StepResult, error) {
	return m.step(ctx, h, st, inputs, targets, m.run)
}

// step is Step with the programs run by exec: one batch each, or call by
// call under the live check (live.go).
func (m *Model) step(ctx context.Context, h Hyper, st *State, inputs, targets [][]int32, exec executor) (StepResult, error) {
	start := time.Now()
	res := StepResult{Step: st.Step, LossScale: st.LossScale, LR: h.LRAt(st.Step)}
	lap := newLaps(start)
	if err := m.writeBatches(ctx, inputs, targets); err != nil {
		return res, err
	}
	res.Phases.Write = lap()
	p := m.kept.get(st.LossScale, func() program { return m.gradients(st.LossScale) })
	if p.err != nil {
		return res, p.err
	}
	if err := exec(ctx, p); err != nil {
		return res, fmt.Errorf("gpt: step %d: %w", st.Step, err)
	}
	res.Phases.Gradients = lap()
	loss, sumsq, bad, err := m.readResults(ctx)
	if err != nil {
		return res, err
	}
	res.Loss = loss
	res.Phases.Read = lap()
	if err := m.finishStep(ctx, h, st, &res, sumsq, bad, exec); err != nil {
		return res, err
	}
	res.Phases.Update = lap()
	res.Time = time.Since(start)
	return res, nil
}

// newLaps returns a stopwatch started at start: each call returns the time
// since the previous call (or start).
func newLaps(start time.Time) func() time.Duration {
	last := start
	return func() time.Duration {
		now := time.Now()
		d := now.Sub(last)
		last = now
		return d
	}
}

// finishStep takes a step's decision from its squared gradient norm and
// its count of non-finite gradients, as GradScaler and
// clip_grad_norm_ take it: skip and halve the scale, or update (clipped,
// unscaled) and advance the scale's count; then st moves to the next step.
func (m *Model) finishStep(ctx context.Context, h Hyper, st *State, res *StepResult, sumsq float64, bad int32, exec executor) error {
	res.GradNorm = math.Sqrt(sumsq) / st.LossScale
	if bad > 0 || math.IsInf(sumsq, 0) || math.IsNaN(sumsq) {
		// GradScaler's found_inf: skip the update and halve the scale.
		res.Skipped = true
		st.LossScale /= 2
		st.Good = 0
	} else {
		clip := 1.0
		if h.Clip > 0 {
			clip = min(1, h.Clip/(res.GradNorm+1e-6)) // torch.nn.utils.clip_grad_norm_
		}
		u := m.update(h, res.LR, st.Updates+1, clip/st.LossScale)
		if u.err != nil {
			return u.err
		}
		if err := exec(ctx, &u); err != nil {
			return fmt.Errorf("gpt: step %d, the update: %w", st.Step, err)
		}
		st.Updates++
		if st.Good++; st.Good == growthInterval {
			st.LossScale *= 2
			st.Good = 0
		}
	}
	st.Step++
	return nil
}

// writeBatches sends every micro-batch's tokens and targets, in one
// transfer (m.batch), encoded into m.hostBatch: a step's host work is the
// encoding and the transfer, with nothing allocated (at char's batch of
// 64 a fresh 128 KiB slice and the loop's unbounded slicing cost more than
// the transfer; BenchmarkStepTransfers).
func (m *Model) writeBatches(ctx context.Context, inputs, targets [][]int32) error {
	want := m.B * m.Config.T
	if len(inputs) != m.K || len(targets) != m.K {
		return fmt.Errorf("gpt: a step takes %d micro-batches, got %d inputs and %d targets", m.K, len(inputs), len(targets))
	}
	if int64(len(m.hostBatch)) != m.batch.Bytes {
		m.hostBatch = make([]byte, m.batch.Bytes)
	}
	for k := range inputs {
		if len(inputs[k]) != want || len(targets[k]) != want {
			return fmt.Errorf("gpt: micro-batch %d has %d inputs and %d targets, want B·T = %d of each", k, len(inputs[k]), len(targets[k]), want)
		}
		for j, v := range [][]int32{inputs[k], targets[k]} {
			le.PutInt32s(m.hostBatch[m.batchAt[2*k+j]:], v)
		}
	}
	return m.batch.Write(ctx, 0, m.hostBatch)
}

// readLoss reads the first k micro-batches' per-row losses and returns
// their mean over the rows counted: all of them, or those whose flag in
// counted is set.
func (m *Model) readLoss(ctx context.Context, k int, counted []bool) (float64, error) {
	all := make([]float32, int64(k)*m.lossStride)
	if err := m.lossAll.ReadF32(ctx, all); err != nil {
		return 0, err
	}
	return m.meanLoss(all, k, counted), nil
}

// readResults reads a step's K micro-batches' losses and its gradients'
// squared norm and non-finite count in one transfer (m.results), into
// m.hostResults: the mean loss, as readLoss gives it, and global_norm's two
// outputs.
func (m *Model) readResults(ctx context.Context) (loss, sumsq float64, bad int32, err error) {
	raw, losses, err := m.readHost(ctx, m.results, int64(m.K)*m.lossStride)
	if err != nil {
		return 0, 0, 0, err
	}
	sumsq = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[m.sumsqAt:])))
	bad = int32(binary.LittleEndian.Uint32(raw[m.badAt:]))
	return m.meanLoss(losses, m.K, nil), sumsq, bad, nil
}

// readHost reads all of results (a view that starts with n f32 losses) into
// the model's host buffers, kept from step to step, and returns its bytes
// and the losses decoded.
func (m *Model) readHost(ctx context.Context, results *vkern.Buffer, n int64) (raw []byte, losses []float32, err error) {
	if int64(len(m.hostResults)) != results.Bytes {
		m.hostResults = make([]byte, results.Bytes)
	}
	if int64(cap(m.hostLosses)) < n {
		m.hostLosses = make([]float32, n)
	}
	if err := results.Read(ctx, 0, m.hostResults); err != nil {
		return nil, nil, err
	}
	losses = m.hostLosses[:n]
	le.Float32s(losses, m.hostResults)
	return m.hostResults, losses, nil
}

// meanLoss is the mean of the first k micro-batches' per-row losses in all
// (lossStride floats apart) over the rows counted: all of them, or those
// whose flag in counted is set; NaN for none.
func (m *Model) meanLoss(all []float32, k int, counted []bool) float64 {
	M := m.B * m.Config.T
	var sum float64
	var n int
	for j := 0; j < k; j++ {
		for r, x := range all[int64(j)*m.lossStride : int64(j)*m.lossStride+int64(M)] {
			if counted == nil || counted[r] {
				sum += float64(x)
				n++
			}
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// Init sets the parameters to GPT-2's initialisation drawn from seed and
// clears the optimizer's moments.
func (m *Model) Init(ctx context.Context, seed uint64) error {
	zero := make([]float32, m.lay.total)
	return m.SetParams(ctx, m.lay.initial(seed), zero, zero)
}

// SetParams writes the f32 masters, their f16 working copy (each rounded
// to nearest, as AdamW writes it) and the two moments, all in the arena
// layout.
func (m *Model) SetParams(ctx context.Context, master, mom1, mom2 []float32) error {
	n := int(m.lay.total)
	if len(master) != n || len(mom1) != n || len(mom2) != n {
		return fmt.Errorf("gpt: parameters of %d, %d and %d elements for a layout of %d", len(master), len(mom1), len(mom2), n)
	}
	work := make([]uint16, n)
	for i, x := range master {
		work[i] = f16.FromFloat64(float64(x))
	}
	if err := m.master.WriteF32(ctx, master); err != nil {
		return err
	}
	if err := m.work.WriteF16(ctx, work); err != nil {
		return err
	}
	if err := m.m.WriteF32(ctx, mom1); err != nil {
		return err
	}
	return m.v.WriteF32(ctx, mom2)
}

// Params reads the f32 masters and the moments back, in the arena layout.
func (m *Model) Params(ctx context.Context) (master, mom1, mom2 []float32, err error) {
	n := m.lay.total
	master, mom1, mom2 = make([]float32, n), make([]float32, n), make([]float32, n)
	for _, r := range []struct {
		dst []float32
		src interface {
			ReadF32(context.Context, []float32) error
		}
	}{{master, m.master}, {mom1, m.m}, {mom2, m.v}} {
		if err := r.src.ReadF32(ctx, r.dst); err != nil {
			return nil, nil, nil, err
		}
	}
	return master, mom1, mom2, nil
}
