// The order in which the Hopper attention kernels (attention.cu, variants 6
// to 8) take a grid's items, in a header of its own so that a host test
// (kernels/testdata/tile_order_check.cc) holds it to visiting every item
// once, with no GPU.
#pragma once

#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define VKERN_TILES_HD __host__ __device__ __forceinline__
#else
#define VKERN_TILES_HD inline
#endif

namespace vkern_tiles {

// tile_item maps item, one of heads·tiles, to its head bh (b·H + h) and
// the rank of its tile by weight, 0 for the heaviest (the forward's and
// dq's last query tile, dk and dv's first key tile). The heads go in groups
// of group: every tile of a group comes before the next group's, the
// heaviest first within it, so the blocks that run at once read the tiles
// of a few heads, which stay in L2. group 0 (or at least heads) is the
// order over all heads at once: every head's heaviest tile, then every
// head's next. A head's keys and values take 256 KB at gpt2's shape, so
// that order swept 48 MB through L2 once for each tile rank at B = 16
// (192 heads, against 50 MB of L2 on an H100) and twice that at B = 32.
// The order moves no arithmetic: each item is computed the same way.
VKERN_TILES_HD void tile_item(int64_t item, int64_t heads, int64_t group, int64_t tiles, int64_t* rank, int64_t* bh) {
  const int64_t per = group > 0 && group < heads ? group : heads;
  const int64_t first = item / (per * tiles) * per, n = per < heads - first ? per : heads - first;
  const int64_t r = item - first * tiles;
  *rank = r / n;
  *bh = first + r % n;
}

}  // namespace vkern_tiles
