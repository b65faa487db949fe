// swiglu on the CPU: y = silu(a)·b elementwise, with a and b the two
// halves of each row of x; f16 in and out, binary32 inside.
//
// The pool runs blocks of whole rows; per element
//
//   y_j = f16(a_j / (1 + expf(−a_j)) · b_j)   the only rounding to f16
//
// Facts relied on (no fast-math, no flush-to-zero): std::exp on float is
// glibc's expf, within 1 ulp, which the bound (swiglu.go) allows four times
// over; expf(−a) overflows to +Inf for a < −88.7, where y is ±0, as the
// bound allows; a = −Inf gives −Inf/Inf = NaN, as the reference.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/backend.h"
#include "core/f16.h"

namespace vkern {

Result run_swiglu(const Call& c, uint64_t*) {
  using namespace op_swiglu;
  const size_t R = c.dim(param::R), C = c.dim(param::C);
  const uint16_t* x = c.ptr<const uint16_t>(buf::x);
  uint16_t* y = c.ptr<uint16_t>(buf::y);
  const size_t block = std::max<size_t>(1, (size_t{1} << 14) / C);
  cpu_pool().parallel_for((R + block - 1) / block, [&](size_t task, unsigned) {
    for (size_t r = task * block; r < std::min(R, (task + 1) * block); ++r) {
      const uint16_t* gate = x + r * 2 * C;
      const uint16_t* value = gate + C;
      for (size_t j = 0; j < C; ++j) {
        const float a = f16_to_f32(gate[j]);
        y[r * C + j] = f32_to_f16(a / (1.0f + std::exp(-a)) * f16_to_f32(value[j]));
      }
    }
  });
  return Result::OK();
}

}  // namespace vkern
