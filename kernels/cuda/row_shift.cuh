// Reading an L whose rows do not start 16-byte aligned with TMA, by rows
// copied whole and shifted in shared memory: the arithmetic of
// gemm_sm90.cu's shifting producer (Tiles::kShiftL), in a header of its
// own so that a host test (kernels/testdata/row_shift_check.cc) holds it
// to putting every element of a stage's L tile where wgmma reads it, with
// no GPU. Its row classes (class_of) serve gemm_sm90.cu's other row-class
// tiles too: class tiles of an unaligned output (Tiles::kClassOut), L
// read in row classes into registers (Tiles::kClassL), and an MN-major L
// read by the classes of its depth rows into registers
// (Tiles::kDepthClassL).
//
// TMA needs a 16-byte-aligned base, a row stride that is a multiple of 16
// bytes, and (measured: docs/row-shift-h100, call 1) a box whose first
// element is 16-byte aligned: a box that starts mid-unit stops the kernel
// with an illegal instruction. A row-major f16 operand of row length ld
// meets none of these when ld is not a multiple of 8 (GPT-2's logits
// gradient, 50257 halves a row), but its rows r ≡ j (mod 8), class j, are
// 8·ld halves apart, and 8·ld·2 bytes is a multiple of 16 for every ld. So
// class j is a tensor of its own: its base is row j's address rounded down
// to 16 bytes, shift_j halves before the row's first element (0 ≤ shift_j
// < 8), its rows 8·ld halves apart and inner + shift_j long; element (r, c)
// of the operand is element (r / 8, c + shift_j) of class r % 8.
//
// Each depth step, the producer's thread 0 copies eight raw boxes, one per
// class, starting at aligned column coordinates (the tile's first column,
// a multiple of 64), kWidth = tile width + 8 halves wide without swizzle,
// into a raw slot; each raw row so holds the tile row's elements from
// shift_j halves in. Then the producer warpgroup's 128 threads put each
// 16-byte unit of the tile in its place in the stage: unit u of a tile row
// is halves [shift_j + 8u, shift_j + 8u + 8) of the raw row, two raw units
// shifted by shift_j halves (shift_units), written at unit u ^ (row % 8)
// of the row, TMA's 128-byte swizzle, which the wgmma descriptors read.
// The rows go back in their natural order, so nothing downstream changes:
// the same tile, the same dot products summed in the same order.
//
// Two layouts of L (gemm.cuh's kLDepth): depth-contiguous (its rows are
// the product's rows; a stage is 128 rows × 64 depth terms: 16 rows of each
// class), or not (its rows are the depth; a stage is 64 depth rows × 128
// columns, two 64-wide panels 8 KB apart: 8 rows of each class). Producer
// warp w puts classes 2w and 2w + 1, four rounds of 32 units each: lane
// l takes unit l % 8 of the round's row l / 8, so that the eight lanes of a
// shared-memory phase read and write eight different bank groups.
#pragma once

#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define VKERN_SHIFT_HD __host__ __device__ __forceinline__
#else
#define VKERN_SHIFT_HD inline
#endif

