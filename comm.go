package vkern

import (
	"context"
	"errors"
	"fmt"

	"github.com/vkern/vkern/kserver"
	"github.com/vkern/vkern/op"
)

// Collectives: communicators between the kernel servers of several
// devices, the engine of data-parallel training (PROTOCOL.md,
// "Collectives"). On cuda the server runs them through NCCL, which it
// loads at run time ($VKERN_NCCL names the library; see
// kernels/cuda/nccl.cu for where else it looks); on hip through RCCL. The
// cpu backend's communicators have one rank, whose collectives are
// copies: several cpu servers are joined on the host instead (package
// collective).
//
// A communicator is made once per run: rank 0's server makes its unique
// id (NewUniqueID), the hosts pass the id to every rank, and each rank's
// server joins with it (JoinComm), all at about the same time. A
// collective waits for every rank's part; a rank that died or hangs makes
// the others' collective fail with ErrCommFailed a little before the
// call's deadline, its communicator aborted, never left waiting.

// ErrCommFailed: a collective (or a communicator's making) did not
// complete: a peer rank died or hung past the call's deadline, or the
// engine reported an error. The communicator was aborted; make a new one.
var ErrCommFailed = kserver.ErrCommFailed

// ErrNoCollectives is wrapped by the error of a collective request to a
// server that has no engine (NCCL not found, say); the message says why.
var ErrNoCollectives = errors.New("vkern: no collective engine")

// UniqueID names a communicator being made: NCCL's ncclUniqueId, 128
// opaque bytes.
type UniqueID [kserver.CommUniqueIDBytes]byte

// CollectiveEngine is what a device's server joins communicators with.
type CollectiveEngine struct {
	// Name is HELLO's collectives field: "nccl", "rccl", or "single-rank"
	// (the cpu backend).
	Name string
	// Version is the engine's version code (NCCL_VERSION_CODE: 22105 for
	// 2.21.5); 0 for the cpu backend.
	Version int
	// Description names the engine, its version and where it was loaded
	// from.
	Description string
}

// CollectiveEngine asks the server for its collective engine (loading
// NCCL on cuda, once). An error wrapping ErrNoCollectives says why there
// is none.
func (d *Device) CollectiveEngine(ctx context.Context) (CollectiveEngine, error) {
	hello, err := d.client.Hello(ctx)
	if err != nil {
		return CollectiveEngine{}, err
	}
	info, err := d.client.CommInfo(ctx)
	if err != nil {
		return CollectiveEngine{}, commError(err)
	}
	return CollectiveEngine{Name: hello.Fields["collectives"], Version: int(info.Version), Description: info.Text}, nil
}

// commError marks a NOT_SUPPORTED answer to a collective request as
// ErrNoCollectives.
func commError(err error) error {
	if errors.Is(err, op.ErrNotSupported) {
		return fmt.Errorf("%w: %w", ErrNoCollectives, err)
	}
	return err
}

// NewUniqueID asks the server for a new communicator's id; rank 0 makes
// it and hands it to every rank.
func (d *Device) NewUniqueID(ctx context.Context) (UniqueID, error) {
	id, err := d.client.CommUniqueID(ctx)
	return UniqueID(id), commError(err)
}

// JoinComm joins the communicator id names as rank of size ranks. It
// returns once every rank has joined, or fails with ErrCommFailed a little
// before ctx's deadline (or the device's CallTimeout) when some rank has
// not.
func (d *Device) JoinComm(ctx context.Context, id UniqueID, rank, size int) (*Comm, error) {
	h, err := d.client.CommInit(ctx, id, rank, size)
	if err != nil {
		return nil, fmt.Errorf("vkern: joining a communicator as rank %d of %d: %w", rank, size, commError(err))
	}
	return &Comm{d: d, h: h, rank: rank, size: size}, nil
}

// Comm is a communicator as one rank's server holds it.
type Comm struct {
	d          *Device
	h          kserver.Handle
	rank, size int
}

// Rank is this server's place in the communicator, from 0.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks.
func (c *Comm) Size() int { return c.size }

// Device is the device whose server holds c.
func (c *Comm) Device() *Device { return c.d }

// ReduceOp is a reduction of AllReduce and ReduceScatter.
type ReduceOp int

// The reductions.
const (
	Sum ReduceOp = iota + 1
	Max
)

// Collective is a collective as a call of a RunBatch (Comm's
// AllReduceCall and AllGatherCall make them): it runs after the batch's
// calls before it, and the calls after it that touch its buffers run after
// it; on a GPU the others may overlap it.
type Collective struct {
	Kind       kserver.CollectiveKind
	Comm       *Comm
	Send, Recv *Buffer
	Count      int64 // elements per rank
	DType      op.DType
	Reduce     ReduceOp // 0 for all-gather
}

func (col *Collective) String() string {
	return fmt.Sprintf("%v of %d %v per rank over %d ranks", col.Kind, col.Count, col.DType, col.Comm.size)
}

