package gpt

import (
	"context"
	"errors"
	"fmt"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/f16"
)

// Model is a GPT on a device: its parameters (f32 masters and the f16
// working copy the kernels read), their gradients and AdamW moments, and
// the activations of one micro-batch of B sequences, all in device
// buffers. It runs the programs of program.go; the host sends tokens and
// reads back scalars.
type Model struct {
	Config Config
	// B is the sequences per micro-batch, K the micro-batches per step.
	B, K int

	dev *vkern.Device
	lay *layout

	// The parameter arenas, one allocation each, laid out by lay: master,
	// moments and gradients in f32, the working copy in f16.
	master, work, grad, m, v *vkern.Buffer
	w16, g32                 []*vkern.Buffer // per tensor: its views of work and grad
	cleared                  []*vkern.Buffer // views of grad a step fills with zeros (layout.cleared)
	groups                   [2]group        // AdamW's: decayed, then not

	acts   *vkern.Buffer // the activations' allocation
	layers []layerActs
	top    topActs
	back   backActs

	tokens, targets []*vkern.Buffer // per micro-batch: B·T i32 each
	loss            []*vkern.Buffer // per micro-batch: B·T f32 each, views of lossAll
	lossAll         *vkern.Buffer   // the K loss buffers, lossStride f32 apart
	lossStride      int64
	sumsq, bad      *vkern.Buffer // global_norm's outputs: f32 and i32
	// results spans lossAll, sumsq and bad (adjacent in the slab), so a
	// step reads its losses and norm in one transfer; sumsqAt and badAt are
	// their byte offsets in it.
	results        *vkern.Buffer
	sumsqAt, badAt int64
	// batch spans the K micro-batches' tokens and targets (adjacent in the
	// slab), so a step sends them in one transfer; batchAt[2k] and
	// batchAt[2k+1] are tokens[k]'s and targets[k]'s byte offsets in it.
	batch   *vkern.Buffer
	batchAt []int64
	kept    reused // the gradients program of the last loss scale (Step)
	// The host's copies of batch and results, and results' losses decoded,
	// kept from step to step (writeBatches, readHost).
	hostBatch, hostResults []byte
	hostLosses             []float32
}

// group is one AdamW group: a contiguous range of the arenas.
type group struct {
	decay                 bool
	n                     int64
	master, grad, m, v, w *vkern.Buffer
}

// layerActs are what the forward of one block keeps for its backward.
type layerActs struct {
	x                *vkern.Buffer // the block's input, M×C f16
	h1, mean1, rstd1 *vkern.Buffer // ln_1's output and statistics
	qkv, att, lse    *vkern.Buffer // c_attn's output, attention's output and log-sum-exps
	xmid             *vkern.Buffer // x + attention's projection
	h2, mean2, rstd2 *vkern.Buffer // ln_2's
	fc, gelu         *vkern.Buffer // c_fc's output and its GELU, M×4C
}

// topActs: the last block's output, ln_f and the head.
type topActs struct {
	x, hf, mean, rstd *vkern.Buffer
	logits, dlogits   *vkern.Buffer // M×Vp f16
	// headBias is the head's constant bias, f16 Vp: 0 for the V tokens,
	// −Inf for the padded columns, whose logits it makes −Inf.
	headBias *vkern.Buffer
}

// backActs: the backward's scratch, reused by every block.
type backActs struct {
	dres, dh, datt *vkern.Buffer // M×C
	dqkv           *vkern.Buffer // M×3C
	dfc            *vkern.Buffer // M×4C
}

// slab plans one allocation cut into views.
type slab struct {
	slots []slot
	size  int64
}

type slot struct {
	dst       **vkern.Buffer
	off, size int64
}

func (s *slab) add(dst **vkern.Buffer, bytes int64) {
	s.slots = append(s.slots, slot{dst, s.size, bytes})
	s.size = (s.size + bytes + vkern.ViewAlign - 1) / vkern.ViewAlign * vkern.ViewAlign
}

func (s *slab) alloc(ctx context.Context, dev *vkern.Device) (*vkern.Buffer, error) {
	whole, err := dev.Alloc(ctx, max(s.size, 1))
	if err != nil {
		return nil, err
	}
	for _, sl := range s.slots {
		v, err := whole.View(ctx, sl.off, sl.size)
		if err != nil {
			whole.Free(ctx)
			return nil, err
		}
		*sl.dst = v
	}
	return whole, nil
}

