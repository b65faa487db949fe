// adamw on the CPU: torch.optim.AdamW's step on f32 param, m and v in place,
// with the gradient multiplied by grad_scale, and param's f16 copy out.
//
// The N elements go to the pool in chunks of kChunk; each element is
// independent, so the result does not depend on the number of threads. Per
// element, in binary32 and in torch's order:
//
//   g = grad·s;  p = p·decay;  m = β1·m + (1 − β1)·g;  v = β2·v + (1 − β2)·(g·g)
//   p = p − η·(m / (√v / √c2 + eps));  param16 = f16(p)
//
// The scalars are computed once per call on the host in binary64 and rounded
// once to binary32: decay = fma(−lr, weight_decay, 1), 1 − β as a binary64
// difference, cᵢ = 1 − βᵢᵗ as −expm1(t·log βᵢ) (within a few ulps of
// binary64 even where βᵢᵗ is near 1, and exactly 1 for βᵢ = 0), η = lr/c1
// and √c2.
//
// Facts relied on: binary32 arithmetic rounded to nearest (no fast-math; GCC
// may fuse a multiply and an add, which rounds once where the oracle's bound
// counts two); std::sqrt on float and float division are correctly rounded;
// glibc's log and expm1 are within 1 ulp; ±Inf and NaN follow the formula (a
// non-finite gradient makes m, v and p non-finite; an infinite v makes the
// update m/∞ = 0). Each element is read before it is written, by the same
// thread.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/backend.h"
#include "core/adamw.h"
#include "core/f16.h"
#include "cpu/convert.h"
#include "cpu/device.h"

namespace vkern {
namespace {
namespace adamw_parts {

constexpr size_t kChunk = 1 << 16;  // elements per task
constexpr size_t kRun = 1024;       // param16 values converted at a time, on the stack

// The step's constants (core/adamw.h).
using vkern::adamw_step::Scalars;
using vkern::adamw_step::scalars_of;

// step updates one element and returns its new param.
inline float step(const Scalars& s, float& p, float grad, float& m, float& v) {
  const float g = grad * s.scale;
  const float decayed = p * s.decay;
  m = s.beta1 * m + s.keep1 * g;
  v = s.beta2 * v + s.keep2 * (g * g);
  const float denom = std::sqrt(v) / s.root2 + s.eps;
  p = decayed - s.step_size * (m / denom);
  return p;
}

// adamw updates elements [0, n) in place and writes param16.
void adamw(const Scalars& s, float* p, const float* grad, float* m, float* v, uint16_t* p16, size_t n) {
  cpu_pool().parallel_for((n + kChunk - 1) / kChunk, [&](size_t chunk, unsigned) {
    const size_t end = std::min(n, (chunk + 1) * kChunk);
    for (size_t first = chunk * kChunk; first < end; first += kRun) {
      const size_t count = std::min(kRun, end - first);
      float fresh[kRun];
      for (size_t i = 0; i < count; ++i) {
        const size_t e = first + i;
        fresh[i] = step(s, p[e], grad[e], m[e], v[e]);
      }
      f32_to_f16_run(fresh, p16 + first, count);
    }
  });
}

}  // namespace adamw_parts
}  // namespace

// The op's entry (kernels.cc lists it).
Result run_adamw(const Call& c, uint64_t*) {
  using namespace op_adamw;
  const adamw_parts::Scalars s = adamw_parts::scalars_of(
      c.real(param::lr), c.real(param::beta1), c.real(param::beta2), c.real(param::eps), c.real(param::weight_decay),
      static_cast<double>(c.params[param::t]), c.real(param::grad_scale));
  adamw_parts::adamw(s, c.ptr<float>(buf::param), c.ptr<const float>(buf::grad), c.ptr<float>(buf::m),
                     c.ptr<float>(buf::v), c.ptr<uint16_t>(buf::param16), c.dim(param::N));
  return Result::OK();
}

}  // namespace vkern