// check says whether col can run: buffers of c's device, large enough.
func (col *Collective) check() (kserver.CollectiveRequest, error) {
	c := col.Comm
	if c == nil {
		return kserver.CollectiveRequest{}, errors.New("vkern: a collective with no communicator")
	}
	var dt kserver.CommDType
	switch col.DType {
	case op.F16:
		dt = kserver.CommF16
	case op.F32:
		dt = kserver.CommF32
	case op.I32:
		dt = kserver.CommI32
	default:
		return kserver.CollectiveRequest{}, fmt.Errorf("vkern: %v: element type %v; collectives take f16, f32 or i32", col.Kind, col.DType)
	}
	red := kserver.RedNone
	switch {
	case col.Kind == kserver.AllGather && col.Reduce == 0:
	case col.Kind != kserver.AllGather && col.Reduce == Sum:
		red = kserver.RedSum
	case col.Kind != kserver.AllGather && col.Reduce == Max:
		red = kserver.RedMax
	default:
		return kserver.CollectiveRequest{}, fmt.Errorf("vkern: %v: reduction %d; all-reduce and reduce-scatter take Sum or Max, all-gather none", col.Kind, col.Reduce)
	}
	if col.Count < 1 {
		return kserver.CollectiveRequest{}, fmt.Errorf("vkern: %v of %d elements: want at least 1", col.Kind, col.Count)
	}
	one := col.Count * int64(col.DType.Size())
	need := map[string]int64{"send": one, "recv": one}
	switch col.Kind {
	case kserver.ReduceScatter:
		need["send"] = one * int64(c.size)
	case kserver.AllGather:
		need["recv"] = one * int64(c.size)
	}
	for _, b := range []struct {
		name string
		buf  *Buffer
	}{{"send", col.Send}, {"recv", col.Recv}} {
		if b.buf == nil || b.buf.d != c.d {
			return kserver.CollectiveRequest{}, fmt.Errorf("vkern: %v: buffer %s is nil or belongs to another device than the communicator's", col.Kind, b.name)
		}
		if b.buf.Bytes < need[b.name] {
			return kserver.CollectiveRequest{}, fmt.Errorf("vkern: %v: buffer %s has %d bytes, want %d (%d %v per rank, %d ranks)",
				col.Kind, b.name, b.buf.Bytes, need[b.name], col.Count, col.DType, c.size)
		}
	}
	return kserver.CollectiveRequest{Count: uint64(col.Count), DType: dt, RedOp: red}, nil
}

// run runs col as its own request.
func (col *Collective) run(ctx context.Context) error {
	req, err := col.check()
	if err != nil {
		return err
	}
	err = col.Comm.d.client.Collective(ctx, kserver.Collective{Kind: col.Kind, Comm: col.Comm.h, Send: col.Send.handle,
		Recv: col.Recv.handle, Count: req.Count, DType: req.DType, RedOp: req.RedOp})
	if err != nil {
		return fmt.Errorf("vkern: %v (rank %d of %d): %w", col, col.Comm.rank, col.Comm.size, commError(err))
	}
	return nil
}

// runRequest is col as a RUN_BATCH entry; its timeout is the batch's.
func (col *Collective) runRequest() (kserver.RunRequest, error) {
	req, err := col.check()
	if err != nil {
		return kserver.RunRequest{}, err
	}
	return kserver.RunRequest{
		OpID:       uint32(col.Kind),
		Collective: true,
		Params:     []int64{int64(req.Count), int64(req.DType), int64(req.RedOp), 0},
		Buffers:    []kserver.Handle{col.Comm.h, col.Send.handle, col.Recv.handle},
		Untimed:    true,
	}, nil
}

// AllReduce reduces count elements of dt of every rank's send into every
// rank's recv (send == recv: in place).
func (c *Comm) AllReduce(ctx context.Context, send, recv *Buffer, count int64, dt op.DType, r ReduceOp) error {
	return (&Collective{Kind: kserver.AllReduce, Comm: c, Send: send, Recv: recv, Count: count, DType: dt, Reduce: r}).run(ctx)
}

// ReduceScatter reduces size·count elements of every rank's send and
// leaves rank r's slice, elements [r·count, (r+1)·count), in its recv.
func (c *Comm) ReduceScatter(ctx context.Context, send, recv *Buffer, count int64, dt op.DType, r ReduceOp) error {
	return (&Collective{Kind: kserver.ReduceScatter, Comm: c, Send: send, Recv: recv, Count: count, DType: dt, Reduce: r}).run(ctx)
}

// AllGather puts every rank's count elements of send into every rank's
// recv, rank r's at [r·count, (r+1)·count).
func (c *Comm) AllGather(ctx context.Context, send, recv *Buffer, count int64, dt op.DType) error {
	return (&Collective{Kind: kserver.AllGather, Comm: c, Send: send, Recv: recv, Count: count, DType: dt}).run(ctx)
}

// AllReduceCall is AllReduce as a call of a RunBatch.
func (c *Comm) AllReduceCall(send, recv *Buffer, count int64, dt op.DType, r ReduceOp) Call {
	return Call{Collective: &Collective{Kind: kserver.AllReduce, Comm: c, Send: send, Recv: recv, Count: count, DType: dt, Reduce: r}}
}

// AllGatherCall is AllGather as a call of a RunBatch.
func (c *Comm) AllGatherCall(send, recv *Buffer, count int64, dt op.DType) Call {
	return Call{Collective: &Collective{Kind: kserver.AllGather, Comm: c, Send: send, Recv: recv, Count: count, DType: dt}}
}

// Abort ends the communicator at once, without waiting for its peers: at
// the end of a run, or once a peer has failed. A communicator a failed
// collective aborted is gone already; Abort then reports its handle
// unknown.
func (c *Comm) Abort(ctx context.Context) error {
	return c.d.client.CommAbort(ctx, c.h)
}