// span is the byte range of the slab from first's start to last's end
// (slots added in that order), and the offsets of the slots between in it.
func (s *slab) span(first, last **vkern.Buffer) (off, size int64, at map[**vkern.Buffer]int64) {
	at = map[**vkern.Buffer]int64{}
	start := int64(-1)
	for _, sl := range s.slots {
		if sl.dst == first {
			start = sl.off
		}
		if start >= 0 {
			at[sl.dst] = sl.off - start
		}
		if sl.dst == last {
			return start, sl.off + sl.size - start, at
		}
	}
	return 0, 0, nil
}

// ErrTooLarge: the model at this batch does not fit the device's memory,
// or one of its buffers would be past what a buffer holds.
var ErrTooLarge = errors.New("gpt: too large for the device")

// New allocates cfg on dev for micro-batches of b sequences, k per step.
// The parameters are unset until Init or Load. It refuses, before
// allocating anything, a model that does not fit the device's free memory.
func New(ctx context.Context, dev *vkern.Device, cfg Config, b, k int) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if b < 1 || k < 1 {
		return nil, fmt.Errorf("gpt: batch %d and accumulation %d must each be at least 1", b, k)
	}
	if int64(b)*int64(cfg.T)*int64(cfg.Vp()) > 1<<40 {
		return nil, fmt.Errorf("%w: batch %d of %d tokens over a vocabulary of %d (padded to %d) is past what one buffer holds; lower --batch", ErrTooLarge, b, cfg.T, cfg.V, cfg.Vp())
	}
	m := &Model{Config: cfg, B: b, K: k, dev: dev, lay: newLayout(cfg)}
	need := m.bytes()
	mem, err := dev.Memory(ctx)
	if err != nil {
		return nil, err
	}
	if mem.Free > 0 && need > mem.Free {
		return nil, fmt.Errorf("%w: model %s at batch %d needs %.2f GB of buffers and the device has %.2f GB free; lower --batch (and raise --accum to keep the tokens per step)",
			ErrTooLarge, cfg.Name, b, float64(need)/1e9, float64(mem.Free)/1e9)
	}
	if err := m.alloc(ctx); err != nil {
		m.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return m, nil
}

// bytes is what New allocates: five parameter arenas and the activations.
func (m *Model) bytes() int64 {
	var s slab
	var dummy *vkern.Buffer
	m.planActs(&s, func(**vkern.Buffer) **vkern.Buffer { return &dummy })
	return 18*m.lay.total + s.size
}

func (m *Model) alloc(ctx context.Context) error {
	n := m.lay.total
	var err error
	for _, a := range []struct {
		dst   **vkern.Buffer
		bytes int64
	}{{&m.master, 4 * n}, {&m.work, 2 * n}, {&m.grad, 4 * n}, {&m.m, 4 * n}, {&m.v, 4 * n}} {
		if *a.dst, err = m.dev.Alloc(ctx, a.bytes); err != nil {
			return err
		}
	}
	for _, t := range m.lay.tensors {
		w, err := m.work.View(ctx, 2*t.offset, 2*t.arenaElements())
		if err != nil {
			return err
		}
		g, err := m.grad.View(ctx, 4*t.offset, 4*t.arenaElements())
		if err != nil {
			return err
		}
		m.w16, m.g32 = append(m.w16, w), append(m.g32, g)
	}
	for _, r := range m.lay.cleared() {
		v, err := m.grad.View(ctx, 4*r[0], 4*(r[1]-r[0]))
		if err != nil {
			return err
		}
		m.cleared = append(m.cleared, v)
	}
	for i, r := range [][2]int64{{0, m.lay.decayEnd}, {m.lay.decayEnd, n}} {
		g := group{decay: i == 0, n: r[1] - r[0]}
		if g.n == 0 {
			continue
		}
		for _, v := range []struct {
			dst  **vkern.Buffer
			from *vkern.Buffer
			size int64
		}{{&g.master, m.master, 4}, {&g.grad, m.grad, 4}, {&g.m, m.m, 4}, {&g.v, m.v, 4}, {&g.w, m.work, 2}} {
			if *v.dst, err = v.from.View(ctx, v.size*r[0], v.size*g.n); err != nil {
				return err
			}
		}
		m.groups[i] = g
	}
	var s slab
	m.planActs(&s, func(p **vkern.Buffer) **vkern.Buffer { return p })
	if m.acts, err = s.alloc(ctx, m.dev); err != nil {
		return err
	}
	off, size, at := s.span(&m.lossAll, &m.bad)
	if m.results, err = m.acts.View(ctx, off, size); err != nil {
		return err
	}
	m.sumsqAt, m.badAt = at[&m.sumsq], at[&m.bad]
	off, size, at = s.span(&m.tokens[0], &m.targets[m.K-1])
	if m.batch, err = m.acts.View(ctx, off, size); err != nil {
		return err
	}
	for k := range m.K {
		m.batchAt = append(m.batchAt, at[&m.tokens[k]], at[&m.targets[k]])
	}
	bias := make([]uint16, m.Config.Vp())
	for j := m.Config.V; j < len(bias); j++ {
		bias[j] = f16.NegInf
	}
	if err := m.top.headBias.WriteF16(ctx, bias); err != nil {
		return err
	}
	M := int64(m.B) * int64(m.Config.T)
	m.loss = make([]*vkern.Buffer, m.K)
	for k := range m.loss {
		if m.loss[k], err = m.lossAll.View(ctx, 4*int64(k)*m.lossStride, 4*M); err != nil {
			return err
		}
	}
	return nil
}

