package gpt

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/collective"
	"github.com/vkern/vkern/internal/le"
	"github.com/vkern/vkern/op"
)

// Data parallelism (TRAINING.md, "Across GPUs and machines"): N replicas
// of the model, one per rank (a device, its kernel server), each training
// on its shard of every step's batch; the gradients summed over the ranks
// before the norm, so that every rank takes the same decision and applies
// the same update, and the replicas stay identical.
//
// The global batch. Step s's batch is the same for any N: the windows of
// data.Corpus.Batch(seed, s, B·K, T), cut into K micro-batches of B
// windows, K being the run's micro-batches per step (Run.Accum, the
// --accum of all ranks together). Rank r of N takes the contiguous block
// of micro-batches [r·K/N, (r+1)·K/N), so N must divide K; a checkpoint
// resumes on any N that does.
//
// The arithmetic. Each micro-batch's loss gradient is scaled by
// lossScale/K (K the global count), as on one device, so the sum over the
// ranks of their accumulated gradients is the one-device gradient of the
// mean loss. The sum order differs from one device's, though: there each
// parameter's accumulator adds micro-batch after micro-batch; here each
// rank accumulates its block and the blocks are then summed (rank order on
// the host collective, NCCL's order on GPUs). A parameter that receives
// one contribution per micro-batch gets the same bits when every rank
// holds one micro-batch and N = 2; wte, which receives two (the head's and
// the embedding's), wpe (on the device engine every rank adds all ranks'
// last embedding gradients after the all-reduce of the rest), and larger N
// do not, so losses agree with one device's within rounding, not bit for
// bit (the first step's loss is the same bits: the per-row losses are
// gathered and averaged in the one-device order). On one rank the path is
// the one-device program plus collectives that copy nothing, and gives its
// bits exactly.
//
// A step on rank r. The device engine (NCCL; the cpu backend's one-rank
// communicators) runs in one RunBatch: the forward and backward of the
// rank's micro-batches, and, as the last micro-batch's backward finishes
// each bucket of gradients (wte and wpe once the head has added its share
// to wte, then about BucketBytes of whole blocks, ln_f first), that
// bucket's all-reduce, which the server runs on its collective stream
// while the backward goes on; at the end, instead of an all-reduce of the
// embeddings' 154 MB (gpt2) after the backward, every rank's gradient into
// the embedding (B·T·C f16) and tokens all-gathered, and every rank adding
// all of them, in rank order, into wte's and wpe's summed gradients; then
// the per-row losses all-gathered, global_norm over the summed gradients,
// and every rank's norm and non-finite count all-gathered. The host
// engine (cpu servers of several ranks) runs the backward, sums the whole
// gradient arena on the host, gathers the losses, then runs global_norm.
// Every rank then reads the gathered norms: they must be the same bits on
// every rank (the same kernel on the same summed gradients), or the step
// fails naming the ranks, so clipping and loss scaling agree everywhere.
//
// Faults. A rank's step runs under its peer's watch (collective.Peer): a
// rank that dies, stops or fails ends every other rank's step with an
// error naming it, its device calls cancelled (their servers ended, so no
// communicator is left waiting), well within the step's Timeout.

// DefaultBucketBytes is the gradient bytes per all-reduce, as PyTorch's
// DistributedDataParallel's default bucket_cap_mb (25 MiB).
const DefaultBucketBytes = 25 << 20

// DefaultCommTimeout bounds a data-parallel step's device calls, the
// collectives' waits on slower ranks included.
const DefaultCommTimeout = 5 * time.Minute

// ParallelOptions set up a data-parallel run (OpenParallel).
type ParallelOptions struct {
	Backend  string // as vkern.Options.Backend
	CacheDir string
	// GPUs is the ranks this process runs, one device each (`vkern train
	// --gpus N`; on cpu, N cpu servers). Zero with Env set.
	GPUs int
	// Env, when set, makes this process one rank of a multi-process run:
	// rank Env.Rank of Env.Size on GPU Env.LocalRank, the processes
	// meeting at Env.Addr.
	Env *collective.Env
	// Config, B and Accum are the model, the sequences per micro-batch and
	// the micro-batches per step of the whole run (all ranks).
	Config   Config
	B, Accum int
	// Match is what every rank must share besides what OpenParallel adds
	// (the backend, device runtime and driver, collective engine, model,
	// B, Accum): vkern's version, the run's seed and hyperparameters.
	Match map[string]string
	// BucketBytes is the gradient bytes per all-reduce
	// (DefaultBucketBytes).
	BucketBytes int64
	// Timeout bounds a step's device calls (DefaultCommTimeout), and the
	// start: every rank must have joined within it.
	Timeout time.Duration
	// Peer sets the heartbeats (collective.Options).
	Peer collective.Options
}

