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

// store_chunk_any stores a staged f16 chunk into rows that need not start
// 16-byte aligned (a row length that is not a multiple of 8 halves, GPT-2's
// vocabulary of 50257 among them), where storing each element on its own
// took 8× the aligned output's time (the lm_head at 16384×768×50257: 13.5
// ms against 1.65 ms at 50304). The chunk's 64 halves of each of the 16
// rows go out in the 16-byte units of memory they cover: a whole unit in
// one 16-byte store, gathered from buf two bytes at a time; the partial
// units at either end of a row's chunk (shared with the chunks beside it),
// a half at a time. first is the chunk's first element in the warp's first
// row, cols the row length; lane is one of the warp's 32, which together
// store the chunk.
VKERN_STAGED_HD void store_chunk_any(const unsigned char* buf, uint16_t* first, int64_t cols, int lane) {
  // Row r's halves start d past a 16-byte boundary; unit k of memory
  // (0 ≤ k ≤ 8) holds the chunk's halves [8k − d, 8k + 8 − d).
  for (int t = lane; t < 16 * 9; t += 32) {
    const int r = t / 9, k = t % 9;
    uint16_t* const row = first + r * cols;
    const int d = static_cast<int>((reinterpret_cast<uintptr_t>(row) >> 1) & 7);
    const int h0 = 8 * k - d;
    const int lo = h0 > 0 ? h0 : 0, hi = h0 + 8 < 64 ? h0 + 8 : 64;
    const unsigned char* const src = buf + r * 128;
    const int sw = swizzle<true>(r);
    auto half_at = [&](int h) { return load16(src + (((h >> 3) ^ sw) << 4) + ((h & 7) << 1)); };
    if (lo == h0 && hi == h0 + 8) {
      uint32_t w[4];
      for (int i = 0; i < 4; ++i) w[i] = half_at(h0 + 2 * i) | half_at(h0 + 2 * i + 1) << 16;
      store16(row + h0, w);
    } else {
      for (int h = lo; h < hi; ++h) row[h] = static_cast<uint16_t>(half_at(h));
    }
  }
}

}  // namespace vkern_staged
