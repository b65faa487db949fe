// softmax and softmax_grad on the CPU: f16 in, f16 out, f32 inside.
//
// Rows are independent: the pool runs blocks of whole rows. Each worker
// converts a row to f32 in its own scratch (8 lanes at a time, convert.h),
// computes there, and converts the result back once. Per row of C elements:
//
//   softmax       m   = max_j x_j
//                 e_j = expf(x_j − m)      kept in f32, never rounded to f16
//                 s   = Σ_j e_j            in f32
//                 y_j = f16(e_j / s)       the only rounding to f16
//
//   softmax_grad  d    = Σ_j dy_j · y_j    in f32 (each product is exact)
//                 dx_j = f16(y_j · (dy_j − d))
//
// Sums run in 8 interleaved f32 partial sums (lane l takes j ≡ l mod 8 of the
// first 8·⌊C/8⌋ terms), which are then added in lane order, then the tail in
// order: a fixed order, so results are deterministic and do not depend on the
// thread count.
//
// IEEE facts relied on (expf from <cmath>; no fast-math, no flush-to-zero):
// - A NaN in a row is skipped by the max but makes s NaN, so every y_j is NaN.
// - A +Inf in a row makes m = +Inf and that entry's x − m = Inf − Inf = NaN,
//   so s is NaN and the whole row is NaN.
// - With m finite, an entry of −Inf gives expf(−Inf) = 0 exactly.
// - A row of only −Inf has m = −Inf and −Inf − (−Inf) = NaN: all NaN.
// - m is one of the row's values, so with a finite row e_j <= 1, one e_j = 1
//   and 1 <= s <= C: no overflow, and e_j / s is in [0, 1].
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/backend.h"
#include "core/f16.h"
#include "cpu/convert.h"
#include "cpu/device.h"
#include "cpu/rows.h"

namespace vkern {
namespace {

// softmax_row: values holds cols floats of the worker's scratch.
void softmax_row(const uint16_t* x, uint16_t* y, size_t cols, float* values) {
  f16_to_f32_run(x, values, cols);
  const float row_max = max_of(values, cols);
  for (size_t j = 0; j < cols; ++j) values[j] = std::exp(values[j] - row_max);
  const float sum = sum_of(values, cols);
  for (size_t j = 0; j < cols; ++j) values[j] = values[j] / sum;
  f32_to_f16_run(values, y, cols);
}

// softmax_grad_row: dy_values and y_values each hold cols floats of the
// worker's scratch.
void softmax_grad_row(const uint16_t* dy, const uint16_t* y, uint16_t* dx, size_t cols, float* dy_values,
                      float* y_values) {
  f16_to_f32_run(dy, dy_values, cols);
  f16_to_f32_run(y, y_values, cols);
  const float dot = dot_of(dy_values, y_values, cols);
  for (size_t j = 0; j < cols; ++j) dy_values[j] = y_values[j] * (dy_values[j] - dot);
  f32_to_f16_run(dy_values, dx, cols);
}

}  // namespace

void softmax(ThreadPool& pool, Scratch& scratch, const uint16_t* x, uint16_t* y, size_t R, size_t C) {
  float* values = scratch.floats(Scratch::kSoftmaxRows, pool.size() * C);
  const size_t block = rows_per_task(pool, R);
  pool.parallel_for((R + block - 1) / block, [&](size_t task, unsigned worker) {
    const size_t end = std::min(R, (task + 1) * block);
    for (size_t r = task * block; r < end; ++r) {
      const size_t base = r * C;
      softmax_row(x + base, y + base, C, values + worker * C);
    }
  });
}

void softmax_grad(ThreadPool& pool, Scratch& scratch, const uint16_t* dy, const uint16_t* y, uint16_t* dx, size_t R,
                  size_t C) {
  float* values = scratch.floats(Scratch::kSoftmaxRows, pool.size() * 2 * C);
  const size_t block = rows_per_task(pool, R);
  pool.parallel_for((R + block - 1) / block, [&](size_t task, unsigned worker) {
    const size_t end = std::min(R, (task + 1) * block);
    float* dy_values = values + worker * 2 * C;
    for (size_t r = task * block; r < end; ++r) {
      const size_t base = r * C;
      softmax_grad_row(dy + base, y + base, dx + base, C, dy_values, dy_values + C);
    }
  });
}

// The ops' entries (kernels.cc lists them).
Result run_softmax(const Call& c, uint64_t*) {
  using namespace op_softmax;
  softmax(cpu_pool(), cpu_scratch(), c.ptr<const uint16_t>(buf::X), c.ptr<uint16_t>(buf::Y), c.dim(param::R),
          c.dim(param::C));
  return Result::OK();
}

Result run_softmax_grad(const Call& c, uint64_t*) {
  using namespace op_softmax_grad;
  softmax_grad(cpu_pool(), cpu_scratch(), c.ptr<const uint16_t>(buf::dY), c.ptr<const uint16_t>(buf::Y),
               c.ptr<uint16_t>(buf::dX), c.dim(param::R), c.dim(param::C));
  return Result::OK();
}

}  // namespace vkern
