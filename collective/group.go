package collective

import (
	"context"
	"fmt"

	"github.com/vkern/vkern"
	"github.com/vkern/vkern/op"
)

// Group is one rank's side of a run's collectives on its device: through
// the kernel server's communicator (NCCL on GPUs: NewDeviceGroup), or,
// where the servers have no engine that joins them (the cpu backend),
// through the host (NewHostGroup).
type Group struct {
	peer *Peer
	dev  *vkern.Device
	comm *vkern.Comm // nil for the host collective
}

// NewDeviceGroup makes the run's communicator: rank 0's server makes its
// unique id, the peers carry it to every rank, and every rank's server
// joins it. Every rank must call it at about the same time; it fails
// with vkern.ErrCommFailed when some rank has not joined by ctx's deadline
// (or the device's call timeout).
func NewDeviceGroup(ctx context.Context, peer *Peer, dev *vkern.Device) (*Group, error) {
	ctx, cancel := peer.Watch(ctx)
	defer cancel()
	var id vkern.UniqueID
	if peer.Rank() == 0 {
		var err error
		if id, err = dev.NewUniqueID(ctx); err != nil {
			peer.Abort(err)
			return nil, fmt.Errorf("collective: rank 0 making the communicator's id: %w", err)
		}
	}
	got, err := peer.Broadcast(ctx, id[:])
	if err != nil {
		return nil, fmt.Errorf("collective: relaying the communicator's id: %w", err)
	}
	if len(got) != len(id) {
		return nil, fmt.Errorf("collective: rank 0 relayed a unique id of %d bytes, want %d", len(got), len(id))
	}
	copy(id[:], got)
	comm, err := dev.JoinComm(ctx, id, peer.Rank(), peer.Size())
	if err != nil {
		if perr := peer.Err(); perr != nil {
			err = fmt.Errorf("%w (%v)", perr, err)
		}
		peer.Abort(err)
		return nil, err
	}
	return &Group{peer: peer, dev: dev, comm: comm}, nil
}

// NewHostGroup is a group whose collectives run on the host (doc.go): the
// cpu backend's, and nothing else's.
func NewHostGroup(peer *Peer, dev *vkern.Device) *Group {
	return &Group{peer: peer, dev: dev}
}

// Rank is this group member's rank.
func (g *Group) Rank() int { return g.peer.Rank() }

// Size is the number of ranks.
func (g *Group) Size() int { return g.peer.Size() }

// Peer is the group's member in this process.
func (g *Group) Peer() *Peer { return g.peer }

// Device is the rank's device.
func (g *Group) Device() *vkern.Device { return g.dev }

// Comm is the server's communicator, whose collectives can be calls of a
// RunBatch; nil for the host collective.
func (g *Group) Comm() *vkern.Comm { return g.comm }

// Engine says which engine runs the group's collectives.
func (g *Group) Engine() string {
	if g.comm == nil {
		return "host (the cpu backend's test path)"
	}
	return "the kernel servers' communicator"
}

// AllReduceSum sums count f32 elements of buf over the ranks, in place.
func (g *Group) AllReduceSum(ctx context.Context, buf *vkern.Buffer, count int64) error {
	if g.comm != nil {
		return g.comm.AllReduce(ctx, buf, buf, count, op.F32, vkern.Sum)
	}
	x := make([]float32, count)
	if err := buf.ReadF32(ctx, x); err != nil {
		return err
	}
	if err := g.peer.AllReduceF32(ctx, x); err != nil {
		return err
	}
	return buf.WriteF32(ctx, x)
}

// AllGather puts every rank's count elements of dt from send into every
// rank's recv, rank r's at element r·count.
func (g *Group) AllGather(ctx context.Context, send, recv *vkern.Buffer, count int64, dt op.DType) error {
	if g.comm != nil {
		return g.comm.AllGather(ctx, send, recv, count, dt)
	}
	n := count * int64(dt.Size())
	mine := make([]byte, n)
	if err := send.Read(ctx, 0, mine); err != nil {
		return err
	}
	parts, err := g.peer.AllGather(ctx, mine)
	if err != nil {
		return err
	}
	for r, part := range parts {
		if err := recv.Write(ctx, int64(r)*n, part); err != nil {
			return err
		}
	}
	return nil
}

// Close ends the communicator (the peer is its owner's to close).
func (g *Group) Close(ctx context.Context) error {
	if g.comm == nil {
		return nil
	}
	return g.comm.Abort(ctx)
}
