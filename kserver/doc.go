// Package kserver is the Go side of the vkern kernel server: it starts the
// C++ server binary as a child process, speaks the framed protocol of
// PROTOCOL.md with it over the child's stdin and stdout, and turns every way
// the child can misbehave into an error that says what happened.
//
// What it does:
//
//   - Frames: [ReadFrame] and [AppendFrame] encode and decode frames exactly
//     as PROTOCOL.md says (u32 little-endian length, 8-byte header, payload,
//     capped at [MaxFrameBytes]); typed encoders and decoders exist for every
//     opcode's payload, HELLO included.
//   - Process: [Client] starts the child lazily on the first call, reads its
//     HELLO, checks the protocol version and (optionally) the source hash,
//     and drains its stderr continuously into a bounded ring.
//   - Faults: every call has a deadline; a missed deadline kills the child.
//     A child that crashes, exits, sends garbage or breaks the protocol is
//     noticed and its exit status and stderr tail come back in the error
//     ([ErrServerDied]); the next call starts a fresh child. Buffer handles
//     remember which child made them, so a handle from a dead child is
//     reported as [ErrStaleHandle] and never silently re-created.
//
// What it does not do: it does not build or verify the server binary (that is
// the cache package's job; [Config.BeforeStart] is its hook to recheck the
// binary before every start), it does not know what the RUN op ids mean (the
// op package does), and it does not check results. Protocol version 1 moves
// bulk data inside frames; the shared-memory arena, batched RUNs and the
// one-process-per-call isolated mode of DESIGN.md are not part of it. Calls
// are serialised by a lock: one request is in flight per child at a time.
package kserver
