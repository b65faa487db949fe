// add, gelu and gelu_grad on the CPU: elementwise, f16 in and out, binary32
// inside.
//
// The N elements go to the pool in chunks of kChunk; each chunk is converted
// to binary32 in runs of kRun (convert.h, eight lanes at a time), computed,
// and rounded once to f16. Chunks are independent, so the result does not
// depend on the number of threads.
//
// Facts relied on: binary32 arithmetic rounded to nearest (no fast-math;
// GCC may fuse a multiply and an add, which rounds once where the bound
// counts two); GELU is gelu.h's, with vmath.h's tanh_run, within
// 1.5·2⁻²³ relatively of tanh over every binary32 argument, where the
// oracle's bound allows 4; ±Inf and NaN follow the formulas
// (gelu(−Inf) = ½·(−Inf)·0 = NaN, as the reference). add may run in place:
// y's buffer may be a's, and each element is read before it is written.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/backend.h"
#include "core/f16.h"
#include "cpu/convert.h"
#include "cpu/device.h"
#include "cpu/gelu.h"

namespace vkern {
namespace {

constexpr size_t kChunk = 1 << 16;  // elements per task
constexpr size_t kRun = kGeluRun;   // elements converted at a time, on the stack

// for_runs calls fn(first, count) over [0, n) in runs of at most kRun
// elements, the runs of one chunk on one worker.
template <class Fn>
void for_runs(size_t n, const Fn& fn) {
  ThreadPool& pool = cpu_pool();
  pool.parallel_for((n + kChunk - 1) / kChunk, [&](size_t chunk, unsigned) {
    const size_t end = std::min(n, (chunk + 1) * kChunk);
    for (size_t i = chunk * kChunk; i < end; i += kRun) fn(i, std::min(kRun, end - i));
  });
}

}  // namespace

// The ops' entries (kernels.cc lists them).
Result run_add(const Call& c, uint64_t*) {
  using namespace op_add;
  const uint16_t* a = c.ptr<const uint16_t>(buf::a);
  const uint16_t* b = c.ptr<const uint16_t>(buf::b);
  uint16_t* y = c.ptr<uint16_t>(buf::y);
  for_runs(c.dim(param::N), [&](size_t first, size_t n) {
    float va[kRun], vb[kRun];
    f16_to_f32_run(a + first, va, n);
    f16_to_f32_run(b + first, vb, n);
    for (size_t i = 0; i < n; ++i) va[i] += vb[i];
    f32_to_f16_run(va, y + first, n);
  });
  return Result::OK();
}

Result run_gelu(const Call& c, uint64_t*) {
  using namespace op_gelu;
  const uint16_t* x = c.ptr<const uint16_t>(buf::x);
  uint16_t* y = c.ptr<uint16_t>(buf::y);
  for_runs(c.dim(param::N), [&](size_t first, size_t n) {
    float v[kRun];
    f16_to_f32_run(x + first, v, n);
    gelu_run(v, n);
    f32_to_f16_run(v, y + first, n);
  });
  return Result::OK();
}

Result run_gelu_grad(const Call& c, uint64_t*) {
  using namespace op_gelu_grad;
  const uint16_t* x = c.ptr<const uint16_t>(buf::x);
  const uint16_t* dy = c.ptr<const uint16_t>(buf::dy);
  uint16_t* dx = c.ptr<uint16_t>(buf::dx);
  for_runs(c.dim(param::N), [&](size_t first, size_t n) {
    float vx[kRun], vd[kRun];
    f16_to_f32_run(x + first, vx, n);
    f16_to_f32_run(dy + first, vd, n);
    gelu_grad_run(vx, vd, n);
    f32_to_f16_run(vx, dx + first, n);
  });
  return Result::OK();
}

}  // namespace vkern