// Parallel is the ranks of a data-parallel run that this process holds:
// all of them (--gpus N) or one (a process per GPU). Trainer.Parallel
// takes it. After its last step a run calls Finish, then Close: a rank
// that closed while another was still in its last update would end that
// rank's step as a departure.
type Parallel struct {
	// Replicas are this process's ranks, in rank order.
	Replicas []*Replica
	// World is the number of ranks in all.
	World   int
	timeout time.Duration
	peers   []*collective.Peer
	devs    []*vkern.Device
}

// Replica is one rank: its model, its group, and the buffers the gathered
// losses and norms land in.
type Replica struct {
	Model *Model
	Group *collective.Group

	slab      *vkern.Buffer
	gathered  *vkern.Buffer // World·K·lossStride f32: every rank's per-row losses
	gdx, gtok *vkern.Buffer // World·B·T·C f16, World·B·T i32: every rank's last embedding gradient and tokens (device engine only)
	kept      reused        // the gradients program of the last loss scale
	// results spans gathered, norms and bads (adjacent in the slab): a
	// step reads them in one transfer; normsAt and badsAt are the byte
	// offsets of the last two in it.
	results         *vkern.Buffer
	normsAt, badsAt int64
	norms, bads     *vkern.Buffer // World f32, World i32: every rank's global_norm
	buckets         []bucket
	views           []*vkern.Buffer // the gradient ranges the buckets all-reduce, in order
}

// bucket is a set of gradient ranges finished at the same point of the
// backward (after stage, as backward's done counts), all-reduced together.
type bucket struct {
	stage  int
	ranges [][2]int64 // element ranges of the gradient arena
}

// Rank is the replica's rank.
func (r *Replica) Rank() int { return r.Group.Rank() }