namespace vkern_shift {

constexpr int kClasses = 8;  // rows r ≡ j (mod 8) make class j

// Class j of an operand at byte address addr, row length ld halves,
// `rows` rows of which `inner` halves are read: the tensor TMA is given.
struct Class {
  uintptr_t base;      // 16-byte aligned: row j's address rounded down
  int32_t shift;       // halves from base to row j's first element
  int64_t inner;       // the class tensor's row length, inner + shift
  int64_t rows;        // rows of the class: ⌈(rows − j) / 8⌉
  int64_t row_stride;  // bytes between its rows: 8·ld·2
};

// rows_aligned says whether every row of an operand at p, ld elements of
// elem_bytes apart, starts at a multiple of `bytes` (a power of two, at
// least elem_bytes): 16 for TMA and 16-byte accesses, twice an element for
// paired stores. Where it is false for 16, the class tensors below give
// TMA what it can read.
VKERN_SHIFT_HD bool rows_aligned(const void* p, int64_t ld, int64_t elem_bytes, int64_t bytes) {
  return ld % (bytes / elem_bytes) == 0 && reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}
// class_of describes class j; rows ≥ kClasses, so that no class is empty
// (a tensor map's dimensions must be at least 1).
VKERN_SHIFT_HD Class class_of(uintptr_t addr, int64_t ld, int64_t rows, int64_t inner, int j) {
  const uintptr_t row = addr + static_cast<uintptr_t>(j) * static_cast<uintptr_t>(ld) * 2u;
  Class c;
  c.base = row & ~uintptr_t{15};
  c.shift = static_cast<int32_t>((row - c.base) / 2);
  c.inner = inner + c.shift;
  c.rows = (rows - j + kClasses - 1) / kClasses;
  c.row_stride = int64_t{kClasses} * ld * 2;
  return c;
}

// The raw boxes of a stage, by L's layout.
template <bool kLDepth>
struct Raw {
  static constexpr int kRows = kLDepth ? 16 : 8;            // rows of a class in a stage
  static constexpr int kPanels = kLDepth ? 1 : 2;           // 64-wide panels of the tile
  static constexpr int kWidth = 64 * kPanels + 8;           // halves a raw row holds
  static constexpr int kRowBytes = 2 * kWidth;              // 144 or 272: whole 16-byte units
  static constexpr int kClassBytes = kRows * kRowBytes;     // a multiple of 128
  static constexpr int kSlotBytes = kClasses * kClassBytes;  // one stage's raw boxes
  static constexpr int kRounds = kRows * kPanels * 8 / 32;  // rounds of 32 units a class: 4
  // Raw slots: thread 0 copies a step's boxes kSlots − 1 steps ahead of the
  // step the warps shift. With 2 (one ahead) the head's dx took 4.31 ms
  // against 2.93 for the padded copy (docs/row-shift-h100, call 2); with
  // 3, 4.71 against 2.90 (call 3): the copies' latency is not the limit.
  static constexpr int kSlots = 3;
};

// A unit of the tile: class j's row i (tile row 8i + j), panel p, unit u.
struct Unit {
  int j, i, p, u;
};

// unit_of: the unit lane takes in round `round` (0 ≤ round < kRounds) of
// class j.
template <bool kLDepth>
VKERN_SHIFT_HD Unit unit_of(int j, int round, int lane) {
  const int n = 4 * round + lane / 8;  // the round's row (and panel)
  Unit t;
  t.j = j;
  t.i = kLDepth ? n : n % 8;
  t.p = kLDepth ? 0 : n / 8;
  t.u = lane % 8;
  return t;
}

// raw_offset: bytes from the raw slot to the first of the two raw units
// the tile unit is shifted from.
template <bool kLDepth>
VKERN_SHIFT_HD int raw_offset(Unit t) {
  return t.j * Raw<kLDepth>::kClassBytes + t.i * Raw<kLDepth>::kRowBytes + 128 * t.p + 16 * t.u;
}

// tile_offset: bytes from the stage's L tile to where the unit goes: row
// 8i + j of its panel (panels 8 KB apart), unit u ^ (row % 8).
VKERN_SHIFT_HD int tile_offset(Unit t) { return 8192 * t.p + 128 * (8 * t.i + t.j) + 16 * (t.u ^ t.j); }

// funnel is the 32 bits from bit 16 of hi:lo.
VKERN_SHIFT_HD uint32_t funnel16(uint32_t lo, uint32_t hi) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_r(lo, hi, 16);
#else
  return (lo >> 16) | (hi << 16);
#endif
}

// shift_units: the 16 bytes from half `shift` (0 ≤ shift < 8) of the 32
// bytes a then b, as words. shift is the same across a warp (one class a
// round), so the switch does not diverge.
VKERN_SHIFT_HD void shift_units(const uint32_t (&a)[4], const uint32_t (&b)[4], int shift, uint32_t (&out)[4]) {
  uint32_t w[5];
  switch (shift >> 1) {
    case 0: w[0] = a[0], w[1] = a[1], w[2] = a[2], w[3] = a[3], w[4] = b[0]; break;
    case 1: w[0] = a[1], w[1] = a[2], w[2] = a[3], w[3] = b[0], w[4] = b[1]; break;
    case 2: w[0] = a[2], w[1] = a[3], w[2] = b[0], w[3] = b[1], w[4] = b[2]; break;
    default: w[0] = a[3], w[1] = b[0], w[2] = b[1], w[3] = b[2], w[4] = b[3]; break;
  }
  if (shift & 1) {
    for (int k = 0; k < 4; ++k) out[k] = funnel16(w[k], w[k + 1]);
  } else {
    for (int k = 0; k < 4; ++k) out[k] = w[k];
  }
}

}  // namespace vkern_shift
