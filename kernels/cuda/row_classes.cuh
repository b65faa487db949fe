// Reading an operand whose rows do not start 16-byte aligned with TMA, in
// row classes: the arithmetic of gemm_sm90.cu's RowClasses variants, in a
// header of its own so that a host test (kernels/testdata/row_classes_check.cc)
// holds it to reading every element of a tile from the right place, and
// the epilogue to storing each accumulator row to the output row it holds,
// with no GPU.
//
// TMA needs a 16-byte-aligned base and a row stride that is a multiple of
// 16 bytes. A row-major f16 operand of row length ld has neither when ld is
// not a multiple of 8 (GPT-2's logits gradient, 50257 halves a row), but
// the rows r ≡ j (mod 8) of it, class j, are 8·ld halves apart, and 8·ld·2
// bytes is a multiple of 16 for every ld. So class j is a tensor of its own:
// its base is the address of row j rounded down to 16 bytes, shift_j halves
// before the row's first element (0 ≤ shift_j < 8), its rows are
// 8·ld halves apart and inner + shift_j long, and element (r, c) of the
// operand is element (r / 8, c + shift_j) of class r % 8. Columns below
// shift_j (the end of the row before) are never read: a box starts at
// column c + shift_j ≥ shift_j; columns past inner + shift_j are outside
// the class tensor, which TMA fills with zeros as it does past any edge.
//
// A 128-row tile whose first row m0 is a multiple of 8 takes rows
// m0/8 .. m0/8 + 15 of each class: eight boxes of 16 rows, class j's landing
// in the tile's shared-memory rows 16j .. 16j + 15. Shared-memory row s of
// the tile so holds operand row m0 + tile_row(s), tile_row(s) = 8·(s % 16) +
// s / 16. When the operand is L with its depth contiguous (its rows are the
// product's rows), the accumulator row the consumers compute from shared row
// s is output row m0 + tile_row(s): warp w of consumer c, whose 16 rows are
// shared rows 64c + 16w .. + 15, holds class 4c + w, and its row r is
// output row m0 + 4c + w + 8r. The depth is read in order, so every dot
// product is summed as in the aligned kernels (the same terms in the same
// fused steps); only which output row a tile row is changes.
#pragma once

#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define VKERN_CLASSES_HD __host__ __device__ __forceinline__
#else
#define VKERN_CLASSES_HD inline
#endif

namespace vkern_classes {

constexpr int kClasses = 8;   // rows r ≡ j (mod 8) make class j
constexpr int kTileRows = 128;  // the Hopper GEMM's BM
constexpr int kBoxRows = kTileRows / kClasses;  // rows of one class in a tile: a consumer warp's 16

// Class j of an operand at byte address `addr`, row length ld halves,
// `rows` rows of which `inner` halves are read: the tensor TMA is given.
struct Class {
  uintptr_t base;      // 16-byte aligned: row j's address rounded down
  int32_t shift;       // halves from base to row j's first element
  int64_t inner;       // the class tensor's row length, inner + shift
  int64_t rows;        // rows of the class: ⌈(rows − j) / 8⌉
  int64_t row_stride;  // bytes between its rows: 8·ld·2
};

// class_of describes class j of the operand; rows ≥ kClasses, so that no
// class is empty (a tensor map's dimensions must be at least 1).
VKERN_CLASSES_HD Class class_of(uintptr_t addr, int64_t ld, int64_t rows, int64_t inner, int j) {
  const uintptr_t row = addr + static_cast<uintptr_t>(j) * static_cast<uintptr_t>(ld) * 2u;
  Class c;
  c.base = row & ~uintptr_t{15};
  c.shift = static_cast<int32_t>((row - c.base) / 2);
  c.inner = inner + c.shift;
  c.rows = (rows - j + kClasses - 1) / kClasses;
  c.row_stride = int64_t{kClasses} * ld * 2;
  return c;
}

// tile_row: the row, from the tile's first, that shared-memory row s of a
// tile read in classes holds.
VKERN_CLASSES_HD int tile_row(int s) { return kClasses * (s % kBoxRows) + s / kBoxRows; }

// warp_first_row and kWarpRowStep: row r of consumer c's warp w (its shared
// rows 64c + 16w + r) is output row m0 + warp_first_row(c, w) + r·kWarpRowStep.
constexpr int kWarpRowStep = kClasses;
VKERN_CLASSES_HD int warp_first_row(int consumer, int warp) { return 4 * consumer + warp; }

}  // namespace vkern_classes
