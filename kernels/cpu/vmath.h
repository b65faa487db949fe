// expf and tanhf over runs of floats, eight lanes at a time.
//
// glibc's scalar expf and tanhf cost tens of nanoseconds a call and do not
// vectorize; the training ops (attention's weights, GELU) call them hundreds
// of thousands of times a step. These are the classic reductions with
// Cephes's single-precision minimax polynomials, written once with GCC/Clang
// vector extensions (AVX on x86, NEON pairs on aarch64, scalar code on a
// target without SIMD), so every backend build gets the same bits.
//
// Accuracy against the float64 functions, over every binary32 argument
// (kernels/testdata/vmath_check.cc; go test ./kernels checks every 13th bit
// pattern, VKERN_EXHAUSTIVE=1 all of them):
//   exp_run   within 2⁻²³·e^x where e^x is normal and an ulp (2⁻¹⁴⁹) where
//             it is subnormal (measured worst 0.7503); the oracles allow
//             2 ulps.
//   tanh_run  within 1.5·2⁻²³·|tanh x| (measured worst 1.1944); the oracles
//             allow 4.
//
// exp: x = n·ln 2 + r with n the nearest integer to x·log₂e and |r| ≤ ½ln 2
// (ln 2 in two parts, Cody and Waite, so n·ln2_hi is exact and r carries
// one rounding); e^r = 1 + r + r²·P(r); the result is e^r·2^⌊n/2⌋·2^(n−⌊n/2⌋),
// two exact or once-rounded scalings, so that results near the overflow
// threshold and in the subnormal range come out right. Arguments are
// clamped to [−110, 89] first (e^89 overflows to +Inf, e^−110 rounds to +0),
// and a NaN is passed through.
//
// tanh: |x| < 0.625 uses x + x³·Q(x²); above, 1 − 2/(e^{2|x|} + 1) with the
// sign put back (|x| is clamped to 10, where 1 − 2/(e²⁰ + 1) rounds to 1);
// NaN passes through, ±Inf gives ±1. Wherever tanh x rounds to ±1 in
// binary32, tanh_run gives ±1 exactly, so that 1 − T² is 0 there as the
// derivative needs (GELU's backward would otherwise see 2⁻²³ for 0 and
// overflow where it should give 0, or Inf where it should give NaN).
//
// A header: the kernel files that need exp or tanh include it, and each
// translation unit gets its own copy of these functions (an unnamed
// namespace), so no definition is shared between units.
#ifndef VKERN_CPU_VMATH_H
#define VKERN_CPU_VMATH_H

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace vkern {
namespace {

typedef float f32x8_math __attribute__((vector_size(32)));
typedef int32_t i32x8_math __attribute__((vector_size(32)));
typedef uint32_t u32x8_math __attribute__((vector_size(32)));

// exp8 returns e^x lane by lane (see the file comment).
inline f32x8_math exp8(f32x8_math x) {
  const f32x8_math nan = x;
  x = x < 89.0f ? x : f32x8_math{} + 89.0f;
  x = x > -110.0f ? x : f32x8_math{} - 110.0f;
  // n = round(x·log₂e): adding 1.5·2²³ leaves the integer in the low bits.
  const f32x8_math magic = f32x8_math{} + 12582912.0f;
  const f32x8_math shifted = x * 1.44269504088896341f + magic;
  const f32x8_math n = shifted - magic;
  const i32x8_math ni = reinterpret_cast<i32x8_math>(shifted) - 0x4b400000;
  const f32x8_math r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  const f32x8_math p =
      (((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r + 4.1665795894e-2f) * r +
        1.6666665459e-1f) * r + 5.0000001201e-1f) * r * r + r + 1.0f;
  const i32x8_math half = ni >> 1;  // ⌊n/2⌋, then n − ⌊n/2⌋: each in [−80, 64]
  const f32x8_math s1 = reinterpret_cast<f32x8_math>((half + 127) << 23);
  const f32x8_math s2 = reinterpret_cast<f32x8_math>((ni - half + 127) << 23);
  const f32x8_math out = p * s1 * s2;
  return nan != nan ? nan : out;
}

// tanh8 returns tanh x lane by lane (see the file comment).
inline f32x8_math tanh8(f32x8_math x) {
  const u32x8_math bits = reinterpret_cast<u32x8_math>(x);
  const u32x8_math sign = bits & 0x80000000u;
  const f32x8_math a = reinterpret_cast<f32x8_math>(bits & 0x7fffffffu);
  const f32x8_math z = x * x;
  const f32x8_math small =
      ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z -
       3.33332819422e-1f) * z * x + x;
  const f32x8_math e = exp8((a < 10.0f ? a : f32x8_math{} + 10.0f) * 2.0f);
  const f32x8_math large = 1.0f - 2.0f / (e + 1.0f);
  const f32x8_math signed_large = reinterpret_cast<f32x8_math>(reinterpret_cast<u32x8_math>(large) | sign);
  const f32x8_math out = a < 0.625f ? small : signed_large;
  return x != x ? x : out;
}

// map_run applies f to v[0, n) in place, the tail padded into one vector.
template <class F>
inline void map_run(float* v, size_t n, F f) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    f32x8_math x;
    std::memcpy(&x, v + i, sizeof x);
    x = f(x);
    std::memcpy(v + i, &x, sizeof x);
  }
  if (i < n) {
    f32x8_math x = {};
    std::memcpy(&x, v + i, (n - i) * sizeof(float));
    x = f(x);
    std::memcpy(v + i, &x, (n - i) * sizeof(float));
  }
}

// exp_run replaces v[0, n) by e^v.
inline void exp_run(float* v, size_t n) { map_run(v, n, exp8); }

// tanh_run replaces v[0, n) by tanh v.
inline void tanh_run(float* v, size_t n) { map_run(v, n, tanh8); }

}  // namespace
}  // namespace vkern

#endif  // VKERN_CPU_VMATH_H
