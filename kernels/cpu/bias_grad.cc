// bias_grad on the CPU: db f32 N += the column sums of dy f16 M×N.
//
// The columns go to the pool in strips of kStrip. A task walks the rows in
// order, converting its strip of each row to binary32 in bulk (convert.h),
// and sums them in the structure the oracle's bound follows
// (oracle.BiasGradRowBlock; the cuda kernel has the same): each block of
// kRowBlock rows from row 0 summed from zero in ascending row order; then
// the block sums and db, here the block sums in ascending order and
// db[j] = db[j] + total[j] last (the oracle allows any order at this
// level). Tasks share no element, so the result does not depend on the
// number of threads.
//
// Facts relied on: f16 values are exact in binary32; every addition is a
// binary32 addition rounded to nearest (no fast-math, so the compiler keeps
// the order). NaN and ±Inf follow the sums.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/backend.h"
#include "core/f16.h"
#include "cpu/column_sums.h"
#include "cpu/convert.h"
#include "cpu/device.h"

namespace vkern {
namespace {
namespace column_sums {

constexpr size_t kStrip = 64;     // columns per task: 128 bytes of each row
constexpr size_t kRowBlock = 64;  // rows per block sum: oracle.BiasGradRowBlock

void bias_grad(ThreadPool& pool, const uint16_t* dy, float* db, size_t rows, size_t cols) {
  pool.parallel_for((cols + kStrip - 1) / kStrip, [&](size_t strip, unsigned) {
    const size_t j0 = strip * kStrip;
    const size_t n = std::min(kStrip, cols - j0);
    float total[kStrip], block[kStrip], run[kStrip];
    for (size_t b0 = 0; b0 < rows; b0 += kRowBlock) {
      const size_t b1 = std::min(rows, b0 + kRowBlock);
      f16_to_f32_run(dy + b0 * cols + j0, block, n);
      for (size_t i = b0 + 1; i < b1; ++i) {
        f16_to_f32_run(dy + i * cols + j0, run, n);
        for (size_t j = 0; j < n; ++j) block[j] += run[j];
      }
      for (size_t j = 0; j < n; ++j) total[j] = b0 == 0 ? block[j] : total[j] + block[j];
    }
    for (size_t j = 0; j < n; ++j) db[j0 + j] = db[j0 + j] + total[j];
  });
}

}  // namespace column_sums
}  // namespace

void add_column_sums(const uint16_t* dy, float* db, size_t rows, size_t cols) {
  column_sums::bias_grad(cpu_pool(), dy, db, rows, cols);
}

// The op's entry (kernels.cc lists it).
Result run_bias_grad(const Call& c, uint64_t*) {
  using namespace op_bias_grad;
  column_sums::bias_grad(cpu_pool(), c.ptr<const uint16_t>(buf::dy), c.ptr<float>(buf::db), c.dim(param::M),
                         c.dim(param::N));
  return Result::OK();
}

}  // namespace vkern