// OpenParallel starts this process's ranks: it opens their devices, meets
// the other ranks (in this process, or over TCP), checks that every rank
// runs the same thing, makes the communicator (NCCL; on the cpu backend
// with several ranks, the host collective) and allocates a model per
// rank. The parameters are unset until Trainer.Init or
// Trainer.SetParams.
func OpenParallel(ctx context.Context, o ParallelOptions) (_ *Parallel, err error) {
	if err := o.Config.Validate(); err != nil {
		return nil, err
	}
	world, local := o.GPUs, o.GPUs
	if o.Env != nil {
		if o.GPUs > 1 {
			return nil, fmt.Errorf("gpt: --gpus %d with WORLD_SIZE=%d: a process of a multi-process run drives one GPU (LOCAL_RANK); start one process per GPU", o.GPUs, o.Env.Size)
		}
		world, local = o.Env.Size, 1
	}
	if world < 1 {
		return nil, fmt.Errorf("gpt: a data-parallel run of %d ranks; want at least 1", world)
	}
	if o.B < 1 || o.Accum < 1 || o.Accum%world != 0 {
		return nil, fmt.Errorf("gpt: %d micro-batches per step cannot be shared by %d ranks: each rank takes the same number (the run's --accum, which a resumed run keeps, must be a multiple of the ranks; choose %s)",
			o.Accum, world, divisorsText(o.Accum))
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultCommTimeout
	}
	if o.BucketBytes <= 0 {
		o.BucketBytes = DefaultBucketBytes
	}
	par := &Parallel{World: world, timeout: o.Timeout}
	defer func() {
		if err != nil {
			par.Close(context.WithoutCancel(ctx))
		}
	}()
	// Devices, and what each says of itself for the handshake. (A first
	// build of a GPU server takes minutes; the ranks' meeting is timed
	// from after it.)
	matches := make([]map[string]string, local)
	for i := 0; i < local; i++ {
		gpu := i
		if o.Env != nil {
			gpu = o.Env.LocalRank
		}
		dev, err := vkern.Open(ctx, vkern.Options{Backend: o.Backend, CacheDir: o.CacheDir, GPU: gpu})
		if err != nil {
			return nil, fmt.Errorf("gpt: rank %d's device (GPU %d): %w", firstRank(o, i), gpu, err)
		}
		par.devs = append(par.devs, dev)
		if matches[i], err = deviceMatch(ctx, dev, world, o); err != nil {
			return nil, fmt.Errorf("gpt: rank %d's device: %w", firstRank(o, i), err)
		}
	}

	// The ranks meet.
	startCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if o.Env != nil {
		p, err := collective.Join(startCtx, *o.Env, collective.NewHello(o.Env.Rank, world, matches[0]), o.Peer)
		if err != nil {
			return nil, fmt.Errorf("gpt: rank %d meeting the others at %s: %w", o.Env.Rank, o.Env.Addr, err)
		}
		par.peers = []*collective.Peer{p}
	} else {
		peers, err := collective.Local(startCtx, world, func(r int) collective.Hello { return collective.NewHello(r, world, matches[r]) }, o.Peer)
		if err != nil {
			return nil, err
		}
		par.peers = peers
	}

	// The communicator, every local rank joining at once, and the models.
	// The cpu servers' communicators have one rank: several are joined on
	// the host.
	host := matches[0]["backend"] == "cpu" && world > 1
	par.Replicas = make([]*Replica, local)
	err = eachRank(local, func(i int) error {
		rep := &Replica{}
		par.Replicas[i] = rep
		var err error
		if host {
			rep.Group = collective.NewHostGroup(par.peers[i], par.devs[i])
		} else if rep.Group, err = collective.NewDeviceGroup(startCtx, par.peers[i], par.devs[i]); err != nil {
			return err
		}
		if err := rep.alloc(ctx, par.devs[i], o, world); err != nil {
			par.peers[i].Abort(err)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return par, nil
}

func firstRank(o ParallelOptions, i int) int {
	if o.Env != nil {
		return o.Env.Rank
	}
	return i
}

// divisorsText lists the rank counts that share k micro-batches.
func divisorsText(k int) string {
	var s string
	for d := 1; d <= k && d <= 64; d++ {
		if k%d == 0 {
			if s != "" {
				s += ", "
			}
			s += fmt.Sprint(d)
		}
	}
	return "a rank count among " + s + ", or a new run whose --accum the ranks divide"
}

// deviceMatch is what the handshake compares of a rank's device: the
// backend, its runtime and driver, and its collective engine's version.
func deviceMatch(ctx context.Context, dev *vkern.Device, world int, o ParallelOptions) (map[string]string, error) {
	info, err := dev.Info(ctx)
	if err != nil {
		return nil, err
	}
	m := map[string]string{
		"backend": info.Backend, "runtime": info.Device["runtime"], "driver": info.Device["driver"],
		"collectives": info.Device["collectives"], "model": o.Config.String(),
		"batch": fmt.Sprint(o.B), "accum": fmt.Sprint(o.Accum), "source_sha256": info.SourceSHA256,
	}
	for k, v := range o.Match {
		m[k] = v
	}
	if info.Backend != "cpu" || world == 1 {
		eng, err := dev.CollectiveEngine(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w; data-parallel training on %s needs it (`vkern doctor` says where it looks)", err, info.Backend)
		}
		m["collectives"] = fmt.Sprintf("%s %d", m["collectives"], eng.Version)
	}
	return m, nil
}

// alloc makes the replica's model and its gathering buffers, and plans
// its buckets. The embedding's gathered gradient and tokens are the device
// engine's alone (gradients' embed); the host engine sums whole arenas.
func (rep *Replica) alloc(ctx context.Context, dev *vkern.Device, o ParallelOptions, world int) error {
	m, err := New(ctx, dev, o.Config, o.B, o.Accum/world)
	if err != nil {
		return err
	}
	rep.Model = m
	var s slab
	s.add(&rep.gathered, 4*int64(world)*int64(m.K)*m.lossStride)
	s.add(&rep.norms, 4*int64(world))
	s.add(&rep.bads, 4*int64(world))
	if rep.Group.Comm() != nil {
		rows := int64(world) * int64(m.B) * int64(m.Config.T)
		s.add(&rep.gdx, 2*rows*int64(m.Config.C))
		s.add(&rep.gtok, 4*rows)
	}
	if rep.slab, err = s.alloc(ctx, dev); err != nil {
		return err
	}
	off, size, at := s.span(&rep.gathered, &rep.bads)
	if rep.results, err = rep.slab.View(ctx, off, size); err != nil {
		return err
	}
	rep.normsAt, rep.badsAt = at[&rep.norms], at[&rep.bads]
	rep.buckets = m.lay.buckets(o.BucketBytes)
	for _, b := range rep.buckets {
		for _, r := range b.ranges {
			v, err := m.grad.View(ctx, 4*r[0], 4*(r[1]-r[0]))
			if err != nil {
				return err
			}
			rep.views = append(rep.views, v)
		}
	}
	return nil
}

// buckets groups the gradient arena for the all-reduces, in the order the
// backward finishes it: wte and wpe first, a bucket of their own once the
// head has added its share (stage Layers+1: the last micro-batch's
// embeddings are added on every rank after it, gradients.embed), then ln_f
// (stage Layers) and blocks Layers−1 … 0, cut where a bucket reaches
// target bytes. A bucket's blocks lo…hi are two ranges (their matrices
// among the decayed tensors, their vectors among the rest); ln_f extends
// the second to the arena's end.
func (l *layout) buckets(target int64) []bucket {
	L := len(l.blocks)
	matStart := func(b int) int64 { // where block b's matrices start; L: the end of the decayed range
		if b == L {
			return l.decayEnd
		}
		return l.tensors[l.blocks[b].attnW].offset
	}
	vecStart := func(b int) int64 { // where block b's vectors start; L: ln_f's
		if b == L {
			return l.tensors[l.lnfW].offset
		}
		return l.tensors[l.blocks[b].ln1w].offset
	}
	out := []bucket{{stage: L + 1, ranges: [][2]int64{{0, matStart(0)}}}} // wte, wpe
	var bytes int64
	hi, withHead := L-1, false
	flush := func(lo, stage int) {
		var rs [][2]int64
		if matStart(lo) < matStart(hi+1) {
			rs = append(rs, [2]int64{matStart(lo), matStart(hi + 1)})
		}
		end := vecStart(hi + 1)
		if withHead {
			end = l.total
		}
		if vecStart(lo) < end {
			rs = append(rs, [2]int64{vecStart(lo), end})
		}
		out = append(out, bucket{stage: stage, ranges: rs})
		bytes, hi, withHead = 0, lo-1, false
	}
	bytes, withHead = 4*(l.total-vecStart(L)), true
	if bytes >= target {
		flush(L, L)
	}
	for b := L - 1; b >= 0; b-- {
		bytes += 4 * ((matStart(b+1) - matStart(b)) + (vecStart(b+1) - vecStart(b)))
		if bytes >= target && b > 0 {
			flush(b, b)
		}
	}
	flush(0, 0)
	return out
}

// gradients is rank rep's first program on the device engine: the
// backward with each bucket's all-reduce issued as it is finished, the
// losses gathered, global_norm over the summed gradients, every rank's
// norm gathered.
func (rep *Replica) gradients(lossScale float64) program {
	m, comm := rep.Model, rep.Group.Comm()
	world := rep.Group.Size()
	next, view := 0, 0
	done := func(p *program, stage int) {
		for ; next < len(rep.buckets) && rep.buckets[next].stage == stage; next++ {
			for range rep.buckets[next].ranges {
				v := rep.views[view]
				view++
				p.calls = append(p.calls, comm.AllReduceCall(v, v, v.Bytes/4, op.F32, vkern.Sum))
			}
		}
	}
	// The last micro-batch's embeddings: every rank gathers every rank's
	// gradient into the embedding and tokens, and adds them all, in rank
	// order, into wte's and wpe's gradients, all-reduced by then (their
	// bucket leaves after the head). Every rank adds the same rows in the
	// same order: the same bits everywhere, with no all-reduce after the
	// embeddings.
	M, c := int64(m.B)*int64(m.Config.T), m.Config
	embed := func(p *program) {
		p.calls = append(p.calls,
			comm.AllGatherCall(m.back.dres, rep.gdx, M*int64(c.C), op.F16),
			comm.AllGatherCall(m.tokens[m.K-1], rep.gtok, M, op.I32))
		p.add(op.EmbeddingGrad, dims(world*m.B, c.T, c.C, c.V), nil, rep.gdx, rep.gtok, m.g32[m.lay.wte], m.g32[m.lay.wpe])
	}
	p := m.backwardProgram(lossScale/float64(m.K*world), done, embed)
	p.calls = append(p.calls, comm.AllGatherCall(m.lossAll, rep.gathered, int64(m.K)*m.lossStride, op.F32))
	m.norm(&p)
	p.calls = append(p.calls,
		comm.AllGatherCall(m.sumsq, rep.norms, 1, op.F32),
		comm.AllGatherCall(m.bad, rep.bads, 1, op.I32))
	return p
}

// step is one data-parallel step of rank rep on its micro-batches.
func (rep *Replica) step(ctx context.Context, h Hyper, st *State, inputs, targets [][]int32, timeout time.Duration) (StepResult, error) {
	m, g := rep.Model, rep.Group
	start := time.Now()
	res := StepResult{Step: st.Step, LossScale: st.LossScale, LR: h.LRAt(st.Step)}
	ctx, stop := g.Peer().Watch(ctx)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	fail := func(what string, err error) (StepResult, error) {
		// A call ended by another rank's failure says so first: that rank
		// is the run's error, this one only its echo.
		var pe *collective.PeerError
		if errors.As(g.Peer().Err(), &pe) && pe.Rank != g.Rank() && !errors.Is(err, collective.ErrPeerFailed) {
			err = fmt.Errorf("%w (here: %v)", pe, err)
		}
		return res, fmt.Errorf("gpt: step %d on rank %d of %d, %s: %w", st.Step, g.Rank(), g.Size(), what, err)
	}
	lap := newLaps(start)
	if err := m.writeBatches(ctx, inputs, targets); err != nil {
		return fail("writing the batch", err)
	}
	res.Phases.Write = lap()
	world := g.Size()
	if g.Comm() != nil {
		p := rep.kept.get(st.LossScale, func() program { return rep.gradients(st.LossScale) })
		if p.err != nil {
			return res, p.err
		}
		if err := m.run(ctx, p); err != nil {
			return fail("the backward and its all-reduces", err)
		}
	} else {
		p := rep.kept.get(st.LossScale, func() program { return m.backwardProgram(st.LossScale/float64(m.K*world), nil, nil) })
		if p.err != nil {
			return res, p.err
		}
		if err := m.run(ctx, p); err != nil {
			return fail("the backward", err)
		}
		if err := g.AllReduceSum(ctx, m.grad, m.lay.total); err != nil {
			return fail("the gradients' all-reduce", err)
		}
		if err := g.AllGather(ctx, m.lossAll, rep.gathered, int64(m.K)*m.lossStride, op.F32); err != nil {
			return fail("gathering the losses", err)
		}
		var n program
		m.norm(&n)
		if err := m.run(ctx, &n); err != nil {
			return fail("the norm", err)
		}
		if err := g.AllGather(ctx, m.sumsq, rep.norms, 1, op.F32); err != nil {
			return fail("gathering the norms", err)
		}
		if err := g.AllGather(ctx, m.bad, rep.bads, 1, op.I32); err != nil {
			return fail("gathering the norms", err)
		}
	}
	res.Phases.Gradients = lap()
	raw, losses, err := m.readHost(ctx, rep.results, int64(m.K*world)*m.lossStride)
	if err != nil {
		return fail("reading the losses and norms", err)
	}
	res.Loss = m.meanLoss(losses, m.K*world, nil)
	sumsq, bad, err := rep.agreedNorm(raw[rep.normsAt:rep.badsAt], raw[rep.badsAt:])
	if err != nil {
		return fail("the norm", err)
	}
	res.Phases.Read = lap()
	if err := m.finishStep(ctx, h, st, &res, sumsq, bad, m.run); err != nil {
		return fail("the update", err)
	}
	res.Phases.Update = lap()
	res.Time = time.Since(start)
	return res, nil
}

// agreedNorm takes every rank's squared norm and non-finite count (the
// gathered norms' and bads' bytes): the same bits on every rank, or an
// error naming the first rank that differs.
func (rep *Replica) agreedNorm(normBytes, raw []byte) (float64, int32, error) {
	world := rep.Group.Size()
	norms := make([]float32, world)
	le.Float32s(norms, normBytes)
	bad0 := int32(binary.LittleEndian.Uint32(raw))
	for r := 1; r < world; r++ {
		bad := int32(binary.LittleEndian.Uint32(raw[4*r:]))
		if math.Float32bits(norms[r]) != math.Float32bits(norms[0]) || bad != bad0 {
			return 0, 0, fmt.Errorf("rank %d's summed gradients have squared norm %v and %d non-finite elements, rank 0's %v and %d: the ranks' gradients differ after the all-reduce, so they would not take the same step",
				r, norms[r], bad, norms[0], bad0)
		}
	}
	return float64(norms[0]), bad0, nil
}

// Finish waits until every rank has finished its last step (a barrier on
// the host collective), so that no rank says goodbye, which ends the
// others' steps as a departure, while another still takes its update or
// its evaluation. A run calls it once, after its last step. It has no
// deadline of its own (rank 0's last evaluation may be long): a rank that
// dies or stops is an error naming it as soon as its heartbeats stop.
func (p *Parallel) Finish(ctx context.Context) error {
	err := eachRank(len(p.peers), func(i int) error {
		got, err := p.peers[i].AllGather(ctx, []byte{finishByte})
		if err != nil {
			p.peers[i].Abort(err)
			return err
		}
		return agreedBytes("finish", got, finishByte, finishByte)
	})
	if err != nil {
		return fmt.Errorf("gpt: waiting for every rank to finish: %w", err)
	}
	return nil
}

// Stopping agrees, between steps, whether the run stops: stop is whether
// this process wants to (it was interrupted), and the result, the same on
// every rank, is the ranks that wanted to, in rank order (none: go on). A
// process of one rank among several (torchrun's variables) is interrupted
// on its own, so the ranks gather one byte each on the host collective: a
// rank that stopped alone would leave the others waiting in the next
// step's collectives, to fail there unsaved. A process that holds every
// rank (--gpus N) has one interrupt for all of them and gathers nothing.
// A rank that dies or stops is an error naming it; one that lives but
// does not come within the step timeout (hung in an evaluation, say) is
// an error too, as it was in the next step's collectives before the
// ranks agreed here. Its cost a step is one host exchange of a byte
// (`go test -bench OneByteAllGather ./collective` times it).
func (p *Parallel) Stopping(ctx context.Context, stop bool) ([]int, error) {
	if len(p.peers) == p.World {
		if !stop {
			return nil, nil
		}
		ranks := make([]int, p.World)
		for r := range ranks {
			ranks[r] = r
		}
		return ranks, nil
	}
	flag := []byte{0}
	if stop {
		flag[0] = 1
	}
	if p.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.timeout)
		defer cancel()
	}
	asked := make([][]int, len(p.peers))
	err := eachRank(len(p.peers), func(i int) error {
		got, err := p.peers[i].AllGather(ctx, flag)
		if err != nil {
			p.peers[i].Abort(err)
			return err
		}
		if err := agreedBytes("stop or go on", got, 0, 1); err != nil {
			p.peers[i].Abort(err)
			return err
		}
		for r, b := range got {
			if b[0] == 1 {
				asked[i] = append(asked[i], r)
			}
		}
		return nil
	})
	if errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("gpt: a rank did not finish its step and evaluation within the step timeout (%v), though it still answers: %w", p.timeout, err)
	}
	if err != nil {
		return nil, fmt.Errorf("gpt: agreeing whether to stop before the next step: %w", err)
	}
	return asked[0], nil
}

