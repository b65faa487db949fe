// Package collective joins the ranks of a data-parallel run: one rank per
// device, in one process (`vkern train --gpus N`) or one process per
// device or machine, the processes meeting over TCP (torchrun's
// MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE).
//
// A Peer is one rank's member of the group. Rank 0 is the hub: every
// other rank holds one connection to it, over which
//   - at the start, each rank says who it is and what it runs (Hello);
//     rank 0 compares every rank's Match fields with its own (vkern's
//     version, the backend, CUDA's and NCCL's versions, the model and the
//     run's settings) and refuses the run, naming the rank and the field,
//     on any difference;
//   - rank 0 relays the unique id that its kernel server made for the
//     communicator (Broadcast), so that every server joins it;
//   - heartbeats flow both ways while the run lives. A rank whose
//     connection closes (its process died: kill -9 closes its sockets) or
//     that sends nothing for Options.HeartbeatTimeout (stopped by SIGSTOP,
//     hung, cut off) fails the group: every rank's Peer ends with a
//     *PeerError naming it, and every call waiting on the group returns
//     that error (Watch cancels device calls in flight, which ends their
//     servers: a communicator is never left waiting).
//
// The collectives themselves run in the kernel servers through NCCL on
// GPUs (Group over a vkern.Comm). The host collective (Peer.AllReduceF32,
// Peer.AllGather; Group without a communicator) is for the cpu backend
// only, whose servers have no engine that joins them: it reads the
// buffers, sends them to rank 0, sums them there in float32 in rank order
// (((x₀ + x₁) + x₂) + …, so every rank gets the same bits, and one rank
// gets its own bits back), and writes the result back. It is the test
// and CPU path, not the GPU engine: nothing uses it where NCCL runs.
package collective
