// gemm, gemm_grad_a, gemm_grad_b, linear, linear_nt and linear_grad_w on the
// CPU: f16 operands, f32 accumulation.
//
// The six ops are one product, Out (rows × cols) = L (rows × depth) · R (depth × cols),
// with an epilogue for the last three:
//
//   op             L     R     depth  Out              epilogue
//   gemm           A     B     K      C  f32 M×N
//   gemm_grad_a    dC    Bᵀ    N      dA f16 M×K
//   gemm_grad_b    Aᵀ    dC    M      dB f16 K×N
//   linear         x     W     K      y  f16 M×N       + b[col]   (bias = 1),
//                                                      then + r[row, col] (residual = 1)
//                                                      or gelu, with pre = the sum (gelu = 1)
//   linear_nt      x     Wᵀ    K      y  f16 M×N       + b[col]   (bias = 1)
//   linear_grad_w  xᵀ    dy    M      dW f32 K×N       dW_old +   (accumulate = 1);
//                                                      db += dy's column sums (bias = 1, bias_grad.cc)
//   linear_grad_x  dy    Wᵀ    N      dx f16 M×K       · gelu′(pre) (gelu = 1)
//
// A transposed operand is only a different read order while packing, so one
// f32 micro-kernel serves all seven.
//
// Blocking (the GotoBLAS/BLIS scheme, sized for a 32 KiB L1 and >= 512 KiB L2):
//
//   for each block of kRowBlock output rows:
//   for each block of kColBlock output columns:
//     for each block of kDepthBlock reduction terms:
//       pack R[depth block, column block] to f32 panels kNR wide     (parallel over panels)
//       and L[row block, depth block] to f32 panels kMR tall, a strip
//       of kRowStrip rows a task                                     (in the same fan-out)
//       parallel over tasks, each a strip of kRowStrip rows × one column strip:
//         for each kNR panel of the column strip (stays in L1):
//           for each kMR panel of the row strip (stays in L2):
//             micro-kernel: a kMR × kNR tile over the depth block, in registers
//             finish_tile: fold the tile into the running sums; on the last
//                          depth block, write the finished elements to Out
//
// Facts relied on:
// - An f16·f16 product is exact in f32 (11-bit significands give at most 22
//   bits; exponents stay inside the f32 normal range). So a fused multiply-add
//   and a multiply followed by an add give the same bits, and every rounding
//   is in an f32 addition. Integer-valued inputs whose partial sums stay
//   below 2^24 in magnitude therefore give exact results.
// - Panels are zero-padded past the last row or column; padding only feeds
//   tile elements that finish_tile never writes. The depth is never padded,
//   so Inf and NaN inputs propagate exactly as in the plain triple loop.
// - Partial sums live in registers within a depth block and in an f32 scratch
//   (one row block × column block, at most 64 MiB) between depth blocks; Out
//   is written once per element, on the last depth block, so an f16 output
//   is rounded exactly once, and an element skipped keeps the host's poison.
// - The epilogue runs there too, on the finished f32 dot product: the bias
//   (converted from f16, exact) in one f32 addition, then the old value of
//   an accumulated f32 output (old + sum) or the residual's element (sum +
//   r, exact from f16) in another, both rounded to nearest, before the one
//   store. The oracle's epilogue bound
//   (oracle.MatMulWith) assumes exactly these two additions. A GELU comes
//   last, on the f32 value, with gelu.h's expressions: the forward stores
//   the value rounded to f16 as pre and gelu of it as the output, the
//   backward multiplies it by gelu′(pre) (gelu_grad_run, dy = the value).
// - Every index that multiplies two dimensions is size_t (64-bit).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/backend.h"
#include "core/f16.h"
#include "cpu/column_sums.h"
#include "cpu/convert.h"
#include "cpu/device.h"
#include "cpu/gelu.h"

#if defined(__FMA__) && defined(__AVX__)
#include <immintrin.h>
#endif