// finishByte is what Finish gathers; Stopping gathers 0 or 1. A rank that
// reached one while another reached the other (their loops out of step)
// is an error naming it, not a misread stop.
const finishByte = 2

// agreedBytes checks that every rank sent one byte in [lo, hi] for the
// exchange what.
func agreedBytes(what string, got [][]byte, lo, hi byte) error {
	for r, b := range got {
		if len(b) != 1 || b[0] < lo || b[0] > hi {
			return fmt.Errorf("gpt: rank %d answered %v where every rank agrees to %s: the ranks are out of step", r, b, what)
		}
	}
	return nil
}

// Close frees the models, ends the communicators and the peers, and
// closes the devices.
func (p *Parallel) Close(ctx context.Context) error {
	var errs []error
	for _, rep := range p.Replicas {
		if rep == nil {
			continue
		}
		if rep.Model != nil {
			errs = append(errs, rep.Model.Close(ctx))
		}
		if rep.Group != nil {
			rep.Group.Close(ctx)
		}
	}
	for _, peer := range p.peers {
		errs = append(errs, peer.Close())
	}
	for _, d := range p.devs {
		errs = append(errs, d.Close())
	}
	return errors.Join(errs...)
}

// Rank0 reports whether this process holds rank 0, which writes the
// checkpoints and speaks for the run.
func (p *Parallel) Rank0() bool { return p.Replicas[0].Rank() == 0 }

