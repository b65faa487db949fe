package gpt

import (
	"context"
	"fmt"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/op"
)

// A program is the list of op calls one round trip sends (vkern.RunBatch):
// a training step's forward, backward and gradient norm; its update; an
// evaluation's or a sample's forward. The calls name views of the model's
// buffers, so a program is data: the level-3 check (live.go) runs the same
// list one call at a time and compares each with its reference.
type program struct {
	calls []vkern.Call
	err   error        // the first shape that failed its op's contract
	batch *vkern.Batch // the calls checked once (Model.run), while the program is reused
}

// executor runs a program: as one batch (Model.run), or call by call under
// the live check (live.go).
type executor func(context.Context, *program) error

// run sends p as one batch, its calls checked against their contracts on
// its first run only: a program that is reused (reused.get) costs the
// host its encoding alone on the next.
func (m *Model) run(ctx context.Context, p *program) error {
	if p.batch == nil {
		b, err := m.dev.Prepare(p.calls)
		if err != nil {
			return err
		}
		p.batch = b
	}
	_, err := p.batch.Run(ctx)
	return err
}

// reused is a program kept while the step's loss scale stays the same, as
// it does for thousands of steps at a time: the program depends on nothing
// else.
type reused struct {
	scale float64
	p     *program
}

// get returns the kept program if it was made for scale, else build's,
// kept in its place.
func (r *reused) get(scale float64, build func() program) *program {
	if r.p == nil || r.scale != scale {
		p := build()
		r.scale, r.p = scale, &p
	}
	return r.p
}

func (p *program) add(o *op.Op, dims []int64, set []op.Setting, bufs ...*vkern.Buffer) {
	if p.err != nil {
		return
	}
	s, err := o.Shape(dims, set...)
	if err != nil {
		p.err = fmt.Errorf("gpt: building the program: %w", err)
		return
	}
	p.calls = append(p.calls, vkern.Call{Op: o, Shape: s, Buffers: bufs, Untimed: true})
}

func dims(d ...int) []int64 {
	out := make([]int64, len(d))
	for i, x := range d {
		out[i] = int64(x)
	}
	return out
}

var noBias = []op.Setting{{Name: "bias", Value: 0}}

// withGELU makes linear the MLP's c_fc and GELU in one pass (its output
// gelu(x·W + b), the pre-activation kept for the backward) and
// linear_grad_x the gradient through c_proj and the GELU (dy·Wᵀ times
// gelu′(pre)): no elementwise op reads a product back (op.Linear,
// op.LinearGradX).
var withGELU = []op.Setting{{Name: "gelu", Value: 1}}

// withResidual makes linear a block's c_proj and its residual connection
// in one pass: x_next = x + (h·W + b), the sum rounded once.
var withResidual = []op.Setting{{Name: "residual", Value: 1}}

// withSum makes layernorm_grad also add the column sums of the stream's
// gradient it writes into a c_proj bias's gradient: every c_proj's output
// gradient is the stream's gradient as the LayerNorm after it (in the
// forward) leaves it, so no bias_grad reads it again. withResidualSum is
// both switches.
var (
	withSum         = []op.Setting{{Name: "dx_sum", Value: 1}}
	withResidualSum = []op.Setting{{Name: "residual", Value: 1}, {Name: "dx_sum", Value: 1}}
)

// overwrite makes linear_grad_w write dW instead of adding into it: a
// step's first micro-batch's, so that the products' weight gradients need
// no clearing first (layout.overwritten), which saves a fill of them and
// each product's read of its old dW.
var overwrite = []op.Setting{{Name: "accumulate", Value: 0}}

// withBias makes linear_grad_w also add the column sums of its dy into a
// bias's gradient (c_fc's and c_attn's, whose output gradients no
// LayerNorm sums), in the call that reads dy for the weight's.
var withBias = op.Setting{Name: "bias", Value: 1}

