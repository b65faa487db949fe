// attention and attention_grad on the CPU: causal multi-head attention from
// the fused projection qkv f16 (B·T)×3C, f32 inside.
//
// Head h of sequence b reads columns h·D.. of q (0..C), k (C..2C) and v
// (2C..3C), D = C/H, α = 1/√D (1.0f / sqrtf(D)). Per query row i, keys
// j ≤ i:
//
//   attention       s_j = α·(q_i·k_j)          each dot product summed in ascending channel order
//                   m   = max_j s_j             (NaN skipped, as softmax.cc)
//                   e_j = exp(s_j − m),  S = Σ_j e_j
//                   y_i = f16(Σ_j e_j·v_j / S)  four partial sums over j (weighted_sum), one division
//                   lse = m + logf(S)           f32, at (b·H + h)·T + i
//
//   attention_grad  P_ij  = exp(α·(q_i·k_j) − lse_i)
//                   D_i   = dy_i·y_i
//                   dS_ij = P_ij·(dy_i·v_j − D_i)
//                   dv_j  = Σ_i≥j P_ij·dy_i,  dq_i = α·Σ_j≤i dS_ij·k_j,  dk_j = α·Σ_i≥j dS_ij·q_i
//
// The q·k and dy·v products of a row are a row times the transposed keys
// or values (scores_of), eight keys at a time; every sum has a fixed order.
//
// Tasks. attention: the pool runs blocks of 32 query rows of one (b, h),
// the blocks of the last rows (the most keys) first; a block converts the
// keys and values it needs (rows 0..its last) to f32 in its worker's part of
// a scratch vector allocated before the fan-out. attention_grad: one task
// per (b, h), which converts the head's q, k, v, dy and y once and keeps
// dk and dv for all its keys; rows run in ascending order, so every sum has
// a fixed order and results do not depend on the thread count.
//
// IEEE facts relied on (no fast-math): a NaN score makes S and the row NaN; a
// +Inf score makes m = +Inf and Inf − Inf = NaN; a row of only −Inf scores
// has m = −Inf and −Inf − (−Inf) = NaN; a −Inf score gives e_j = 0 and
// 0·v_j, which is NaN where v_j is infinite, as the formula reads. Keys
// j > i take no part in row i (scores are computed eight keys at a time, so
// up to seven past the mask are, and then ignored, never summed or used as a
// maximum). Every binary32 operation rounds once; GCC
// may fuse a multiply and an add, which the oracle's bounds allow.
//
// exp is vmath.h's exp_run (within 2⁻²³ relatively, where the oracle
// allows 2 ulps); log is logf, once a row. The row helpers (max_of, sum_of,
// dot_of) are rows.h's, shared with softmax.cc.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/backend.h"
#include "core/f16.h"
#include "cpu/convert.h"
#include "cpu/device.h"
#include "cpu/rows.h"
#include "cpu/vmath.h"

namespace vkern {
namespace {

constexpr size_t kQueryBlock = 32;  // query rows per attention task

// padded rounds a count of keys up to whole vectors of eight: the rows of a
// transposed matrix are this long, so that scores_of runs without a scalar
// tail.
size_t padded(size_t n) { return (n + 7) / 8 * 8; }

// AttentionHeads locates the heads of one call: B sequences of T tokens, H
// heads of D channels in rows of C (y, dy) or 3C (qkv) values.
struct AttentionHeads {
  size_t B, T, C, H, D;

  // row returns the start of head h of token t of sequence b in a matrix
  // of width values a row, part 0 (q, y, dy), 1 (k) or 2 (v).
  template <class T16>
  T16* row(T16* m, size_t width, size_t part, size_t b, size_t t, size_t h) const {
    return m + (b * T + t) * width + part * C + h * D;
  }

  // load converts rows [0, rows) of a head to f32, D values a row.
  void load(const uint16_t* m, size_t width, size_t part, size_t b, size_t h, size_t rows, float* dst) const {
    for (size_t t = 0; t < rows; ++t) f16_to_f32_run(row(m, width, part, b, t, h), dst + t * D, D);
  }

