package gpt

import (
	"context"
	"fmt"

	"github.com/vkern/vkern/data"
)

// Trainer is a run: a model, its hyperparameters and state, and the corpus
// its batches come from. Step s trains on data.Corpus.Batch(Seed, s, B·K,
// T), cut into K micro-batches of B windows, so a run resumed from a
// checkpoint sees exactly the batches an uninterrupted one would.
type Trainer struct {
	Model  *Model
	Hyper  Hyper
	State  State
	Seed   uint64
	Corpus *data.Corpus
}

// Batch returns step s's K micro-batches.
func (tr *Trainer) Batch(s int64) (inputs, targets [][]int32) {
	m := tr.Model
	in, tg := tr.Corpus.Batch(tr.Seed, s, m.B*m.K, m.Config.T)
	n := m.B * m.Config.T
	for k := 0; k < m.K; k++ {
		inputs = append(inputs, in[k*n:(k+1)*n])
		targets = append(targets, tg[k*n:(k+1)*n])
	}
	return inputs, targets
}

// Step takes the run's next step.
func (tr *Trainer) Step(ctx context.Context) (StepResult, error) {
	in, tg := tr.Batch(tr.State.Step)
	return tr.Model.Step(ctx, tr.Hyper, &tr.State, in, tg)
}

// ValLoss is the mean loss over n windows of the validation part spread
// evenly over it (EvalCorpus with spread), so that a few hundred windows
// sample every part of a corpus, not its first files.
func (tr *Trainer) ValLoss(ctx context.Context, n int) (float64, error) {
	return EvalCorpus(ctx, tr.Model, tr.Corpus.Val, n, true)
}

// EvalCorpus is the mean loss of m over n of the non-overlapping windows
// of T + 1 tokens of tokens (all of them when there are no more than n):
// window w is tokens [w·(T+1), (w+1)·(T+1)), its first T the inputs and
// its last T the targets, every one of its T positions counted. The n
// windows are the first n, or with spread windows ⌊i·W/n⌋ for i < n, W
// the windows there are.
func EvalCorpus(ctx context.Context, m *Model, tokens []uint16, n int, spread bool) (float64, error) {
	T := m.Config.T
	avail := len(tokens) / (T + 1)
	if avail == 0 {
		return 0, fmt.Errorf("gpt: %d tokens hold no window of T + 1 = %d", len(tokens), T+1)
	}
	if n <= 0 || n > avail {
		n = avail
	}
	ws := make([]Window, n)
	for i := range ws {
		w := i
		if spread {
			w = int(int64(i) * int64(avail) / int64(n))
		}
		win := tokens[w*(T+1) : (w+1)*(T+1)]
		in, tg := make([]int32, T), make([]int32, T)
		for j := 0; j < T; j++ {
			in[j], tg[j] = int32(win[j]), int32(win[j+1])
		}
		ws[i] = Window{in, tg}
	}
	return m.Eval(ctx, ws)
}