// forward adds the forward of b sequences of t tokens (b ≤ B, t ≤ T) from
// micro-batch slot k's tokens to the logits: embedding, the blocks
// (pre-LayerNorm attention and MLP, each added into the residual stream by
// its c_proj),
// ln_f, and the head tied to wte over the padded vocabulary (logits M×Vp =
// ln_f(x)·wteᵀ + headBias, linear_nt with W = wte, Vp×C): the padded
// columns' logits are −Inf. The embedding reads wte's first V rows (a
// buffer may be longer than its shape), so its kernels refuse a token ≥ V.
func (m *Model) forward(p *program, k, b, t int) {
	m.body(p, k, b, t)
	m.head(p, b*t, m.top.x)
}

// body adds forward's embedding and blocks: the residual stream's last
// value in top.x.
func (m *Model) body(p *program, k, b, t int) {
	c, w, top := m.Config, m.w16, &m.top
	M, C := b*t, c.C
	p.add(op.Embedding, dims(b, t, C, c.V), nil, m.tokens[k], w[m.lay.wte], w[m.lay.wpe], m.layers[0].x)
	for l := range m.layers {
		a, bl := &m.layers[l], m.lay.blocks[l]
		next := top.x
		if l+1 < len(m.layers) {
			next = m.layers[l+1].x
		}
		p.add(op.LayerNorm, dims(M, C), nil, a.x, w[bl.ln1w], w[bl.ln1b], a.h1, a.mean1, a.rstd1)
		p.add(op.Linear, dims(M, 3*C, C), nil, a.h1, w[bl.attnW], w[bl.attnB], nil, a.qkv, nil)
		p.add(op.Attention, dims(b, t, C, c.Heads), nil, a.qkv, a.att, a.lse)
		p.add(op.Linear, dims(M, C, C), withResidual, a.att, w[bl.projW], w[bl.projB], a.x, a.xmid, nil)
		p.add(op.LayerNorm, dims(M, C), nil, a.xmid, w[bl.ln2w], w[bl.ln2b], a.h2, a.mean2, a.rstd2)
		p.add(op.Linear, dims(M, 4*C, C), withGELU, a.h2, w[bl.fcW], w[bl.fcB], nil, a.gelu, a.fc)
		p.add(op.Linear, dims(M, C, 4*C), withResidual, a.gelu, w[bl.mlpW], w[bl.mlpB], a.xmid, next, nil)
	}
}

// head adds ln_f and the head over the M rows of x into the first M rows
// of top's hf, mean, rstd and logits: x is top.x in forward, and a view of
// its last row when Sample needs that row's logits alone.
func (m *Model) head(p *program, M int, x *vkern.Buffer) {
	c, w, top := m.Config, m.w16, &m.top
	p.add(op.LayerNorm, dims(M, c.C), nil, x, w[m.lay.lnfW], w[m.lay.lnfB], top.hf, top.mean, top.rstd)
	p.add(op.LinearNT, dims(M, c.Vp(), c.C), nil, top.hf, w[m.lay.wte], top.headBias, top.logits)
}

// crossEntropy adds cross_entropy over the M = b·t rows of the logits
// against slot k's targets: each row's loss into loss[k], and the gradient,
// scaled by gradScale/(rows counted), into dlogits. ignore (when set) marks
// rows to skip. The rows are Vp long: the padded columns' logits are −Inf,
// so with a finite row maximum their exp is exactly 0, the loss is the one
// over V (but for the order of the sum's additions) and their gradient is
// exactly 0 (kernels/cpu/cross_entropy.cc, kernels/cuda/cross_entropy.cu,
// oracle.CrossEntropyRows).
func (m *Model) crossEntropy(p *program, k, rows int, gradScale float64, ignore *int32) {
	set := []op.Setting{{Name: "grad_scale", Value: gradScale}}
	if ignore != nil {
		set = append(set, op.Setting{Name: op.IgnoreIndex, Value: float64(*ignore)})
	}
	p.add(op.CrossEntropy, dims(rows, m.Config.Vp()), set, m.top.logits, m.targets[k], m.loss[k], m.top.dlogits)
}

