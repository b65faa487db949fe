// What other streams of the device may hold while the compute stream's
// kernels run: the multiprocessors of a batch's collectives (nccl.cu,
// BatchCollectives), from the first one it issues to the batch's end.
//
// The wgmma GEMMs (gemm_sm90.cu) launch a persistent grid of one block per
// multiprocessor and give each block a fixed share of the tiles. A block
// that finds no free multiprocessor, because a collective's blocks hold
// some, starts only when another block has finished its whole share, and
// the GEMM takes up to twice as long. While collectives may run, those
// GEMMs leave g_lent_multiprocessors free instead, and so does
// layernorm_grad's grid (whose parameter sums then have fewer partials: a
// run's bits depend on the setting, the same on every rank).
//
// The setting is $VKERN_COMM_SMS (nccl.cu), 0 unless set, until a
// two-GPU run shows what it buys. Its cost, measured with one NCCL rank
// (collectives that move nothing) on an H100, gpt2 at B = 16: 42.50 ms a
// step at 0, 43.09 at 8, 43.49 at 16, 44.35 at 32.
#pragma once

namespace vkern_occupancy {

inline int g_lent_multiprocessors = 0;

}  // namespace vkern_occupancy
