// The on/off switches of the kernel server's environment that let a call
// time one kernel variant against another (VKERN_GEMM_SHIFT,
// VKERN_GEMM_BN192, VKERN_GEMM_DEPTH_CLASSES, VKERN_GEMM_FUSED_DB,
// VKERN_BIAS_GRAD_SPANS, VKERN_BIAS_GRAD_NARROW_SLICES, VKERN_LAYERNORM_PREFETCH,
// VKERN_LAYERNORM_PAIRS, VKERN_CROSS_ENTROPY_FTZ, VKERN_SOFTMAX_FTZ).
#ifndef VKERN_CUDA_ENV_H
#define VKERN_CUDA_ENV_H

#include <cstdlib>
#include <cstring>

namespace {
namespace vkern_env {

// on_off is switch name's setting: by_default, unless the environment sets
// it to the other one ("1" turns on a switch that is off by default, "0"
// turns off one that is on; anything else is ignored). It reads the
// environment each time: callers keep the answer in a static.
inline bool on_off(const char* name, bool by_default) {
  const char* v = std::getenv(name);
  if (v == nullptr) return by_default;
  return by_default ? std::strcmp(v, "0") != 0 : std::strcmp(v, "1") == 0;
}

}  // namespace vkern_env
}  // namespace

#endif  // VKERN_CUDA_ENV_H