// Stages of the backward (its done callback's, parallel.go's buckets):
// stageHead after the head's share of dwte, Layers after ln_f's, l after
// block l's, stageEmbeddings after the embeddings'.
func (c Config) stageHead() int { return c.Layers + 1 }

const stageEmbeddings = -1

// backward adds the backward of the full micro-batch k from dlogits, every
// parameter's gradient added into its f32 accumulator. The residual
// stream's gradient runs in back.dres; each block's two branches add into
// it in place. done, when not nil, is called as parts of the gradient are
// finished for this micro-batch, with the stages above (at stageHead wte
// still takes the embedding's share). embed, when not nil, adds the
// embeddings' backward in place of this micro-batch's embedding_grad (a
// data-parallel rank's, over every rank's rows: parallel.go).
func (m *Model) backward(p *program, k int, done func(p *program, stage int), embed func(p *program)) {
	if done == nil {
		done = func(*program, int) {}
	}
	c, w, g, top, bk := m.Config, m.w16, m.g32, &m.top, &m.back
	b, t := m.B, c.T
	M, C := b*t, c.C
	var gw []op.Setting // linear_grad_w's: the first micro-batch writes dW (backwardProgram)
	if k == 0 {
		gw = overwrite
	}
	gwb := append(append([]op.Setting(nil), gw...), withBias) // and db += dy's column sums
	// The head, over Vp: dhf = dlogits·wte (linear without a bias), dwte
	// += dlogitsᵀ·hf, whose padded rows get sums of zeros, exactly 0 (the
	// padded columns of dlogits are 0); then ln_f.
	p.add(op.Linear, dims(M, C, c.Vp()), noBias, top.dlogits, w[m.lay.wte], nil, nil, bk.dh, nil)
	p.add(op.LinearGradW, dims(M, C, c.Vp()), gw, top.dlogits, top.hf, g[m.lay.wte], nil)
	done(p, c.stageHead())
	// ln_f starts the stream's gradient, whose column sums are the last
	// block's MLP c_proj bias's gradient.
	last := m.lay.blocks[len(m.layers)-1]
	p.add(op.LayerNormGrad, dims(M, C), withSum, bk.dh, top.x, w[m.lay.lnfW], top.mean, top.rstd, nil, bk.dres, g[m.lay.lnfW], g[m.lay.lnfB], g[last.mlpB])
	done(p, len(m.layers))
	for l := len(m.layers) - 1; l >= 0; l-- {
		a, bl := &m.layers[l], m.lay.blocks[l]
		// MLP: c_proj (K = 4C, N = C) with the GELU's gradient in its
		// epilogue (its bias's gradient came with the stream's), c_fc
		// (K = C, N = 4C; its bias's gradient with its weight's), ln_2.
		p.add(op.LinearGradX, dims(M, C, 4*C), withGELU, bk.dres, w[bl.mlpW], a.fc, bk.dfc)
		p.add(op.LinearGradW, dims(M, C, 4*C), gw, a.gelu, bk.dres, g[bl.mlpW], nil)
		p.add(op.GemmGradA, dims(M, 4*C, C), nil, bk.dfc, w[bl.fcW], bk.dh)
		p.add(op.LinearGradW, dims(M, 4*C, C), gwb, a.h2, bk.dfc, g[bl.fcW], g[bl.fcB])
		// ln_2's gradient added into the stream's in the same pass (in
		// place), the sums going to the attention's c_proj bias.
		p.add(op.LayerNormGrad, dims(M, C), withResidualSum, bk.dh, a.xmid, w[bl.ln2w], a.mean2, a.rstd2, bk.dres, bk.dres, g[bl.ln2w], g[bl.ln2b], g[bl.projB])
		// Attention: c_proj (K = N = C), attention, c_attn (K = C,
		// N = 3C; its bias's gradient with its weight's), ln_1.
		p.add(op.GemmGradA, dims(M, C, C), nil, bk.dres, w[bl.projW], bk.datt)
		p.add(op.LinearGradW, dims(M, C, C), gw, a.att, bk.dres, g[bl.projW], nil)
		p.add(op.AttentionGrad, dims(b, t, C, c.Heads), nil, bk.datt, a.qkv, a.att, a.lse, bk.dqkv)
		p.add(op.GemmGradA, dims(M, 3*C, C), nil, bk.dqkv, w[bl.attnW], bk.dh)
		p.add(op.LinearGradW, dims(M, 3*C, C), gwb, a.h1, bk.dqkv, g[bl.attnW], g[bl.attnB])
		// ln_1's likewise, the sums going to the block below's MLP c_proj
		// bias (none below block 0: the embeddings).
		set, below := withResidual, (*vkern.Buffer)(nil)
		if l > 0 {
			set, below = withResidualSum, g[m.lay.blocks[l-1].mlpB]
		}
		p.add(op.LayerNormGrad, dims(M, C), set, bk.dh, a.x, w[bl.ln1w], a.mean1, a.rstd1, bk.dres, bk.dres, g[bl.ln1w], g[bl.ln1b], below)
		done(p, l)
	}
	if embed != nil {
		embed(p)
	} else {
		// dwte's first V rows: no token is a padded row.
		p.add(op.EmbeddingGrad, dims(b, t, C, c.V), nil, bk.dres, m.tokens[k], g[m.lay.wte], g[m.lay.wpe])
	}
	done(p, stageEmbeddings)
}