// Engine says what runs the run's collectives.
func (p *Parallel) Engine() string { return p.Replicas[0].Group.Engine() }

// stepParallel is Trainer.Step of a data-parallel run: every local rank
// steps at once on its shard of the global batch.
func (tr *Trainer) stepParallel(ctx context.Context) (StepResult, error) {
	p := tr.Parallel
	in, tg := tr.Batch(tr.State.Step)
	results := make([]StepResult, len(p.Replicas))
	states := make([]State, len(p.Replicas))
	err := eachRank(len(p.Replicas), func(i int) error {
		rep := p.Replicas[i]
		states[i] = tr.State
		k, r := rep.Model.K, rep.Rank()
		var err error
		if results[i], err = rep.step(ctx, tr.Hyper, &states[i], in[r*k:(r+1)*k], tg[r*k:(r+1)*k], p.timeout); err != nil {
			rep.Group.Peer().Abort(err)
		}
		return err
	})
	if err != nil {
		return StepResult{}, err
	}
	for i := range results {
		a, b := results[i], results[0]
		if states[i] != states[0] || math.Float64bits(a.Loss) != math.Float64bits(b.Loss) || a.Skipped != b.Skipped {
			return results[0], fmt.Errorf("gpt: step %d: rank %d ended with loss %v and state %+v, rank %d with %v and %+v: the ranks disagree",
				tr.State.Step, p.Replicas[i].Rank(), a.Loss, states[i], p.Replicas[0].Rank(), b.Loss, states[0])
		}
	}
	tr.State = states[0]
	return results[0], nil
}

