// cross_entropy on the CPU: logits f16 R×V and labels i32 R in; the per-row
// loss f32 R and the gradient of the mean loss, dLogits f16 R×V, out; f32
// inside. Forward and backward in one pass over each row.
//
// First one serial pass over the R labels counts n, the rows whose label is
// not the ignore_index, and finds the first label that is neither a class in
// [0, V) nor the ignore_index: then the call writes nothing and returns that
// row, the call's problem, which the server answers as INVALID_ARGUMENT
// naming the row and its label (core/server.cc, domain_error).
// Then the pool runs blocks of whole rows (rows are independent once n is
// known). Per row with label l that is not ignored, in the worker's f32
// scratch, converted from f16 once:
//
//   m        = max_j x_j
//   e_j      = expf(x_j − m)                kept in f32, never rounded to f16
//   s        = Σ_j e_j                      in rows.h's fixed order
//   loss     = (m − x_l) + logf(s)          unscaled: the mean loss is Σ loss / n
//   dLogit_j = f16(e_j · (c / s) − [j = l]·c),   c = f32(grad_scale/n)
//
// A row whose label is the ignore_index is not read: loss 0 and a row of +0.
// When every row is ignored, n = 0 and c is never used: all outputs are 0.
//
// IEEE facts relied on, as in softmax.cc (expf, logf; no fast-math): a NaN
// or a +Inf in a row, or a row of only −Inf, makes s NaN, so the loss and
// the whole gradient row are NaN; with m finite, x_l = −Inf gives
// m − x_l = +Inf, a loss of +Inf, and e_l = 0, so dLogit_l = −c.
//
// The row helpers (max_of, sum_of, rows_per_task) are rows.h's, shared with
// softmax.cc.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/backend.h"
#include "core/f16.h"
#include "cpu/convert.h"
#include "cpu/device.h"
#include "cpu/rows.h"

namespace vkern {
namespace {

// cross_entropy_row: one row that is not ignored; values holds cols floats
// of the worker's scratch.
void cross_entropy_row(const uint16_t* x, size_t label, float scale, float* loss, uint16_t* dlogits, size_t cols,
                       float* values) {
  f16_to_f32_run(x, values, cols);
  const float row_max = max_of(values, cols);
  const float label_logit = values[label];
  for (size_t j = 0; j < cols; ++j) values[j] = std::exp(values[j] - row_max);
  const float sum = sum_of(values, cols);
  *loss = (row_max - label_logit) + std::log(sum);
  const float scale_over_sum = scale / sum;
  for (size_t j = 0; j < cols; ++j) values[j] = values[j] * scale_over_sum;
  values[label] -= scale;
  f32_to_f16_run(values, dlogits, cols);
}

}  // namespace

int64_t cross_entropy(ThreadPool& pool, Scratch& scratch, const uint16_t* logits, const int32_t* labels, float* loss,
                      uint16_t* dlogits, size_t R, size_t V, int64_t ignore_index, double grad_scale) {
  size_t n = 0;
  for (size_t r = 0; r < R; ++r) {
    const int64_t label = labels[r];
    if (label == ignore_index) continue;
    if (label < 0 || static_cast<uint64_t>(label) >= V) return static_cast<int64_t>(r);
    ++n;
  }
  const float scale = n > 0 ? static_cast<float>(grad_scale / static_cast<double>(n)) : 0.0f;
  float* values = scratch.floats(Scratch::kCrossEntropyRows, pool.size() * V);
  const size_t block = rows_per_task(pool, R);
  pool.parallel_for((R + block - 1) / block, [&](size_t task, unsigned worker) {
    const size_t end = std::min(R, (task + 1) * block);
    for (size_t r = task * block; r < end; ++r) {
      const size_t base = r * V;
      if (labels[r] == ignore_index) {
        loss[r] = 0.0f;
        std::memset(dlogits + base, 0, V * sizeof(uint16_t));
        continue;
      }
      const size_t label = static_cast<size_t>(labels[r]);
      cross_entropy_row(logits + base, label, scale, loss + r, dlogits + base, V, values + worker * V);
    }
  });
  return -1;
}

// The op's entry (kernels.cc lists it): a bad label is the call's problem.
Result run_cross_entropy(const Call& c, uint64_t* problem) {
  using namespace op_cross_entropy;
  const int64_t bad = cross_entropy(cpu_pool(), cpu_scratch(), c.ptr<const uint16_t>(buf::logits),
                                    c.ptr<const int32_t>(buf::labels), c.ptr<float>(buf::loss),
                                    c.ptr<uint16_t>(buf::dLogits), c.dim(param::R), c.dim(param::V),
                                    c.params[param::ignore_index], c.real(param::grad_scale));
  if (bad >= 0) *problem = static_cast<uint64_t>(bad);
  return Result::OK();
}

}  // namespace vkern
