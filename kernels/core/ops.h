// The RUN op table's types, and the table itself: core/optable.h, which
// vkern generates from the op contracts (package op) into the sources it
// builds. The server checks every RUN against the table (counts, dimensions
// >= 1, every parameter of its kind and in its range, the divisibility the
// op needs, element counts without overflow, buffer sizes, outputs not
// aliasing inputs but where the contract allows it) before a backend sees
// it, so a kernel may assume well-formed shapes and large-enough buffers.
// What the table cannot check before the run, whether an input keeps its
// domain (cross_entropy's labels in [0, V)), the kernels check while they
// run and report (backend.h, Call::problem); the core then words the error.
#ifndef VKERN_CORE_OPS_H
#define VKERN_CORE_OPS_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/protocol.h"

namespace vkern {

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

constexpr int kMaxOpParams = 16;
constexpr int kMaxOpBuffers = 16;
constexpr int kMaxExtentTerms = 4;
constexpr int kMaxDivides = 2;
constexpr double kInfinity = std::numeric_limits<double>::infinity();

// What a RUN parameter is. A dimension is >= 1; an Int a whole number in
// [min, max]; a Float a binary64 number in [min, max], sent as its bits; an
// Index a value compared with 32-bit labels: a value in the int32 range, or
// kUnsetIndex when the caller sets none, which no label equals.
enum class ParamKind { kDim, kInt, kIndex, kFloat };
constexpr int64_t kUnsetIndex = std::numeric_limits<int64_t>::min();

struct ParamSpec {
  const char* name;
  ParamKind kind;
  double min, max;
};

// An extent is coef times the product of the parameters at terms[0..count).
struct Extent {
  int64_t coef;
  int count;
  int terms[kMaxExtentTerms];
};

// What an op does with a buffer: reads it, writes every element of it, or
// reads and then writes it (adds into it, updates it in place).
enum class Role { kIn, kOut, kInOut };

// A buffer of an op: a dtype matrix of rows × cols elements.
struct BufferSpec {
  const char* name;
  DType dtype;
  Extent rows, cols;
  Role role;
  int may_alias;       // the input an output may share its buffer with, or -1
  const char* domain;  // what an i32 input must hold, checked while running; nullptr: anything
};

// {a, b}: parameter a must divide parameter b.
struct Divides {
  int a, b;
};

struct OpSpec {
  uint32_t id;
  const char* name;
  int param_count;  // dimensions first, then the other parameters
  ParamSpec params[kMaxOpParams];
  int buffer_count;  // in wire order
  BufferSpec buffers[kMaxOpBuffers];
  int divides_count;
  Divides divides[kMaxDivides];
  int checked_buffer;  // the buffer with a domain, or -1
};

inline bool writes(const BufferSpec& b) { return b.role != Role::kIn; }

}  // namespace vkern

#include "core/optable.h"

namespace vkern {

inline const OpSpec* find_op(uint32_t id) {
  for (const OpSpec& op : kOps) {
    if (op.id == id) return &op;
  }
  return nullptr;
}

// find_op_named is the built-in op called name, or nullptr.
inline const OpSpec* find_op_named(const char* name) {
  for (const OpSpec& op : kOps) {
    if (std::strcmp(op.name, name) == 0) return &op;
  }
  return nullptr;
}

}  // namespace vkern

#endif  // VKERN_CORE_OPS_H
