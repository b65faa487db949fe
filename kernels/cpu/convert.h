// Bulk f16 <-> f32 conversion of contiguous runs, eight lanes at a time.
//
// Each lane does exactly what the scalar f16_to_f32 / f32_to_f16 in
// core/f16.h do (same operations, same selects), so results are bit for bit
// the scalar ones; only the speed differs. The scalar functions finish the
// tail. GCC/Clang vector extensions lower to AVX on x86 and to NEON pairs on
// aarch64; a target without SIMD gets scalar code from the same source.
// No vector is passed to or returned from a function (that would change the
// ABI on targets without 32-byte registers).
//
// A header: every kernel file that converts runs includes it. The
// functions are inline and use only the lane types (aliases of the
// compiler's vector types) and core/f16.h, so each translation unit's copy
// is the same definition.
#ifndef VKERN_CPU_CONVERT_H
#define VKERN_CPU_CONVERT_H

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/f16.h"

namespace vkern {
namespace {

typedef uint16_t u16x8 __attribute__((vector_size(16)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef float f32x8_lanes __attribute__((vector_size(32)));

}  // namespace

// f16_to_f32_run converts n values from src to dst.
inline void f16_to_f32_run(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    u16x8 h;
    std::memcpy(&h, src + i, sizeof h);
    const u32x8 w = __builtin_convertvector(h, u32x8);
    const u32x8 sign = (w & 0x8000u) << 16;
    const u32x8 magnitude = w & 0x7fffu;
    const u32x8 inf_nan = 0x7f800000u | ((magnitude & 0x03ffu) << 13);
    const u32x8 normal = (magnitude << 13) + 0x38000000u;
    const f32x8_lanes small_value = __builtin_convertvector(reinterpret_cast<i32x8>(magnitude), f32x8_lanes) * 0x1p-24f;
    const u32x8 small = reinterpret_cast<u32x8>(small_value);
    const u32x8 bits = magnitude >= 0x7c00u ? inf_nan : magnitude >= 0x0400u ? normal : small;
    const u32x8 out = sign | bits;
    std::memcpy(dst + i, &out, sizeof out);
  }
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

// f32_to_f16_run converts n values from src to dst, rounding to nearest even.
inline void f32_to_f16_run(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    u32x8 x;
    std::memcpy(&x, src + i, sizeof x);
    const u32x8 sign = (x >> 16) & 0x8000u;
    const u32x8 magnitude = x & 0x7fffffffu;
    const u32x8 nan = 0x7e00u | ((magnitude >> 13) & 0x03ffu);
    const u32x8 inf = u32x8{} + 0x7c00u;
    const u32x8 rebiased = magnitude - 0x38000000u;
    const u32x8 normal = (rebiased + 0x0fffu + ((rebiased >> 13) & 1u)) >> 13;
    const f32x8_lanes shifted = reinterpret_cast<f32x8_lanes>(magnitude) + 0.5f;
    const u32x8 small = reinterpret_cast<u32x8>(shifted) - 0x3f000000u;
    const u32x8 bits = magnitude > 0x7f800000u    ? nan
                       : magnitude >= 0x477ff000u ? inf
                       : magnitude >= 0x38800000u ? normal
                                                  : small;
    const u16x8 out = __builtin_convertvector(sign | bits, u16x8);
    std::memcpy(dst + i, &out, sizeof out);
  }
  for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

}  // namespace vkern

#endif  // VKERN_CPU_CONVERT_H