// gradients is a training step's first program: clear the gradient
// accumulators the first micro-batch does not overwrite, the forward, loss
// and backward of every micro-batch (the gradient scaled by lossScale/K,
// so the K sum to the mean's), and the squared norm and non-finite count
// of the summed gradients.
func (m *Model) gradients(lossScale float64) program {
	p := m.backwardProgram(lossScale/float64(m.K), nil, nil)
	m.norm(&p)
	return p
}

// backwardProgram is gradients without the norm: each micro-batch's loss
// gradient scaled by gradScale, and done and embed (when not nil) given to
// the last micro-batch's backward.
func (m *Model) backwardProgram(gradScale float64, done func(p *program, stage int), embed func(p *program)) program {
	var p program
	// The products' weight gradients are written whole by the first
	// micro-batch (overwrite): only the rest is cleared.
	for _, v := range m.cleared {
		p.add(op.Fill, dims(int(v.Bytes/4)), nil, v)
	}
	for k := 0; k < m.K; k++ {
		m.forward(&p, k, m.B, m.Config.T)
		m.crossEntropy(&p, k, m.B*m.Config.T, gradScale, nil)
		var last func(*program, int)
		var lastEmbed func(*program)
		if k == m.K-1 {
			last, lastEmbed = done, embed
		}
		m.backward(&p, k, last, lastEmbed)
	}
	return p
}

// norm adds global_norm over the gradients: their squared norm and the
// count of non-finite elements.
func (m *Model) norm(p *program) {
	p.add(op.GlobalNorm, dims(int(m.lay.total)), nil, m.grad, m.sumsq, m.bad)
}

// update is a step's second program: AdamW on each group, the gradient
// multiplied by gradScale (the clipping factor over the loss scale).
func (m *Model) update(h Hyper, lr float64, t int64, gradScale float64) program {
	var p program
	for _, g := range m.groups {
		if g.n == 0 {
			continue
		}
		wd := 0.0
		if g.decay {
			wd = h.WeightDecay
		}
		set := []op.Setting{
			{Name: "lr", Value: lr}, {Name: "beta1", Value: h.Beta1}, {Name: "beta2", Value: h.Beta2},
			{Name: "eps", Value: h.Eps}, {Name: "weight_decay", Value: wd}, {Name: "t", Value: float64(t)},
			{Name: "grad_scale", Value: gradScale},
		}
		p.add(op.AdamW, dims(int(g.n)), set, g.master, g.grad, g.m, g.v, g.w)
	}
	return p
}
