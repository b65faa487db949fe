// The column sums bias_grad forms (bias_grad.cc), for the kernels that
// produce a bias gradient alongside another result: linear_grad_w with
// bias 1 (gemm.cc).
#pragma once

#include <cstddef>
#include <cstdint>

namespace vkern {

// add_column_sums sets db[j] = db[j] + the sum of column j of dy (f16
// rows × cols), in bias_grad's order (oracle.BiasGradRowBlock), on the
// cpu pool.
void add_column_sums(const uint16_t* dy, float* db, size_t rows, size_t cols);

}  // namespace vkern
