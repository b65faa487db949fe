// staged_store_check holds cuda/staged_store.cuh's store_chunk_any, the
// Hopper GEMM's store of f16 rows that do not start 16-byte aligned, to
// what the kernel relies on: for row lengths of every remainder modulo 8
// (GPT-2's 50257 among them), chunks at every offset along the row and
// every alignment of the first row, the 32 lanes together write each of
// the chunk's 16 × 64 elements once with the value staged for it (read
// through the buffer's swizzle), nothing outside the chunk, every 16-byte
// store aligned, and one 16-byte store for each whole unit of memory a
// row's chunk covers. It prints {"checked": N, "bad": M} and exits 1 when
// M > 0 (the first few failures on stderr).
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda/staged_store.cuh"

int main() {
  long checked = 0, bad = 0;
  auto fail = [&](const char* what, long cols, long col0, int shift, int r, int h) {
    if (bad++ < 10) {
      std::fprintf(stderr, "%s: cols %ld, chunk at column %ld, base shifted %d halves, row %d, half %d\n", what, cols,
                   col0, shift, r, h);
    }
  };
  const long widths[] = {64, 65, 66, 67, 68, 69, 70, 71, 72, 100, 127, 1001, 2049, 50257};
  constexpr uint16_t kUntouched = 0xfffe;
  for (const long cols : widths) {
    for (long col0 = 0; col0 + 64 <= cols; col0 += (cols > 200 ? 64 * 7 + 3 : 1)) {
      for (int shift = 0; shift < 8; ++shift) {
        // The staged chunk: element (r, h) holds r·64 + h + 1, at unit
        // (h / 8) ^ swizzle(r) of row r's 128 bytes.
        alignas(16) unsigned char buf[16 * 128];
        for (int r = 0; r < 16; ++r) {
          for (int h = 0; h < 64; ++h) {
            const uint16_t v = static_cast<uint16_t>(r * 64 + h + 1);
            std::memcpy(buf + r * 128 + (((h >> 3) ^ vkern_staged::swizzle<true>(r)) << 4) + ((h & 7) << 1), &v, 2);
          }
        }
        // 16 rows of cols halves, the first starting shift halves past a
        // 16-byte boundary, with a row of margin either side.
        std::vector<uint16_t> mem(18 * cols + 16, kUntouched);
        uint16_t* base = mem.data();
        while (reinterpret_cast<uintptr_t>(base) & 15u) ++base;
        uint16_t* const rows = base + cols + shift;
        vkern_staged::host_stores16 = vkern_staged::host_misaligned16 = 0;
        for (int lane = 0; lane < 32; ++lane) vkern_staged::store_chunk_any(buf, rows + col0, cols, lane);
        long whole = 0;  // whole 16-byte units of memory in the chunk's rows
        for (int r = 0; r < 16; ++r) {
          const int d = static_cast<int>((reinterpret_cast<uintptr_t>(rows + r * cols + col0) >> 1) & 7);
          whole += d == 0 ? 8 : 7;
        }
        if (vkern_staged::host_misaligned16 != 0) fail("a 16-byte store not 16-byte aligned", cols, col0, shift, -1, -1);
        if (vkern_staged::host_stores16 != whole) fail("not one 16-byte store per whole unit", cols, col0, shift, -1, -1);
        for (long i = 0; i < static_cast<long>(mem.size()); ++i) {
          ++checked;
          const long at = &mem[i] - rows;  // the element's index from the first row's start
          const long r = at >= 0 ? at / cols : -1, c = at >= 0 ? at % cols : -1;
          const bool inside = r >= 0 && r < 16 && c >= col0 && c < col0 + 64;
          if (!inside) {
            if (mem[i] != kUntouched) fail("written outside the chunk", cols, col0, shift, static_cast<int>(r), -1);
            continue;
          }
          const int h = static_cast<int>(c - col0);
          if (mem[i] != static_cast<uint16_t>(r * 64 + h + 1)) {
            fail(mem[i] == kUntouched ? "never written" : "a wrong value", cols, col0, shift, static_cast<int>(r), h);
          }
        }
      }
    }
  }
  std::printf("{\"checked\": %ld, \"bad\": %ld}\n", checked, bad);
  return bad > 0 ? 1 : 0;
}
