// row_classes_check holds cuda/row_classes.cuh, the Hopper GEMM's reading
// of an L whose rows do not start 16-byte aligned as eight tensors of every
// eighth row, to what gemm_sm90.cu relies on. For row lengths of every
// remainder modulo 8 (GPT-2's 50257 among them), bases at every 2-byte
// offset from a 16-byte boundary, row counts that end a tile anywhere and
// depths that end a step anywhere, it plays TMA's part: each class's tensor
// is one TMA accepts (16-byte-aligned base and row stride, no empty
// dimension), and the eight boxes of every tile's every depth step, read
// as TMA reads them (an element outside the class tensor is zero), put in
// shared-memory row s, column x exactly the operand's element
// (m0 + tile_row(s), p0 + x), or zero past its last row or depth term,
// never touching memory outside the operand. Then the epilogue's side:
// tile_row is a permutation of a tile's 128 rows, and consumer c's warp
// w stores its row r to warp_first_row(c, w) + r·kWarpRowStep, the row
// its shared-memory row 64c + 16w + r holds. It prints
// {"checked": N, "bad": M} and exits 1 when M > 0 (the first few failures
// on stderr).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cuda/row_classes.cuh"

namespace c = vkern_classes;

int main() {
  long checked = 0, bad = 0;
  auto fail = [&](const char* what, long ld, int offset, long rows, long inner, long m0, long p0, int j) {
    if (bad++ < 10) {
      std::fprintf(stderr, "%s: ld %ld, base +%d halves, rows %ld, inner %ld, tile row %ld, depth %ld, class %d\n",
                   what, ld, offset, rows, inner, m0, p0, j);
    }
  };

  // The epilogue's row arithmetic against the tile's layout.
  std::vector<int> seen(c::kTileRows, 0);
  for (int s = 0; s < c::kTileRows; ++s) {
    ++checked;
    const int t = c::tile_row(s);
    if (t < 0 || t >= c::kTileRows) {
      fail("tile_row out of range", 0, 0, 0, 0, s, 0, 0);
      continue;
    }
    ++seen[t];
  }
  for (int t = 0; t < c::kTileRows; ++t) {
    if (seen[t] != 1) fail("tile_row is not a permutation", 0, 0, 0, 0, t, 0, 0);
  }
  for (int consumer = 0; consumer < 2; ++consumer) {
    for (int warp = 0; warp < 4; ++warp) {
      for (int r = 0; r < 16; ++r) {
        ++checked;
        if (c::warp_first_row(consumer, warp) + r * c::kWarpRowStep != c::tile_row(64 * consumer + 16 * warp + r)) {
          fail("a warp's row is not the row its shared rows hold", 0, 0, 0, 0, 64 * consumer + 16 * warp + r, 0, 0);
        }
      }
    }
  }

  struct Case {
    long ld, rows, inner;
  };
  std::vector<Case> cases;
  for (long ld = 64; ld <= 72; ++ld) {
    for (const long rows : {8L, 9L, 15L, 127L, 128L, 129L, 260L}) cases.push_back({ld, rows, ld});
  }
  cases.push_back({200, 300, 131});     // a view narrower than its rows
  cases.push_back({1001, 133, 1001});
  cases.push_back({50257, 20, 50257});  // GPT-2's logits gradient
  cases.push_back({50257, 9, 50257});

  constexpr int kBoxInner = 64;
  for (const Case& k : cases) {
    for (int offset = 0; offset < 8; ++offset) {
      // The operand at `offset` halves past a 16-byte boundary, with 64
      // bytes of memory on either side that must never be read.
      constexpr long kGuard = 32;  // halves
      std::vector<uint16_t> memory(static_cast<size_t>(k.rows * k.ld + 2 * kGuard + 8));
      uint16_t* const aligned = reinterpret_cast<uint16_t*>(
          (reinterpret_cast<uintptr_t>(memory.data()) + kGuard * 2 + 15) & ~uintptr_t{15});
      uint16_t* const op = aligned + offset;
      auto value = [](long i) { return static_cast<uint16_t>((i * 40503u + 7u) % 65521u + 1u); };
      for (long i = 0; i < k.rows * k.ld; ++i) op[i] = value(i);
      const uintptr_t lo = reinterpret_cast<uintptr_t>(op), hi = lo + static_cast<uintptr_t>(k.rows * k.ld) * 2;

      c::Class cls[c::kClasses];
      for (int j = 0; j < c::kClasses; ++j) {
        ++checked;
        cls[j] = c::class_of(lo, k.ld, k.rows, k.inner, j);
        const c::Class& m = cls[j];
        if (m.base % 16 != 0 || m.row_stride % 16 != 0 || m.rows < 1 || m.inner < 1 || m.shift < 0 || m.shift >= 8 ||
            m.base + static_cast<uintptr_t>(m.shift) * 2 != lo + static_cast<uintptr_t>(j * k.ld) * 2) {
          fail("a class tensor TMA would refuse, or not at row j", k.ld, offset, k.rows, k.inner, 0, 0, j);
        }
      }
      // The depth steps: every one, or for long rows every 97th and the last.
      const long steps = (k.inner + kBoxInner - 1) / kBoxInner;
      std::vector<long> walk;
      for (long step = 0; step < steps; step += k.inner > 1000 ? 97 : 1) walk.push_back(step);
      if (walk.back() != steps - 1) walk.push_back(steps - 1);
      for (long m0 = 0; m0 < k.rows; m0 += c::kTileRows) {
        for (const long step : walk) {
          const long p0 = step * kBoxInner;
          for (int j = 0; j < c::kClasses; ++j) {
            const c::Class& m = cls[j];
            const long x0 = p0 + m.shift, y0 = m0 / c::kClasses;  // the box's coordinates, as the producer gives them
            for (int by = 0; by < c::kBoxRows; ++by) {
              const int s = j * c::kBoxRows + by;  // the shared-memory row the box's row lands in
              const long row = m0 + c::tile_row(s);
              for (int bx = 0; bx < kBoxInner; ++bx) {
                ++checked;
                const long x = x0 + bx, y = y0 + by;
                uint16_t got = 0;
                if (x < m.inner && y < m.rows) {
                  const uintptr_t at = m.base + static_cast<uintptr_t>(y * m.row_stride + x * 2);
                  if (at < lo || at + 2 > hi) {
                    fail("a box reads outside the operand", k.ld, offset, k.rows, k.inner, m0, p0, j);
                    continue;
                  }
                  std::memcpy(&got, reinterpret_cast<const void*>(at), 2);
                }
                const long col = p0 + bx;
                const uint16_t want = row < k.rows && col < k.inner ? value(row * k.ld + col) : 0;
                if (got != want) fail("a tile element is not the operand's", k.ld, offset, k.rows, k.inner, m0, p0, j);
              }
            }
          }
        }
      }
    }
  }
  std::printf("{\"checked\": %ld, \"bad\": %ld}\n", checked, bad);
  return bad > 0 ? 1 : 0;
}
