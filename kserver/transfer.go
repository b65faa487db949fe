package kserver

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// A transfer moves in pieces of at most maxPieceBytes, transferWindow of
// them in flight at once: while the server copies one piece between the
// arena and the buffer, the host copies the next one between the caller's
// slice and the arena.
const (
	maxPieceBytes  = 8 << 20
	transferWindow = 4
)

// pieceBytes is the piece size for c's arena: small enough that a few
// transfers fit side by side.
func (c *Client) pieceBytes() int {
	return int(min(maxPieceBytes, c.cfg.ArenaBytes/(2*transferWindow)))
}

// flight is one piece of a transfer in flight.
type flight struct {
	cl     *call
	region span // in the arena; n == 0 for an empty transfer
	at     int  // where the piece starts in the caller's slice
}

// transfer runs a WRITE (buf to the buffer) or a READ (the buffer to buf)
// through the arena.
func (s *conn) transfer(cx callCtx, op Opcode, handle, offset uint64, buf []byte) error {
	a := s.c.arena
	piece := s.c.pieceBytes()
	var window []flight
	var firstErr error
	// finish ends a piece whose outcome is in: READ data is copied out, the
	// range released, the first error kept.
	finish := func(f flight) {
		err := f.cl.err
		if err == nil && op == OpRead && firstErr == nil && f.region.n > 0 {
			err = a.copyOut(buf[f.at:f.at+int(f.region.n)], f.region.off)
		}
		if f.region.n > 0 {
			a.release(f.region.off, f.region.n)
		}
		if err != nil && firstErr == nil {
			firstErr = inPiece(err, op, offset, len(buf), f.at, piece)
		}
	}
	// settle waits for the oldest piece. If the caller's context ends
	// first, the pieces still queued are left to the reader to clean up.
	settle := func() {
		f := window[0]
		window = window[1:]
		err := s.waitHolding(cx, f.cl, f.region)
		select {
		case <-f.cl.done:
			finish(f)
			return
		default:
		}
		// Abandoned: f.cl and everything behind it.
		if firstErr == nil {
			firstErr = inPiece(err, op, offset, len(buf), f.at, piece)
		}
		for _, g := range window {
			if !s.abandon(g.cl, g.region) {
				<-g.cl.done
				finish(g)
			}
		}
		window = nil
	}
	for at := 0; ; {
		n := min(len(buf)-at, piece)
		var region span
		if n > 0 {
			for {
				off, ok, err := a.reserve(cx, uint64(n), len(window) == 0)
				if err != nil {
					firstErr = inPiece(fmt.Errorf("kserver: %v: %w", op, err), op, offset, len(buf), at, piece)
					break
				}
				if ok {
					region = span{off, uint64(n)}
					break
				}
				settle()
				if firstErr != nil {
					break
				}
			}
			if firstErr != nil {
				break
			}
			if op == OpWrite {
				if err := a.copyIn(region.off, buf[at:at+n]); err != nil {
					a.release(region.off, region.n)
					firstErr = fmt.Errorf("kserver: %v: %w", op, err)
					break
				}
			}
		}
		var head [transferBytes]byte
		req := AppendTransferRequest(head[:0], TransferRequest{Handle: handle, Offset: offset + uint64(at), ArenaOffset: region.off, Length: uint64(n)})
		cl := &call{op: op}
		if err := s.send(cx, cl, req, nil); err != nil {
			if region.n > 0 {
				a.release(region.off, region.n)
			}
			firstErr = inPiece(err, op, offset, len(buf), at, piece)
			break
		}
		window = append(window, flight{cl: cl, region: region, at: at})
		at += n
		if at >= len(buf) {
			break
		}
		if len(window) == transferWindow {
			settle()
		}
		if firstErr != nil {
			break
		}
	}
	for len(window) > 0 {
		settle()
	}
	return firstErr
}

// inPiece says which piece of a multi-piece transfer failed.
func inPiece(err error, op Opcode, offset uint64, total, done, pieceBytes int) error {
	if total <= pieceBytes {
		return err
	}
	return fmt.Errorf("kserver: %v of %d bytes at offset %d, piece at offset %d: %w", op, total, offset, offset+uint64(done), err)
}

// copyIn copies src into the arena at off.
func (a *arena) copyIn(off uint64, src []byte) error {
	b, done, err := a.bytes(off, uint64(len(src)))
	if err != nil {
		return err
	}
	copy(b, src)
	done()
	return nil
}

// copyOut copies the arena at off into dst.
func (a *arena) copyOut(dst []byte, off uint64) error {
	b, done, err := a.bytes(off, uint64(len(dst)))
	if err != nil {
		return err
	}
	copy(dst, b)
	done()
	return nil
}

