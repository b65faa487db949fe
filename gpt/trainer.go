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
//
// With Parallel set, the run is data-parallel (parallel.go): Model is the
// model of this process's first rank, K is the whole run's micro-batches
// per step, and each rank trains on its block of them.
type Trainer struct {
	Model    *Model
	Hyper    Hyper
	State    State
	Seed     uint64
	Corpus   *data.Corpus
	Parallel *Parallel
}

// Ranks is the number of ranks the run trains on: 1 without Parallel.
func (tr *Trainer) Ranks() int {
	if tr.Parallel == nil {
		return 1
	}
	return tr.Parallel.World
}

// MicroBatches is K, the micro-batches of a step over all ranks.
func (tr *Trainer) MicroBatches() int { return tr.Model.K * tr.Ranks() }

// Batch returns step s's K micro-batches (all ranks').
func (tr *Trainer) Batch(s int64) (inputs, targets [][]int32) {
	m := tr.Model
	K := tr.MicroBatches()
	in, tg := tr.Corpus.Batch(tr.Seed, s, m.B*K, m.Config.T)
	n := m.B * m.Config.T
	for k := 0; k < K; k++ {
		inputs = append(inputs, in[k*n:(k+1)*n])
		targets = append(targets, tg[k*n:(k+1)*n])
	}
	return inputs, targets
}

// Step takes the run's next step.
func (tr *Trainer) Step(ctx context.Context) (StepResult, error) {
	if tr.Parallel != nil {
		return tr.stepParallel(ctx)
	}
	in, tg := tr.Batch(tr.State.Step)
	return tr.Model.Step(ctx, tr.Hyper, &tr.State, in, tg)
}

// Init sets every rank's parameters to GPT-2's initialisation drawn from
// seed (Model.Init), and checks that the ranks agree.
func (tr *Trainer) Init(ctx context.Context, seed uint64) error {
	return tr.eachModel(ctx, func(m *Model) error { return m.Init(ctx, seed) })
}

// SetParams sets every rank's parameters and moments (Model.SetParams),
// and checks that the ranks agree: each process of a multi-process run
// loads its own copy of the checkpoint.
func (tr *Trainer) SetParams(ctx context.Context, master, mom1, mom2 []float32) error {
	return tr.eachModel(ctx, func(m *Model) error { return m.SetParams(ctx, master, mom1, mom2) })
}

func (tr *Trainer) eachModel(ctx context.Context, f func(*Model) error) error {
	if tr.Parallel == nil {
		return f(tr.Model)
	}
	for _, rep := range tr.Parallel.Replicas {
		if err := f(rep.Model); err != nil {
			return err
		}
	}
	return tr.Parallel.agree(ctx)
}

// Save writes the run's checkpoint (Model.Save): once, by rank 0; on the
// other ranks' processes it writes nothing. The checkpoint resumes on any
// number of ranks that divides its micro-batches per step.
func (tr *Trainer) Save(ctx context.Context, dir string, run Run) error {
	if tr.Parallel != nil && !tr.Parallel.Rank0() {
		return nil
	}
	run.Accum = tr.MicroBatches()
	if tr.Ranks() > 1 {
		run.Ranks = tr.Ranks()
	}
	return tr.Model.Save(ctx, dir, run)
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
