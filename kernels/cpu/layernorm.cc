// layernorm and layernorm_grad on the CPU: f16 activations in and out, the
// statistics and the parameter gradients f32, binary32 inside.
//
// layernorm: the pool runs blocks of whole rows. Each worker converts a row
// to f32 in its own scratch (convert.h, eight lanes at a time) and takes
// two passes over it:
//
//   m    = (Σ_j x_j) / C
//   d_j  = x_j − m                   kept in f32
//   v    = (Σ_j d_j²) / C            the biased variance, never negative
//   s    = 1 / sqrtf(v + eps)
//   y_j  = f16(d_j · s · w_j + b_j)  the only rounding to f16
//
// and stores mean = m, rstd = s. w and b are converted to f32 once a call.
//
// layernorm_grad, two phases. First the pool runs blocks of whole rows for
// dx; per row, with x̂_j = (x_j − mean)·rstd and g_j = w_j·dy_j (exact):
//
//   a    = (Σ_j g_j) / C,   c = (Σ_j g_j·x̂_j) / C
//   dx_j = f16((g_j − a − x̂_j·c) · rstd)            residual 0
//   dx_j = f16(r_j + (g_j − a − x̂_j·c) · rstd)      residual 1
//
// (the residual r read before dx is written, row by row: r may be dx).
// With dx_sum, each group of kSumRows rows also adds its f32 dx values,
// before their rounding, into a partial row of its own, rows in ascending
// order (the row blocks are whole groups, so each group has one writer).
//
// Then the pool runs blocks of kGradColumns columns for dw and db: each
// block starts from the columns' initial dw and db and adds dy·x̂ and dy row
// by row, rows in ascending order, and dxs the groups' partial rows in
// order. No atomics, and partials fixed by the rows alone: the result does
// not depend on the thread count.
//
// Sums run in rows.h's fixed order (sum_of, dot_of: 8 interleaved partial
// sums, then the tail), so results are deterministic.
//
// IEEE facts relied on (sqrtf correctly rounded, glibc; no fast-math, no
// flush-to-zero): a NaN or an infinity in a row of x makes m or v NaN or
// infinite and every y of the row NaN, as the reference; a NaN weight makes
// its column NaN and an infinite bias its column infinite. In the backward a
// NaN or infinite g makes a or c non-finite, so the whole row of dx follows
// the formula, and x̂ is exactly 0 where x = mean, so Inf·x̂ is NaN there as
// in the reference.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/backend.h"
#include "core/f16.h"
#include "cpu/convert.h"
#include "cpu/device.h"
#include "cpu/rows.h"

