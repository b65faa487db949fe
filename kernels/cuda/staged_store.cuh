// The Hopper GEMM's store of f16 rows that do not start 16-byte aligned
// (gemm_sm90.cu's staged epilogue), in a header of its own so that a host
// test (kernels/testdata/staged_store_check.cc) holds it to writing every
// element of a chunk once, from the right place in the staging buffer, in
// 16-byte stores only where they are aligned, with no GPU.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define VKERN_STAGED_HD __host__ __device__ __forceinline__
#else
#define VKERN_STAGED_HD inline
#endif

namespace vkern_staged {

// The staged epilogue's buffer: a warp's 16 rows × 128 bytes, one chunk
// of its rows at a time (64 columns as f16, or 32 as f32), each 16-byte
// unit u of row r at u ^ swizzle<kHalf>(r), which keeps both the
// fragment's pair writes and the rows' 16-byte reads free of bank
// conflicts.
template <bool kHalf>
VKERN_STAGED_HD int swizzle(int r) {
  return kHalf ? (r & 7) : ((r & 3) << 1);
}

// load16 is the 2 bytes at p.
VKERN_STAGED_HD uint32_t load16(const unsigned char* p) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return *reinterpret_cast<const uint16_t*>(p);
#else
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
#endif
}

#if !defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
// On the host (the check's build), store16's calls and those of them at an
// address that is not 16-byte aligned, which the device would fault on.
inline long host_stores16 = 0, host_misaligned16 = 0;
#endif

// store16 writes w to p, which is 16-byte aligned, in one store.
VKERN_STAGED_HD void store16(uint16_t* p, const uint32_t (&w)[4]) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
#else
  ++host_stores16;
  if (reinterpret_cast<uintptr_t>(p) & 15u) ++host_misaligned16;
  std::memcpy(p, w, 16);
#endif
}

// load_unit is the 16 bytes at p (16-byte aligned), as four words.
VKERN_STAGED_HD void load_unit(const unsigned char* p, uint32_t* w) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
#else
  std::memcpy(w, p, 16);
#endif
}

// store_chunk_any stores a staged f16 chunk into rows that need not start
// 16-byte aligned (a row length that is not a multiple of 8 halves, GPT-2's
// vocabulary of 50257 among them). Row r's halves start d past a 16-byte
// boundary, so unit k of memory (0 ≤ k ≤ 8) holds the chunk's halves
// [8k − d, 8k + 8 − d): with d = 0 the units 0 to 7 are whole, else the
// units 1 to 7, and units 0 and 8 hold 8 − d and d of the chunk's halves
// (the rest belong to the chunks beside it). The 8 lanes of a row group
// take one row at a time: lane j stores whole unit j (d = 0) or j + 1 (j <
// 7) in one 16-byte store, its 8 halves the staged units k − 1 and k read
// whole and shifted by 8 − d halves (selects and byte permutes, no indexed
// registers), and, where d ≠ 0, one of the 8 halves of the partial units.
// The first version gathered each whole unit two bytes at a time and
// looped over the partial units' halves on one lane: the lm_head at
// 16384×50257×768 spent 1.26 G warp instructions, most of them index
// arithmetic and branches, and took 3.5 ms against 2.0 ms at 50304; this
// one takes 2.65-2.75 ms (the H100, vkern bench --suite ops; BENCHMARKS.md).
// first is the chunk's first element in the warp's first row, cols the row
// length; lane is one of the warp's 32, which together store the chunk.
VKERN_STAGED_HD void store_chunk_any(const unsigned char* buf, uint16_t* first, int64_t cols, int lane) {
  const int j = lane % 8;
  for (int it = 0; it < 4; ++it) {
    const int r = 4 * it + lane / 8;
    uint16_t* const row = first + r * cols;
    const int d = static_cast<int>((reinterpret_cast<uintptr_t>(row) >> 1) & 7);
    const unsigned char* const src = buf + r * 128;
    const int sw = swizzle<true>(r);
    const int k = d == 0 ? j : j + 1;
    if (k <= 7) {
      // w: staged units k − 1 (any unit, unused, when d = 0) and k, then a
      // zero; the unit of memory is halves [8 − d, 16 − d) of it, which
      // start in word m = (8 − d) / 2. a, b, c: the window from word m,
      // shifted by 4, 2 and 1 words as m's bits say.
      uint32_t w[9];
      load_unit(src + ((((k - 1) & 7) ^ sw) << 4), w);
      load_unit(src + ((k ^ sw) << 4), w + 4);
      w[8] = 0;
      const int s = 8 - d, m = s >> 1;
      uint32_t a[8], b[6], c[5];
      for (int i = 0; i < 8; ++i) a[i] = (m & 4) ? (i + 4 <= 8 ? w[i + 4] : 0u) : w[i];
      for (int i = 0; i < 6; ++i) b[i] = (m & 2) ? a[i + 2] : a[i];
      for (int i = 0; i < 5; ++i) c[i] = (m & 1) ? b[i + 1] : b[i];
      uint32_t out[4];
      for (int i = 0; i < 4; ++i) out[i] = (s & 1) ? (c[i] >> 16) | (c[i + 1] << 16) : c[i];
      store16(row + 8 * k - d, out);
    }
    if (d != 0) {
      // The partial units' 8 halves: unit 0's first 8 − d, then unit 8's d.
      const int h = j < 8 - d ? j : 56 + j;
      row[h] = static_cast<uint16_t>(load16(src + (((h >> 3) ^ sw) << 4) + ((h & 7) << 1)));
    }
  }
}

}  // namespace vkern_staged
