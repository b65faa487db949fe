package gpt

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/f16"
)

// uncancelled returns ctx (to check between device calls) and a context
// for the calls that ctx's cancellation does not reach but its deadline,
// if any, still bounds.
func uncancelled(ctx context.Context) (stop, calls context.Context, cancel context.CancelFunc) {
	calls = context.WithoutCancel(ctx)
	if d, ok := ctx.Deadline(); ok {
		calls, cancel = context.WithDeadline(calls, d)
		return ctx, calls, cancel
	}
	return ctx, calls, func() {}
}

// Window is one evaluation window: T inputs and the T targets that follow
// them.
type Window struct{ Inputs, Targets []int32 }

// Eval returns the mean loss over windows, B at a time on micro-batch slot
// 0. A last batch of fewer than B windows is padded with sequences of
// token 0 whose targets are the ignore_index −1, so they count for
// nothing. Each window must hold T inputs and T targets. A cancelled ctx
// stops it between batches with ctx's error; a batch's device calls, once
// sent, finish (as a training step's do: a call cut short would leave the
// server mid-program).
func (m *Model) Eval(ctx context.Context, windows []Window) (float64, error) {
	T := m.Config.T
	if len(windows) == 0 {
		return math.NaN(), fmt.Errorf("gpt: no windows to evaluate")
	}
	stop, ctx, cancel := uncancelled(ctx)
	defer cancel()
	ignore := int32(-1)
	var sum float64
	var n int
	for at := 0; at < len(windows); at += m.B {
		if err := stop.Err(); err != nil {
			return math.NaN(), err
		}
		in, tg := make([]int32, m.B*T), make([]int32, m.B*T)
		counted := make([]bool, m.B*T)
		for i := 0; i < m.B; i++ {
			if at+i >= len(windows) {
				for j := 0; j < T; j++ {
					tg[i*T+j] = ignore
				}
				continue
			}
			w := windows[at+i]
			if len(w.Inputs) != T || len(w.Targets) != T {
				return math.NaN(), fmt.Errorf("gpt: window %d has %d inputs and %d targets, want T = %d", at+i, len(w.Inputs), len(w.Targets), T)
			}
			copy(in[i*T:], w.Inputs)
			copy(tg[i*T:], w.Targets)
			for j := 0; j < T; j++ {
				counted[i*T+j] = true
			}
		}
		if err := m.tokens[0].WriteI32(ctx, in); err != nil {
			return math.NaN(), err
		}
		if err := m.targets[0].WriteI32(ctx, tg); err != nil {
			return math.NaN(), err
		}
		var p program
		m.forward(&p, 0, m.B, T)
		m.crossEntropy(&p, 0, m.B*T, 1, &ignore)
		if p.err != nil {
			return math.NaN(), p.err
		}
		if _, err := m.dev.RunBatch(ctx, p.calls); err != nil {
			return math.NaN(), fmt.Errorf("gpt: evaluating windows %d…: %w", at, err)
		}
		mean, err := m.readLoss(ctx, 1, counted)
		if err != nil {
			return math.NaN(), err
		}
		rows := min(m.B, len(windows)-at) * T
		sum += mean * float64(rows)
		n += rows
	}
	return sum / float64(n), nil
}

// Sample continues prompt by n tokens, each drawn from the softmax of the
// last position's logits divided by temperature (0: the most likely token)
// with PCG(seed, 0). The context is the last T tokens. It returns the new
// tokens only. A cancelled ctx stops it between tokens, with the tokens
// made so far and ctx's error.
func (m *Model) Sample(ctx context.Context, prompt []int32, n int, temperature float64, seed uint64) ([]int32, error) {
	c := m.Config
	if len(prompt) == 0 {
		return nil, fmt.Errorf("gpt: sampling needs a prompt of at least one token")
	}
	if !(temperature >= 0) || math.IsInf(temperature, 0) {
		return nil, fmt.Errorf("gpt: temperature %g must be finite and ≥ 0", temperature)
	}
	for i, t := range prompt {
		if t < 0 || int(t) >= c.V {
			return nil, fmt.Errorf("gpt: prompt token %d is %d, outside the vocabulary [0, %d)", i, t, c.V)
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	seq := append([]int32(nil), prompt...)
	row := make([]uint16, c.V)
	raw := make([]byte, 2*c.V)
	probs := make([]float64, c.V)
	stop, ctx, cancel := uncancelled(ctx) // as Eval's
	defer cancel()
	for len(seq) < len(prompt)+n {
		if err := stop.Err(); err != nil {
			return seq[len(prompt):], err
		}
		ctxTokens := seq[max(0, len(seq)-c.T):]
		t := len(ctxTokens)
		if err := m.tokens[0].WriteI32(ctx, ctxTokens); err != nil {
			return nil, err
		}
		logitsRow, err := m.sampleLogits(ctx, t)
		if err != nil {
			return nil, err
		}
		// The first V of the row's Vp logits: the padded ones are −Inf.
		if err := m.top.logits.Read(ctx, logitsRow*int64(c.Vp())*2, raw); err != nil {
			return nil, err
		}
		for i := range row {
			row[i] = uint16(raw[2*i]) | uint16(raw[2*i+1])<<8
		}
		seq = append(seq, draw(row, probs, temperature, rng))
	}
	return seq[len(prompt):], nil
}

// sampleLogits runs the forward of the t tokens in slot 0 for Sample and
// returns the row of top.logits that holds the last position's logits. Only
// that position's are needed: where its row of the residual stream starts
// on a view's boundary (vkern.ViewAlign), ln_f and the head run over that
// row alone, into row 0 (the head is a third of gpt2's forward at its
// context); else over every row, as forward does.
func (m *Model) sampleLogits(ctx context.Context, t int) (row int64, err error) {
	var p program
	m.body(&p, 0, 1, t)
	x, rows, at := m.top.x, t, int64(t-1)
	rowBytes := int64(2 * m.Config.C)
	if offset := int64(t-1) * rowBytes; offset%vkern.ViewAlign == 0 {
		last, verr := m.top.x.View(ctx, offset, rowBytes)
		if verr != nil {
			return 0, fmt.Errorf("gpt: sampling: %w", verr)
		}
		defer func() {
			if ferr := last.Free(context.WithoutCancel(ctx)); ferr != nil && err == nil {
				row, err = 0, fmt.Errorf("gpt: sampling: freeing the last row's view: %w", ferr)
			}
		}()
		x, rows, at = last, 1, 0
	}
	m.head(&p, rows, x)
	if p.err != nil {
		return 0, p.err
	}
	if _, err := m.dev.RunBatch(ctx, p.calls); err != nil {
		return 0, fmt.Errorf("gpt: sampling: %w", err)
	}
	return at, nil
}

// draw picks a token from f16 logits: the first largest at temperature 0,
// else from softmax(logits/temperature) in float64.
func draw(logits []uint16, probs []float64, temperature float64, rng *rand.Rand) int32 {
	best := 0
	for i, x := range logits {
		if f16.ToFloat64(x) > f16.ToFloat64(logits[best]) {
			best = i
		}
	}
	if temperature == 0 {
		return int32(best)
	}
	top := f16.ToFloat64(logits[best])
	var sum float64
	for i, x := range logits {
		v := f16.ToFloat64(x)
		if math.IsNaN(v) {
			v = math.Inf(-1)
		}
		probs[i] = math.Exp((v - top) / temperature)
		sum += probs[i]
	}
	u := rng.Float64() * sum
	for i, p := range probs {
		if u < p {
			return int32(i)
		}
		u -= p
	}
	return int32(best)
}