  // load_transposed converts rows [0, rows) of a head to f32 transposed:
  // channel c of row t at dst[c·ld + t], ld = padded(rows), the columns
  // past rows zero. run has room for D floats.
  void load_transposed(const uint16_t* m, size_t width, size_t part, size_t b, size_t h, size_t rows, float* run,
                       float* dst) const {
    const size_t ld = padded(rows);
    for (size_t t = 0; t < rows; ++t) {
      f16_to_f32_run(row(m, width, part, b, t, h), run, D);
      for (size_t c = 0; c < D; ++c) dst[c * ld + t] = run[c];
    }
    for (size_t c = 0; c < D; ++c) std::fill(dst + c * ld + rows, dst + (c + 1) * ld, 0.0f);
  }
};

typedef float f32x8_att __attribute__((vector_size(32)));

// scores_of sets out[j] = Σ_c x[c]·mt[c·ld + j] for j < padded(n) (ld, a
// multiple of eight, at least that), each sum in ascending c: a row times
// a transposed matrix, eight columns j at a time, four vectors of columns
// in flight (independent chains of multiply-adds), with no horizontal sums.
// The caller reads only j < n; the rest is padding or keys past the mask.
void scores_of(const float* x, const float* mt, size_t ld, size_t D, size_t n, float* out) {
  const size_t vectors = padded(n) / 8;
  size_t q = 0;
  for (; q + 4 <= vectors; q += 4) {
    f32x8_att a0 = {}, a1 = {}, a2 = {}, a3 = {};
    for (size_t c = 0; c < D; ++c) {
      const float* row = mt + c * ld + 8 * q;
      f32x8_att m0, m1, m2, m3;
      std::memcpy(&m0, row, sizeof m0);
      std::memcpy(&m1, row + 8, sizeof m1);
      std::memcpy(&m2, row + 16, sizeof m2);
      std::memcpy(&m3, row + 24, sizeof m3);
      a0 += x[c] * m0;
      a1 += x[c] * m1;
      a2 += x[c] * m2;
      a3 += x[c] * m3;
    }
    std::memcpy(out + 8 * q, &a0, sizeof a0);
    std::memcpy(out + 8 * q + 8, &a1, sizeof a1);
    std::memcpy(out + 8 * q + 16, &a2, sizeof a2);
    std::memcpy(out + 8 * q + 24, &a3, sizeof a3);
  }
  for (; q < vectors; ++q) {
    f32x8_att acc = {};
    for (size_t c = 0; c < D; ++c) {
      f32x8_att m;
      std::memcpy(&m, mt + c * ld + 8 * q, sizeof m);
      acc += x[c] * m;
    }
    std::memcpy(out + 8 * q, &acc, sizeof acc);
  }
}

// weighted_sum sets out[c] = Σ_j w[j]·m[j·D + c] over j < n, c < D: four
// partial sums, the k-th over j ≡ k (mod 4) in ascending j, added at the
// end as (s₀ + s₁) + (s₂ + s₃), so that four chains of multiply-adds run at
// once; eight channels at a time in registers, the last D mod 8 one at a
// time in the same order. A fixed order: the result does not depend on the
// thread count.
void weighted_sum(const float* w, const float* m, size_t n, size_t D, float* out) {
  const size_t n4 = n / 4 * 4;
  size_t c = 0;
  for (; c + 8 <= D; c += 8) {
    f32x8_att s[4] = {};
    for (size_t j = 0; j < n4; j += 4) {
      for (size_t k = 0; k < 4; ++k) {
        f32x8_att x;
        std::memcpy(&x, m + (j + k) * D + c, sizeof x);
        s[k] += w[j + k] * x;
      }
    }
    for (size_t j = n4; j < n; ++j) {
      f32x8_att x;
      std::memcpy(&x, m + j * D + c, sizeof x);
      s[j - n4] += w[j] * x;
    }
    const f32x8_att sum = (s[0] + s[1]) + (s[2] + s[3]);
    std::memcpy(out + c, &sum, sizeof sum);
  }
  for (; c < D; ++c) {
    float s[4] = {};
    for (size_t j = 0; j < n4; j += 4) {
      for (size_t k = 0; k < 4; ++k) s[k] += w[j + k] * m[(j + k) * D + c];
    }
    for (size_t j = n4; j < n; ++j) s[j - n4] += w[j] * m[j * D + c];
    out[c] = (s[0] + s[1]) + (s[2] + s[3]);
  }
}

// add_scaled sets y[c] += a·x[c] for c < D, eight at a time.
void add_scaled(float* y, float a, const float* x, size_t D) {
  size_t c = 0;
  for (; c + 8 <= D; c += 8) {
    f32x8_att vy, vx;
    std::memcpy(&vy, y + c, sizeof vy);
    std::memcpy(&vx, x + c, sizeof vx);
    vy += a * vx;
    std::memcpy(y + c, &vy, sizeof vy);
  }
  for (; c < D; ++c) y[c] += a * x[c];
}

// score_scale is α = 1/√D in binary32 (sqrtf and the division each round
// once).
float score_scale(size_t D) { return 1.0f / std::sqrt(static_cast<float>(D)); }

AttentionHeads heads_of(const Call& c, int b, int t, int ch, int h) {
  const size_t C = c.dim(ch), H = c.dim(h);
  return AttentionHeads{c.dim(b), c.dim(t), C, H, C / H};
}

// attention_rows computes query rows [r0, r1) of head h of sequence b; kt
// holds the head's keys 0..r1 − 1 transposed (kt[c·padded(r1) + j] =
// k_j[c]) and v its values (v[j·D + c]), in f32; scores has room for
// padded(r1) floats, q and acc for D.
void attention_rows(const AttentionHeads& a, const uint16_t* qkv, uint16_t* y, float* lse, size_t b, size_t h,
                    size_t r0, size_t r1, const float* kt, const float* v, float* scores, float* q, float* acc) {
  const size_t D = a.D;
  const float scale = score_scale(D);
  for (size_t i = r0; i < r1; ++i) {
    const size_t n = i + 1;
    f16_to_f32_run(a.row(qkv, 3 * a.C, 0, b, i, h), q, D);
    scores_of(q, kt, padded(r1), D, n, scores);
    for (size_t j = 0; j < n; ++j) scores[j] *= scale;
    const float row_max = max_of(scores, n);
    for (size_t j = 0; j < n; ++j) scores[j] -= row_max;
    exp_run(scores, n);
    const float sum = sum_of(scores, n);
    weighted_sum(scores, v, n, D, acc);
    for (size_t c = 0; c < D; ++c) acc[c] = acc[c] / sum;
    f32_to_f16_run(acc, a.row(y, a.C, 0, b, i, h), D);
    lse[(b * a.H + h) * a.T + i] = row_max + std::log(sum);
  }
}

// attention_grad_head computes dq, dk and dv of head h of sequence b. w
// holds grad_scratch(T, D) floats of the worker's scratch.
size_t grad_scratch(size_t T, size_t D) { return 7 * T * D + 2 * padded(T) * D + 3 * padded(T) + D; }

void attention_grad_head(const AttentionHeads& a, const uint16_t* dy, const uint16_t* qkv, const uint16_t* y,
                         const float* lse, uint16_t* dqkv, size_t b, size_t h, float* w) {
  const size_t T = a.T, D = a.D, size = T * D;
  float *q = w, *k = q + size, *v = k + size, *g = v + size, *yv = g + size;
  const size_t ld = padded(T);
  float *dk = yv + size, *dv = dk + size, *kt = dv + size, *vt = kt + ld * D;
  float *p = vt + ld * D, *ds = p + ld, *gv = ds + ld, *dq = gv + ld;
  a.load(qkv, 3 * a.C, 0, b, h, T, q);
  a.load(qkv, 3 * a.C, 1, b, h, T, k);
  a.load(qkv, 3 * a.C, 2, b, h, T, v);
  a.load_transposed(qkv, 3 * a.C, 1, b, h, T, dq, kt);
  a.load_transposed(qkv, 3 * a.C, 2, b, h, T, dq, vt);
  a.load(dy, a.C, 0, b, h, T, g);
  a.load(y, a.C, 0, b, h, T, yv);
  std::fill(dk, dk + 2 * size, 0.0f);  // dk and dv
  const float scale = score_scale(D);
  const float* head_lse = lse + (b * a.H + h) * T;
  for (size_t i = 0; i < T; ++i) {
    const float* qi = q + i * D;
    const float* gi = g + i * D;
    const float d = dot_of(gi, yv + i * D, D);
    const size_t keys = i + 1;
    scores_of(qi, kt, ld, D, keys, p);
    for (size_t j = 0; j < keys; ++j) p[j] = p[j] * scale - head_lse[i];
    exp_run(p, keys);
    scores_of(gi, vt, ld, D, keys, gv);
    for (size_t j = 0; j < keys; ++j) ds[j] = p[j] * (gv[j] - d);
    weighted_sum(ds, k, keys, D, dq);
    for (size_t j = 0; j < keys; ++j) {
      add_scaled(dk + j * D, ds[j], qi, D);
      add_scaled(dv + j * D, p[j], gi, D);
    }
    for (size_t c = 0; c < D; ++c) dq[c] *= scale;
    f32_to_f16_run(dq, a.row(dqkv, 3 * a.C, 0, b, i, h), D);
  }
  for (size_t e = 0; e < size; ++e) dk[e] *= scale;
  for (size_t t = 0; t < T; ++t) {
    f32_to_f16_run(dk + t * D, a.row(dqkv, 3 * a.C, 1, b, t, h), D);
    f32_to_f16_run(dv + t * D, a.row(dqkv, 3 * a.C, 2, b, t, h), D);
  }
}

}  // namespace

// The ops' entries (kernels.cc lists them). The scratch vectors are
// allocated here, before the fan-out, so that running out of memory
// surfaces on this thread (device.cc answers it as OUT_OF_MEMORY).
Result run_attention(const Call& c, uint64_t*) {
  using namespace op_attention;
  const AttentionHeads a = heads_of(c, param::B, param::T, param::C, param::H);
  const uint16_t* qkv = c.ptr<const uint16_t>(buf::qkv);
  uint16_t* y = c.ptr<uint16_t>(buf::y);
  float* lse = c.ptr<float>(buf::lse);
  ThreadPool& pool = cpu_pool();
  const size_t per_worker = 2 * padded(a.T) * a.D + padded(a.T) + 2 * a.D;
  std::vector<float> scratch(pool.size() * per_worker);
  const size_t units = a.B * a.H, blocks = (a.T + kQueryBlock - 1) / kQueryBlock;
  pool.parallel_for(units * blocks, [&](size_t task, unsigned worker) {
    const size_t unit = task % units, block = blocks - 1 - task / units;
    const size_t b = unit / a.H, h = unit % a.H;
    const size_t r0 = block * kQueryBlock, r1 = std::min(a.T, r0 + kQueryBlock);
    float* kt = scratch.data() + worker * per_worker;
    float* v = kt + padded(a.T) * a.D;
    float* scores = v + a.T * a.D;
    float* q = scores + padded(a.T);
    a.load_transposed(qkv, 3 * a.C, 1, b, h, r1, q, kt);
    a.load(qkv, 3 * a.C, 2, b, h, r1, v);
    attention_rows(a, qkv, y, lse, b, h, r0, r1, kt, v, scores, q, q + a.D);
  });
  return Result::OK();
}

Result run_attention_grad(const Call& c, uint64_t*) {
  using namespace op_attention_grad;
  const AttentionHeads a = heads_of(c, param::B, param::T, param::C, param::H);
  ThreadPool& pool = cpu_pool();
  const size_t per_worker = grad_scratch(a.T, a.D);
  std::vector<float> scratch(pool.size() * per_worker);
  pool.parallel_for(a.B * a.H, [&](size_t unit, unsigned worker) {
    attention_grad_head(a, c.ptr<const uint16_t>(buf::dy), c.ptr<const uint16_t>(buf::qkv),
                        c.ptr<const uint16_t>(buf::y), c.ptr<const float>(buf::lse), c.ptr<uint16_t>(buf::dqkv),
                        unit / a.H, unit % a.H, scratch.data() + worker * per_worker);
  });
  return Result::OK();
}

}  // namespace vkern
