// row_shift_check holds cuda/row_shift.cuh, the Hopper GEMM's reading of
// an L whose rows do not start 16-byte aligned (copied whole by TMA in
// eight row classes, then shifted into place in shared memory), to what
// gemm_sm90.cu's shifting producer relies on, in both of L's layouts. For
// row lengths of every remainder modulo 8 (GPT-2's 50257 among them), bases
// at every 2-byte offset from a 16-byte boundary, and tiles and depth steps
// that end anywhere, it plays TMA's part: each class's tensor is one TMA
// accepts (16-byte-aligned base and row stride, no empty dimension), and
// each raw box starts 16-byte aligned and reads nothing outside the operand
// but what shares its first 16 bytes; then the producer's 128 threads, each
// unit as unit_of, raw_offset, shift_units and tile_offset place it, write
// each of the stage's 1024 units once, and the stage read through TMA's
// 128-byte swizzle holds exactly the operand's tile (zero past its last row
// or column). It prints {"checked": N, "bad": M} and exits 1 when M > 0
// (the first few failures on stderr).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cuda/row_shift.cuh"

namespace s = vkern_shift;

namespace {

long checked = 0, bad = 0;

void fail(const char* what, bool depth_rows, long ld, int offset, long stored, long inner, long m0, long p0) {
  if (bad++ < 10) {
    std::fprintf(stderr, "%s: L %s, ld %ld, base +%d halves, %ld stored rows, %ld read, tile %ld, step %ld\n", what,
                 depth_rows ? "depth-contiguous" : "rows-are-depth", ld, offset, stored, inner, m0, p0);
  }
}

// check runs every tile and step of one operand in one layout.
template <bool kLDepth>
void check(long ld, int offset, long stored, long inner) {
  using Raw = s::Raw<kLDepth>;
  constexpr long kGuard = 32;  // halves of memory on either side
  std::vector<uint16_t> memory(static_cast<size_t>(stored * ld + 2 * kGuard + 8), 0xdead);
  uint16_t* const aligned =
      reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(memory.data()) + kGuard * 2 + 15) & ~uintptr_t{15});
  uint16_t* const op = aligned + offset;
  auto value = [](long i) { return static_cast<uint16_t>((i * 40503u + 7u) % 65521u + 1u); };
  for (long i = 0; i < stored * ld; ++i) op[i] = value(i);
  const uintptr_t lo = reinterpret_cast<uintptr_t>(op), hi = lo + static_cast<uintptr_t>(stored * ld) * 2;

  // rows_aligned against every row's address: 16-byte rows (what TMA
  // reads in place), and 4-byte pairs.
  for (const long bytes : {4L, 16L}) {
    bool every = true;
    for (long r = 0; r < stored; ++r) every = every && (lo + static_cast<uintptr_t>(r * ld) * 2) % bytes == 0;
    ++checked;
    if (s::rows_aligned(op, ld, 2, bytes) != every) {
      fail(bytes == 16 ? "rows_aligned(16) wrong" : "rows_aligned(4) wrong", kLDepth, ld, offset, stored, inner, 0, 0);
    }
  }

  s::Class cls[s::kClasses];
  for (int j = 0; j < s::kClasses; ++j) {
    ++checked;
    cls[j] = s::class_of(lo, ld, stored, inner, j);
    const s::Class& c = cls[j];
    if (c.base % 16 != 0 || c.row_stride % 16 != 0 || c.rows < 1 || c.inner < 1 || c.shift < 0 || c.shift >= 8 ||
        c.base + static_cast<uintptr_t>(c.shift) * 2 != lo + static_cast<uintptr_t>(j * ld) * 2) {
      fail("a class tensor TMA would refuse, or not at row j", kLDepth, ld, offset, stored, inner, 0, 0);
    }
  }
  // Tiles run over the product's rows and steps over the depth: the
  // stored rows and the inner columns in the one layout, the other way
  // round in the other. Long walks are sampled, their ends kept.
  const long tile_extent = kLDepth ? stored : inner, step_extent = kLDepth ? inner : stored;
  auto walk = [](long extent, long size) {
    std::vector<long> v;
    const long n = (extent + size - 1) / size;
    for (long i = 0; i < n; i += n > 40 ? 37 : 1) v.push_back(i * size);
    if (v.back() != (n - 1) * size) v.push_back((n - 1) * size);
    return v;
  };
  std::vector<unsigned char> raw(Raw::kSlotBytes), stage(16384);
  for (const long m0 : walk(tile_extent, 128)) {
    for (const long p0 : walk(step_extent, 64)) {
      // TMA: class j's box at (p0, m0 / 8) or (m0, p0 / 8), kWidth × kRows.
      for (int j = 0; j < s::kClasses; ++j) {
        const s::Class& c = cls[j];
        const long x0 = kLDepth ? p0 : m0, y0 = (kLDepth ? m0 : p0) / s::kClasses;
        ++checked;
        if ((c.base + static_cast<uintptr_t>(x0) * 2) % 16 != 0) {
          fail("a raw box starts mid-unit", kLDepth, ld, offset, stored, inner, m0, p0);
        }
        for (int by = 0; by < Raw::kRows; ++by) {
          for (int bx = 0; bx < Raw::kWidth; ++bx) {
            const long x = x0 + bx, y = y0 + by;
            uint16_t v = 0;
            if (x < c.inner && y < c.rows) {
              const uintptr_t at = c.base + static_cast<uintptr_t>(y * c.row_stride + x * 2);
              if (at < (lo & ~uintptr_t{15}) || at + 2 > hi) {
                fail("a raw box reads outside the operand", kLDepth, ld, offset, stored, inner, m0, p0);
              } else {
                std::memcpy(&v, reinterpret_cast<const void*>(at), 2);
              }
            }
            std::memcpy(&raw[j * Raw::kClassBytes + by * Raw::kRowBytes + bx * 2], &v, 2);
          }
        }
      }
      // The producer's 128 threads.
      std::vector<int> writes(1024, 0);
      std::fill(stage.begin(), stage.end(), 0xee);
      for (int warp = 0; warp < 4; ++warp) {
        for (int c2 = 0; c2 < 2; ++c2) {
          const int j = 2 * warp + c2;
          for (int round = 0; round < Raw::kRounds; ++round) {
            for (int lane = 0; lane < 32; ++lane) {
              const s::Unit t = s::unit_of<kLDepth>(j, round, lane);
              const int from = s::raw_offset<kLDepth>(t), to = s::tile_offset(t);
              ++checked;
              if (from < 0 || from + 32 > Raw::kSlotBytes || from % 16 != 0 || to < 0 || to + 16 > 16384 ||
                  to % 16 != 0) {
                fail("a unit read or written out of its buffer", kLDepth, ld, offset, stored, inner, m0, p0);
                continue;
              }
              uint32_t a[4], b[4], v[4];
              std::memcpy(a, &raw[from], 16);
              std::memcpy(b, &raw[from + 16], 16);
              s::shift_units(a, b, cls[j].shift, v);
              std::memcpy(&stage[to], v, 16);
              ++writes[to / 16];
            }
          }
        }
      }
      for (int k = 0; k < 1024; ++k) {
        ++checked;
        if (writes[k] != 1) fail("a stage unit not written exactly once", kLDepth, ld, offset, stored, inner, m0, p0);
      }
      // The stage as wgmma reads it.
      for (int k = 0; k < 1024; ++k) {
        const int p = k / 512, row = k % 512 / 8, u = k % 8;  // !kLDepth: panel, depth row, unit
        const int t = k / 8;                                   // kLDepth: tile row
        const int r = kLDepth ? t : row;
        const int at = (kLDepth ? 128 * t : 8192 * p + 128 * row) + 16 * (u ^ (r % 8));
        for (int h = 0; h < 8; ++h) {
          ++checked;
          const long srow = kLDepth ? m0 + t : p0 + row, scol = kLDepth ? p0 + 8 * u + h : m0 + 64 * p + 8 * u + h;
          const uint16_t want = srow < stored && scol < inner ? value(srow * ld + scol) : 0;
          uint16_t got;
          std::memcpy(&got, &stage[at + 2 * h], 2);
          if (got != want) fail("a tile element is not the operand's", kLDepth, ld, offset, stored, inner, m0, p0);
        }
      }
    }
  }
}

}  // namespace

int main() {
  for (int offset = 0; offset < 8; ++offset) {
    for (long ld = 64; ld <= 72; ++ld) {
      for (const long stored : {8L, 9L, 64L, 65L, 127L, 128L, 129L, 200L}) {
        check<true>(ld, offset, stored, ld);
        check<false>(ld, offset, stored, ld);
      }
    }
    check<true>(200, offset, 130, 131);  // a view narrower than its rows
    check<false>(200, offset, 130, 131);
    check<true>(1001, offset, 133, 1001);
    check<false>(1001, offset, 133, 1001);
    check<true>(50257, offset, 20, 50257);  // GPT-2's logits gradient
    check<false>(50257, offset, 70, 50257);
  }
  std::printf("{\"checked\": %ld, \"bad\": %ld}\n", checked, bad);
  return bad > 0 ? 1 : 0;
}
