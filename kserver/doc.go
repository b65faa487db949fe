// Package kserver is the Go side of the vkern kernel server: it starts the
// C++ server binary as a child process, speaks the framed protocol of
// PROTOCOL.md (version 2) with it over the child's stdin and stdout, moves
// bulk data through a shared-memory arena, and turns every way the child can
// misbehave into an error that says what happened.
//
// What it does:
//
//   - Frames: [ReadFrame] and [AppendFrame] encode and decode frames exactly
//     as PROTOCOL.md says (u32 little-endian length, 8-byte header, payload,
//     capped at [MaxFrameBytes]); typed encoders and decoders exist for every
//     opcode's payload, HELLO included.
//   - Arena: an anonymous memfd, mapped once by the host at its largest size
//     ([Config.ArenaBytes]) and passed to the child as file descriptor 3,
//     grown on demand. [Client.Write] copies the caller's bytes straight into
//     it and [Client.Read] copies straight out of it into the caller's slice;
//     frames carry only (offset, length). Large transfers move in pieces,
//     several in flight, so the host's copy and the server's overlap.
//   - Concurrency: any number of goroutines share one [Client]. Calls are
//     pipelined: each is written as soon as it is ready, with its id, and
//     the server answers in order. The caller of the oldest call in flight
//     reads the next answer itself with a plain blocking read (a lone call
//     costs one write and one read), checks its id, and passes the reading
//     on to the next call's caller. A call waits for the server only as
//     long as the server is busy with the requests sent before it.
//   - Batches: [Client.RunBatch] sends a sequence of RUNs in one frame; the
//     server checks them all before it runs any, and an error names the
//     failing entry ([BatchError]).
//   - Isolation: with [Config.Isolated] every call that needs the device runs
//     in a fresh server process (the seed's one-shot), behind the same API.
//   - Process: the child starts lazily on the first call; its HELLO is read
//     and its protocol version and (optionally) source hash checked, and its
//     stderr is drained continuously into a bounded ring.
//   - Faults: every call has a deadline; a call whose deadline passes while
//     the server works on it kills the server. A child that crashes, exits,
//     sends garbage or breaks the protocol is noticed, and its exit status
//     and stderr tail come back in the error of every call in flight
//     ([ErrServerDied]); the next call starts a fresh child. Buffer handles
//     remember which child made them, so a handle from a dead child is
//     reported as [ErrStaleHandle] and never silently re-created.
//
// What it does not do: it does not build or verify the server binary (that is
// the cache package's job; [Config.BeforeStart] is its hook to recheck the
// binary before every start), it does not know what the RUN op ids mean (the
// op package does), and it does not check results. The server runs one
// request at a time, so pipelining hides the host's costs, not the server's.
package kserver
