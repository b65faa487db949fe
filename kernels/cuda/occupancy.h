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
// The setting is $VKERN_COMM_SMS (nccl.cu), 0 unless set. Its cost,
// measured with one NCCL rank (collectives that move nothing) on an H100,
// gpt2 at B = 16: 42.50 ms a step at 0, 43.09 at 8, 43.49 at 16, 44.35 at
// 32. What it buys on two H200s (gpt2, B = 16 a GPU, 30 steps, one call):
// nothing; 43.24 ms a step at 0, 43.93 at 8 (NCCL_MAX_CTAS=8), 43.73 at 16
// (NCCL_MAX_CTAS=16).
#pragma once

namespace vkern_occupancy {

inline int g_lent_multiprocessors = 0;

// g_units_per_cluster, when above 0, caps the tiles (units) a GEMM
// cluster takes while collectives may run: the grid grows to
// units / g_units_per_cluster clusters, more than can be resident, and the
// hardware hands the rest out as multiprocessors come free, so a
// collective's blocks delay a GEMM by their own time on a few
// multiprocessors, not by a whole share of tiles. $VKERN_COMM_GEMM_UNITS
// (nccl.cu); 0 keeps the persistent grid. The tiles are the same, so the
// bits are too. Measured on two H200s (gpt2, B = 16 a GPU, the median of
// steps 8–19, the backward's batch): 1 → 42.59 ms against 43.04 at 0 in
// one call, 41.61 and 41.48 against 41.69 and 41.60 in another; with one
// rank 40.74 against 40.49. Too little to be the default yet.
inline int g_units_per_cluster = 0;

}  // namespace vkern_occupancy
