package collective

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
)

// The host collective: data of every rank meets at rank 0, which combines
// it in rank order and sends the result to every rank. It is the cpu
// backend's engine (doc.go) and the relay of a communicator's unique id;
// on GPUs the gradients never pass here.

// Broadcast returns rank 0's data on every rank (the other ranks' data is
// ignored): how rank 0's unique id reaches every rank's server.
func (p *Peer) Broadcast(ctx context.Context, data []byte) ([]byte, error) {
	if p.rank != 0 {
		data = nil
	}
	return p.exchange(ctx, "broadcast", data, func(parts [][]byte) ([]byte, *PeerError) { return parts[0], nil })
}

// AllGather returns every rank's mine, in rank order, on every rank. Every
// rank must give the same number of bytes.
func (p *Peer) AllGather(ctx context.Context, mine []byte) ([][]byte, error) {
	all, err := p.exchange(ctx, "all-gather", mine, func(parts [][]byte) ([]byte, *PeerError) {
		var out []byte
		for r, part := range parts {
			if len(part) != len(parts[0]) {
				return nil, p.peerError(r, fmt.Sprintf("gave %d bytes to an all-gather where rank 0 gave %d: the ranks' programs disagree", len(part), len(parts[0])))
			}
			out = append(out, part...)
		}
		return out, nil
	})
	if err != nil {
		return nil, err
	}
	if len(all) != p.size*len(mine) {
		return nil, fmt.Errorf("collective: all-gather of %d bytes per rank came back with %d bytes for %d ranks: the ranks' programs disagree", len(mine), len(all), p.size)
	}
	out := make([][]byte, p.size)
	for r := range out {
		out[r] = all[r*len(mine) : (r+1)*len(mine)]
	}
	return out, nil
}

// AllReduceF32 sums x over the ranks, in place: on every rank x becomes
// ((x₀ + x₁) + x₂) + …, each addition rounded to float32, in rank order,
// so every rank gets the same bits. Every rank must give as many elements.
func (p *Peer) AllReduceF32(ctx context.Context, x []float32) error {
	mine := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(mine[4*i:], math.Float32bits(v))
	}
	sum, err := p.exchange(ctx, "all-reduce", mine, func(parts [][]byte) ([]byte, *PeerError) {
		acc := make([]float32, len(x))
		for r, part := range parts {
			if len(part) != len(mine) {
				return nil, p.peerError(r, fmt.Sprintf("gave %d elements to an all-reduce where rank 0 gave %d: the ranks' programs disagree", len(part)/4, len(x)))
			}
			for i := range acc {
				v := math.Float32frombits(binary.LittleEndian.Uint32(part[4*i:]))
				if r == 0 {
					acc[i] = v
				} else {
					acc[i] += v
				}
			}
		}
		out := make([]byte, len(mine))
		for i, v := range acc {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		}
		return out, nil
	})
	if err != nil {
		return err
	}
	if len(sum) != len(mine) {
		return fmt.Errorf("collective: all-reduce of %d elements came back with %d bytes: the ranks' programs disagree", len(x), len(sum))
	}
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(sum[4*i:]))
	}
	return nil
}

// exchange is one collective: every rank's mine goes to rank 0, which
// combines them (parts in rank order, its own first) and sends the result
// to every rank. A combine error fails the group naming the rank.
func (p *Peer) exchange(ctx context.Context, what string, mine []byte, combine func(parts [][]byte) ([]byte, *PeerError)) ([]byte, error) {
	p.collective.Lock()
	defer p.collective.Unlock()
	p.seq++
	seq := p.seq
	if err := p.Err(); err != nil {
		return nil, err
	}
	if p.size == 1 {
		out, perr := combine([][]byte{mine})
		if perr != nil {
			return nil, perr
		}
		return out, nil
	}
	if p.rank != 0 {
		hub := p.links[0]
		if err := hub.sendData(seq, mine); err != nil {
			return nil, err
		}
		return hub.recvData(ctx, seq, what)
	}
	parts := make([][]byte, p.size)
	parts[0] = mine
	for r := 1; r < p.size; r++ {
		part, err := p.links[r].recvData(ctx, seq, what)
		if err != nil {
			return nil, err
		}
		parts[r] = part
	}
	out, perr := combine(parts)
	if perr != nil {
		p.fail(perr, -1)
		return nil, perr
	}
	for r := 1; r < p.size; r++ {
		if err := p.links[r].sendData(seq, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// sendData sends collective seq's bytes in chunks of at most chunkBytes:
// u64 seq, u32 chunk, u32 chunks, the chunk's bytes.
func (l *link) sendData(seq uint64, data []byte) error {
	chunks := max(1, (len(data)+chunkBytes-1)/chunkBytes)
	for i := 0; i < chunks; i++ {
		piece := data[i*chunkBytes : min(len(data), (i+1)*chunkBytes)]
		msg := make([]byte, 16, 16+len(piece))
		binary.LittleEndian.PutUint64(msg, seq)
		binary.LittleEndian.PutUint32(msg[8:], uint32(i))
		binary.LittleEndian.PutUint32(msg[12:], uint32(chunks))
		if err := l.send(msgData, append(msg, piece...)); err != nil {
			e := l.p.peerError(l.rank, writeFailure(err, l.p.opts.HeartbeatTimeout)+fmt.Sprintf(" (sending collective %d's data)", seq))
			l.p.fail(e, -1)
			return e
		}
	}
	return nil
}

// recvData receives collective seq's bytes from the rank at the other end.
func (l *link) recvData(ctx context.Context, seq uint64, what string) ([]byte, error) {
	var out []byte
	for i, chunks := 0, 1; i < chunks; i++ {
		msg, err := l.recv(ctx)
		if err != nil {
			return nil, fmt.Errorf("collective: %s %d: %w", what, seq, err)
		}
		if len(msg) < 16 {
			e := l.p.peerError(l.rank, fmt.Sprintf("sent a data message of %d bytes, too short for its header", len(msg)))
			l.p.fail(e, -1)
			return nil, e
		}
		gotSeq, gotI, n := binary.LittleEndian.Uint64(msg), int(binary.LittleEndian.Uint32(msg[8:])), int(binary.LittleEndian.Uint32(msg[12:]))
		if gotSeq != seq || gotI != i || n < 1 || (i > 0 && n != chunks) {
			e := l.p.peerError(l.rank, fmt.Sprintf("sent chunk %d of %d of collective %d during chunk %d of collective %d (%s): the ranks' programs disagree",
				gotI, n, gotSeq, i, seq, what))
			l.p.fail(e, -1)
			return nil, e
		}
		chunks = n
		out = append(out, msg[16:]...)
	}
	return out, nil
}
