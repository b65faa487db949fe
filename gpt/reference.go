package gpt

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/vkern/vkern/f16"
	"github.com/vkern/vkern/op"
	"github.com/vkern/vkern/oracle"
)

// The float64 reference GPT (TRAINING.md, level 2): the model's loss and
// gradients composed from the ops' oracles, each op computed in float64
// and its outputs stored in the op's output types (f16, f32), as the
// device stores them. It is written apart from the device program and
// shares with it only the op contracts.
//
// The reference is GPT-2 over its V tokens, unpadded: the head is
// gemm_grad_a's hf·wteᵀ with wte's V rows, and cross_entropy runs over V
// columns, where the device runs linear_nt and cross_entropy over Vp
// (Config.Vp), so the whole-step check shows that the padded program
// computes GPT-2's step. It reads and writes parameters in the arena
// layout, whose padded rows of wte it leaves zero: their gradient is zero,
// and AdamW keeps a zero weight with zero gradient and moments at zero.
//
// Perturbed runs estimate the tolerance: in one, every stored output is
// not the reference value rounded to nearest but the value moved by its
// op's bound, up or down at random, then rounded, a trajectory the per-op
// verifier would accept. How far such runs land from the nearest-rounded
// one is how far a correct device may land.

// refRun is one execution of the reference.
type refRun struct {
	ctx   context.Context
	arith oracle.Arithmetic
	rng   *rand.Rand // nil: round to nearest
	err   error
}

// run computes o on ins and returns its outputs stored in their types.
func (r *refRun) run(o *op.Op, d []int64, set []op.Setting, ins ...oracle.Input) []oracle.Input {
	outs := o.Outputs()
	if r.err != nil {
		return make([]oracle.Input, len(outs))
	}
	s, err := o.Shape(d, set...)
	if err == nil {
		var refs []*oracle.Reference
		if refs, err = oracle.Compute(r.ctx, o, s, ins, r.arith); err == nil {
			res := make([]oracle.Input, len(outs))
			for i, p := range outs {
				res[i] = r.store(p.DType, refs[i])
			}
			return res
		}
	}
	r.err = fmt.Errorf("gpt: reference %s: %w", o.Name, err)
	return make([]oracle.Input, len(outs))
}

// store rounds a reference's values to dtype: to nearest, or, perturbed,
// after moving each by its bound in a random direction.
func (r *refRun) store(dtype op.DType, ref *oracle.Reference) oracle.Input {
	v := func(i int) float64 {
		x := ref.Value[i]
		if r.rng != nil && !math.IsInf(ref.Bound[i], 0) {
			if r.rng.IntN(2) == 0 {
				x += ref.Bound[i]
			} else {
				x -= ref.Bound[i]
			}
		}
		return x
	}
	n := len(ref.Value)
	switch dtype {
	case op.F16:
		out := make([]uint16, n)
		for i := range out {
			out[i] = f16.FromFloat64(v(i))
		}
		return oracle.Input{F16: out}
	case op.F32:
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(v(i))
		}
		return oracle.Input{F32: out}
	default:
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(ref.Value[i])
		}
		return oracle.Input{I32: out}
	}
}

// ReferenceResult is the reference's account of one training step on one
// micro-batch.
type ReferenceResult struct {
	Loss float64
	// Grads is every parameter's gradient, scaled by the loss scale, in
	// the arena layout (padding 0).
	Grads []float32
	// GradNorm is the unscaled global norm; Skipped says a gradient was
	// not finite, so that no update was made.
	GradNorm float64
	Skipped  bool
	// Master is the parameters after the update.
	Master []float32
}

