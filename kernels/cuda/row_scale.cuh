// The powers of two that put a row of attention_grad's dS into f16's range
// and scale its products back (attention.cu: row_shift, round_scaled,
// add_scaled), in a header of their own so that a host test
// (kernels/testdata/row_scale_check.cc) holds them, with no GPU, to what
// attention.cu relies on: shift_for gives a shift in [−163, 113] for any
// finite largest, one that puts it in [2¹⁴, 2¹⁵); pow2(n) is 2^n for n in
// [−149, 127]; and x·pow2(n) has the bits of ldexpf(x, n) for every such n.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define VKERN_SCALE_HD __host__ __device__ __forceinline__
#else
#define VKERN_SCALE_HD inline
#endif

namespace vkern_scale {

// float_bits and bits_float reinterpret a float and its 32 bits.
VKERN_SCALE_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
#endif
}
VKERN_SCALE_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
#endif
}

// shift_for is the shift that puts largest (≥ 0) in [2¹⁴, 2¹⁵) once scaled
// by 2^−shift; 0 for 0. For a finite largest it lies in [−163, 113]: 113 at
// the largest float, −163 at the smallest subnormal.
VKERN_SCALE_HD int shift_for(float largest) {
  int e = 0;  // largest in [2^(e−1), 2^e)
  if (largest >= 1.17549435e-38f) {
    e = static_cast<int>(float_bits(largest) >> 23 & 0xffu) - 126;  // normal (an infinity: unused)
  } else if (largest > 0.0f) {
    frexpf(largest, &e);
  }
  return largest > 0.0f ? e - 15 : 0;
}

// kFastShiftMin is the least row shift for which attention.cu's
// round_scaled and add_scaled multiply by pow2(∓shift) (fast_shifts): with
// shift_for's largest, 114 (at an infinity), both powers lie in pow2's
// range.
constexpr int kFastShiftMin = -127;

// pow2 is 2^n for n in [−149, 127]: exact, subnormal below −126. A
// multiplication by it rounds the exact product once, as ldexpf does, so
// x·pow2(n) has ldexpf(x, n)'s bits.
VKERN_SCALE_HD float pow2(int n) {
  return bits_float(n >= -126 ? static_cast<uint32_t>(n + 127) << 23 : uint32_t{1} << (n + 149));
}

}  // namespace vkern_scale
