// The cpu backend's kernels: one line per op. An op missing here answers
// NOT_SUPPORTED on this backend (core/backend.h).
#include <cstdint>
#include <string>

#include "core/backend.h"

namespace vkern {
namespace {

struct Entry {
  uint32_t id;
  const char* name;
  Kernel run;
};

// clang-format off
constexpr Entry kKernels[] = {
    {op_gemm::kId, "gemm", run_gemm},
    {op_gemm_grad_a::kId, "gemm_grad_a", run_gemm_grad_a},
    {op_gemm_grad_b::kId, "gemm_grad_b", run_gemm_grad_b},
    {op_softmax::kId, "softmax", run_softmax},
    {op_softmax_grad::kId, "softmax_grad", run_softmax_grad},
    {op_cross_entropy::kId, "cross_entropy", run_cross_entropy},
    {op_add::kId, "add", run_add},
    {op_gelu::kId, "gelu", run_gelu},
    {op_gelu_grad::kId, "gelu_grad", run_gelu_grad},
    {op_layernorm::kId, "layernorm", run_layernorm},
    {op_layernorm_grad::kId, "layernorm_grad", run_layernorm_grad},
    {op_embedding::kId, "embedding", run_embedding},
    {op_embedding_grad::kId, "embedding_grad", run_embedding_grad},
    {op_linear::kId, "linear", run_linear},
    {op_linear_grad_w::kId, "linear_grad_w", run_linear_grad_w},
    {op_bias_grad::kId, "bias_grad", run_bias_grad},
    {op_attention::kId, "attention", run_attention},
    {op_attention_grad::kId, "attention_grad", run_attention_grad},
    {op_global_norm::kId, "global_norm", run_global_norm},
    {op_adamw::kId, "adamw", run_adamw},
    {op_fill::kId, "fill", run_fill},
};
// clang-format on

}  // namespace

Kernel find_kernel(uint32_t op_id) {
  for (const Entry& e : kKernels) {
    if (e.id == op_id) return e.run;
  }
  return nullptr;
}

std::string backend_op_names() {
  std::string names;
  for (const Entry& e : kKernels) names += std::string(names.empty() ? "" : ",") + e.name;
  return names;
}

}  // namespace vkern