// textPieceBytes is the most text one TEXT_WRITE frame carries.
const textPieceBytes = MaxFrameBytes - HeaderBytes - textHeadBytes

// textReadValues is the most values one TEXT_READ asks for: six characters
// each at most ("65535 ") must fit a frame.
const textReadValues = (MaxFrameBytes - HeaderBytes) / 6

// TextWrite writes values (u16 bit patterns) into the buffer h from byte
// offset on as decimal text in frames: the seed's data path. It exists only
// as the benchmark baseline that Write is measured against; use Write.
func (c *Client) TextWrite(ctx context.Context, h Handle, offset uint64, values []uint16) error {
	if c.iso != nil {
		return fmt.Errorf("kserver: TEXT_WRITE: %w in isolated mode", errors.ErrUnsupported)
	}
	cx, err := c.begin(ctx, OpTextWrite)
	if err != nil {
		return err
	}
	s, err := c.serverFor(&cx, OpTextWrite, h)
	if err != nil {
		return err
	}
	// Two pieces in flight: the host formats one while the server parses
	// the other.
	var window []*call
	var firstErr error
	settle := func() {
		if err := s.wait(cx, window[0]); err != nil && firstErr == nil {
			firstErr = err
		}
		window = window[1:]
	}
	text := make([]byte, 0, textPieceBytes)
	for done := 0; done < len(values) && firstErr == nil; {
		var head [textHeadBytes]byte
		req := appendTextHead(head[:0], h.id, offset+2*uint64(done))
		text = text[:0]
		n := 0
		for done+n < len(values) && len(text)+6 <= cap(text) {
			text = strconv.AppendUint(text, uint64(values[done+n]), 10)
			text = append(text, ' ')
			n++
		}
		cl := &call{op: OpTextWrite}
		if err := s.send(cx, cl, req, text); err != nil {
			firstErr = err
			break
		}
		window = append(window, cl)
		done += n
		if len(window) == 2 {
			settle()
		}
	}
	for len(window) > 0 {
		settle()
	}
	return firstErr
}

// TextRead reads len(dst) u16 values of the buffer h from byte offset on as
// decimal text in frames, the benchmark baseline for Read.
func (c *Client) TextRead(ctx context.Context, h Handle, offset uint64, dst []uint16) error {
	if c.iso != nil {
		return fmt.Errorf("kserver: TEXT_READ: %w in isolated mode", errors.ErrUnsupported)
	}
	cx, err := c.begin(ctx, OpTextRead)
	if err != nil {
		return err
	}
	s, err := c.serverFor(&cx, OpTextRead, h)
	if err != nil {
		return err
	}
	type textFlight struct {
		cl    *call
		at, n int
	}
	var window []textFlight
	var firstErr error
	settle := func() {
		f := window[0]
		window = window[1:]
		if err := s.wait(cx, f.cl); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			return
		}
		if firstErr == nil {
			firstErr = parseText(f.cl.text, dst[f.at:f.at+f.n])
		}
	}
	for done := 0; done < len(dst) && firstErr == nil; {
		n := min(len(dst)-done, textReadValues)
		var head [24]byte
		req := AppendTextReadRequest(head[:0], TextReadRequest{Handle: h.id, Offset: offset + 2*uint64(done), Count: uint64(n)})
		cl := &call{op: OpTextRead}
		if err := s.send(cx, cl, req, nil); err != nil {
			firstErr = err
			break
		}
		window = append(window, textFlight{cl: cl, at: done, n: n})
		done += n
		if len(window) == 2 {
			settle()
		}
	}
	for len(window) > 0 {
		settle()
	}
	return firstErr
}

// parseText parses len(dst) decimal u16 values separated by spaces.
func parseText(text []byte, dst []uint16) error {
	i := 0
	for k := range dst {
		for i < len(text) && text[i] == ' ' {
			i++
		}
		start := i
		v := 0
		for i < len(text) && text[i] >= '0' && text[i] <= '9' && v <= 0xFFFF {
			v = 10*v + int(text[i]-'0')
			i++
		}
		if i == start || v > 0xFFFF || (i < len(text) && text[i] != ' ') {
			return fmt.Errorf("%w: TEXT_READ value %d is not a decimal u16 (text %.40q)", ErrProtocol, k, text[start:])
		}
		dst[k] = uint16(v)
	}
	for i < len(text) && text[i] == ' ' {
		i++
	}
	if i != len(text) {
		return fmt.Errorf("%w: TEXT_READ answer has %d bytes after its %d values", ErrProtocol, len(text)-i, len(dst))
	}
	return nil
}