// planActs adds every activation buffer to s; at(p) is where the view
// goes (a dummy while only sizing).
func (m *Model) planActs(s *slab, at func(**vkern.Buffer) **vkern.Buffer) {
	c := m.Config
	M := int64(m.B) * int64(c.T)
	C, Vp := int64(c.C), int64(c.Vp())
	f16 := func(p **vkern.Buffer, n int64) { s.add(at(p), 2*n) }
	f32 := func(p **vkern.Buffer, n int64) { s.add(at(p), 4*n) }
	m.layers = make([]layerActs, c.Layers)
	for l := range m.layers {
		a := &m.layers[l]
		f16(&a.x, M*C)
		f16(&a.h1, M*C)
		f32(&a.mean1, M)
		f32(&a.rstd1, M)
		f16(&a.qkv, 3*M*C)
		f16(&a.att, M*C)
		f32(&a.lse, M*int64(c.Heads))
		f16(&a.xmid, M*C)
		f16(&a.h2, M*C)
		f32(&a.mean2, M)
		f32(&a.rstd2, M)
		f16(&a.fc, 4*M*C)
		f16(&a.gelu, 4*M*C)
	}
	t := &m.top
	f16(&t.x, M*C)
	f16(&t.hf, M*C)
	f32(&t.mean, M)
	f32(&t.rstd, M)
	f16(&t.logits, M*Vp)
	f16(&t.dlogits, M*Vp)
	f16(&t.headBias, Vp)
	b := &m.back
	for _, p := range []**vkern.Buffer{&b.dres, &b.dh, &b.datt} {
		f16(p, M*C)
	}
	f16(&b.dqkv, 3*M*C)
	f16(&b.dfc, 4*M*C)
	m.tokens, m.targets = make([]*vkern.Buffer, m.K), make([]*vkern.Buffer, m.K)
	for k := 0; k < m.K; k++ {
		s.add(at(&m.tokens[k]), 4*M)
		s.add(at(&m.targets[k]), 4*M)
	}
	// The K loss buffers are views of one, read back at once: micro-batch
	// k's M rows start at f32 k·⌈M/64⌉·64, on a ViewAlign boundary.
	m.lossStride = (M + 63) / 64 * 64
	s.add(at(&m.lossAll), 4*m.lossStride*int64(m.K))
	f32(&m.sumsq, 1)
	s.add(at(&m.bad), 4)
}

// Close frees the model's buffers.
func (m *Model) Close(ctx context.Context) error {
	var first error
	for _, b := range []*vkern.Buffer{m.master, m.work, m.grad, m.m, m.v, m.acts} {
		if b == nil {
			continue
		}
		if err := b.Free(ctx); err != nil && first == nil {
			first = err
		}
	}
	m.master, m.work, m.grad, m.m, m.v, m.acts = nil, nil, nil, nil, nil, nil
	return first
}