namespace vkern {
namespace {

constexpr size_t kGradColumns = 256;  // columns per dw/db task
constexpr size_t kSumRows = 64;       // rows per partial row of dxs

// layernorm_scratch is this file's f32 working memory, kept across calls
// and only grown (as device.cc's Scratch, whose slots belong to other
// kernels); it is taken on the calling thread before the pool fans out, so
// running out of memory surfaces as OUT_OF_MEMORY.
float* layernorm_scratch(size_t count) {
  static std::vector<float> buffer;
  if (buffer.size() < count) {
    buffer.clear();
    buffer.shrink_to_fit();
    buffer.resize(count);
  }
  return buffer.data();
}

// layernorm_row: values holds cols floats of the worker's scratch.
void layernorm_row(const uint16_t* x, const float* w, const float* b, float eps, uint16_t* y, float* mean, float* rstd,
                   size_t cols, float* values) {
  f16_to_f32_run(x, values, cols);
  const float n = static_cast<float>(cols);
  const float m = sum_of(values, cols) / n;
  for (size_t j = 0; j < cols; ++j) values[j] -= m;
  const float variance = dot_of(values, values, cols) / n;
  const float s = 1.0f / std::sqrt(variance + eps);
  for (size_t j = 0; j < cols; ++j) values[j] = values[j] * s * w[j] + b[j];
  f32_to_f16_run(values, y, cols);
  *mean = m;
  *rstd = s;
}

// layernorm_grad_row: g and xhat each hold cols floats of the worker's
// scratch; res, when not null, is the row's residual (it may be dx); sum,
// when not null, gets the row's f32 dx added in.
void layernorm_grad_row(const uint16_t* dy, const uint16_t* x, const float* w, float mean, float rstd,
                        const uint16_t* res, uint16_t* dx, size_t cols, float* g, float* xhat, float* sum) {
  f16_to_f32_run(dy, g, cols);
  f16_to_f32_run(x, xhat, cols);
  for (size_t j = 0; j < cols; ++j) {
    xhat[j] = (xhat[j] - mean) * rstd;
    g[j] *= w[j];
  }
  const float n = static_cast<float>(cols);
  const float g_mean = sum_of(g, cols) / n;
  const float gx_mean = dot_of(g, xhat, cols) / n;
  for (size_t j = 0; j < cols; ++j) g[j] = (g[j] - g_mean - xhat[j] * gx_mean) * rstd;
  if (res != nullptr) {
    f16_to_f32_run(res, xhat, cols);
    for (size_t j = 0; j < cols; ++j) g[j] = xhat[j] + g[j];
  }
  if (sum != nullptr) {
    for (size_t j = 0; j < cols; ++j) sum[j] += g[j];
  }
  f32_to_f16_run(g, dx, cols);
}

// layernorm_grad_params adds row by row into dw and db over columns
// [first, first + n), n <= kGradColumns.
void layernorm_grad_params(const uint16_t* dy, const uint16_t* x, const float* mean, const float* rstd, float* dw,
                           float* db, size_t R, size_t C, size_t first, size_t n) {
  float sum_w[kGradColumns], sum_b[kGradColumns], dy_values[kGradColumns], x_values[kGradColumns];
  std::copy(dw + first, dw + first + n, sum_w);
  std::copy(db + first, db + first + n, sum_b);
  for (size_t r = 0; r < R; ++r) {
    f16_to_f32_run(dy + r * C + first, dy_values, n);
    f16_to_f32_run(x + r * C + first, x_values, n);
    for (size_t j = 0; j < n; ++j) {
      sum_w[j] += dy_values[j] * ((x_values[j] - mean[r]) * rstd[r]);
      sum_b[j] += dy_values[j];
    }
  }
  std::copy(sum_w, sum_w + n, dw + first);
  std::copy(sum_b, sum_b + n, db + first);
}

}  // namespace

// The ops' entries (kernels.cc lists them).
Result run_layernorm(const Call& c, uint64_t*) {
  using namespace op_layernorm;
  const size_t R = c.dim(param::R), C = c.dim(param::C);
  const float eps = static_cast<float>(c.real(param::eps));
  const uint16_t* x = c.ptr<const uint16_t>(buf::x);
  uint16_t* y = c.ptr<uint16_t>(buf::y);
  float* mean = c.ptr<float>(buf::mean);
  float* rstd = c.ptr<float>(buf::rstd);
  ThreadPool& pool = cpu_pool();
  float* scratch = layernorm_scratch((2 + pool.size()) * C);
  float* w = scratch;
  float* b = scratch + C;
  f16_to_f32_run(c.ptr<const uint16_t>(buf::w), w, C);
  f16_to_f32_run(c.ptr<const uint16_t>(buf::b), b, C);
  const size_t block = rows_per_task(pool, R);
  pool.parallel_for((R + block - 1) / block, [&](size_t task, unsigned worker) {
    const size_t end = std::min(R, (task + 1) * block);
    float* values = scratch + (2 + worker) * C;
    for (size_t r = task * block; r < end; ++r) {
      layernorm_row(x + r * C, w, b, eps, y + r * C, mean + r, rstd + r, C, values);
    }
  });
  return Result::OK();
}

Result run_layernorm_grad(const Call& c, uint64_t*) {
  using namespace op_layernorm_grad;
  const size_t R = c.dim(param::R), C = c.dim(param::C);
  const uint16_t* dy = c.ptr<const uint16_t>(buf::dy);
  const uint16_t* x = c.ptr<const uint16_t>(buf::x);
  const float* mean = c.ptr<const float>(buf::mean);
  const float* rstd = c.ptr<const float>(buf::rstd);
  const uint16_t* res = c.dim(param::residual) == 1 ? c.ptr<const uint16_t>(buf::r) : nullptr;
  uint16_t* dx = c.ptr<uint16_t>(buf::dx);
  float* dxs = c.dim(param::dx_sum) == 1 ? c.ptr<float>(buf::dxs) : nullptr;
  ThreadPool& pool = cpu_pool();
  const size_t groups = dxs != nullptr ? (R + kSumRows - 1) / kSumRows : 0;
  float* scratch = layernorm_scratch((1 + 2 * pool.size() + groups) * C);
  float* w = scratch;
  float* partials = scratch + (1 + 2 * pool.size()) * C;  // groups × C
  f16_to_f32_run(c.ptr<const uint16_t>(buf::w), w, C);
  size_t block = rows_per_task(pool, R);
  if (dxs != nullptr) block = (block + kSumRows - 1) / kSumRows * kSumRows;
  pool.parallel_for((R + block - 1) / block, [&](size_t task, unsigned worker) {
    const size_t end = std::min(R, (task + 1) * block);
    float* g = scratch + (1 + 2 * worker) * C;
    for (size_t r = task * block; r < end; ++r) {
      float* sum = nullptr;
      if (dxs != nullptr) {
        sum = partials + r / kSumRows * C;
        if (r % kSumRows == 0) std::fill(sum, sum + C, 0.0f);
      }
      layernorm_grad_row(dy + r * C, x + r * C, w, mean[r], rstd[r], res != nullptr ? res + r * C : nullptr, dx + r * C, C,
                         g, g + C, sum);
    }
  });
  float* dw = c.ptr<float>(buf::dw);
  float* db = c.ptr<float>(buf::db);
  pool.parallel_for((C + kGradColumns - 1) / kGradColumns, [&](size_t task, unsigned) {
    const size_t first = task * kGradColumns, n = std::min(kGradColumns, C - first);
    layernorm_grad_params(dy, x, mean, rstd, dw, db, R, C, first, n);
    if (dxs == nullptr) return;
    for (size_t j = first; j < first + n; ++j) {
      float s = dxs[j];
      for (size_t p = 0; p < groups; ++p) s += partials[p * C + j];
      dxs[j] = s;
    }
  });
  return Result::OK();
}

}  // namespace vkern
