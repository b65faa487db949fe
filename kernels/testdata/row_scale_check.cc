// row_scale_check holds cuda/row_scale.cuh to what attention.cu's dS
// scaling relies on, on the host's IEEE binary32 arithmetic:
//   - pow2(n) is 2^n (std::ldexp(1.0f, n)'s bits) for every n in [−149, 127];
//   - x·pow2(n) has std::ldexp(x, n)'s bits for every such n and a sample of
//     floats x (every 65,521st bit pattern, and zeros, the smallest and
//     largest subnormals and normals, the largest float, infinities, NaN);
//   - shift_for(x) lies in [−163, 113] for every finite x ≥ 0 of the sample
//     and the extremes, and ldexp(x, −shift) lies in [2¹⁴, 2¹⁵) for x > 0;
//     shift_for(0) is 0;
//   - every shift round_scaled and add_scaled take their fast path for,
//     kFastShiftMin up to shift_for(+Inf), has both 2^shift and 2^−shift
//     exact (ldexp's bits, neither 0 nor infinite).
// It prints {"checked": N, "bad": M} and exits 1 when M > 0 (the first few
// failures on stderr).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cuda/row_scale.cuh"

namespace {

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}

float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

// same: equal bits, or both NaN.
bool same(float a, float b) { return bits(a) == bits(b) || (std::isnan(a) && std::isnan(b)); }

}  // namespace

int main() {
  long checked = 0, bad = 0;
  auto fail = [&](const char* what, float x, int n) {
    if (bad++ < 10) std::fprintf(stderr, "%s: x = %a (0x%08x), n = %d\n", what, x, bits(x), n);
  };
  using vkern_scale::pow2;
  using vkern_scale::shift_for;

  for (int n = -149; n <= 127; ++n) {
    ++checked;
    if (!same(pow2(n), std::ldexp(1.0f, n))) fail("pow2(n) is not 2^n", 1.0f, n);
  }

  std::vector<float> xs = {0.0f, -0.0f, from_bits(1), from_bits(0x007fffff), from_bits(0x00800000),
                           from_bits(0x7f7fffff), from_bits(0x80000001), from_bits(0xff7fffff),
                           INFINITY, -INFINITY, NAN, 1.0f, 1.5f, 3.0f, -0.75f};
  for (uint64_t u = 0; u <= 0xffffffffull; u += 65521) xs.push_back(from_bits(static_cast<uint32_t>(u)));

  for (const float x : xs) {
    for (int n = -149; n <= 127; ++n) {
      ++checked;
      if (!same(x * pow2(n), std::ldexp(x, n))) fail("x * pow2(n) is not ldexp(x, n)", x, n);
    }
    const float a = std::fabs(x);
    if (std::isfinite(a)) {
      ++checked;
      const int s = shift_for(a);
      if (s < -163 || s > 113) fail("shift_for outside [-163, 113]", a, s);
      if (a > 0.0f) {
        const float scaled = std::ldexp(a, -s);
        if (!(scaled >= 16384.0f && scaled < 32768.0f)) fail("shift_for does not put x in [2^14, 2^15)", a, s);
      } else if (s != 0) {
        fail("shift_for(0) is not 0", a, s);
      }
    }
  }
  ++checked;
  if (shift_for(from_bits(1)) != -163 || shift_for(from_bits(0x7f7fffff)) != 113) fail("shift_for's extremes", 0.0f, 0);
  // Every shift the fast path takes, kFastShiftMin up to shift_for's
  // largest (at an infinity), has both powers exact: 2^s and 2^−s as
  // ldexp gives them.
  const int most = shift_for(INFINITY);
  for (int s = vkern_scale::kFastShiftMin; s <= most; ++s) {
    ++checked;
    if (!same(pow2(s), std::ldexp(1.0f, s)) || !same(pow2(-s), std::ldexp(1.0f, -s)) || pow2(s) == 0.0f ||
        pow2(-s) == 0.0f || std::isinf(pow2(s)) || std::isinf(pow2(-s))) {
      fail("a fast shift whose power is not a float", 0.0f, s);
    }
  }

  std::printf("{\"checked\": %ld, \"bad\": %ld}\n", checked, bad);
  return bad == 0 ? 0 : 1;
}
