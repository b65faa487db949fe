// The RUN op table: each op's id, parameters and buffers, shared by every
// backend. The server checks a RUN request against this table (counts,
// dimensions >= 1, element counts without overflow, buffer sizes, outputs not
// aliasing inputs) before a backend sees it, so a backend's run function may
// assume well-formed shapes and large-enough buffers.
#ifndef VKERN_CORE_OPS_H
#define VKERN_CORE_OPS_H

#include <cstddef>
#include <cstdint>

namespace vkern {

enum class OpId : uint32_t {
  kGemm = 1,
  kGemmGradA = 2,
  kGemmGradB = 3,
  kSoftmax = 4,
  kSoftmaxGrad = 5,
};

enum class DType { kF16, kF32 };

inline uint64_t dtype_bytes(DType t) { return t == DType::kF16 ? 2 : 4; }
inline const char* dtype_name(DType t) { return t == DType::kF16 ? "f16" : "f32"; }

constexpr int kMaxOpParams = 3;
constexpr int kMaxOpBuffers = 3;

// A buffer of an op: a dtype matrix of params[rows] × params[cols] elements.
struct BufferSpec {
  const char* name;
  DType dtype;
  int rows;  // index into the op's params
  int cols;  // index into the op's params
  bool output;
};

struct OpSpec {
  OpId id;
  const char* name;
  int param_count;
  const char* params[kMaxOpParams];
  int buffer_count;  // inputs first, then outputs
  BufferSpec buffers[kMaxOpBuffers];
};

// Parameter positions, named for readability in the table and the backends.
enum : int { kM = 0, kN = 1, kK = 2 };
enum : int { kR = 0, kC = 1 };

// clang-format off
constexpr OpSpec kOps[] = {
    {OpId::kGemm, "gemm", 3, {"M", "N", "K"}, 3,
     {{"A", DType::kF16, kM, kK, false},
      {"B", DType::kF16, kK, kN, false},
      {"C", DType::kF32, kM, kN, true}}},
    {OpId::kGemmGradA, "gemm_grad_a", 3, {"M", "N", "K"}, 3,
     {{"dC", DType::kF16, kM, kN, false},
      {"B", DType::kF16, kK, kN, false},
      {"dA", DType::kF16, kM, kK, true}}},
    {OpId::kGemmGradB, "gemm_grad_b", 3, {"M", "N", "K"}, 3,
     {{"A", DType::kF16, kM, kK, false},
      {"dC", DType::kF16, kM, kN, false},
      {"dB", DType::kF16, kK, kN, true}}},
    {OpId::kSoftmax, "softmax", 2, {"R", "C", nullptr}, 2,
     {{"X", DType::kF16, kR, kC, false},
      {"Y", DType::kF16, kR, kC, true},
      {nullptr, DType::kF16, 0, 0, false}}},
    {OpId::kSoftmaxGrad, "softmax_grad", 2, {"R", "C", nullptr}, 3,
     {{"dY", DType::kF16, kR, kC, false},
      {"Y", DType::kF16, kR, kC, false},
      {"dX", DType::kF16, kR, kC, true}}},
};
// clang-format on

inline const OpSpec* find_op(uint32_t id) {
  for (const OpSpec& op : kOps) {
    if (static_cast<uint32_t>(op.id) == id) return &op;
  }
  return nullptr;
}

}  // namespace vkern

#endif  // VKERN_CORE_OPS_H
