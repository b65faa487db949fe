// Row helpers of the cpu kernels that work on whole rows in f32 (softmax,
// cross_entropy, layernorm, attention): the row's maximum, sum and dot
// product in one fixed order, and how many rows a pool task takes.
//
// Sums run in 8 interleaved f32 partial sums (lane l takes j ≡ l mod 8 of the
// first 8·⌊n/8⌋ terms), which are then added in lane order, then the tail in
// order: a fixed order, so results are deterministic and do not depend on the
// thread count.
//
// A header: each translation unit that includes it gets its own copy of
// these small functions (an unnamed namespace).
#ifndef VKERN_CPU_ROWS_H
#define VKERN_CPU_ROWS_H

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>

#include "cpu/device.h"

namespace vkern {
namespace {

typedef float f32x8_row __attribute__((vector_size(32)));

// max_of returns the largest of n values; NaNs are skipped (x > m is false).
inline float max_of(const float* v, size_t n) {
  const float lowest = -std::numeric_limits<float>::infinity();
  f32x8_row m8 = {lowest, lowest, lowest, lowest, lowest, lowest, lowest, lowest};
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    f32x8_row x;
    std::memcpy(&x, v + j, sizeof x);
    m8 = x > m8 ? x : m8;
  }
  float m = lowest;
  for (int lane = 0; lane < 8; ++lane) m = m8[lane] > m ? m8[lane] : m;
  for (; j < n; ++j) m = v[j] > m ? v[j] : m;
  return m;
}

// sum_of returns Σ v_j in the fixed order described above.
inline float sum_of(const float* v, size_t n) {
  f32x8_row s8 = {};
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    f32x8_row x;
    std::memcpy(&x, v + j, sizeof x);
    s8 += x;
  }
  float s = 0.0f;
  for (int lane = 0; lane < 8; ++lane) s += s8[lane];
  for (; j < n; ++j) s += v[j];
  return s;
}

// dot_of returns Σ a_j·b_j in the same order as sum_of.
inline float dot_of(const float* a, const float* b, size_t n) {
  f32x8_row s8 = {};
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    f32x8_row x, y;
    std::memcpy(&x, a + j, sizeof x);
    std::memcpy(&y, b + j, sizeof y);
    s8 += x * y;
  }
  float s = 0.0f;
  for (int lane = 0; lane < 8; ++lane) s += s8[lane];
  for (; j < n; ++j) s += a[j] * b[j];
  return s;
}

// rows_per_task splits rows into enough blocks for the pool to balance.
inline size_t rows_per_task(const ThreadPool& pool, size_t rows) {
  const size_t tasks = std::min(rows, size_t{8} * pool.size());
  return (rows + tasks - 1) / tasks;
}

}  // namespace
}  // namespace vkern

#endif  // VKERN_CPU_ROWS_H