namespace vkern {
namespace {

// f32x8 is eight f32 lanes: one AVX register, two NEON or SSE registers.
typedef float f32x8 __attribute__((vector_size(32)));

constexpr size_t kMR = 6;            // micro-tile rows: 6 × 2 accumulator vectors + 2 B vectors + 1 A broadcast
constexpr size_t kNR = 16;           // micro-tile columns: two f32x8
// kDepthBlock also fixes the summation order that HELLO's dot_accumulation
// states ("rn-blocked:256"); gemm_dot_accumulation spells it from this
// constant, so the claim follows any change here.
constexpr size_t kDepthBlock = 256;  // packed R panel: 256 × 16 × 4 B = 16 KiB, in L1
constexpr size_t kRowStrip = 96;     // packed L strip: 96 × 256 × 4 B = 96 KiB, in L2
constexpr size_t kColBlock = 4096;   // packed R block: at most 256 × 4096 × 4 B = 4 MiB
constexpr size_t kRowBlock = 4096;   // partial sums: at most 4096 × 4096 × 4 B = 64 MiB

size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

// Operand is a read-only f16 matrix as the product sees it: element (r, c) is
// data[r * ld + c], or data[c * ld + r] for the transpose of a stored
// row-major matrix whose rows hold ld elements.
struct Operand {
  const uint16_t* data;
  size_t ld;
  bool transposed;

