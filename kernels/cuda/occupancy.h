// What other streams of the device may hold while the compute stream's
// kernels run: the multiprocessors of a batch's collectives (nccl.cu,
// BatchCollectives), from the first one it issues to the batch's end.
//
// The wgmma GEMMs (gemm_sm90.cu) launch a persistent grid of one block per
// multiprocessor and give each block a fixed share of the tiles. A block
// that finds no free multiprocessor, because a collective's blocks hold
// some, starts only when another block has finished its whole share, and
// the GEMM takes up to twice as long. While collectives may run, those
// GEMMs leave g_lent_multiprocessors free instead.
#pragma once

namespace vkern_occupancy {

inline int g_lent_multiprocessors = 0;

}  // namespace vkern_occupancy