// Reference computes one training step on K micro-batches (inputs[k],
// targets[k]: B·T tokens each) from the parameters master and moments m1, m2
// (in the arena layout) at run state st, as Model.Step does: the loss and
// the gradients (scaled by st.LossScale), the global norm, and AdamW's
// update of each group. perturb 0 rounds every stored output to nearest;
// another value perturbs them, drawn from PCG(perturb, 0).
func Reference(ctx context.Context, cfg Config, b int, master, m1, m2 []float32, inputs, targets [][]int32, h Hyper, st State, arith oracle.Arithmetic, perturb uint64) (*ReferenceResult, error) {
	lossScale := st.LossScale
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lay := newLayout(cfg)
	T, C, V, H := cfg.T, cfg.C, cfg.V, cfg.Heads
	M := b * T
	K := len(inputs)
	if len(master) != int(lay.total) || len(m1) != int(lay.total) || len(m2) != int(lay.total) || K == 0 || len(targets) != K {
		return nil, fmt.Errorf("gpt: reference given %d parameters, %d and %d moments and %d, %d micro-batches; want %d and at least one",
			len(master), len(m1), len(m2), len(inputs), len(targets), lay.total)
	}
	for k := range inputs {
		if len(inputs[k]) != M || len(targets[k]) != M {
			return nil, fmt.Errorf("gpt: reference micro-batch %d has %d inputs and %d targets, want B·T = %d", k, len(inputs[k]), len(targets[k]), M)
		}
	}
	r := &refRun{ctx: ctx, arith: arith}
	if perturb != 0 {
		r.rng = rand.New(rand.NewPCG(perturb, 0))
	}
	// The f16 working copy: each master rounded to nearest, as on the
	// device (not perturbed: the host writes it).
	w := func(i int) oracle.Input {
		t := lay.tensors[i]
		out := make([]uint16, t.elements())
		for j := range out {
			out[j] = f16.FromFloat64(float64(master[t.offset+int64(j)]))
		}
		return oracle.Input{F16: out}
	}
	// linear's and layernorm_grad's residual operand where its switch is
	// off (the residual connections are in c_proj's epilogue and in
	// layernorm_grad, as the program has them).
	noResidual := oracle.Input{F16: []uint16{}}
	// layernorm_grad's column sums where the program has them off (ln_1
	// of block 0), and linear_grad_w's db here, where bias_grad gives the
	// biases' gradients: the c_proj biases' gradients come from the LayerNorm
	// backward before them, as in the program, since the sums are of the
	// f32 stream gradient before its rounding, not bias_grad's of the f16.
	noSum := oracle.Input{F32: []float32{}}
	grads := make([]oracle.Input, len(lay.tensors))
	for i, t := range lay.tensors {
		grads[i] = oracle.Input{F32: make([]float32, t.elements())}
	}
	var lossSum float64
	for k := range inputs {
		tokens, labels := oracle.Input{I32: inputs[k]}, oracle.Input{I32: targets[k]}

		// Forward.
		type saved struct{ x, h1, mean1, rstd1, qkv, att, lse, xmid, h2, mean2, rstd2, fc, gelu oracle.Input }
		acts := make([]saved, cfg.Layers)
		x := r.run(op.Embedding, dims(b, T, C, V), nil, tokens, w(lay.wte), w(lay.wpe))[0]
		for l := range acts {
			bl, a := lay.blocks[l], &acts[l]
			a.x = x
			o := r.run(op.LayerNorm, dims(M, C), nil, a.x, w(bl.ln1w), w(bl.ln1b))
			a.h1, a.mean1, a.rstd1 = o[0], o[1], o[2]
			a.qkv = r.run(op.Linear, dims(M, 3*C, C), nil, a.h1, w(bl.attnW), w(bl.attnB), noResidual)[0]
			o = r.run(op.Attention, dims(b, T, C, H), nil, a.qkv)
			a.att, a.lse = o[0], o[1]
			a.xmid = r.run(op.Linear, dims(M, C, C), withResidual, a.att, w(bl.projW), w(bl.projB), a.x)[0]
			o = r.run(op.LayerNorm, dims(M, C), nil, a.xmid, w(bl.ln2w), w(bl.ln2b))
			a.h2, a.mean2, a.rstd2 = o[0], o[1], o[2]
			a.fc = r.run(op.Linear, dims(M, 4*C, C), nil, a.h2, w(bl.fcW), w(bl.fcB), noResidual)[0]
			a.gelu = r.run(op.GELU, dims(4*M*C), nil, a.fc)[0]
			x = r.run(op.Linear, dims(M, C, 4*C), withResidual, a.gelu, w(bl.mlpW), w(bl.mlpB), a.xmid)[0]
		}
		o := r.run(op.LayerNorm, dims(M, C), nil, x, w(lay.lnfW), w(lay.lnfB))
		hf, meanf, rstdf := o[0], o[1], o[2]
		logits := r.run(op.GemmGradA, dims(M, C, V), nil, hf, w(lay.wte))[0]
		o = r.run(op.CrossEntropy, dims(M, V), []op.Setting{{Name: "grad_scale", Value: lossScale / float64(K)}}, logits, labels)
		rows, dlogits := o[0], o[1]

		// Backward: every gradient added into its accumulator.
		acc := func(i int, in oracle.Input) { grads[i] = in }
		dh := r.run(op.Linear, dims(M, C, V), noBias, dlogits, w(lay.wte), oracle.Input{F16: []uint16{}}, noResidual)[0]
		acc(lay.wte, r.run(op.LinearGradW, dims(M, C, V), nil, dlogits, hf, grads[lay.wte], noSum)[0])
		last := lay.blocks[cfg.Layers-1]
		o = r.run(op.LayerNormGrad, dims(M, C), withSum, dh, x, w(lay.lnfW), meanf, rstdf, noResidual, grads[lay.lnfW], grads[lay.lnfB], grads[last.mlpB])
		dres := o[0]
		acc(lay.lnfW, o[1])
		acc(lay.lnfB, o[2])
		acc(last.mlpB, o[3])
		for l := cfg.Layers - 1; l >= 0; l-- {
			bl, a := lay.blocks[l], &acts[l]
			dgelu := r.run(op.GemmGradA, dims(M, C, 4*C), nil, dres, w(bl.mlpW))[0]
			acc(bl.mlpW, r.run(op.LinearGradW, dims(M, C, 4*C), nil, a.gelu, dres, grads[bl.mlpW], noSum)[0])
			dfc := r.run(op.GELUGrad, dims(4*M*C), nil, a.fc, dgelu)[0]
			dh = r.run(op.GemmGradA, dims(M, 4*C, C), nil, dfc, w(bl.fcW))[0]
			acc(bl.fcW, r.run(op.LinearGradW, dims(M, 4*C, C), nil, a.h2, dfc, grads[bl.fcW], noSum)[0])
			acc(bl.fcB, r.run(op.BiasGrad, dims(M, 4*C), nil, dfc, grads[bl.fcB])[0])
			o = r.run(op.LayerNormGrad, dims(M, C), withResidualSum, dh, a.xmid, w(bl.ln2w), a.mean2, a.rstd2, dres, grads[bl.ln2w], grads[bl.ln2b], grads[bl.projB])
			acc(bl.ln2w, o[1])
			acc(bl.ln2b, o[2])
			acc(bl.projB, o[3])
			dres = o[0]
			datt := r.run(op.GemmGradA, dims(M, C, C), nil, dres, w(bl.projW))[0]
			acc(bl.projW, r.run(op.LinearGradW, dims(M, C, C), nil, a.att, dres, grads[bl.projW], noSum)[0])
			dqkv := r.run(op.AttentionGrad, dims(b, T, C, H), nil, datt, a.qkv, a.att, a.lse)[0]
			dh = r.run(op.GemmGradA, dims(M, 3*C, C), nil, dqkv, w(bl.attnW))[0]
			acc(bl.attnW, r.run(op.LinearGradW, dims(M, 3*C, C), nil, a.h1, dqkv, grads[bl.attnW], noSum)[0])
			acc(bl.attnB, r.run(op.BiasGrad, dims(M, 3*C), nil, dqkv, grads[bl.attnB])[0])
			set, sum := withResidual, noSum // block 0's ln_1: no c_proj below
			if l > 0 {
				set, sum = withResidualSum, grads[lay.blocks[l-1].mlpB]
			}
			o = r.run(op.LayerNormGrad, dims(M, C), set, dh, a.x, w(bl.ln1w), a.mean1, a.rstd1, dres, grads[bl.ln1w], grads[bl.ln1b], sum)
			acc(bl.ln1w, o[1])
			acc(bl.ln1b, o[2])
			if l > 0 {
				acc(lay.blocks[l-1].mlpB, o[3])
			}
			dres = o[0]
		}
		o = r.run(op.EmbeddingGrad, dims(b, T, C, V), nil, dres, tokens, grads[lay.wte], grads[lay.wpe])
		acc(lay.wte, o[0])
		acc(lay.wpe, o[1])
		if r.err != nil {
			return nil, r.err
		}
		for _, x := range rows.F32 {
			lossSum += float64(x)
		}
	}

	res := &ReferenceResult{Grads: make([]float32, lay.total), Master: append([]float32(nil), master...)}
	res.Loss = lossSum / float64(K*M)
	for i, t := range lay.tensors {
		copy(res.Grads[t.offset:], grads[i].F32)
	}

	// The update, as Model.step.
	o := r.run(op.GlobalNorm, dims(int(lay.total)), nil, oracle.Input{F32: res.Grads})
	if r.err != nil {
		return nil, r.err
	}
	sumsq := float64(o[0].F32[0])
	res.GradNorm = math.Sqrt(sumsq) / lossScale
	if o[1].I32[0] > 0 || math.IsInf(sumsq, 0) || math.IsNaN(sumsq) {
		res.Skipped = true
		return res, nil
	}
	clip := 1.0
	if h.Clip > 0 {
		clip = min(1, h.Clip/(res.GradNorm+1e-6))
	}
	for _, g := range [][2]int64{{0, lay.decayEnd}, {lay.decayEnd, lay.total}} {
		if g[1] == g[0] {
			continue
		}
		wd := 0.0
		if g[0] == 0 {
			wd = h.WeightDecay
		}
		set := []op.Setting{
			{Name: "lr", Value: h.LRAt(st.Step)}, {Name: "beta1", Value: h.Beta1}, {Name: "beta2", Value: h.Beta2},
			{Name: "eps", Value: h.Eps}, {Name: "weight_decay", Value: wd}, {Name: "t", Value: float64(st.Updates + 1)},
			{Name: "grad_scale", Value: clip / lossScale},
		}
		span := func(a []float32) oracle.Input { return oracle.Input{F32: a[g[0]:g[1]]} }
		o = r.run(op.AdamW, dims(int(g[1]-g[0])), set, span(master), span(res.Grads), span(m1), span(m2))
		if r.err != nil {
			return nil, r.err
		}
		copy(res.Master[g[0]:], o[0].F32)
	}
	return res, nil
}
