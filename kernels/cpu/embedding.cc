// embedding and embedding_grad on the CPU: tokens i32 B·T, f16 embeddings
// and gradients, binary32 inside.
//
// embedding: x[p] = f16(f32(wte[tokens[p]]) + f32(wpe[p mod T])), for the
// N = B·T positions p = b·T + t. The pool runs blocks of whole positions;
// each row is converted to binary32 in runs of kRunChannels (convert.h),
// added, and rounded once to f16.
//
// embedding_grad: dwte[v] += Σ dx[p] over the positions p holding token v,
// dwpe[t] += Σ_b dx[b·T + t], in binary32, added into the f32 outputs in
// place. The summation order is fixed, so the result is the same bits on
// every run, whatever the number of threads:
//
//   dwte[v][c] = ((dwte₀[v][c] + dx[p₁][c]) + dx[p₂][c]) + …,  p₁ < p₂ < … the positions of v
//   dwpe[t][c] = ((dwpe₀[t][c] + dx[t][c]) + dx[T + t][c]) + …,  b ascending
//
// Each output element belongs to one task, which adds its terms in that
// order: dwpe's tasks are blocks of positions t; dwte's are a range of
// token ids × a block of kRunChannels channels, and each scans all N token
// ids in ascending position, adding the rows whose id is in its range (a
// scan of N ids per task, small next to the rows it adds). The oracle's
// bound, γ₂₄(n)·Σ|terms| for n additions, holds for any order
// (oracle/embedding.go).
//
// Token ids. A serial pass first finds the smallest position whose id is
// outside [0, V): it is the call's problem, which the server answers as
// INVALID_ARGUMENT naming tokens[p] and its value (core/server.cc,
// domain_error). Such an id never indexes wte or dwte: embedding writes a
// row of +0 at its position, and embedding_grad adds nothing to dwte for it
// (dwpe, which does not read the ids, takes its row as any other).
//
// Facts relied on: binary32 additions rounded to nearest (no fast-math);
// IEEE specials follow the formula (NaN + x = NaN, +Inf + −Inf = NaN); a
// sum of f16 values past 65504 rounds to f16 Inf.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/backend.h"
#include "core/f16.h"
#include "cpu/convert.h"
#include "cpu/device.h"

namespace vkern {
namespace {
namespace embedding_cpu {

constexpr size_t kTaskElements = size_t{1} << 15;  // output elements per task (at least one row)
constexpr size_t kRunChannels = 256;               // channels converted at a time, on the stack

inline bool valid_token(int32_t id, size_t V) { return id >= 0 && static_cast<size_t>(id) < V; }

// first_bad_token is the smallest position whose id is outside [0, V), or
// −1 when there is none.
int64_t first_bad_token(const int32_t* tokens, size_t n, size_t V) {
  for (size_t p = 0; p < n; ++p) {
    if (!valid_token(tokens[p], V)) return static_cast<int64_t>(p);
  }
  return -1;
}

// accumulate adds n f16 values of src to dst (f32), one binary32 addition
// each.
inline void accumulate(float* dst, const uint16_t* src, size_t n) {
  float values[kRunChannels];
  f16_to_f32_run(src, values, n);
  for (size_t i = 0; i < n; ++i) dst[i] += values[i];
}

}  // namespace embedding_cpu
}  // namespace

// The ops' entries (kernels.cc lists them): a bad token id is the call's
// problem.
Result run_embedding(const Call& c, uint64_t* problem) {
  using namespace op_embedding;
  using namespace embedding_cpu;
  const size_t T = c.dim(param::T), C = c.dim(param::C), V = c.dim(param::V);
  const size_t N = c.dim(param::B) * T;
  const int32_t* tokens = c.ptr<const int32_t>(buf::tokens);
  const uint16_t* wte = c.ptr<const uint16_t>(buf::wte);
  const uint16_t* wpe = c.ptr<const uint16_t>(buf::wpe);
  uint16_t* x = c.ptr<uint16_t>(buf::x);
  const int64_t bad = first_bad_token(tokens, N, V);
  if (bad >= 0) *problem = static_cast<uint64_t>(bad);
  const size_t rows = std::max<size_t>(1, kTaskElements / C);
  cpu_pool().parallel_for((N + rows - 1) / rows, [&](size_t task, unsigned) {
    const size_t end = std::min(N, (task + 1) * rows);
    for (size_t p = task * rows; p < end; ++p) {
      uint16_t* out = x + p * C;
      const int32_t id = tokens[p];
      if (!valid_token(id, V)) {
        std::memset(out, 0, C * sizeof(uint16_t));
        continue;
      }
      const size_t t = p % T;
      const uint16_t* token_row = wte + static_cast<size_t>(id) * C;
      const uint16_t* position_row = wpe + t * C;
      for (size_t first = 0; first < C; first += kRunChannels) {
        const size_t n = std::min(kRunChannels, C - first);
        float sum[kRunChannels], position[kRunChannels];
        f16_to_f32_run(token_row + first, sum, n);
        f16_to_f32_run(position_row + first, position, n);
        for (size_t i = 0; i < n; ++i) sum[i] += position[i];
        f32_to_f16_run(sum, out + first, n);
      }
    }
  });
  return Result::OK();
}

Result run_embedding_grad(const Call& c, uint64_t* problem) {
  using namespace op_embedding_grad;
  using namespace embedding_cpu;
  const size_t B = c.dim(param::B), T = c.dim(param::T), C = c.dim(param::C), V = c.dim(param::V);
  const size_t N = B * T;
  const uint16_t* dx = c.ptr<const uint16_t>(buf::dx);
  const int32_t* tokens = c.ptr<const int32_t>(buf::tokens);
  float* dwte = c.ptr<float>(buf::dwte);
  float* dwpe = c.ptr<float>(buf::dwpe);
  const int64_t bad = first_bad_token(tokens, N, V);
  if (bad >= 0) *problem = static_cast<uint64_t>(bad);
  ThreadPool& pool = cpu_pool();

  // dwpe: blocks of positions t, each row summed over b ascending.
  const size_t rows = std::max<size_t>(1, kTaskElements / (C * B));
  pool.parallel_for((T + rows - 1) / rows, [&](size_t task, unsigned) {
    const size_t end = std::min(T, (task + 1) * rows);
    for (size_t t = task * rows; t < end; ++t) {
      for (size_t first = 0; first < C; first += kRunChannels) {
        const size_t n = std::min(kRunChannels, C - first);
        for (size_t b = 0; b < B; ++b) accumulate(dwpe + t * C + first, dx + (b * T + t) * C + first, n);
      }
    }
  });

  // dwte: token ranges × channel blocks, each scanning the positions in
  // ascending order.
  const size_t ranges = std::min(V, size_t{4} * pool.size());
  const size_t blocks = (C + kRunChannels - 1) / kRunChannels;
  pool.parallel_for(ranges * blocks, [&](size_t task, unsigned) {
    const size_t range = task / blocks, first = task % blocks * kRunChannels;
    const int64_t lo = static_cast<int64_t>(range * V / ranges), hi = static_cast<int64_t>((range + 1) * V / ranges);
    const size_t n = std::min(kRunChannels, C - first);
    for (size_t p = 0; p < N; ++p) {
      const int64_t id = tokens[p];
      if (id < lo || id >= hi) continue;
      accumulate(dwte + static_cast<size_t>(id) * C + first, dx + p * C + first, n);
    }
  });
  return Result::OK();
}

}  // namespace vkern
