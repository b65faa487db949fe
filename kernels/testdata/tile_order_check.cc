// tile_order_check holds cuda/tile_order.cuh's tile_item, the Hopper
// attention kernels' order of items, to what the kernels rely on, for every
// count of heads up to 80, of tiles up to 12 and several groups: each item
// maps to a head and a tile rank in range, every (head, rank) once; ranks
// never fall within a group, whose heads are consecutive; and group 0, or
// one of at least every head, is the order over all heads at once (rank
// item / heads, head item % heads). It prints {"checked": N, "bad": M}
// and exits 1 when M > 0 (the first few failures on stderr).
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda/tile_order.cuh"

int main() {
  long checked = 0, bad = 0;
  auto fail = [&](const char* what, int64_t heads, int64_t tiles, int64_t group, int64_t item) {
    if (bad++ < 10) {
      std::fprintf(stderr, "%s: heads %lld, tiles %lld, group %lld, item %lld\n", what, (long long)heads,
                   (long long)tiles, (long long)group, (long long)item);
    }
  };
  const int64_t groups[] = {0, 1, 2, 3, 4, 5, 8, 16, 33, 100};
  for (int64_t heads = 1; heads <= 80; ++heads) {
    for (int64_t tiles = 1; tiles <= 12; ++tiles) {
      for (const int64_t group : groups) {
        std::vector<int> seen(heads * tiles, 0);
        int64_t last_rank = -1, last_first = -1;
        for (int64_t item = 0; item < heads * tiles; ++item) {
          ++checked;
          int64_t rank = -1, bh = -1;
          vkern_tiles::tile_item(item, heads, group, tiles, &rank, &bh);
          if (rank < 0 || rank >= tiles || bh < 0 || bh >= heads) {
            fail("out of range", heads, tiles, group, item);
            continue;
          }
          ++seen[bh * tiles + rank];
          const int64_t per = group > 0 && group < heads ? group : heads;
          const int64_t first = bh / per * per;  // the group's first head
          if (first == last_first && rank < last_rank) fail("a rank falls within a group", heads, tiles, group, item);
          last_rank = rank;
          last_first = first;
          if (per == heads && (rank != item / heads || bh != item % heads)) {
            fail("not the order over all heads", heads, tiles, group, item);
          }
        }
        for (size_t i = 0; i < seen.size(); ++i) {
          if (seen[i] != 1) fail("a (head, rank) not visited exactly once", heads, tiles, group, static_cast<int64_t>(i));
        }
      }
    }
  }
  std::printf("{\"checked\": %ld, \"bad\": %ld}\n", checked, bad);
  return bad == 0 ? 0 : 1;
}
