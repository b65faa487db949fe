// The RUN op table: each op's id, parameters and buffers, shared by every
// backend. The server checks a RUN request against this table (counts,
// dimensions >= 1, index values in range, element counts without overflow,
// buffer sizes, outputs not aliasing inputs) before a backend sees it, so a
// backend's run function may assume well-formed shapes and large-enough
// buffers. What the table cannot say, such as whether each cross_entropy
// label names a class, a backend checks while it runs (label_error).
#ifndef VKERN_CORE_OPS_H
#define VKERN_CORE_OPS_H

#include <cstddef>
#include <cstdint>
#include <limits>

#include "core/protocol.h"

namespace vkern {

enum class OpId : uint32_t {
  kGemm = 1,
  kGemmGradA = 2,
  kGemmGradB = 3,
  kSoftmax = 4,
  kSoftmaxGrad = 5,
  kCrossEntropy = 6,
};

enum class DType { kF16, kF32, kI32 };

inline uint64_t dtype_bytes(DType t) { return t == DType::kF16 ? 2 : 4; }
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF16: return "f16";
    case DType::kF32: return "f32";
    case DType::kI32: return "i32";
  }
  return "?";
}

constexpr int kMaxOpParams = 3;
constexpr int kMaxOpBuffers = 4;

// What a RUN parameter is. A dimension must be >= 1. An index is a value
// compared with 32-bit labels (cross_entropy's ignore_index): a value in the
// int32 range, or kUnsetIndex when the caller sets none, which no label
// equals.
enum class ParamKind { kDim, kIndex };
constexpr int64_t kUnsetIndex = std::numeric_limits<int64_t>::min();

struct ParamSpec {
  const char* name;
  ParamKind kind;
};

// kOne as a BufferSpec's cols: the buffer is a vector of params[rows] elements.
constexpr int kOne = -1;

// A buffer of an op: a dtype matrix of params[rows] × params[cols] elements.
struct BufferSpec {
  const char* name;
  DType dtype;
  int rows;  // index into the op's params
  int cols;  // index into the op's params, or kOne
  bool output;
};

struct OpSpec {
  OpId id;
  const char* name;
  int param_count;
  ParamSpec params[kMaxOpParams];
  int buffer_count;  // inputs first, then outputs
  BufferSpec buffers[kMaxOpBuffers];
};

// Parameter positions, named for readability in the table and the backends.
enum : int { kM = 0, kN = 1, kK = 2 };
enum : int { kR = 0, kC = 1 };
enum : int { kV = 1, kIgnoreIndex = 2 };  // cross_entropy: R, V, ignore_index

constexpr ParamSpec kDimM{"M", ParamKind::kDim}, kDimN{"N", ParamKind::kDim}, kDimK{"K", ParamKind::kDim};
constexpr ParamSpec kDimR{"R", ParamKind::kDim}, kDimC{"C", ParamKind::kDim}, kDimV{"V", ParamKind::kDim};
constexpr ParamSpec kNoParam{nullptr, ParamKind::kDim};
constexpr BufferSpec kNoBuffer{nullptr, DType::kF16, 0, 0, false};

// clang-format off
constexpr OpSpec kOps[] = {
    {OpId::kGemm, "gemm", 3, {kDimM, kDimN, kDimK}, 3,
     {{"A", DType::kF16, kM, kK, false},
      {"B", DType::kF16, kK, kN, false},
      {"C", DType::kF32, kM, kN, true},
      kNoBuffer}},
    {OpId::kGemmGradA, "gemm_grad_a", 3, {kDimM, kDimN, kDimK}, 3,
     {{"dC", DType::kF16, kM, kN, false},
      {"B", DType::kF16, kK, kN, false},
      {"dA", DType::kF16, kM, kK, true},
      kNoBuffer}},
    {OpId::kGemmGradB, "gemm_grad_b", 3, {kDimM, kDimN, kDimK}, 3,
     {{"A", DType::kF16, kM, kK, false},
      {"dC", DType::kF16, kM, kN, false},
      {"dB", DType::kF16, kK, kN, true},
      kNoBuffer}},
    {OpId::kSoftmax, "softmax", 2, {kDimR, kDimC, kNoParam}, 2,
     {{"X", DType::kF16, kR, kC, false},
      {"Y", DType::kF16, kR, kC, true},
      kNoBuffer, kNoBuffer}},
    {OpId::kSoftmaxGrad, "softmax_grad", 2, {kDimR, kDimC, kNoParam}, 3,
     {{"dY", DType::kF16, kR, kC, false},
      {"Y", DType::kF16, kR, kC, false},
      {"dX", DType::kF16, kR, kC, true},
      kNoBuffer}},
    {OpId::kCrossEntropy, "cross_entropy", 3, {kDimR, kDimV, {"ignore_index", ParamKind::kIndex}}, 4,
     {{"logits", DType::kF16, kR, kV, false},
      {"labels", DType::kI32, kR, kOne, false},
      {"loss", DType::kF32, kR, kOne, true},
      {"dLogits", DType::kF16, kR, kV, true}}},
};
// clang-format on

// label_error is what both backends answer when a cross_entropy call's row
// `row` holds `label`, which is neither a class in [0, V) nor the
// ignore_index: INVALID_ARGUMENT, found while running, so the outputs of
// the call are unspecified.
inline Result label_error(const int64_t* params, int64_t row, int64_t label) {
  const int64_t V = params[kV], ignore = params[kIgnoreIndex];
  const std::string ignored = ignore == kUnsetIndex ? std::string("none set") : cat(ignore);
  return fail(kStatusInvalidArgument, "cross_entropy: labels[", row, "] = ", label,
              " is neither a class index in [0, V) = [0, ", V, ") nor the ignore_index (", ignored, "; R=", params[kR],
              ", V=", V, "): fix the labels, or set ignore_index to the value that marks rows to skip; "
              "this call's outputs are unspecified");
}

inline const OpSpec* find_op(uint32_t id) {
  for (const OpSpec& op : kOps) {
    if (static_cast<uint32_t>(op.id) == id) return &op;
  }
  return nullptr;
}

}  // namespace vkern

#endif  // VKERN_CORE_OPS_H
