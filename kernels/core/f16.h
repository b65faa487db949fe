// IEEE 754 binary16 <-> binary32 conversion in portable C++.
//
// No _Float16, no F16C or NEON conversion instructions: integer bit work plus
// two float operations whose results are exact or correctly rounded by the
// FPU's default round-to-nearest-even mode. This relies on
//   - IEEE binary32 float arithmetic evaluated in binary32 (FLT_EVAL_METHOD 0,
//     true on x86_64 and aarch64),
//   - the default rounding mode, and no -ffast-math.
// Flush-to-zero or denormals-are-zero modes do not change any result here:
// f16_to_f32 never touches an f32 subnormal, and f32_to_f16 maps every f32
// subnormal input to a signed zero either way.
#ifndef VKERN_CORE_F16_H
#define VKERN_CORE_F16_H

#include <cstdint>
#include <cstring>

namespace vkern {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float float_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Both conversions compute every case and then select one, so the same steps
// vectorise lane by lane (cpu/convert.h does that for whole runs; a compiler
// may still turn the scalar selects into branches).

// f16_to_f32 is exact: every binary16 value, subnormals and signed zeros
// included, is a binary32 value. Inf keeps its sign; NaN keeps its sign and
// payload (shifted into the top of the binary32 mantissa; a signalling NaN
// stays signalling, where conversion instructions would quiet it).
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t magnitude = h & 0x7fffu;
  // Inf or NaN: all-ones exponent, mantissa moved up 13 bits.
  const uint32_t inf_nan = 0x7f800000u | ((magnitude & 0x03ffu) << 13);
  // Normal: exponent bias 15 -> 127 is an add of 112 << 23.
  const uint32_t normal = (magnitude << 13) + 0x38000000u;
  // Zero or subnormal: magnitude × 2^-24, exact in binary32 (a normal number).
  const uint32_t small = float_bits(static_cast<float>(static_cast<int32_t>(magnitude)) * 0x1p-24f);
  const uint32_t bits = magnitude >= 0x7c00u ? inf_nan : magnitude >= 0x0400u ? normal : small;
  return float_from_bits(sign | bits);
}

// f32_to_f16 rounds to nearest, ties to even. |f| >= 65520 (halfway between
// the largest finite binary16, 65504, and 2^16) becomes Inf of the same sign;
// results below 2^-14 become subnormals or signed zeros; NaN stays NaN (quiet,
// sign and the top payload bits kept).
inline uint16_t f32_to_f16(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t magnitude = x & 0x7fffffffu;
  const uint32_t nan = 0x7e00u | ((magnitude >> 13) & 0x03ffu);
  const uint32_t inf = 0x7c00u;
  // Normal binary16, [2^-14, 65520): rebias the exponent, then round the 13
  // dropped mantissa bits to nearest even. A carry out of the mantissa bumps
  // the exponent, which is the correctly rounded value. (For other inputs the
  // subtraction wraps; the result is not selected.)
  const uint32_t rebiased = magnitude - 0x38000000u;
  const uint32_t normal = (rebiased + 0x0fffu + ((rebiased >> 13) & 1u)) >> 13;
  // Below 2^-14 the result is a multiple of 2^-24. Adding 0.5, whose binary32
  // ulp is 2^-24, makes the FPU round |f| to that multiple (ties to even); the
  // multiple is then the low mantissa bits. 1024 × 2^-24 encodes as 0x0400,
  // the smallest normal, which is right for values that round up to it.
  const uint32_t small = float_bits(float_from_bits(magnitude) + 0.5f) - 0x3f000000u;
  const uint32_t bits = magnitude > 0x7f800000u    ? nan
                        : magnitude >= 0x477ff000u ? inf
                        : magnitude >= 0x38800000u ? normal
                                                   : small;
  return static_cast<uint16_t>(sign | bits);
}

}  // namespace vkern

#endif  // VKERN_CORE_F16_H