// eachRank runs fn(i) for this process's ranks i < n at once and returns
// firstError of their errors.
func eachRank(n int, fn func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	return firstError(errs)
}

// firstError is the error to report of the ranks' errors: the first, in
// rank order, that is a rank's own failure rather than news of another's
// (collective.ErrPeerFailed), else the first.
func firstError(errs []error) error {
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if !errors.Is(err, collective.ErrPeerFailed) {
			return err
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// agree checks, after the parameters are set, that every rank holds the
// same ones: a SHA-256 of each rank's masters and moments, gathered.
func (p *Parallel) agree(ctx context.Context) error {
	return eachRank(len(p.Replicas), func(i int) error {
		rep := p.Replicas[i]
		master, m1, m2, err := rep.Model.Params(ctx)
		if err != nil {
			rep.Group.Peer().Abort(err)
			return err
		}
		h := sha256.New()
		buf := make([]byte, 0, 4<<20)
		for _, a := range [][]float32{master, m1, m2} {
			for _, x := range a {
				if buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x)); len(buf) == cap(buf) {
					h.Write(buf)
					buf = buf[:0]
				}
			}
		}
		h.Write(buf)
		sums, err := rep.Group.Peer().AllGather(ctx, h.Sum(nil))
		if err != nil {
			return err
		}
		for r, s := range sums {
			if string(s) != string(sums[0]) {
				return fmt.Errorf("gpt: rank %d starts from other parameters than rank 0 (SHA-256 %x, rank 0's %x): every rank must load the same checkpoint", r, s[:8], sums[0][:8])
			}
		}
		return nil
	})
}
