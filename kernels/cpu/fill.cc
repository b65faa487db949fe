// fill on the CPU: every f32 element set to the value, in chunks on the
// pool. The value is rounded to binary32 once, to nearest (a C++ cast).
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/backend.h"
#include "cpu/device.h"

namespace vkern {

Result run_fill(const Call& c, uint64_t*) {
  using namespace op_fill;
  constexpr size_t kChunk = 1 << 16;
  float* y = c.ptr<float>(buf::y);
  const size_t n = c.dim(param::N);
  const float v = static_cast<float>(c.real(param::value));
  cpu_pool().parallel_for((n + kChunk - 1) / kChunk, [&](size_t chunk, unsigned) {
    std::fill(y + chunk * kChunk, y + std::min(n, (chunk + 1) * kChunk), v);
  });
  return Result::OK();
}

}  // namespace vkern