  static Operand row_major(const uint16_t* data, size_t cols) { return Operand{data, cols, false}; }
  static Operand transpose_of(const uint16_t* data, size_t stored_cols) { return Operand{data, stored_cols, true}; }
};

// Output is where finished elements go (exactly one of c32, c16 is set,
// rows × cols) and where partial sums wait between depth blocks: element
// (row, col) of the current row and column block at
// sums[(row − sums_row0) · sums_cols + col − sums_col0]. The epilogue adds
// bias[col] (f16, cols of them) when bias is set, and adds into c32 instead
// of overwriting it when accumulate is set, or residual's element (f16,
// rows × cols) for an f16 output; then, for an f16 output, the GELU: with pre_out set, the element goes to pre_out (f16, rows × cols) and
// gelu of it to c16; with pre_in set, c16 gets it times gelu′(pre_in's
// element).
struct Output {
  float* c32;
  uint16_t* c16;
  size_t rows;
  size_t cols;
  float* sums;  // used only when there is more than one depth block
  size_t sums_row0;
  size_t sums_col0;
  size_t sums_cols;
  const uint16_t* bias = nullptr;
  bool accumulate = false;           // c32 only
  uint16_t* pre_out = nullptr;         // c16 only
  const uint16_t* pre_in = nullptr;    // c16 only
  const uint16_t* residual = nullptr;  // c16 only
};

// VKERN_MULTIPLY_ADD(acc, a, b) sets acc = acc + a·b. The products are exact
// (see above), so the fused instruction, where the target has one, is used
// only for speed and changes no result. (A macro, because passing 32-byte
// vectors to functions warns about the ABI on targets without AVX.)
#if defined(__FMA__) && defined(__AVX__)
#define VKERN_MULTIPLY_ADD(acc, a, b) \
  (acc) = reinterpret_cast<f32x8>(    \
      _mm256_fmadd_ps(reinterpret_cast<__m256>(a), reinterpret_cast<__m256>(b), reinterpret_cast<__m256>(acc)))
#else
#define VKERN_MULTIPLY_ADD(acc, a, b) (acc) += (a) * (b)
#endif

// pack_lhs converts rows [row0, row0 + rows) × terms [depth0, depth0 + depth)
// of L, rows <= kRowStrip and depth <= kDepthBlock, into f32 panels of kMR
// rows: panel q holds element (q·kMR + i, p) at q·depth·kMR + p·kMR + i.
// Rows past the end are zero. Whichever way L is stored, the contiguous run
// of f16 is converted in bulk, then scattered into the panels.
void pack_lhs(const Operand& l, size_t row0, size_t rows, size_t depth0, size_t depth, float* dst) {
  alignas(64) float run[kDepthBlock > kRowStrip ? kDepthBlock : kRowStrip];
  const size_t panels = ceil_div(rows, kMR);
  if (l.transposed) {
    // L(i, p) = data[p·ld + i]: for each term, the strip's rows are contiguous.
    for (size_t p = 0; p < depth; ++p) {
      f16_to_f32_run(l.data + (depth0 + p) * l.ld + row0, run, rows);
      for (size_t i = rows; i < panels * kMR; ++i) run[i] = 0.0f;
      for (size_t q = 0; q < panels; ++q) {
        for (size_t i = 0; i < kMR; ++i) dst[q * depth * kMR + p * kMR + i] = run[q * kMR + i];
      }
    }
    return;
  }
  // L(i, p) = data[i·ld + p]: each row's terms are contiguous.
  for (size_t i = 0; i < panels * kMR; ++i) {
    float* panel = dst + (i / kMR) * depth * kMR + i % kMR;
    if (i >= rows) {
      for (size_t p = 0; p < depth; ++p) panel[p * kMR] = 0.0f;
      continue;
    }
    f16_to_f32_run(l.data + (row0 + i) * l.ld + depth0, run, depth);
    for (size_t p = 0; p < depth; ++p) panel[p * kMR] = run[p];
  }
}

// pack_rhs_panel converts terms [depth0, depth0 + depth) × columns
// [col0, col0 + cols) of R, cols <= kNR and depth <= kDepthBlock, into one
// f32 panel: element (p, j) at p·kNR + j. Columns past the end are zero.
void pack_rhs_panel(const Operand& r, size_t depth0, size_t depth, size_t col0, size_t cols, float* dst) {
  if (r.transposed) {
    // R(p, j) = data[j·ld + p]: each column's terms are contiguous.
    alignas(64) float run[kDepthBlock];
    for (size_t j = 0; j < kNR; ++j) {
      if (j < cols) {
        f16_to_f32_run(r.data + (col0 + j) * r.ld + depth0, run, depth);
      } else {
        for (size_t p = 0; p < depth; ++p) run[p] = 0.0f;
      }
      for (size_t p = 0; p < depth; ++p) dst[p * kNR + j] = run[p];
    }
    return;
  }
  // R(p, j) = data[p·ld + j]: each term's columns are contiguous.
  for (size_t p = 0; p < depth; ++p) {
    f16_to_f32_run(r.data + (depth0 + p) * r.ld + col0, dst + p * kNR, cols);
    for (size_t j = cols; j < kNR; ++j) dst[p * kNR + j] = 0.0f;
  }
}

// micro_kernel computes the kMR × kNR tile = Σ_k lhs(·, k) ⊗ rhs(k, ·) over
// one depth block of packed panels, in registers, and stores it to tile.
void micro_kernel(size_t depth, const float* lhs, const float* rhs, float* tile) {
  f32x8 acc[kMR][2] = {};
  for (size_t k = 0; k < depth; ++k) {
    f32x8 b0, b1;
    std::memcpy(&b0, rhs + k * kNR, sizeof b0);
    std::memcpy(&b1, rhs + k * kNR + 8, sizeof b1);
    const float* a = lhs + k * kMR;
#pragma GCC unroll 6
    for (size_t i = 0; i < kMR; ++i) {
      const float s = a[i];
      const f32x8 ai = {s, s, s, s, s, s, s, s};
      VKERN_MULTIPLY_ADD(acc[i][0], ai, b0);
      VKERN_MULTIPLY_ADD(acc[i][1], ai, b1);
    }
  }
  for (size_t i = 0; i < kMR; ++i) {
    std::memcpy(tile + i * kNR, &acc[i][0], sizeof acc[i][0]);
    std::memcpy(tile + i * kNR + 8, &acc[i][1], sizeof acc[i][1]);
  }
}

// finish_tile folds one depth block's tile (mr × nr valid elements at
// row0, col0) into the running sums, and on the last depth block writes the
// finished elements to the output after the epilogue: f32 as is, f16
// rounded once.
void finish_tile(const Output& out, const float* tile, size_t row0, size_t col0, size_t mr, size_t nr, bool first_block,
                 bool last_block) {
  float bias[kNR];
  if (last_block && out.bias != nullptr) f16_to_f32_run(out.bias + col0, bias, nr);
  for (size_t i = 0; i < mr; ++i) {
    const size_t row = row0 + i;
    const float* part = tile + i * kNR;
    float* sums =
        first_block && last_block ? nullptr : out.sums + (row - out.sums_row0) * out.sums_cols + (col0 - out.sums_col0);
    if (!last_block) {
      for (size_t j = 0; j < nr; ++j) sums[j] = first_block ? part[j] : sums[j] + part[j];
      continue;
    }
    if (out.c32 != nullptr) {
      float* c32_row = out.c32 + row * out.cols + col0;
      for (size_t j = 0; j < nr; ++j) {
        float value = first_block ? part[j] : sums[j] + part[j];
        if (out.bias != nullptr) value += bias[j];
        if (out.accumulate) value = c32_row[j] + value;
        c32_row[j] = value;
      }
    } else {
      float values[kNR];
      for (size_t j = 0; j < nr; ++j) {
        float value = first_block ? part[j] : sums[j] + part[j];
        if (out.bias != nullptr) value += bias[j];
        values[j] = value;
      }
      const size_t at = row * out.cols + col0;
      if (out.residual != nullptr) {
        float r[kNR];
        f16_to_f32_run(out.residual + at, r, nr);
        for (size_t j = 0; j < nr; ++j) values[j] += r[j];
      }
      float pre[kNR];
      const float* result = values;
      if (out.pre_out != nullptr) {
        f32_to_f16_run(values, out.pre_out + at, nr);
        gelu_run(values, nr);
      } else if (out.pre_in != nullptr) {
        f16_to_f32_run(out.pre_in + at, pre, nr);
        gelu_grad_run(pre, values, nr);  // pre becomes values·gelu′(pre)
        result = pre;
      }
      f32_to_f16_run(result, out.c16 + at, nr);
    }
  }
}

// product computes out = l · r for rows × depth times depth × cols.
void product(ThreadPool& pool, Scratch& scratch, const Operand& l, const Operand& r, size_t rows, size_t cols,
             size_t depth, Output out) {
  const size_t threads = pool.size();
  const size_t depth_block = std::min(kDepthBlock, depth);
  const size_t col_block = std::min(kColBlock, cols);
  const size_t row_block = std::min(kRowBlock, rows);
  float* packed_r = scratch.floats(Scratch::kGemmPackedR, depth_block * ceil_div(col_block, kNR) * kNR);
  // Every row strip of the row block, packed once per depth block and
  // shared by the tasks of all its column strips.
  const size_t strip_floats = depth_block * ceil_div(std::min(kRowStrip, rows), kMR) * kMR;
  float* packed_l = scratch.floats(Scratch::kGemmPackedL, ceil_div(row_block, kRowStrip) * strip_floats);
  out.sums = depth > kDepthBlock ? scratch.floats(Scratch::kGemmSums, row_block * col_block) : nullptr;

  for (size_t r0 = 0; r0 < rows; r0 += kRowBlock) {
    const size_t mb = std::min(kRowBlock, rows - r0);
    const size_t row_strips = ceil_div(mb, kRowStrip);
    for (size_t c0 = 0; c0 < cols; c0 += kColBlock) {
      const size_t nc = std::min(kColBlock, cols - c0);
      const size_t panels = ceil_div(nc, kNR);
      // Enough tasks to keep every thread busy to the end: split the columns
      // when there are too few row strips.
      const size_t col_strips = std::min(panels, std::max<size_t>(1, ceil_div(4 * threads, row_strips)));
      const size_t panels_per_strip = ceil_div(panels, col_strips);
      out.sums_row0 = r0;
      out.sums_col0 = c0;
      out.sums_cols = nc;
      for (size_t d0 = 0; d0 < depth; d0 += kDepthBlock) {
        const size_t kc = std::min(kDepthBlock, depth - d0);
        const bool first_block = d0 == 0;
        const bool last_block = d0 + kc == depth;
        // Pack the R panels and the L strips, each once, in one fan-out.
        pool.parallel_for(panels + row_strips, [&](size_t task, unsigned) {
          if (task < row_strips) {
            const size_t strip_row0 = r0 + task * kRowStrip;
            pack_lhs(l, strip_row0, std::min(kRowStrip, r0 + mb - strip_row0), d0, kc, packed_l + task * strip_floats);
            return;
          }
          const size_t j0 = (task - row_strips) * kNR;
          pack_rhs_panel(r, d0, kc, c0 + j0, std::min(kNR, nc - j0), packed_r + (task - row_strips) * kc * kNR);
        });
        pool.parallel_for(row_strips * col_strips, [&](size_t task, unsigned) {
          const size_t strip = task / col_strips;
          const size_t strip_row0 = r0 + strip * kRowStrip;
          const size_t strip_rows = std::min(kRowStrip, r0 + mb - strip_row0);
          const size_t panel_begin = (task % col_strips) * panels_per_strip;
          const size_t panel_end = std::min(panels, panel_begin + panels_per_strip);
          const float* lhs = packed_l + strip * strip_floats;
          alignas(64) float tile[kMR * kNR];
          for (size_t q = panel_begin; q < panel_end; ++q) {
            const size_t col0 = c0 + q * kNR;
            const size_t nr = std::min(kNR, cols - col0);
            const float* rhs = packed_r + q * kc * kNR;
            for (size_t i0 = 0; i0 < strip_rows; i0 += kMR) {
              micro_kernel(kc, lhs + (i0 / kMR) * kc * kMR, rhs, tile);
              finish_tile(out, tile, strip_row0 + i0, col0, std::min(kMR, strip_rows - i0), nr, first_block,
                          last_block);
            }
          }
        });
      }
    }
  }
}

}  // namespace

// Each dot product is summed in ascending k within depth blocks of
// kDepthBlock terms: micro_kernel starts every block's sum from zero, adds
// the exact products in f32 (round to nearest), and finish_tile adds the
// block sums to the running sum in order.
std::string gemm_dot_accumulation() { return "rn-blocked:" + std::to_string(kDepthBlock); }

void gemm(ThreadPool& pool, Scratch& scratch, const uint16_t* a, const uint16_t* b, float* c, size_t M, size_t N,
          size_t K) {
  const Operand lhs = Operand::row_major(a, K);
  const Operand rhs = Operand::row_major(b, N);
  product(pool, scratch, lhs, rhs, M, N, K, Output{c, nullptr, M, N, nullptr, 0, 0, 0});
}

// dA = dC · Bᵀ: B is stored K×N, so Bᵀ (N×K) is its transposed view.
void gemm_grad_a(ThreadPool& pool, Scratch& scratch, const uint16_t* dc, const uint16_t* b, uint16_t* da, size_t M,
                 size_t N, size_t K) {
  const Operand lhs = Operand::row_major(dc, N);
  const Operand rhs = Operand::transpose_of(b, N);
  product(pool, scratch, lhs, rhs, M, K, N, Output{nullptr, da, M, K, nullptr, 0, 0, 0});
}

// dB = Aᵀ · dC: A is stored M×K, so Aᵀ (K×M) is its transposed view.
void gemm_grad_b(ThreadPool& pool, Scratch& scratch, const uint16_t* a, const uint16_t* dc, uint16_t* db, size_t M,
                 size_t N, size_t K) {
  const Operand lhs = Operand::transpose_of(a, K);
  const Operand rhs = Operand::row_major(dc, N);
  product(pool, scratch, lhs, rhs, K, N, M, Output{nullptr, db, K, N, nullptr, 0, 0, 0});
}

// y = x · W + b: x M×K and W K×N as gemm's A and B, y f16; b (N) is
// nullptr when the bias is off. With r (M×N) not null, y = x · W + b + r.
// With pre (M×N) not null, pre = x · W + b and y = gelu of it.
void linear(ThreadPool& pool, Scratch& scratch, const uint16_t* x, const uint16_t* w, const uint16_t* b,
            const uint16_t* r, uint16_t* y, uint16_t* pre, size_t M, size_t N, size_t K) {
  Output out{nullptr, y, M, N, nullptr, 0, 0, 0};
  out.bias = b;
  out.residual = r;
  out.pre_out = pre;
  product(pool, scratch, Operand::row_major(x, K), Operand::row_major(w, N), M, N, K, out);
}

// dx = dy · Wᵀ: gemm_grad_a's product (W stored K×N, so Wᵀ is its
// transposed view), dx f16 M×K; with pre (M×K) not null, times gelu′(pre).
void linear_grad_x(ThreadPool& pool, Scratch& scratch, const uint16_t* dy, const uint16_t* w, const uint16_t* pre,
                   uint16_t* dx, size_t M, size_t N, size_t K) {
  Output out{nullptr, dx, M, K, nullptr, 0, 0, 0};
  out.pre_in = pre;
  product(pool, scratch, Operand::row_major(dy, N), Operand::transpose_of(w, N), M, K, N, out);
}

// y = x · Wᵀ + b: W is stored N×K (torch.nn.functional.linear's weight),
// so Wᵀ (K×N) is its transposed view, as gemm_grad_a's Bᵀ; y f16, b (N)
// nullptr when the bias is off.
void linear_nt(ThreadPool& pool, Scratch& scratch, const uint16_t* x, const uint16_t* w, const uint16_t* b,
               uint16_t* y, size_t M, size_t N, size_t K) {
  Output out{nullptr, y, M, N, nullptr, 0, 0, 0};
  out.bias = b;
  product(pool, scratch, Operand::row_major(x, K), Operand::transpose_of(w, K), M, N, K, out);
}

// dW = xᵀ · dy, or dW += xᵀ · dy when accumulating: x is stored M×K, so xᵀ
// (K×M) is its transposed view, as gemm_grad_b's Aᵀ.
void linear_grad_w(ThreadPool& pool, Scratch& scratch, const uint16_t* x, const uint16_t* dy, float* dw, size_t M,
                   size_t N, size_t K, bool accumulate) {
  Output out{dw, nullptr, K, N, nullptr, 0, 0, 0};
  out.accumulate = accumulate;
  product(pool, scratch, Operand::transpose_of(x, K), Operand::row_major(dy, N), K, N, M, out);
}

// The ops' entries (kernels.cc lists them).
Result run_gemm(const Call& c, uint64_t*) {
  using namespace op_gemm;
  gemm(cpu_pool(), cpu_scratch(), c.ptr<const uint16_t>(buf::A), c.ptr<const uint16_t>(buf::B), c.ptr<float>(buf::C),
       c.dim(param::M), c.dim(param::N), c.dim(param::K));
  return Result::OK();
}

Result run_gemm_grad_a(const Call& c, uint64_t*) {
  using namespace op_gemm_grad_a;
  gemm_grad_a(cpu_pool(), cpu_scratch(), c.ptr<const uint16_t>(buf::dC), c.ptr<const uint16_t>(buf::B),
              c.ptr<uint16_t>(buf::dA), c.dim(param::M), c.dim(param::N), c.dim(param::K));
  return Result::OK();
}

Result run_gemm_grad_b(const Call& c, uint64_t*) {
  using namespace op_gemm_grad_b;
  gemm_grad_b(cpu_pool(), cpu_scratch(), c.ptr<const uint16_t>(buf::A), c.ptr<const uint16_t>(buf::dC),
              c.ptr<uint16_t>(buf::dB), c.dim(param::M), c.dim(param::N), c.dim(param::K));
  return Result::OK();
}

Result run_linear(const Call& c, uint64_t*) {
  using namespace op_linear;
  const uint16_t* b = c.dim(param::bias) == 1 ? c.ptr<const uint16_t>(buf::b) : nullptr;
  const uint16_t* r = c.dim(param::residual) == 1 ? c.ptr<const uint16_t>(buf::r) : nullptr;
  uint16_t* pre = c.dim(param::gelu) == 1 ? c.ptr<uint16_t>(buf::pre) : nullptr;
  linear(cpu_pool(), cpu_scratch(), c.ptr<const uint16_t>(buf::x), c.ptr<const uint16_t>(buf::W), b, r,
         c.ptr<uint16_t>(buf::y), pre, c.dim(param::M), c.dim(param::N), c.dim(param::K));
  return Result::OK();
}

Result run_linear_grad_x(const Call& c, uint64_t*) {
  using namespace op_linear_grad_x;
  const uint16_t* pre = c.dim(param::gelu) == 1 ? c.ptr<const uint16_t>(buf::pre) : nullptr;
  linear_grad_x(cpu_pool(), cpu_scratch(), c.ptr<const uint16_t>(buf::dy), c.ptr<const uint16_t>(buf::W), pre,
                c.ptr<uint16_t>(buf::dx), c.dim(param::M), c.dim(param::N), c.dim(param::K));
  return Result::OK();
}

Result run_linear_nt(const Call& c, uint64_t*) {
  using namespace op_linear_nt;
  const uint16_t* b = c.dim(param::bias) == 1 ? c.ptr<const uint16_t>(buf::b) : nullptr;
  linear_nt(cpu_pool(), cpu_scratch(), c.ptr<const uint16_t>(buf::x), c.ptr<const uint16_t>(buf::W), b,
            c.ptr<uint16_t>(buf::y), c.dim(param::M), c.dim(param::N), c.dim(param::K));
  return Result::OK();
}

Result run_linear_grad_w(const Call& c, uint64_t*) {
  using namespace op_linear_grad_w;
  linear_grad_w(cpu_pool(), cpu_scratch(), c.ptr<const uint16_t>(buf::x), c.ptr<const uint16_t>(buf::dy),
                c.ptr<float>(buf::dW), c.dim(param::M), c.dim(param::N), c.dim(param::K),
                c.dim(param::accumulate) == 1);
  if (c.dim(param::bias) == 1) {
    add_column_sums(c.ptr<const uint16_t>(buf::dy), c.ptr<float>(buf::db), c.dim(param::M), c.dim(param::N));
  }
  return Result::OK();
}

}  // namespace vkern
