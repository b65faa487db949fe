// global_norm on the CPU: g f32 N in; sumsq f32 = Σ g² (binary64 inside,
// rounded once) and nonfinite i32 = the count of ±Inf and NaN elements, out.
//
// The N elements go to the pool in chunks of kChunk; each chunk's sum of
// squares (in binary64, over kLanes interleaved accumulators, added in lane
// order at the end) and count go to its own slot, and the calling thread adds
// the slots in chunk order. The partition depends on N alone, so the result
// is the same for any number of threads and any scheduling.
//
// Facts relied on: the square of a binary32 value is exact in binary64 (48
// significant bits, exponents inside binary64's normal range), so only the
// additions round (the oracle's bound allows any order); the final cast to
// float rounds to nearest; NaN and ±Inf propagate through the sum as IEEE
// says (no fast-math). The count saturates at 2³¹ − 1.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/backend.h"
#include "cpu/device.h"

namespace vkern {
namespace {
namespace global_norm_parts {

constexpr size_t kChunk = 1 << 16;  // elements per task
constexpr size_t kLanes = 8;        // independent accumulators: one vector of four doubles twice over

// Part is one chunk's sum of squares and count of non-finite elements.
struct Part {
  double sumsq;
  uint64_t nonfinite;
};

inline bool nonfinite(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return (bits & 0x7f800000u) == 0x7f800000u;
}

Part chunk_part(const float* g, size_t n) {
  double lanes[kLanes] = {};
  uint64_t count = 0;
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) {
      const double d = g[i + k];
      lanes[k] += d * d;
      count += nonfinite(g[i + k]);
    }
  }
  for (size_t k = 0; i < n; ++i, ++k) {
    const double d = g[i];
    lanes[k] += d * d;
    count += nonfinite(g[i]);
  }
  double sum = 0.0;
  for (size_t k = 0; k < kLanes; ++k) sum += lanes[k];
  return Part{sum, count};
}

// global_norm writes the sum of squares of g[0, n) and its count of
// non-finite elements.
void global_norm(const float* g, size_t n, float* sumsq, int32_t* nonfinite_count) {
  const size_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<Part> parts(chunks);  // bad_alloc becomes OUT_OF_MEMORY (device.cc)
  cpu_pool().parallel_for(chunks, [&](size_t chunk, unsigned) {
    const size_t first = chunk * kChunk;
    parts[chunk] = chunk_part(g + first, std::min(kChunk, n - first));
  });
  double sum = 0.0;
  uint64_t count = 0;
  for (const Part& p : parts) {
    sum += p.sumsq;
    count += p.nonfinite;
  }
  *sumsq = static_cast<float>(sum);
  *nonfinite_count = static_cast<int32_t>(std::min<uint64_t>(count, std::numeric_limits<int32_t>::max()));
}

}  // namespace global_norm_parts
}  // namespace

// The op's entry (kernels.cc lists it).
Result run_global_norm(const Call& c, uint64_t*) {
  using namespace op_global_norm;
  global_norm_parts::global_norm(c.ptr<const float>(buf::g), c.dim(param::N), c.ptr<float>(buf::sumsq),
                                 c.ptr<int32_t>(buf::nonfinite));
  return Result::OK();
}

}  // namespace vkern
