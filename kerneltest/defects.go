package kerneltest

import (
	"bytes"
	"fmt"

	"github.com/vkern/vkern/kernels"
)

// The planted defects: real mistakes planted in the real kernel sources
// (Mutation, Plant). The root package's tests build a server with each and
// check that the verifier reports its op incorrect; package gpt's tests
// check that a whole training step's comparison with the float64 model
// fails too.

// CPUDefects are real defects planted in the real C++ kernels by editing
// their sources; each mutant server is built and verified, and must be
// reported incorrect. If the verifier is weakened so that one passes, this
// test fails. If a kernel is rewritten so that a snippet is gone, this test
// fails too, and the snippet must be updated to the new code.
var CPUDefects = []Mutation{
	{
		Name: "one output element left unwritten", File: "cpu/gemm.cc",
		Old: "c32_row[j] = value;", New: "if (row != 0 || col0 + j != 0) c32_row[j] = value;",
		Op: "gemm", Shapes: []string{"17x31x129"},
	},
	{
		Name: "f32 output rounded through f16", File: "cpu/gemm.cc",
		Old: "c32_row[j] = value;", New: "c32_row[j] = f16_to_f32(f32_to_f16(value));",
		Op: "gemm", Shapes: []string{"17x31x129"},
	},
	{
		Name: "last k term dropped", File: "cpu/gemm.cc",
		Old: "for (size_t k = 0; k < depth; ++k) {", New: "for (size_t k = 0; k + 1 < depth; ++k) {",
		Op: "gemm_grad_b", Shapes: []string{"17x31x129"},
	},
	{
		Name: "off-by-one row", File: "cpu/gemm.cc",
		Old: "const size_t row = row0 + i;", New: "const size_t row = row0 + i + 1 < out.rows ? row0 + i + 1 : row0 + i;",
		Op: "gemm_grad_a", Shapes: []string{"17x31x129"},
	},
	{
		Name: "max subtraction missing in softmax", File: "cpu/softmax.cc",
		Old: "std::exp(values[j] - row_max)", New: "std::exp(values[j])",
		Op: "softmax", Shapes: []string{"7x4099"},
	},
	{
		Name: "B used where Bᵀ belongs", File: "cpu/gemm.cc",
		Old: "const Operand rhs = Operand::transpose_of(b, N);", New: "const Operand rhs = Operand::row_major(b, K);",
		Op: "gemm_grad_a", Shapes: []string{"33x33x33"},
	},
	{
		Name: "A used where Aᵀ belongs", File: "cpu/gemm.cc",
		Old: "const Operand lhs = Operand::transpose_of(a, K);", New: "const Operand lhs = Operand::row_major(a, M);",
		Op: "gemm_grad_b", Shapes: []string{"33x33x33"},
	},
	{
		Name: "mean scale missing in cross_entropy", File: "cpu/cross_entropy.cc",
		Old: "const float scale = n > 0 ? static_cast<float>(grad_scale / static_cast<double>(n)) : 0.0f;", New: "const float scale = 1.0f;",
		Op: "cross_entropy", Shapes: []string{"7x4099"},
	},
	{
		Name: "off-by-one label in cross_entropy", File: "cpu/cross_entropy.cc",
		Old: "const size_t label = static_cast<size_t>(labels[r]);", New: "const size_t label = (static_cast<size_t>(labels[r]) + 1) % V;",
		Op: "cross_entropy", Shapes: []string{"7x4099"},
	},
	{
		Name: "ignore_index not honoured in cross_entropy", File: "cpu/cross_entropy.cc",
		Old: "if (labels[r] == ignore_index) {", New: "if (false) {",
		Op: "cross_entropy", Shapes: []string{"12x300:ignore_index=0"},
	},
	{
		Name: "ignored rows counted in cross_entropy's n", File: "cpu/cross_entropy.cc",
		Old: "if (label == ignore_index) continue;", New: "if (label == ignore_index) { ++n; continue; }",
		Op: "cross_entropy", Shapes: []string{"64x1000:ignore_index=-100"},
	},
	{
		Name: "max subtraction missing in cross_entropy", File: "cpu/cross_entropy.cc",
		Old: "std::exp(values[j] - row_max)", New: "std::exp(values[j])",
		Op: "cross_entropy", Shapes: []string{"7x4099"},
	},
	{
		Name: "one-hot added instead of subtracted in cross_entropy", File: "cpu/cross_entropy.cc",
		Old: "values[label] -= scale;", New: "values[label] += scale;",
		Op: "cross_entropy", Shapes: []string{"7x4099"},
	},
	{
		Name: "add subtracts b", File: "cpu/elementwise.cc",
		Old: "for (size_t i = 0; i < n; ++i) va[i] += vb[i];", New: "for (size_t i = 0; i < n; ++i) va[i] -= vb[i];",
		Op: "add", Shapes: []string{"4099"},
	},
	{
		Name: "add leaves the last element of a short run unwritten", File: "cpu/elementwise.cc",
		Old: "f32_to_f16_run(va, y + first, n);", New: "f32_to_f16_run(va, y + first, n - (n < kRun ? 1 : 0));",
		Op: "add", Shapes: []string{"4099"},
	},
	{
		Name: "gelu with x² where x³ belongs", File: "cpu/gelu.h",
		Old: "t[i] = kGeluC * (v[i] + kGeluK * v[i] * v[i] * v[i]);", New: "t[i] = kGeluC * (v[i] + kGeluK * v[i] * v[i]);",
		Op: "gelu", Shapes: []string{"4099"},
	},
	{
		Name: "gelu with erf where the tanh approximation belongs", File: "cpu/gelu.h",
		Old: "v[i] = 0.5f * v[i] * (1.0f + t[i]);", New: "v[i] = 0.5f * v[i] * (1.0f + std::erf(v[i] * 0.70710678f));",
		Op: "gelu", Shapes: []string{"4099", "65536"},
	},
	{
		Name: "gelu_grad with 1 − T where 1 − T² belongs", File: "cpu/gelu.h",
		Old: "const float sech2 = 1.0f - T[i] * T[i];", New: "const float sech2 = 1.0f - T[i];",
		Op: "gelu_grad", Shapes: []string{"4099"},
	},
	{
		Name: "fill leaves the last element unwritten", File: "cpu/fill.cc",
		Old: "std::fill(y + chunk * kChunk, y + std::min(n, (chunk + 1) * kChunk), v);", New: "std::fill(y + chunk * kChunk, y + std::min(n - 1, (chunk + 1) * kChunk), v);",
		Op: "fill", Shapes: []string{"4099"},
	},
	{
		Name: "fill writes only its first chunk", File: "cpu/fill.cc",
		Old: "cpu_pool().parallel_for((n + kChunk - 1) / kChunk, [&](size_t chunk, unsigned) {",
		New: "cpu_pool().parallel_for(1, [&](size_t chunk, unsigned) {",
		Op:  "fill", Shapes: []string{"1000003:value=0.1"},
	},
	{
		Name: "gelu_grad without the ½ of its first term", File: "cpu/gelu.h",
		Old: "x[i] = dy[i] * (0.5f * (1.0f + T[i]) + 0.5f * x[i] * sech2 * inner);", New: "x[i] = dy[i] * ((1.0f + T[i]) + 0.5f * x[i] * sech2 * inner);",
		Op: "gelu_grad", Shapes: []string{"4099"},
	},
	{
		Name: "layernorm's variance as E[x²], the mean not subtracted", File: "cpu/layernorm.cc",
		Old: "const float variance = dot_of(values, values, cols) / n;", New: "const float variance = dot_of(values, values, cols) / n + m * m;",
		Op: "layernorm", Shapes: []string{"7x769", "64x768"},
	},
	{
		Name: "layernorm's eps outside the square root", File: "cpu/layernorm.cc",
		Old: "const float s = 1.0f / std::sqrt(variance + eps);", New: "const float s = 1.0f / (std::sqrt(variance) + eps);",
		Op: "layernorm", Shapes: []string{"7x769", "64x768"},
	},
	{
		Name: "layernorm with w and b swapped", File: "cpu/layernorm.cc",
		Old: "values[j] = values[j] * s * w[j] + b[j];", New: "values[j] = values[j] * s * b[j] + w[j];",
		Op: "layernorm", Shapes: []string{"7x769"},
	},
	{
		Name: "layernorm_grad's dx without the x̂·mean(g⊙x̂) term", File: "cpu/layernorm.cc",
		Old: "g[j] = (g[j] - g_mean - xhat[j] * gx_mean) * rstd;", New: "g[j] = (g[j] - g_mean) * rstd;",
		Op: "layernorm_grad", Shapes: []string{"7x769", "64x768"},
	},
	{
		Name: "layernorm_grad's db overwritten instead of added into", File: "cpu/layernorm.cc",
		Old: "std::copy(db + first, db + first + n, sum_b);", New: "std::fill(sum_b, sum_b + n, 0.0f);",
		Op: "layernorm_grad", Shapes: []string{"7x769", "64x768"},
	},
	{
		Name: "layernorm_grad's dw from dy·x where dy·x̂ belongs", File: "cpu/layernorm.cc",
		Old: "sum_w[j] += dy_values[j] * ((x_values[j] - mean[r]) * rstd[r]);", New: "sum_w[j] += dy_values[j] * x_values[j];",
		Op: "layernorm_grad", Shapes: []string{"7x769", "64x768"},
	},
	{
		Name: "layernorm_grad adds its residual twice", File: "cpu/layernorm.cc",
		Old: "for (size_t j = 0; j < cols; ++j) g[j] = xhat[j] + g[j];", New: "for (size_t j = 0; j < cols; ++j) g[j] = 2 * xhat[j] + g[j];",
		Op: "layernorm_grad", Shapes: []string{"7x769:residual=1", "64x768:residual=1"},
	},
	{
		Name: "layernorm_grad ignores its residual", File: "cpu/layernorm.cc",
		Old: "const uint16_t* res = c.dim(param::residual) == 1 ? c.ptr<const uint16_t>(buf::r) : nullptr;",
		New: "const uint16_t* res = nullptr;",
		Op:  "layernorm_grad", Shapes: []string{"7x769:residual=1", "64x768:residual=1"},
	},
	{
		Name: "layernorm_grad's dxs sums the gradient without the residual", File: "cpu/layernorm.cc",
		Old: "  if (res != nullptr) {\n    f16_to_f32_run(res, xhat, cols);\n    for (size_t j = 0; j < cols; ++j) g[j] = xhat[j] + g[j];\n  }\n  if (sum != nullptr) {\n    for (size_t j = 0; j < cols; ++j) sum[j] += g[j];\n  }",
		New: "  if (sum != nullptr) {\n    for (size_t j = 0; j < cols; ++j) sum[j] += g[j];\n  }\n  if (res != nullptr) {\n    f16_to_f32_run(res, xhat, cols);\n    for (size_t j = 0; j < cols; ++j) g[j] = xhat[j] + g[j];\n  }",
		Op:  "layernorm_grad", Shapes: []string{"64x768:residual=1,dx_sum=1"},
	},
	{
		Name: "layernorm_grad's dxs overwritten instead of added into", File: "cpu/layernorm.cc",
		Old: "      float s = dxs[j];", New: "      float s = 0.0f;",
		Op: "layernorm_grad", Shapes: []string{"7x769:dx_sum=1", "64x768:residual=1,dx_sum=1"},
	},
	{
		Name: "layernorm_grad's dxs leaves out the last group of rows", File: "cpu/layernorm.cc",
		Old: "for (size_t p = 0; p < groups; ++p) s += partials[p * C + j];", New: "for (size_t p = 0; p + 1 < groups; ++p) s += partials[p * C + j];",
		Op: "layernorm_grad", Shapes: []string{"70x8200:dx_sum=1"},
	},
	{
		Name: "global_norm sums in f32", File: "cpu/global_norm.cc",
		Old: "double lanes[kLanes] = {};", New: "float lanes[kLanes] = {};",
		Op: "global_norm", Shapes: []string{"4099", "65536", "1000003"},
	},
	{
		Name: "global_norm counts only NaN as non-finite", File: "cpu/global_norm.cc",
		Old: "return (bits & 0x7f800000u) == 0x7f800000u;", New: "return (bits & 0x7fffffffu) > 0x7f800000u;",
		Op: "global_norm", Shapes: []string{"4099"},
	},
	{
		Name: "global_norm drops the last element of a chunk's tail", File: "cpu/global_norm.cc",
		Old: "for (size_t k = 0; i < n; ++i, ++k) {", New: "for (size_t k = 0; i + 1 < n; ++i, ++k) {",
		Op: "global_norm", Shapes: []string{"7", "4099"},
	},
	{
		Name: "global_norm keeps only the last chunk's sum", File: "cpu/global_norm.cc",
		Old: "sum += p.sumsq;", New: "sum = p.sumsq;",
		Op: "global_norm", Shapes: []string{"1000003"},
	},
	{
		Name: "adamw without the bias corrections", File: "core/adamw.h",
		Old: "s.step_size = static_cast<float>(lr / correction(beta1, t));\n  s.root2 = static_cast<float>(std::sqrt(correction(beta2, t)));",
		New: "s.step_size = static_cast<float>(lr);\n  s.root2 = 1.0f;",
		Op:  "adamw", Shapes: []string{"4099"},
	},
	{
		Name: "adamw with L2 weight decay on the gradient (Adam) instead of decoupled decay", File: "cpu/adamw.cc",
		Old: "const float g = grad * s.scale;\n  const float decayed = p * s.decay;",
		New: "const float g = grad * s.scale + 0.01f * p;  // weight_decay = 0.01\n  const float decayed = p;",
		Op:  "adamw", Shapes: []string{"4099"},
	},
	{
		Name: "adamw with v where m belongs in the update", File: "cpu/adamw.cc",
		Old: "p = decayed - s.step_size * (m / denom);", New: "p = decayed - s.step_size * (v / denom);",
		Op: "adamw", Shapes: []string{"4099"},
	},
	{
		Name: "adamw with eps inside the square root", File: "cpu/adamw.cc",
		Old: "const float denom = std::sqrt(v) / s.root2 + s.eps;", New: "const float denom = std::sqrt(v / (s.root2 * s.root2) + s.eps);",
		Op: "adamw", Shapes: []string{"4099", "65536:eps=1e-3,beta1=0.5,beta2=0.95,t=3"},
	},
	{
		Name: "adamw with β2 for the first moment", File: "cpu/adamw.cc",
		Old: "m = s.beta1 * m + s.keep1 * g;", New: "m = s.beta2 * m + s.keep2 * g;",
		Op: "adamw", Shapes: []string{"4099"},
	},
	{
		Name: "adamw writes param16 from the old param", File: "cpu/adamw.cc",
		Old: "fresh[i] = step(s, p[e], grad[e], m[e], v[e]);", New: "fresh[i] = p[e];\n        step(s, p[e], grad[e], m[e], v[e]);",
		Op: "adamw", Shapes: []string{"4099"},
	},
	{
		Name: "adamw without grad_scale", File: "cpu/adamw.cc",
		Old: "const float g = grad * s.scale;", New: "const float g = grad;",
		Op: "adamw", Shapes: []string{"4099:t=1000,weight_decay=0.1,lr=6e-4,grad_scale=3.0517578125e-05"},
	},
	{
		Name: "attention's causal mask per block of rows, not per row", File: "cpu/attention.cc",
		Old: "const size_t n = i + 1;", New: "const size_t n = r1;",
		Op: "attention", Shapes: []string{"2x17x24x3", "1x64x64x4"},
	},
	{
		Name: "attention's scores scaled by 1/D where 1/√D belongs", File: "cpu/attention.cc",
		Old: "return 1.0f / std::sqrt(static_cast<float>(D));", New: "return 1.0f / static_cast<float>(D);",
		Op: "attention", Shapes: []string{"2x17x24x3"},
	},
	{
		Name: "attention's lse without the row max", File: "cpu/attention.cc",
		Old: "lse[(b * a.H + h) * a.T + i] = row_max + std::log(sum);", New: "lse[(b * a.H + h) * a.T + i] = std::log(sum);",
		Op: "attention", Shapes: []string{"2x17x24x3"},
	},
	{
		Name: "attention with k and v swapped", File: "cpu/attention.cc",
		Old: "a.load_transposed(qkv, 3 * a.C, 1, b, h, r1, q, kt);\n    a.load(qkv, 3 * a.C, 2, b, h, r1, v);",
		New: "a.load_transposed(qkv, 3 * a.C, 2, b, h, r1, q, kt);\n    a.load(qkv, 3 * a.C, 1, b, h, r1, v);",
		Op:  "attention", Shapes: []string{"2x17x24x3"},
	},
	{
		Name: "attention reads head 0's columns for every head", File: "cpu/attention.cc",
		Old: "return m + (b * T + t) * width + part * C + h * D;", New: "return m + (b * T + t) * width + part * C;",
		Op: "attention", Shapes: []string{"2x17x24x3"},
	},
	{
		Name: "attention_grad's dk without the scale", File: "cpu/attention.cc",
		Old: "for (size_t e = 0; e < size; ++e) dk[e] *= scale;", New: "",
		Op: "attention_grad", Shapes: []string{"2x17x24x3"},
	},
	{
		Name: "attention_grad's D over half the head's columns", File: "cpu/attention.cc",
		Old: "const float d = dot_of(gi, yv + i * D, D);", New: "const float d = dot_of(gi, yv + i * D, D - D / 2);",
		Op: "attention_grad", Shapes: []string{"2x17x24x3"},
	},
	{
		Name: "attention_grad without the causal mask", File: "cpu/attention.cc",
		Old: "const size_t keys = i + 1;", New: "const size_t keys = T;",
		Op: "attention_grad", Shapes: []string{"2x17x24x3"},
	},
	{
		Name: "attention_grad's dv from dS where P belongs", File: "cpu/attention.cc",
		Old: "add_scaled(dv + j * D, p[j], gi, D);", New: "add_scaled(dv + j * D, ds[j], gi, D);",
		Op: "attention_grad", Shapes: []string{"2x17x24x3"},
	},
	// The f16 output rounding: the scalar conversion (the GEMMs' outputs)
	// and the eight-lane one (the row ops'), each rounded half away from
	// zero, which differs from ties-to-even only on exact ties, and toward
	// zero.
	{
		Name: "f16 outputs rounded half away from zero (scalar conversion)", File: "core/f16.h",
		Old: "const uint32_t normal = (rebiased + 0x0fffu + ((rebiased >> 13) & 1u)) >> 13;",
		New: "const uint32_t normal = (rebiased + 0x1000u) >> 13;",
		Op:  "gemm_grad_a", Shapes: []string{"17x31x129"},
	},
	{
		Name: "f16 outputs rounded toward zero (scalar conversion)", File: "core/f16.h",
		Old: "const uint32_t normal = (rebiased + 0x0fffu + ((rebiased >> 13) & 1u)) >> 13;",
		New: "const uint32_t normal = rebiased >> 13;",
		// Seven columns: every output row is a run's scalar tail.
		Op: "gemm_grad_b", Shapes: []string{"4100x7x40"},
	},
	{
		Name: "f16 outputs rounded half away from zero (eight-lane conversion)", File: "cpu/convert.h",
		Old: "const u32x8 normal = (rebiased + 0x0fffu + ((rebiased >> 13) & 1u)) >> 13;",
		New: "const u32x8 normal = (rebiased + 0x1000u) >> 13;",
		Op:  "softmax_grad", Shapes: []string{"64x1000"},
	},
	{
		Name: "f16 outputs rounded toward zero (eight-lane conversion)", File: "cpu/convert.h",
		Old: "const u32x8 normal = (rebiased + 0x0fffu + ((rebiased >> 13) & 1u)) >> 13;",
		New: "const u32x8 normal = rebiased >> 13;",
		Op:  "softmax", Shapes: []string{"64x1000"},
	},
	{
		Name: "embedding's wpe row from p / B where p mod T belongs", File: "cpu/embedding.cc",
		Old: "const size_t t = p % T;", New: "const size_t t = p / (N / T);",
		Op: "embedding", Shapes: []string{"2x5x7x11", "4x64x64x256"},
	},
	{
		Name: "embedding's token id off by one", File: "cpu/embedding.cc",
		Old: "const uint16_t* token_row = wte + static_cast<size_t>(id) * C;", New: "const uint16_t* token_row = wte + static_cast<size_t>(id + 1) % V * C;",
		Op: "embedding", Shapes: []string{"2x5x7x11", "4x64x64x256"},
	},
	{
		Name: "embedding without wpe", File: "cpu/embedding.cc",
		Old: "for (size_t i = 0; i < n; ++i) sum[i] += position[i];", New: "(void)position;",
		Op: "embedding", Shapes: []string{"2x5x7x11"},
	},
	{
		Name: "embedding_grad's dwpe summed over rows t·B + b", File: "cpu/embedding.cc",
		Old: "accumulate(dwpe + t * C + first, dx + (b * T + t) * C + first, n);", New: "accumulate(dwpe + t * C + first, dx + (t * B + b) * C + first, n);",
		Op: "embedding_grad", Shapes: []string{"2x5x7x11", "4x64x64x256"},
	},
	{
		Name: "embedding_grad drops the last position from dwte", File: "cpu/embedding.cc",
		Old: "for (size_t p = 0; p < N; ++p) {", New: "for (size_t p = 0; p + 1 < N; ++p) {",
		Op: "embedding_grad", Shapes: []string{"2x5x7x11", "4x64x64x256"},
	},
	{
		Name: "embedding_grad overwrites dwte instead of adding into it", File: "cpu/embedding.cc",
		Old: "accumulate(dwte + static_cast<size_t>(id) * C + first, dx + p * C + first, n);",
		New: "f16_to_f32_run(dx + p * C + first, dwte + static_cast<size_t>(id) * C + first, n);",
		Op:  "embedding_grad", Shapes: []string{"2x5x7x11", "4x64x64x256"},
	},
	// linear's bias, linear_nt's layout and bias, linear_grad_w's
	// accumulation and bias_grad's column sums.
	{
		Name: "linear's bias skipped when the depth is one block", File: "cpu/gemm.cc",
		Old: "if (out.bias != nullptr) value += bias[j];\n        values[j] = value;",
		New: "if (out.bias != nullptr && !first_block) value += bias[j];\n        values[j] = value;",
		Op:  "linear", Shapes: []string{"17x31x129"},
	},
	{
		Name: "linear's bias added twice", File: "cpu/gemm.cc",
		Old: "if (out.bias != nullptr) value += bias[j];\n        values[j] = value;",
		New: "if (out.bias != nullptr) value += bias[j] + bias[j];\n        values[j] = value;",
		Op:  "linear", Shapes: []string{"17x31x129"},
	},
	{
		Name: "linear's bias indexed by the row", File: "cpu/gemm.cc",
		Old: "if (last_block && out.bias != nullptr) f16_to_f32_run(out.bias + col0, bias, nr);",
		New: "if (last_block && out.bias != nullptr) f16_to_f32_run(out.bias + std::min(row0, out.cols - nr), bias, nr);",
		Op:  "linear", Shapes: []string{"17x31x129", "64x48x80"},
	},
	{
		Name: "linear_nt with W where Wᵀ belongs", File: "cpu/gemm.cc",
		Old: "product(pool, scratch, Operand::row_major(x, K), Operand::transpose_of(w, K), M, N, K, out);",
		New: "product(pool, scratch, Operand::row_major(x, K), Operand::row_major(w, N), M, N, K, out);",
		Op:  "linear_nt", Shapes: []string{"17x31x129", "33x33x33"},
	},
	{
		Name: "linear_nt's Wᵀ read with W's row length N where K belongs", File: "cpu/gemm.cc",
		Old: "product(pool, scratch, Operand::row_major(x, K), Operand::transpose_of(w, K), M, N, K, out);",
		New: "product(pool, scratch, Operand::row_major(x, K), Operand::transpose_of(w, N), M, N, K, out);",
		Op:  "linear_nt", Shapes: []string{"17x31x129"},
	},
	{
		Name: "linear_nt's bias skipped", File: "cpu/gemm.cc",
		Old: "  out.bias = b;\n  product(pool, scratch, Operand::row_major(x, K), Operand::transpose_of(w, K),",
		New: "  out.bias = nullptr;\n  (void)b;\n  product(pool, scratch, Operand::row_major(x, K), Operand::transpose_of(w, K),",
		Op:  "linear_nt", Shapes: []string{"17x31x129", "64x48x80"},
	},
	{
		Name: "linear_grad_w overwrites dW when it should add", File: "cpu/gemm.cc",
		Old: "if (out.accumulate) value = c32_row[j] + value;", New: "",
		Op: "linear_grad_w", Shapes: []string{"17x31x129"},
	},
	{
		Name: "linear_grad_w adds into dW when it should overwrite", File: "cpu/gemm.cc",
		Old: "c.dim(param::accumulate) == 1);", New: "true);",
		Op: "linear_grad_w", Shapes: []string{"17x31x129:accumulate=0"},
	},
	{
		Name: "linear_grad_w's db without dy's last row", File: "cpu/gemm.cc",
		Old: "add_column_sums(c.ptr<const uint16_t>(buf::dy), c.ptr<float>(buf::db), c.dim(param::M), c.dim(param::N));",
		New: "add_column_sums(c.ptr<const uint16_t>(buf::dy), c.ptr<float>(buf::db), c.dim(param::M) - 1, c.dim(param::N));",
		Op:  "linear_grad_w", Shapes: []string{"70x33x40:bias=1"},
	},
	{
		Name: "linear_grad_w's db from x's columns", File: "cpu/gemm.cc",
		Old: "add_column_sums(c.ptr<const uint16_t>(buf::dy), c.ptr<float>(buf::db), c.dim(param::M), c.dim(param::N));",
		New: "add_column_sums(c.ptr<const uint16_t>(buf::x), c.ptr<float>(buf::db), c.dim(param::M), c.dim(param::N));",
		Op:  "linear_grad_w", Shapes: []string{"70x33x33:bias=1"},
	},
	{
		Name: "linear_grad_w with x where xᵀ belongs", File: "cpu/gemm.cc",
		Old: "product(pool, scratch, Operand::transpose_of(x, K), Operand::row_major(dy, N), K, N, M, out);",
		New: "product(pool, scratch, Operand::row_major(x, M), Operand::row_major(dy, N), K, N, M, out);",
		Op:  "linear_grad_w", Shapes: []string{"33x33x33"},
	},
	// The GELU epilogues: linear's forward (pre and gelu of it) and
	// linear_grad_x's gelu′.
	{
		Name: "linear's GELU stores gelu of the sum as pre too", File: "cpu/gemm.cc",
		Old: "f32_to_f16_run(values, out.pre_out + at, nr);\n        gelu_run(values, nr);",
		New: "gelu_run(values, nr);\n        f32_to_f16_run(values, out.pre_out + at, nr);",
		Op:  "linear", Shapes: []string{"17x31x129:gelu=1", "33x70x40:gelu=1"},
	},
	{
		Name: "linear's GELU applied before the bias", File: "cpu/gemm.cc",
		Old: "if (out.bias != nullptr) value += bias[j];\n        values[j] = value;\n      }\n      const size_t at",
		New: "values[j] = value;\n      }\n      if (out.pre_out != nullptr) gelu_run(values, nr);\n      for (size_t j = 0; j < nr; ++j) if (out.bias != nullptr) values[j] += bias[j];\n      const size_t at",
		Op:  "linear", Shapes: []string{"17x31x129:gelu=1", "33x70x40:gelu=1"},
	},
	{
		Name: "linear's residual left out", File: "cpu/gemm.cc",
		Old: "for (size_t j = 0; j < nr; ++j) values[j] += r[j];", New: "",
		Op: "linear", Shapes: []string{"17x31x129:residual=1", "33x70x40:residual=1"},
	},
	{
		Name: "linear's residual read from the row's first columns", File: "cpu/gemm.cc",
		Old: "f16_to_f32_run(out.residual + at, r, nr);", New: "f16_to_f32_run(out.residual + row * out.cols, r, nr);",
		Op: "linear", Shapes: []string{"17x31x129:residual=1", "33x70x40:residual=1"},
	},
	{
		Name: "linear_grad_x multiplies by gelu(pre) where gelu′(pre) belongs", File: "cpu/gemm.cc",
		Old: "gelu_grad_run(pre, values, nr);  // pre becomes values·gelu′(pre)\n        result = pre;",
		New: "gelu_run(pre, nr);\n        for (size_t j = 0; j < nr; ++j) values[j] *= pre[j];",
		Op:  "linear_grad_x", Shapes: []string{"17x31x129:gelu=1", "64x48x80:gelu=1"},
	},
	{
		Name: "linear_grad_x ignores its gelu switch", File: "cpu/gemm.cc",
		Old: "const uint16_t* pre = c.dim(param::gelu) == 1 ? c.ptr<const uint16_t>(buf::pre) : nullptr;",
		New: "const uint16_t* pre = nullptr;",
		Op:  "linear_grad_x", Shapes: []string{"17x31x129:gelu=1", "3x1000x5:gelu=1"},
	},
	{
		Name: "linear_grad_x's gelu′ read from the row's first pre-activations", File: "cpu/gemm.cc",
		Old: "f16_to_f32_run(out.pre_in + at, pre, nr);",
		New: "f16_to_f32_run(out.pre_in + row * out.cols, pre, nr);",
		Op:  "linear_grad_x", Shapes: []string{"17x31x129:gelu=1", "64x48x80:gelu=1"},
	},
	{
		Name: "bias_grad drops the last row", File: "cpu/bias_grad.cc",
		Old: "for (size_t i = b0 + 1; i < b1; ++i) {", New: "for (size_t i = b0 + 1; i < std::min(b1, rows - 1); ++i) {",
		Op: "bias_grad", Shapes: []string{"1000x64", "7x4099"},
	},
	{
		Name: "bias_grad overwrites db when it should add", File: "cpu/bias_grad.cc",
		Old: "db[j0 + j] = db[j0 + j] + total[j];", New: "db[j0 + j] = total[j];",
		Op: "bias_grad", Shapes: []string{"1000x64"},
	},
	{
		Name: "bias_grad loses the first block's sum", File: "cpu/bias_grad.cc",
		Old: "total[j] = b0 == 0 ? block[j] : total[j] + block[j];", New: "total[j] = b0 == 0 ? 0.0f : total[j] + block[j];",
		Op: "bias_grad", Shapes: []string{"1000x64"},
	},
}

// shiftChosen turns the Hopper GEMM's shifting producer on (it runs only
// where VKERN_GEMM_SHIFT=1 otherwise), for the defects planted in it.
var shiftChosen = []Edit{{
	Old: `vkern_env::on_off("VKERN_GEMM_SHIFT", false);`,
	New: `true;`,
}}

// fusedDBChosen sends linear_grad_w's db to the Hopper kernel's column
// sums (kSums; it runs only where VKERN_GEMM_FUSED_DB=1 otherwise), for
// the defects planted in them.
var fusedDBChosen = []Edit{{
	File: "cuda/linear_grad.cu",
	Old:  `vkern_env::on_off("VKERN_GEMM_FUSED_DB", false);`,
	New:  `true;`,
}}

// fusedDBOff keeps linear_grad_w's db on bias_grad's kernel after the
// product whatever VKERN_GEMM_FUSED_DB says, for the defects planted in
// that way.
var fusedDBOff = []Edit{{
	Old: `vkern_env::on_off("VKERN_GEMM_FUSED_DB", false);`,
	New: `false;`,
}}

// depthClassesOff, an edit of gemm.cuh, sends an MN-major L whose depth
// rows are not aligned to the padded copy (as VKERN_GEMM_DEPTH_CLASSES=0
// does), for the defects planted in that path, which the depth's row
// classes otherwise take.
var depthClassesOff = []Edit{{
	Old: `if (only_l && h::depth_classes_chosen() &&`,
	New: `if (only_l && false &&`,
}}

// CUDADefects plant the cpu suite's kinds of defect in the CUDA kernels.
// On a Hopper GPU every GEMM whose operands are 16-byte aligned runs the
// TMA + wgmma kernels of gemm_sm90.cu, so the defects in gemm.cuh's mma.sync
// kernels run at shapes with a row length that is not a multiple of 8 (81,
// 47), and the Hopper kernels get defects of their own at aligned shapes.
var CUDADefects = []Mutation{
	{
		Name: "output elements left unwritten", File: "cuda/gemm.cuh",
		Old: "if (row < rows) store_pair(out, row, col, cols, pairs_aligned, acc[i][j][0], acc[i][j][1]);",
		New: "if (row < rows && (row | col) != 0) store_pair(out, row, col, cols, pairs_aligned, acc[i][j][0], acc[i][j][1]);",
		Op:  "gemm", Shapes: []string{"64x48x81"},
	},
	{
		Name: "f32 output rounded through f16", File: "cuda/gemm.cuh",
		Old: "*reinterpret_cast<float2*>(p) = make_float2(v0, v1);",
		New: "*reinterpret_cast<float2*>(p) = make_float2(__half2float(__float2half_rn(v0)), __half2float(__float2half_rn(v1)));",
		Op:  "gemm", Shapes: []string{"64x48x81"},
	},
	{
		Name: "last k term dropped", File: "cuda/gemm.cu",
		Old: "return vkern_gemm::product<true, false>(A, K, B, N, C, M, N, K, s);",
		New: "return vkern_gemm::product<true, false>(A, K, B, N, C, M, N, K > 1 ? K - 1 : K, s);",
		Op:  "gemm", Shapes: []string{"17x31x129"},
	},
	{
		Name: "off-by-one row", File: "cuda/gemm.cuh",
		Old: "const int64_t row = m0 + warp_m + i * 16 + (lane >> 2);",
		New: "const int64_t row = m0 + warp_m + i * 16 + (lane >> 2) + (m0 + warp_m + i * 16 + (lane >> 2) + 9 < rows ? 1 : 0);",
		Op:  "gemm_grad_a", Shapes: []string{"64x47x80"},
	},
	{
		Name: "Hopper: each depth step's first 16-deep slice dropped", File: "cuda/gemm_sm90.cu",
		Old: "desc_r0 + stage_off + (kk * kRStep >> 4), k > 0 || kk > 0);",
		New: "desc_r0 + stage_off + (kk * kRStep >> 4), k > 0 || kk > 1);",
		Op:  "gemm", Shapes: []string{"64x48x80"},
	},
	{
		Name: "Hopper: the last row of an edge tile never stored", File: "cuda/gemm_sm90.cu",
		Old: "if (r >= rows) continue;", New: "if (r >= rows - 1) continue;",
		Op: "gemm_grad_b", Shapes: []string{"64x48x80"},
	},
	{
		Name: "Hopper: R's transpose bit flipped", File: "cuda/gemm_sm90.cu",
		Old: "wgmma<BN, kLDepth ? 0 : 1, kRDepth ? 0 : 1>(", New: "wgmma<BN, kLDepth ? 0 : 1, kRDepth ? 1 : 0>(",
		Op: "gemm_grad_a", Shapes: []string{"64x64x64"},
	},
	{
		Name: "Hopper: staged f32 epilogue reads with the wrong swizzle", File: "cuda/gemm_sm90.cu",
		Old: "return r * 128 + ((lane % 8) ^ vkern_staged::swizzle<kHalf>(r)) * 16;",
		New: "return r * 128 + ((lane % 8) ^ (kHalf ? vkern_staged::swizzle<kHalf>(r) : ((r & 1) << 1))) * 16;",
		Op:  "gemm", Shapes: []string{"256x256x64"},
	},
	// The staged store of f16 rows that do not start 16-byte aligned
	// (staged_store.cuh): dx of linear_grad_x 1001 halves wide, its
	// operands aligned, past the padding threshold, so the Hopper kernels
	// take it.
	{
		Name: "Hopper: unaligned f16 rows, each row chunk's last half never stored", File: "cuda/staged_store.cuh",
		Old: "const int h = j < 8 - d ? j : 56 + j;", New: "const int h = j < 8 - d ? j : 55 + j;",
		Op: "linear_grad_x", Shapes: []string{"4096x264x1001"},
	},
	{
		Name: "Hopper: unaligned f16 rows gathered through the next row's swizzle", File: "cuda/staged_store.cuh",
		Old: "const int sw = swizzle<true>(r);", New: "const int sw = swizzle<true>(r + 1);",
		Op: "linear_grad_x", Shapes: []string{"4096x264x1001"},
	},
	// The shifting producer (row_shift.cuh): linear's x and linear_grad_w's
	// x with an odd row length, the other operand aligned, past the padding
	// threshold, so WideS3 reads them in place.
	{
		Name: "Hopper shifting producer: rows placed without their class's shift", File: "cuda/gemm_sm90.cu",
		Old: "vkern_shift::shift_units(a, b, shift, v);", New: "vkern_shift::shift_units(a, b, 0, v);",
		Op: "linear", Shapes: []string{"16390x520x1001"}, Setup: shiftChosen,
	},
	{
		Name: "Hopper shifting producer: each tile's raw rows copied one depth step behind", File: "cuda/gemm_sm90.cu",
		Old: "copy_raw(ahead_u, ahead_k, ahead_q++);",
		New: "copy_raw(ahead_u, ahead_k > 0 ? ahead_k - 1 : 0, ahead_q++);",
		Op:  "linear_grad_w", Shapes: []string{"4096x512x16385"}, Setup: shiftChosen,
	},
	// The class tiles (gemm_sm90.cu, kOutClass): linear_nt's f16 output
	// with an odd row length, past the padding threshold, so WideS writes
	// it in class tiles.
	{
		Name: "Hopper class tiles: W's rows read without the class's shift", File: "cuda/gemm_sm90.cu",
		Old: "          n0 -= maps_shift.shift[c];\n        }\n        for (int64_t k = 0; k < steps; ++k) {",
		New: "        }\n        for (int64_t k = 0; k < steps; ++k) {",
		Op:  "linear_nt", Shapes: []string{"4096x1001x512"},
	},
	{
		// One row of the class late, not one class off: another class's
		// rows start at another shift, where the 16-byte stores would fault
		// (a failed run, not an incorrect one: call 1 of
		// docs/lm-head-class-tiles-h100).
		Name: "Hopper class tiles: the epilogue's rows one row of their class late", File: "cuda/gemm_sm90.cu",
		Old: "m0 = um / vkern_shift::kClasses * kClassRows + c;",
		New: "m0 = um / vkern_shift::kClasses * kClassRows + c + vkern_shift::kClasses;",
		Op:  "linear_nt", Shapes: []string{"4096x1001x512"},
	},
	// L in row classes (gemm_sm90.cu, Tiles::kClassL): linear's x with an
	// odd row length, W and the output aligned, past the padding threshold,
	// so WideSR builds its A fragments from the classes' raw boxes.
	{
		Name: "Hopper row classes of L: the odd shifts' pairs taken from one word", File: "cuda/gemm_sm90.cu",
		Old: "if (shift % 2 != 0) a_select = 0x5432u;", New: "(void)shift;",
		Op: "linear", Shapes: []string{"16390x520x1001"},
	},
	{
		Name: "Hopper row classes of L: a warp's fragments from the next class's box", File: "cuda/gemm_sm90.cu",
		Old: "a_offset = q * WideSR::kClassBoxBytes +",
		New: "a_offset = (q + 1) % vkern_shift::kClasses * WideSR::kClassBoxBytes +",
		Op:  "linear", Shapes: []string{"16390x520x1001"},
	},
	{
		// WideSR runs in clusters of 2, each block multicasting half of a
		// stage's R to both: the only clustered kernel the dispatcher
		// picks by default.
		Name: "Hopper row classes of L: both blocks of a cluster multicast R's first half", File: "cuda/gemm_sm90.cu",
		Old: "tma_load_multicast(dst, &map_r, full, n0 + 64 * b, p0 + rank * kShare, (1u << kCluster) - 1);",
		New: "tma_load_multicast(dst, &map_r, full, n0 + 64 * b, p0, (1u << kCluster) - 1);",
		Op:  "linear", Shapes: []string{"16390x520x1001"},
	},
	// The padded copy (gemm.cuh, pad_rows) of large products whose rows
	// are not 16-byte aligned: gemm with A's and B's rows an odd length,
	// and linear_grad_w's MN-major x with the depth's row classes off.
	{
		// The last element of an odd-length row is the low half of its
		// pair, so the mutation is on lo: on hi it changed nothing at
		// 1025 (call 2 of docs/bias-grad-h100).
		Name: "pad_rows loses each row's last element", File: "cuda/gemm.cuh",
		Old: "const uint32_t lo = c0 + e < cols ? __ldg(from + e) : 0u;",
		New: "const uint32_t lo = c0 + e + 1 < cols ? __ldg(from + e) : 0u;",
		Op:  "gemm", Shapes: []string{"1024x1025x1025"},
	},
	{
		Name: "pad_rows copies every row from the row before", File: "cuda/gemm.cuh",
		Old: "reinterpret_cast<const unsigned short*>(src) + r * cols + c0;",
		New: "reinterpret_cast<const unsigned short*>(src) + (r > 0 ? r - 1 : 0) * cols + c0;",
		Op:  "linear_grad_w", Shapes: []string{"1024x520x4097"}, Setup: depthClassesOff,
	},
	// WideS192's 128 × 192 tiles (gemm_sm90.cu; gemm.cuh, bn192_pays):
	// a weight gradient of 768 rows and 3072 columns, 72 tiles of
	// 128 × 256 or 96 of 128 × 192.
	{
		Name: "Hopper m64n192: each step overwrites the sum where it should add", File: "cuda/wgmma.cuh",
		Old: `setp.ne.b32 p, %98, 0;`, New: `setp.eq.b32 p, %98, 0;`,
		Op: "linear_grad_w", Shapes: []string{"512x3072x768:accumulate=0"},
	},
	// The depth's row classes (gemm_sm90.cu, Tiles::kDepthClassL):
	// linear_grad_w with x's rows an odd length (the head's dW, where x is
	// the logits gradient), dy aligned, past the padding threshold, so
	// WideDC builds its A fragments from the raw boxes of x's depth rows
	// in classes.
	{
		Name: "Hopper depth classes: the odd classes' halves read at the even classes' shifts", File: "cuda/gemm_sm90.cu",
		Old: "2 * (column + maps_shift.shift[2 * t + 1] +", New: "2 * (column + maps_shift.shift[2 * t] +",
		Op: "linear_grad_w", Shapes: []string{"1024x520x4097"},
	},
	{
		Name: "Hopper depth classes: the boxes copied without their lead", File: "cuda/gemm_sm90.cu",
		Old: "full, m0 - WideDC::lead(j),", New: "full, m0,",
		Op: "linear_grad_w", Shapes: []string{"1024x520x4097"},
	},
	{
		Name: "Hopper depth classes: a fragment register's two depth rows both from the even class", File: "cuda/gemm_sm90.cu",
		Old: `"=h"(hi) : "r"(at + a_offset_hi)`, New: `"=h"(hi) : "r"(at + a_offset)`,
		Op: "linear_grad_w", Shapes: []string{"1024x520x4097"},
	},
	{
		Name: "Hopper depth classes: every fragment's depth rows from the box's even rows", File: "cuda/gemm_sm90.cu",
		Old: "boxes + (2 * kk + i / 2) * WideDC::kRawRowBytes", New: "boxes + (2 * kk) * WideDC::kRawRowBytes",
		Op: "linear_grad_w", Shapes: []string{"1024x520x4097"},
	},
	{
		Name: "Hopper depth classes: each stage's class rows one class row late", File: "cuda/gemm_sm90.cu",
		Old: "const int32_t class_row = p0 / vkern_shift::kClasses;",
		New: "const int32_t class_row = p0 / vkern_shift::kClasses + 1;",
		Op:  "linear_grad_w", Shapes: []string{"1025x520x4097:accumulate=1"},
	},
	{
		Name: "max subtraction missing in softmax", File: "cuda/softmax.cu",
		Old: "m = row_max<T>(m, red);", New: "m = 0.0f * row_max<T>(m, red);",
		Op: "softmax", Shapes: []string{"7x4099"},
	},
	{
		Name: "B used where Bᵀ belongs", File: "cuda/gemm.cu",
		Old: "return vkern_gemm::product<true, true>(dC, N, B, N, dA, M, K, N, s);",
		New: "return vkern_gemm::product<true, false>(dC, N, B, N, dA, M, K, N, s);",
		Op:  "gemm_grad_a", Shapes: []string{"64x64x64"},
	},
	{
		Name: "A used where Aᵀ belongs", File: "cuda/gemm.cu",
		Old: "return vkern_gemm::product<false, false>(A, K, dC, N, dB, K, N, M, s);",
		New: "return vkern_gemm::product<true, false>(A, K, dC, N, dB, K, N, M, s);",
		Op:  "gemm_grad_b", Shapes: []string{"64x64x64"},
	},
	{
		Name: "mean scale missing in cross_entropy", File: "cuda/cross_entropy.cu",
		Old: "return static_cast<float>(grad_scale / n);", New: "return 1.0f;",
		Op: "cross_entropy", Shapes: []string{"7x4099"},
	},
	{
		Name: "off-by-one label in cross_entropy's gradient", File: "cuda/cross_entropy.cu",
		Old: "const int mine = RowSlice<T, E, VW>::row_slot(g, label, t);", New: "const int mine = RowSlice<T, E, VW>::row_slot(g, label + 1, t);",
		Op: "cross_entropy", Shapes: []string{"7x4099"},
	},
	{
		Name: "ignore_index not honoured in cross_entropy", File: "cuda/cross_entropy.cu",
		Old: "if (label == ignore) return kIgnored;", New: "if (false) return kIgnored;",
		Op: "cross_entropy", Shapes: []string{"12x300:ignore_index=0"},
	},
	{
		Name: "ignored rows counted in cross_entropy's n", File: "cuda/cross_entropy.cu",
		Old: "counted += VK_LDG(labels + r) != ignore ? 1u : 0u;", New: "counted += 1u;",
		Op: "cross_entropy", Shapes: []string{"64x1000:ignore_index=-100"},
	},
	{
		Name: "max subtraction missing in cross_entropy", File: "cuda/cross_entropy.cu",
		Old: "m = row_max<T>(m, red);", New: "m = 0.0f * row_max<T>(m, red);",
		Op: "cross_entropy", Shapes: []string{"7x4099"},
	},
	{
		Name: "cross_entropy's EX2 exponentials without log2(e)", File: "cuda/rows.cuh",
		Old: "return vk_ex2_ftz(d * kLog2e);", New: "return vk_ex2_ftz(d);",
		Op: "cross_entropy", Shapes: []string{"7x4099"},
	},
	{
		Name: "softmax's EX2 exponentials without log2(e)", File: "cuda/rows.cuh",
		Old: "return vk_ex2_ftz(d * kLog2e);", New: "return vk_ex2_ftz(d);",
		Op: "softmax", Shapes: []string{"64x1000", "7x4099"},
	},
	{
		Name: "one-hot added instead of subtracted in cross_entropy", File: "cuda/cross_entropy.cu",
		Old: "return e * q - (idx == mine ? c : 0.0f);", New: "return e * q + (idx == mine ? c : 0.0f);",
		Op: "cross_entropy", Shapes: []string{"7x4099"},
	},
	{
		Name: "add subtracts b", File: "cuda/elementwise.cu",
		Old: "__device__ float operator()(float a, float b) const { return a + b; }",
		New: "__device__ float operator()(float a, float b) const { return a - b; }",
		Op:  "add", Shapes: []string{"4099", "65536"},
	},
	{
		Name: "add's vector path skips the last 16 bytes", File: "cuda/elementwise.cu",
		Old: "for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n8; i += int64_t{gridDim.x} * kThreads) {",
		New: "for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n8 - 1; i += int64_t{gridDim.x} * kThreads) {",
		Op:  "add", Shapes: []string{"65536"},
	},
	{
		Name: "gelu with x² where x³ belongs", File: "cuda/gelu.cuh",
		Old: "return vk_ex2_ftz(x * fmaf(kGeluB, x2, kGeluA));", New: "return vk_ex2_ftz(fmaf(kGeluB, x2, x * kGeluA));",
		Op: "gelu", Shapes: []string{"4099", "65536"},
	},
	{
		Name: "gelu with erf where the tanh approximation belongs", File: "cuda/gelu.cuh",
		Old: "return __fdividef(x, 1.0f + e);", New: "return 0.5f * x * (1.0f + erff(x * 0.70710678f));",
		Op: "gelu", Shapes: []string{"4099", "65536"},
	},
	{
		Name: "gelu_grad with E where 1 − σ = E·σ belongs", File: "cuda/gelu.cuh",
		Old: "const float q = fminf(e * s, 1.0f);", New: "const float q = fminf(e, 1.0f);",
		Op: "gelu_grad", Shapes: []string{"4099", "65536"},
	},
	{
		Name: "fill of zero clears half the bytes", File: "cuda/fill.cu",
		Old: "return cudaMemsetAsync(y, 0, sizeof(float) * n, s);", New: "return cudaMemsetAsync(y, 0, sizeof(float) * n / 2, s);",
		Op: "fill", Shapes: []string{"4099", "65536"},
	},
	{
		Name: "fill of a value rounds it to f16", File: "cuda/fill.cu",
		Old: "y[i] = v;", New: "y[i] = __half2float(__float2half_rn(v));",
		Op: "fill", Shapes: []string{"1000003:value=0.1"},
	},
	{
		Name: "gelu_grad without its first term σ", File: "cuda/gelu.cuh",
		Old: "return dy * (s * fmaf(w, q, 1.0f));", New: "return dy * (s * w * q);",
		Op: "gelu_grad", Shapes: []string{"4099", "65536"},
	},
	{
		Name: "layernorm's variance as E[x²], the mean not subtracted", File: "cuda/layernorm.cu",
		Old: "squares += column_of<T, VW>(i, t) < C ? d * d : 0.0f;",
		New: "squares += column_of<T, VW>(i, t) < C ? element(x[k].w, i) * element(x[k].w, i) : 0.0f;",
		Op:  "layernorm", Shapes: []string{"7x769", "64x768"},
	},
	{
		Name: "layernorm's eps outside the square root", File: "cuda/layernorm.cu",
		Old: "const float s = rsqrtf(row_sum<T>(squares, red) / n + eps);",
		New: "const float s = 1.0f / (sqrtf(row_sum<T>(squares, red) / n) + eps);",
		Op:  "layernorm", Shapes: []string{"7x769", "64x768"},
	},
	{
		Name: "layernorm's bias read from the weight", File: "cuda/layernorm.cu",
		Old: "b.load(B, C, t, 0u);", New: "b.load(W, C, t, 0u);",
		Op: "layernorm", Shapes: []string{"7x769", "64x768"},
	},
	{
		Name: "layernorm_grad's dx without the x̂·mean(g⊙x̂) term", File: "cuda/layernorm.cu",
		Old: "const float v = (element(w.w, i) * element(dy.w, i) - a - xh * c) * s;",
		New: "const float v = (element(w.w, i) * element(dy.w, i) - a) * s;",
		Op:  "layernorm_grad", Shapes: []string{"7x769", "64x768"},
	},
	{
		Name: "layernorm_grad subtracts its residual (rows on chip)", File: "cuda/layernorm.cu",
		Old: "return Res != nullptr ? element(res.w, i) + v : v;",
		New: "return Res != nullptr ? element(res.w, i) - v : v;",
		Op:  "layernorm_grad", Shapes: []string{"7x769:residual=1", "64x768:residual=1"},
	},
	{
		Name: "layernorm_grad reads the residual of the row before (rows on chip)", File: "cuda/layernorm.cu",
		Old: "if (Res != nullptr) res.load(Res + r * C, C, t, 0u);",
		New: "if (Res != nullptr) res.load(Res + (r > 0 ? r - 1 : r) * C, C, t, 0u);",
		Op:  "layernorm_grad", Shapes: []string{"64x768:residual=1"},
	},
	{
		Name: "layernorm_grad drops its residual (long rows)", File: "cuda/layernorm.cu",
		Old: "const float v = Res != nullptr ? __half2float(Res[r * C + j]) + g : g;",
		New: "const float v = g;",
		Op:  "layernorm_grad", Shapes: []string{"3x65537:residual=1"},
	},
	{
		Name: "layernorm_grad's db overwritten instead of added into", File: "cuda/layernorm.cu",
		Old: "float v = out[j];", New: "float v = o == 1 ? 0.0f : out[j];",
		Op: "layernorm_grad", Shapes: []string{"7x769", "64x768"},
	},
	{
		Name: "layernorm_grad's dxs overwritten instead of added into", File: "cuda/layernorm.cu",
		Old: "float v = out[j];", New: "float v = o == 2 ? 0.0f : out[j];",
		Op: "layernorm_grad", Shapes: []string{"7x769:dx_sum=1", "64x768:residual=1,dx_sum=1"},
	},
	{
		Name: "layernorm_grad's parameter sums skip the fourth row of each batch", File: "cuda/layernorm.cu",
		Old: "      sum += d;\n    }\n    for (; p < P; p += kReduceSlices)", New: "      (void)d;\n    }\n    for (; p < P; p += kReduceSlices)",
		Op: "layernorm_grad", Shapes: []string{"16384x768", "16384x768:residual=1,dx_sum=1"},
	},
	{
		Name: "layernorm_grad's dxs from the last warp of each block only (rows on chip)", File: "cuda/layernorm.cu",
		Old: "if constexpr (kSum) combined[2 * C + col] = k == 0 ? sum_x[i] : combined[2 * C + col] + sum_x[i];",
		New: "if constexpr (kSum) combined[2 * C + col] = sum_x[i];",
		Op:  "layernorm_grad", Shapes: []string{"64x768:residual=1,dx_sum=1"},
	},
	{
		Name: "layernorm_grad's dxs without the residual (rows on chip)", File: "cuda/layernorm.cu",
		Old: "sum_x[2 * i] += v0;", New: "sum_x[2 * i] += v0 - element(res.w, 2 * i);",
		Op: "layernorm_grad", Shapes: []string{"64x768:residual=1,dx_sum=1"},
	},
	{
		Name: "layernorm_grad's dxs keeps each block's last row only (long rows)", File: "cuda/layernorm.cu",
		Old: "if (sum != nullptr) sum[j] = first ? v : sum[j] + v;", New: "if (sum != nullptr) sum[j] = v;",
		Op: "layernorm_grad", Shapes: []string{"70x8200:dx_sum=1"},
	},
	{
		Name: "layernorm_grad's dw from the last warp of each block only", File: "cuda/layernorm.cu",
		Old: "combined[col] = k == 0 ? sum_w[i] : combined[col] + sum_w[i];", New: "combined[col] = sum_w[i];",
		Op: "layernorm_grad", Shapes: []string{"7x769", "64x768"},
	},
	{
		Name: "global_norm counts only NaN as non-finite", File: "cuda/global_norm.cu",
		Old: "count += (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u ? 1ull : 0ull;", New: "count += x != x ? 1ull : 0ull;",
		Op: "global_norm", Shapes: []string{"4099", "65536"},
	},
	{
		Name: "global_norm's finish skips the last tile", File: "cuda/global_norm.cu",
		Old: "batch[b] = i < tiles ? parts[i] : Part{0.0, 0ull};", New: "batch[b] = i < tiles - 1 ? parts[i] : Part{0.0, 0ull};",
		Op: "global_norm", Shapes: []string{"4099", "65536", "1000003"},
	},
	{
		Name: "global_norm drops the last element of a partial tile", File: "cuda/global_norm.cu",
		Old: "if (at < size) take(VK_LDG(tile + at), lane[c], count);", New: "if (at < size - 1) take(VK_LDG(tile + at), lane[c], count);",
		Op: "global_norm", Shapes: []string{"7", "4099"},
	},
	{
		Name: "global_norm's vector loads with a warp's stride for a block's", File: "cuda/global_norm.cu",
		Old: "x[u] = VK_LDG(tile4 + u * kThreads);", New: "x[u] = VK_LDG(tile4 + u * 32);",
		Op: "global_norm", Shapes: []string{"65536"},
	},
	{
		Name: "adamw without the bias corrections", File: "core/adamw.h",
		Old: "s.step_size = static_cast<float>(lr / correction(beta1, t));\n  s.root2 = static_cast<float>(std::sqrt(correction(beta2, t)));",
		New: "s.step_size = static_cast<float>(lr);\n  s.root2 = 1.0f;",
		Op:  "adamw", Shapes: []string{"4099", "65536"},
	},
	{
		Name: "adamw with L2 weight decay on the gradient (Adam) instead of decoupled decay", File: "cuda/adamw.cu",
		Old: "const float g = grad * s.scale;\n  const float decayed = p * s.decay;",
		New: "const float g = grad * s.scale + 0.01f * p;  // weight_decay = 0.01\n  const float decayed = p;",
		Op:  "adamw", Shapes: []string{"4099", "65536"},
	},
	{
		Name: "adamw with v where m belongs in the update", File: "cuda/adamw.cu",
		Old: "p = decayed - s.step_size * (m / denom);", New: "p = decayed - s.step_size * (v / denom);",
		Op: "adamw", Shapes: []string{"4099", "65536"},
	},
	{
		Name: "adamw with eps inside the square root", File: "cuda/adamw.cu",
		Old: "const float denom = sqrtf(v) / s.root2 + s.eps;", New: "const float denom = sqrtf(v / (s.root2 * s.root2) + s.eps);",
		Op: "adamw", Shapes: []string{"4099", "65536:eps=1e-3,beta1=0.5,beta2=0.95,t=3"},
	},
	{
		Name: "adamw with β2 for the first moment", File: "cuda/adamw.cu",
		Old: "m = s.beta1 * m + s.keep1 * g;", New: "m = s.beta2 * m + s.keep2 * g;",
		Op: "adamw", Shapes: []string{"4099", "65536"},
	},
	{
		Name: "adamw's vector path writes param16 from the old param", File: "cuda/adamw.cu",
		Old: "p16[i] = make_uint2(pack2(x, y), pack2(z, w));", New: "p16[i] = make_uint2(pack2(p[i].x, p[i].y), pack2(p[i].z, p[i].w));",
		Op: "adamw", Shapes: []string{"65536"},
	},
	{
		Name: "adamw without grad_scale", File: "cuda/adamw.cu",
		Old: "const float g = grad * s.scale;", New: "const float g = grad;",
		Op: "adamw", Shapes: []string{"4099:t=1000,weight_decay=0.1,lr=6e-4,grad_scale=3.0517578125e-05"},
	},
	{
		Name: "adamw leaves the elements after the last whole vector unwritten", File: "cuda/adamw.cu",
		Old: "if (done == n) return cudaSuccess;", New: "if (done == n || done > 0) return cudaSuccess;",
		Op: "adamw", Shapes: []string{"4099"},
	},
	// The f16 output rounding, toward zero and half away from zero: in the
	// Hopper GEMM epilogue (the staged path of interior tiles, and the
	// element path of edge tiles) and in the row ops' store (pack, used by
	// every softmax and softmax_grad path).
	// attention: the quick shapes run the tensor-core kernels on the
	// finite distributions and the exact row kernels on special.
	{
		Name: "attention without the causal mask (tensor cores)", File: "cuda/attention.cu",
		Old: "if (n * 8 + 2 * t + (e & 1) > r0 + 8 * (e / 2)) s[n][e] = vkern_rows::neg_inf();",
		New: "",
		Op:  "attention", Shapes: []string{"2x17x24x3", "1x64x64x4", hopperAttention},
	},
	{
		Name: "attention's lse without the row max (tensor cores)", File: "cuda/attention.cu",
		Old: "if (t == 0) lse_bh[row[r]] = (m[r] + log2f(l[r])) * kLn2;",
		New: "if (t == 0) lse_bh[row[r]] = log2f(l[r]) * kLn2;",
		Op:  "attention", Shapes: []string{"2x17x24x3", hopperAttention},
	},
	{
		Name: "attention's scores scaled by 1/D where 1/√D belongs", File: "cuda/attention.cu",
		Old: "const float scale2 = static_cast<float>(kLog2eDouble / std::sqrt(static_cast<double>(a.D)));",
		New: "const float scale2 = static_cast<float>(kLog2eDouble / static_cast<double>(a.D));",
		Op:  "attention", Shapes: []string{"2x17x24x3"},
	},
	{
		Name: "attention's online pass rescales o but not the row sum (tensor cores)", File: "cuda/attention.cu",
		Old: "l[r] *= rescale;",
		New: "",
		Op:  "attention", Shapes: []string{"1x200x64x1"},
	},
	{
		Name: "attention's tiles never raise the route's flag (tensor cores)", File: "cuda/attention.cu",
		Old: "if (marks & kSpecialMarks) atomicOr(flag, 1u);",
		New: "",
		Op:  "attention", Shapes: []string{"2x17x24x3", "1x64x64x4"},
	},
	{
		Name: "attention's exact rows see the keys after them", File: "cuda/attention.cu",
		Old: "for (int64_t j = 0; j <= i; ++j) {\n        const float p = exp2f(head_dot(q, k + j * width, a.D, lane) * scale2 - m);",
		New: "for (int64_t j = 0; j < a.T; ++j) {\n        const float p = exp2f(head_dot(q, k + j * width, a.D, lane) * scale2 - m);",
		Op:  "attention", Shapes: []string{"2x17x24x3"},
	},
	{
		Name: "attention_grad's dk without the scale (tensor cores)", File: "cuda/attention.cu",
		Old: "const float dk_factor[2] = {scale, scale}, dv_factor[2] = {1.0f, 1.0f};",
		New: "const float dk_factor[2] = {1.0f, 1.0f}, dv_factor[2] = {1.0f, 1.0f};",
		Op:  "attention_grad", Shapes: []string{"2x17x24x3"},
	},
	{
		Name: "attention_grad's D from head 0's y", File: "cuda/attention.cu",
		Old: "const __half* v = y + row * a.C + h * a.D;",
		New: "const __half* v = y + row * a.C;",
		Op:  "attention_grad", Shapes: []string{"2x17x24x3"},
	},
	{
		Name: "attention_grad's dk never scaled back from its f16 range (tensor cores)", File: "cuda/attention.cu",
		Old: "product<DP, true>(fa, qs, lane, shift, dk);",
		New: "product<DP, false>(fa, qs, lane, shift, dk);",
		Op:  "attention_grad", Shapes: []string{"2x17x24x3"},
	},
	{
		Name: "attention_grad's dq without the causal mask (tensor cores)", File: "cuda/attention.cu",
		Old: "p[n][e] = j > r0 + 8 * (e / 2) ? 0.0f : exp2f(fmaf(p[n][e], scale2, -lse2[e / 2]));",
		New: "p[n][e] = exp2f(fmaf(p[n][e], scale2, -lse2[e / 2]));",
		Op:  "attention_grad", Shapes: []string{"2x17x24x3", "1x64x64x4", hopperAttention},
	},
	// attention's variant 7 (the Hopper forward on wgmma), at a shape it
	// takes on an H100.
	{
		Name: "attention's P·V overwrites o at each key tile (Hopper)", File: "cuda/attention.cu",
		Old: "fragment_products<true>(o, pa, v_addr);", New: "fragment_products<false>(o, pa, v_addr);",
		Op: "attention", Shapes: []string{hopperAttention},
	},
	{
		Name: "attention's P·V reads the keys where the values belong (Hopper)", File: "cuda/attention.cu",
		Old: "fragment_products<true>(o, pa, v_addr);", New: "fragment_products<true>(o, pa, k_addr);",
		Op: "attention", Shapes: []string{hopperAttention},
	},
	{
		Name: "attention's tiles never raise the route's flag (Hopper)", File: "cuda/attention.cu",
		Old: "  if (marks & kSpecialMarks) {\n    atomicOr(flag, 1u);\n  }", New: "",
		Op: "attention", Shapes: []string{hopperAttention},
	},
	// attention_grad's variant 6 (the Hopper backward on wgmma): heads of
	// 64 columns on an H100; elsewhere the shape takes the mma.sync
	// kernels and the defect is not on its path.
	{
		Name: "attention_grad's dk never scaled back from its f16 range (Hopper)", File: "cuda/attention.cu",
		Old: "      add_scaled(dk, part, shift);", New: "      add_scaled(dk, part, no_shift);",
		Op: "attention_grad", Shapes: []string{hopperAttention},
	},
	{
		Name: "attention_grad's dv overwritten by each query tile (Hopper)", File: "cuda/attention.cu",
		Old: "fragment_products<true>(dv, fp, g_addr);", New: "fragment_products<false>(dv, fp, g_addr);",
		Op: "attention_grad", Shapes: []string{hopperAttention},
	},
	{
		Name: "attention_grad's dq from the values where the keys belong (Hopper)", File: "cuda/attention.cu",
		Old: "fragment_products<false>(part, fd, k_addr);", New: "fragment_products<false>(part, fd, v_addr);",
		Op: "attention_grad", Shapes: []string{hopperAttention},
	},
	{
		Name: "attention_grad's tiles copied unswizzled (Hopper)", File: "cuda/attention.cu",
		Old: "const uint32_t at = dst + r0 * 128 + ((u ^ (r0 & 7)) << 4);",
		New: "const uint32_t at = dst + r0 * 128 + (u << 4);",
		Op:  "attention_grad", Shapes: []string{hopperAttention},
	},
	{
		Name: "attention_grad's scores read the first 16 columns of q four times (Hopper)", File: "cuda/attention.cu",
		Old: "wgmma_m64n64k16<0, 0>(flat(x), da + 2 * kk, db + 2 * kk, 1);",
		New: "wgmma_m64n64k16<0, 0>(flat(x), da + 2 * kk, db, 1);",
		Op:  "attention_grad", Shapes: []string{hopperAttention},
	},
	{
		Name: "attention_grad's products with P and dS read the first 16 rows four times (Hopper)", File: "cuda/attention.cu",
		Old: "wgmma_m64n64k16_rs<1>(flat(x), f[kk], db + 128 * kk, 1);",
		New: "wgmma_m64n64k16_rs<1>(flat(x), f[kk], db, 1);",
		Op:  "attention_grad", Shapes: []string{hopperAttention},
	},
	// attention.cu's variants 9–11: the fast paths of the Hopper backward
	// (round_scaled's and add_scaled's multiplications by powers of two),
	// the overwriting first k-step of wgmma_m64n64k16_set, and lse₂ formed
	// by row_dots for both tensor-core paths. (Without the first k-step,
	// the accumulators that wgmma_m64n64k16_set no longer sets start from
	// whatever their registers hold.) exp2_tile, ex2.approx.ftz alone
	// since variant 14, has no mutant: its one departure from exp2f,
	// results under 2⁻¹²⁶ flushed to zero, is within the bound (so exp2f
	// in its place would not be incorrect either), and where P is rounded
	// to f16 it lies below what the rounding keeps; bench/exp2_check.cu
	// holds the instruction's bits and its flushes instead, and oracle's
	// TestAttentionBoundsHoldWhereExponentialsFlush the bound.
	{
		Name: "attention_grad's dS scaled up where it is scaled down into f16's range (Hopper)", File: "cuda/attention.cu",
		Old: "const float f[2] = {pow2(-shift[0]), pow2(-shift[1])};",
		New: "const float f[2] = {pow2(shift[0]), pow2(shift[1])};",
		Op:  "attention_grad", Shapes: []string{hopperAttention},
	},
	{
		Name: "attention_grad's products scaled back by the first row's shift in both rows (Hopper)", File: "cuda/attention.cu",
		Old: "x[n][e] = __fmaf_rn(part[n][e], f[e / 2], x[n][e]);",
		New: "x[n][e] = __fmaf_rn(part[n][e], f[0], x[n][e]);",
		Op:  "attention_grad", Shapes: []string{hopperAttention},
	},
	{
		Name: "attention_grad's scores without the first k-step that sets them (Hopper)", File: "cuda/attention.cu",
		Old: "  wgmma_m64n64k16_set<0, 0>(flat(x), da, db);\n",
		New: "",
		Op:  "attention_grad", Shapes: []string{hopperAttention},
	},
	{
		Name: "attention_grad's lse₂ left in base e (row_dots)", File: "cuda/attention.cu",
		Old: "lse2[at] = l * kLog2e;",
		New: "lse2[at] = l;",
		Op:  "attention_grad", Shapes: []string{"2x17x24x3", hopperAttention},
	},
	// Not planted: attention_grad's tile scans never raising the flag. On
	// an H100 (2026-11-27) verify passed that mutant: in the op's domain y
	// and lse are the forward's outputs, and an infinity or a NaN anywhere
	// in qkv reaches some row's y or lse, which row_dots scans, so the
	// call is routed anyway. The scans guard inputs outside the domain.
	// attention_grad's variant 5 (dq from the stored dS), switched on in
	// the mutant's source as $VKERN_ATTENTION_DQ=stored switches it on.
	{
		Name: "attention_grad's stored dq scaled back by one row's shift for both (variant 5)", File: "cuda/attention.cu",
		Setup: []Edit{storedDS},
		Old:   "const int shift[2] = {sh[q0 + g], sh[q0 + g + 8]};",
		New:   "const int shift[2] = {sh[q0 + g], sh[q0 + g]};",
		Op:    "attention_grad", Shapes: []string{"2x17x24x3", "1x64x64x4"},
	},
	{
		Name: "attention_grad's stored dS not scaled into f16's range (variant 5)", File: "cuda/attention.cu",
		Setup: []Edit{storedDS},
		Old:   "__floats2half2_rn(ldexpf(x[n][2 * r], -s0), ldexpf(x[n][2 * r + 1], -s1));",
		New:   "__floats2half2_rn(x[n][2 * r], x[n][2 * r + 1]);",
		// 1x192x256x4: heads of 64, the Hopper kernels (variant 20) on sm_90.
		Op: "attention_grad", Shapes: []string{"2x17x24x3", "1x64x64x4", "1x192x256x4"},
	},
	{
		Name: "attention_grad's Hopper dS tiles stored at the diagonal's place (variant 20)", File: "cuda/attention.cu",
		Setup: []Edit{storedDS},
		Old:   "pair_index(qt, kt);  // the pair's place",
		New:   "pair_index(qt, qt);  // the pair's place",
		Op:    "attention_grad", Shapes: []string{"1x192x256x4"},
	},
	{
		Name: "attention_grad's route misses infinities in dy (tensor cores)", File: "cuda/attention.cu",
		Old: "found = found || special_halves(gs[e]) || special_halves(vs[e]);",
		New: "found = found || special_halves(vs[e]);",
		Op:  "attention_grad", Shapes: []string{"2x17x24x3", "1x64x64x4"},
	},
	{
		Name: "attention_grad's exact dv from dS where P belongs", File: "cuda/attention.cu",
		Old: "dv[e] += p * __half2float(gi[c]);",
		New: "dv[e] += ds * __half2float(gi[c]);",
		Op:  "attention_grad", Shapes: []string{"2x17x24x3"},
	},
	{
		Name: "Hopper: staged f16 epilogue rounds toward zero", File: "cuda/gemm_sm90.cu",
		Old: "__floats2half2_rn(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);",
		New: "__halves2half2(__float2half_rz(acc[4 * j + 2 * h]), __float2half_rz(acc[4 * j + 2 * h + 1]));",
		Op:  "gemm_grad_a", Shapes: []string{"256x256x256", "256x4096x256"},
	},
	{
		Name: "Hopper: staged f16 epilogue rounds half away from zero", File: "cuda/gemm_sm90.cu",
		Old: "__floats2half2_rn(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);",
		New: "[](float a, float b) { " + halfAwayLambda + " return __halves2half2(away(a), away(b)); }(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);",
		Op:  "gemm_grad_a", Shapes: []string{"256x256x256", "256x4096x256"},
	},
	{
		Name: "Hopper: edge-tile f16 stores round toward zero", File: "cuda/gemm_sm90.cu",
		Old: "__device__ __forceinline__ void store_one(__half* p, float v) { *p = __float2half_rn(v); }",
		New: "__device__ __forceinline__ void store_one(__half* p, float v) { *p = __float2half_rz(v); }",
		Op:  "gemm_grad_b", Shapes: []string{"64x48x80", "4096x48x80"},
	},
	// The GELU epilogues (epilogue.cuh): the Hopper kernels take the paired
	// path at aligned shapes (even columns), gemm.cuh's mma.sync kernels and
	// odd column counts the one-element path.
	{
		Name: "Hopper: linear's GELU stores gelu of the sum as pre too", File: "cuda/epilogue.cuh",
		Old: "*p = __floats2half2_rn(v0, v1);\n          v0 = vkern_gelu::gelu(v0);\n          v1 = vkern_gelu::gelu(v1);",
		New: "v0 = vkern_gelu::gelu(v0);\n          v1 = vkern_gelu::gelu(v1);\n          *p = __floats2half2_rn(v0, v1);",
		Op:  "linear", Shapes: []string{"64x128x96:gelu=1", "256x64x256:gelu=1,bias=0"},
	},
	{
		Name: "Hopper: linear_grad_x's pair of pre-activations read crosswise", File: "cuda/epilogue.cuh",
		Old: "v0 = vkern_gelu::gelu_grad(x.x, v0);\n          v1 = vkern_gelu::gelu_grad(x.y, v1);",
		New: "v0 = vkern_gelu::gelu_grad(x.y, v0);\n          v1 = vkern_gelu::gelu_grad(x.x, v1);",
		Op:  "linear_grad_x", Shapes: []string{"64x48x80:gelu=1", "256x256x64:gelu=1"},
	},
	{
		Name: "linear's GELU leaves pre unwritten (one-element path)", File: "cuda/epilogue.cuh",
		Old: "pre[at] = __float2half_rn(v);\n      return vkern_gelu::gelu(v);",
		New: "return vkern_gelu::gelu(v);",
		Op:  "linear", Shapes: []string{"17x31x129:gelu=1", "40x41x4100:gelu=1,bias=0"},
	},
	{
		Name: "linear_grad_x's gelu′ of its own product where pre belongs (one-element path)", File: "cuda/epilogue.cuh",
		Old: "return vkern_gelu::gelu_grad(__half2float(pre[at]), v);",
		New: "return vkern_gelu::gelu_grad(v, v);",
		Op:  "linear_grad_x", Shapes: []string{"17x31x129:gelu=1", "3x1000x5:gelu=1"},
	},
	{
		Name: "Hopper: linear's residual pairs read crosswise", File: "cuda/gemm_sm90.cu",
		Old: "acc[4 * (j0 + jj) + 2 * h] = acc[4 * (j0 + jj) + 2 * h] + r[2 * jj + h].x;",
		New: "acc[4 * (j0 + jj) + 2 * h] = acc[4 * (j0 + jj) + 2 * h] + r[2 * jj + h].y;",
		Op:  "linear", Shapes: []string{"64x128x96:residual=1", "256x64x256:residual=1,bias=0"},
	},
	{
		Name: "linear's residual read from the row above (one-element path)", File: "cuda/epilogue.cuh",
		Old: "if constexpr (kResidual) v = v + __half2float(residual[row * cols + col]);",
		New: "if constexpr (kResidual) v = v + __half2float(residual[(row > 0 ? row - 1 : 0) * cols + col]);",
		Op:  "linear", Shapes: []string{"17x31x129:residual=1", "40x41x4100:residual=1,bias=0"},
	},
	{
		Name: "linear ignores its residual switch", File: "cuda/linear.cu",
		Old: "const __half* r = c.params[param::residual] == 1 ? c.ptr<const __half>(buf::r) : nullptr;",
		New: "const __half* r = nullptr;",
		Op:  "linear", Shapes: []string{"64x128x96:residual=1", "17x31x129:residual=1"},
	},
	// The staged epilogue's quads (interior tiles of aligned shapes).
	{
		Name: "Hopper staged: linear's GELU stores gelu of the sum as pre too", File: "cuda/epilogue.cuh",
		Old: "const __half2 lo = __floats2half2_rn(v[0], v[1]), hi = __floats2half2_rn(v[2], v[3]);\n      *reinterpret_cast<uint2*>(pre + at) =\n          make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));\n#pragma unroll\n      for (int e = 0; e < 4; ++e) v[e] = vkern_gelu::gelu(v[e]);",
		New: "for (int e = 0; e < 4; ++e) v[e] = vkern_gelu::gelu(v[e]);\n      const __half2 lo = __floats2half2_rn(v[0], v[1]), hi = __floats2half2_rn(v[2], v[3]);\n      *reinterpret_cast<uint2*>(pre + at) =\n          make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));",
		Op:  "linear", Shapes: []string{"256x256x64:gelu=1", "512x128x64:gelu=1,bias=0"},
	},
	{
		Name: "Hopper staged: linear's residual halves read crosswise", File: "cuda/epilogue.cuh",
		Old: "v[0] = v[0] + lo.x;", New: "v[0] = v[0] + lo.y;",
		Op: "linear", Shapes: []string{"256x256x64:residual=1", "512x128x64:residual=1,bias=0"},
	},
	{
		Name: "Hopper staged: linear_grad_x's gelu′ from the next four pre-activations", File: "cuda/epilogue.cuh",
		Old: "return *reinterpret_cast<const uint2*>(pre + at);", New: "return *reinterpret_cast<const uint2*>(pre + (at ^ 4));",
		Op: "linear_grad_x", Shapes: []string{"256x64x256:gelu=1", "512x64x128:gelu=1"},
	},
	{
		Name: "linear_grad_x ignores its gelu switch", File: "cuda/linear_grad.cu",
		Old: "const __half* pre = c.params[param::gelu] == 1 ? c.ptr<const __half>(buf::pre) : nullptr;",
		New: "const __half* pre = nullptr;",
		Op:  "linear_grad_x", Shapes: []string{"64x48x80:gelu=1", "17x31x129:gelu=1"},
	},
	{
		Name: "f16 row stores round toward zero", File: "cuda/rows.cuh",
		Old: "return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(lo))) |\n         static_cast<uint32_t>(__half_as_ushort(__float2half_rn(hi))) << 16;",
		New: "return static_cast<uint32_t>(__half_as_ushort(__float2half_rz(lo))) |\n         static_cast<uint32_t>(__half_as_ushort(__float2half_rz(hi))) << 16;",
		Op:  "softmax", Shapes: []string{"64x1000", "7x4099"},
	},
	{
		Name: "f16 row stores round half away from zero", File: "cuda/rows.cuh",
		Old: "return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(lo))) |\n         static_cast<uint32_t>(__half_as_ushort(__float2half_rn(hi))) << 16;",
		New: halfAwayLambda + "\n  return static_cast<uint32_t>(__half_as_ushort(away(lo))) |\n         static_cast<uint32_t>(__half_as_ushort(away(hi))) << 16;",
		Op:  "softmax_grad", Shapes: []string{"64x1000", "7x4099"},
	},
	// Rows that do not start on a 16-byte boundary (odd row lengths): the
	// vectors a row's ends cut, read and written element by element.
	{
		Name: "unaligned rows' cut vectors read as padding", File: "cuda/rows.cuh",
		Old: "if (column(j, t) >= hi || inside(j, t, lo, hi)) continue;", New: "continue;",
		Op: "softmax", Shapes: []string{"16x13", "7x4099"},
	},
	{
		Name: "unaligned rows' last element left unwritten", File: "cuda/rows.cuh",
		Old: "if (k >= lo && k < hi) h[k]", New: "if (k >= lo && k + 1 < hi) h[k]",
		Op: "cross_entropy", Shapes: []string{"16x13", "7x4099"},
	},
	{
		Name: "softmax_grad's staged rows read their cut vectors as zeros", File: "cuda/softmax.cu",
		Old: "return load_cut(reinterpret_cast<const __half*>(base + j), lo - 8 * j, hi - 8 * j, 0u);",
		New: "return make_uint4(0u, 0u, 0u, 0u);",
		// 50,257 columns: the staged kernel on a Hopper GPU.
		Op: "softmax_grad", Shapes: []string{"16x50257"},
	},
	{
		Name: "embedding's wpe row from p / B where p mod T belongs", File: "cuda/embedding.cu",
		Old: "const int64_t t = p % T;", New: "const int64_t t = p / (N / T);",
		Op: "embedding", Shapes: []string{"2x5x7x11", "4x64x64x256"},
	},
	{
		Name: "embedding's vector path without wpe in its first two channels", File: "cuda/embedding.cu",
		Old: "r.x = pack(a.value(0) + b.value(0), a.value(1) + b.value(1));", New: "r.x = pack(a.value(0), a.value(1));",
		Op: "embedding", Shapes: []string{"4x64x64x256"},
	},
	{
		Name: "embedding_grad's dwpe summed over rows t·B + b", File: "cuda/embedding.cu",
		Old: "if (b0 + k < B) rows[k].load(dx + ((b0 + k) * T + t) * C + ch);", New: "if (b0 + k < B) rows[k].load(dx + (t * B + b0 + k) * C + ch);",
		Op: "embedding_grad", Shapes: []string{"2x5x7x11", "4x64x64x256"},
	},
	{
		Name: "embedding_grad drops the last segment of a run that crosses segments", File: "cuda/embedding.cu",
		Old: "const int64_t last_segment = (a - 1) / kSegment;", New: "const int64_t last_segment = (a - 1) / kSegment - 1;",
		Op: "embedding_grad", Shapes: []string{"4x64x64x256", "8x512x64x3"},
	},
	{
		Name: "embedding_grad overwrites dwte where a run crosses segments", File: "cuda/embedding.cu",
		Old: "load_f32<VW>(row, acc);", New: "for (int i = 0; i < VW; ++i) acc[i] = 0.0f;",
		Op: "embedding_grad", Shapes: []string{"4x64x64x256", "8x512x64x3"},
	},
	// linear's bias and linear_grad_w's accumulation (epilogue.cuh, applied
	// in each GEMM kernel's registers), linear_nt's layout and bias, and
	// bias_grad's kernel. The shapes with a row length of 47 or 81 run
	// the mma.sync kernels on a Hopper GPU, the others the wgmma ones.
	{
		Name: "linear's bias indexed by the row", File: "cuda/epilogue.cuh",
		Old: "VK_LDG(reinterpret_cast<const unsigned short*>(bias) + col)",
		New: "VK_LDG(reinterpret_cast<const unsigned short*>(bias) + row % cols)",
		Op:  "linear", Shapes: []string{"64x48x80", "64x47x80"},
	},
	{
		Name: "linear's bias added twice (mma.sync)", File: "cuda/gemm.cuh",
		Old: "if (r < rows && c < cols) acc[i][j][e] = epi.apply(acc[i][j][e], out, r, c, cols);",
		New: "if (r < rows && c < cols) acc[i][j][e] = epi.apply(epi.apply(acc[i][j][e], out, r, c, cols), out, r, c, cols);",
		Op:  "linear", Shapes: []string{"64x47x80"},
	},
	{
		Name: "Hopper: the bias skipped on edge tiles", File: "cuda/gemm_sm90.cu",
		Old: "if constexpr (Epi::kBias) {\n        unsigned char* const slice",
		New: "if (Epi::kBias && m0 + BM <= rows) {\n        unsigned char* const slice",
		Op:  "linear", Shapes: []string{"64x48x80"},
	},
	{
		Name: "Hopper: a tile's bias taken from the next tile's columns", File: "cuda/gemm_sm90.cu",
		Old: "bias_pair = epi.bias_pair(n0 + 2 * t, cols);",
		New: "bias_pair = epi.bias_pair(n0 + BN + 2 * t, cols);",
		Op:  "linear", Shapes: []string{"64x48x80", "128x512x64"},
	},
	{
		Name: "Hopper: dW overwritten when it should be added into", File: "cuda/gemm_sm90.cu",
		Old: "acc[4 * j0 + i] = old[i] + acc[4 * j0 + i];",
		New: "acc[4 * j0 + i] = 0.0f * old[i] + acc[4 * j0 + i];",
		Op:  "linear_grad_w", Shapes: []string{"64x48x80", "256x256x256"},
	},
	{
		Name: "linear_grad_w's db without dy's last row", File: "cuda/linear_grad.cu",
		Old: "return vk_bias_grad(dy, db, M, N, s, /*spans=*/false);",
		New: "return vk_bias_grad(dy, db, M - 1, N, s, /*spans=*/false);",
		Op:  "linear_grad_w", Shapes: []string{"70x33x40:bias=1", "1000x64x64:bias=1"}, Setup: fusedDBOff,
	},
	{
		Name: "linear_grad_w's db from x's columns", File: "cuda/linear_grad.cu",
		Old: "return vk_bias_grad(dy, db, M, N, s, /*spans=*/false);",
		New: "return vk_bias_grad(x, db, M, N, s, /*spans=*/false);",
		Op:  "linear_grad_w", Shapes: []string{"70x33x33:bias=1", "1000x64x64:bias=1"}, Setup: fusedDBOff,
	},
	// The handshake: the launch says the kernel summed (Epilogue::summed),
	// and only then is bias_grad's kernel left out.
	{
		Name: "linear_grad_w's db: bias_grad's kernel left out where the kernel did not sum", File: "cuda/linear_grad.cu",
		Old: "if (err != cudaSuccess || summed) return err;", New: "if (err != cudaSuccess || true) return err;",
		Op: "linear_grad_w", Shapes: []string{"70x33x40:bias=1"}, Setup: fusedDBChosen,
	},
	{
		Name: "Hopper column sums: the launch does not say the kernel summed", File: "cuda/gemm_sm90.cu",
		Old: "if (epi.summed != nullptr) *epi.summed = true;", New: "if (epi.summed != nullptr) *epi.summed = false;",
		Op: "linear_grad_w", Shapes: []string{"1000x64x64:bias=1"}, Setup: fusedDBChosen,
	},
	// linear_grad_w's db formed in the Hopper kernel of plain tiles
	// (gemm_sm90.cu, kSums; VKERN_GEMM_FUSED_DB=1) as its producer
	// warpgroup passes dy's stages, each column tile's pairs shared among
	// its row tiles: 1000 rows end in a partial stage; 512x3072x768 runs
	// WideS192 in 6 row tiles (16 pairs each), 256x2048x4096 WideS in 32
	// (4 each), 64x65536x128 WideS in one row tile (128 pairs: summers
	// 0-31 take two).
	{
		Name: "Hopper column sums: the swizzle left out of a partial stage's reads", File: "cuda/gemm_sm90.cu",
		Old: "lds32(unit0 + p * 128 + ((x ^ (p % 8)) << 4));",
		New: "lds32(unit0 + p * 128 + (x << 4));",
		Op:  "linear_grad_w", Shapes: []string{"1000x64x64:bias=1"}, Setup: fusedDBChosen,
	},
	{
		Name: "Hopper column sums: a full stage's rows read from the pair's first unit", File: "cuda/gemm_sm90.cu",
		Old: "lds32_rows(unit0 + p0 * 128 + (x << 4), w);",
		New: "lds32_rows(unit0 + p0 * 128, w);",
		Op:  "linear_grad_w", Shapes: []string{"1000x64x64:bias=1", "512x3072x768:bias=1"}, Setup: fusedDBChosen,
	},
	{
		Name: "Hopper column sums: only each unit's last stage kept", File: "cuda/gemm_sm90.cu",
		Old: "total[i][0] = total[i][0] + lo;", New: "total[i][0] = lo;",
		Op: "linear_grad_w", Shapes: []string{"1000x64x64:bias=1", "256x2048x4096:bias=1"}, Setup: fusedDBChosen,
	},
	{
		Name: "Hopper column sums: every row tile sums the first share of pairs", File: "cuda/gemm_sm90.cu",
		Old: "c = um * share + offset;", New: "c = offset;",
		Op: "linear_grad_w", Shapes: []string{"512x3072x768:bias=1", "256x2048x4096:bias=1"}, Setup: fusedDBChosen,
	},
	{
		// 64x64x4352 runs NarrowS in 34 row tiles of a 32-pair tile: a
		// share of 1, the last two units summing nothing (not yet run on
		// a GPU).
		Name: "Hopper column sums: a row tile's share overruns into the next one's", File: "cuda/gemm_sm90.cu",
		Old: "pair[i] = offset < share && c < kPairs ? static_cast<int>(c) : -1;",
		New: "pair[i] = offset <= share && c < kPairs ? static_cast<int>(c) : -1;",
		Op:  "linear_grad_w", Shapes: []string{"512x3072x768:bias=1", "64x64x4352:bias=1"}, Setup: fusedDBChosen,
	},
	{
		Name: "Hopper column sums: a summer's second pair left out", File: "cuda/gemm_sm90.cu",
		Old: "pair[i] = offset < share && c < kPairs ? static_cast<int>(c) : -1;",
		New: "pair[i] = offset < share && c < kPairs && i == 0 ? static_cast<int>(c) : -1;",
		Op:  "linear_grad_w", Shapes: []string{"64x65536x128:bias=1"}, Setup: fusedDBChosen,
	},
	{
		Name: "linear_nt with W where Wᵀ belongs", File: "cuda/linear_nt.cu",
		Old: "return vkern_gemm::product<true, true>(x, K, W, K, y, M, N, K, s, vkern_epilogue::Epilogue<true, false>{b});",
		New: "return vkern_gemm::product<true, false>(x, K, W, N, y, M, N, K, s, vkern_epilogue::Epilogue<true, false>{b});",
		Op:  "linear_nt", Shapes: []string{"64x48x80", "64x48x81"},
	},
	{
		Name: "linear_nt's bias skipped", File: "cuda/linear_nt.cu",
		Old: "const __half* b = c.params[param::bias] == 1 ? c.ptr<const __half>(buf::b) : nullptr;\n  return vk_linear_nt(",
		New: "const __half* b = nullptr;\n  return vk_linear_nt(",
		Op:  "linear_nt", Shapes: []string{"64x48x80", "64x48x81"},
	},
	{
		Name: "linear_grad_w overwrites dW when it should add", File: "cuda/epilogue.cuh",
		Old: "      v = out[row * cols + col] + v;\n", New: "",
		Op: "linear_grad_w", Shapes: []string{"64x48x80", "64x47x80"},
	},
	{
		Name: "linear_grad_w adds into dW when it should overwrite", File: "cuda/linear_grad.cu",
		Old: "const bool accumulate = c.params[param::accumulate] == 1;", New: "const bool accumulate = true;",
		Op: "linear_grad_w", Shapes: []string{"64x48x80:accumulate=0"},
	},
	{
		Name: "Hopper: dW's old values read with the fragment's row and column halves swapped", File: "cuda/gemm_sm90.cu",
		Old: "const int64_t r = row + 8 * step * (e >> 1), c = col + 8 * (j0 + jj) + (e & 1);",
		New: "const int64_t r = row + 8 * step * (e & 1), c = col + 8 * (j0 + jj) + (e & 1);",
		Op:  "linear_grad_w", Shapes: []string{"64x48x80"},
	},
	{
		Name: "bias_grad drops the last row of each block", File: "cuda/bias_grad.cu",
		Old: "const int n = static_cast<int>(rows - r0 < kRowBlock ? rows - r0 : kRowBlock);",
		New: "const int n = static_cast<int>(rows - r0 < kRowBlock ? rows - r0 : kRowBlock) - 1;",
		Op:  "bias_grad", Shapes: []string{"1000x64"},
	},
	{
		Name: "bias_grad walks along the row instead of down the column", File: "cuda/bias_grad.cu",
		Old: "if (r + k < n) w[k] = VK_LDG(p + (r + k) * stride);", New: "if (r + k < n) w[k] = VK_LDG(p + (r + k));",
		Op: "bias_grad", Shapes: []string{"1000x64"},
	},
	{
		Name: "bias_grad overwrites db when it should add", File: "cuda/bias_grad.cu",
		Old: "db[j] = db[j] + total;", New: "db[j] = total;",
		Op: "bias_grad", Shapes: []string{"1000x64"},
	},
	{
		// The finish is rows.cuh's, which layernorm_grad shares. 4100x40
		// is 9 groups of 512 rows and 13000x40 is 26, finished in 6 to 32
		// strands however dy aligns: at 13000x40 the last strand holds a
		// partial in every tile of 16-byte and 4-byte aligned dy, and in
		// the 32-column tile of 2-byte aligned dy. 16384x768 takes the
		// spans' finish: 128 partial rows in 8 strands of 96-column slices
		// (24 of 32-column ones).
		Name: "bias_grad loses the last strand's partial sums", File: "cuda/rows.cuh",
		Old: "for (int k = 1; k < strands; ++k) {",
		New: "for (int k = 1; k + 1 < strands; ++k) {",
		Op:  "bias_grad", Shapes: []string{"4100x40", "13000x40", "16384x768"},
	},
	{
		// Spans (CUDA, at least 768 columns of 16-byte rows): 4100x1000 is
		// 33 groups of 128 rows and two spans, the second 232 columns wide;
		// 11 slices of 96 columns or fewer (32 of 32 or fewer with
		// $VKERN_BIAS_GRAD_NARROW_SLICES=1).
		Name: "bias_grad's span finish leaves out the first group's partial row", File: "cuda/bias_grad.cu",
		Old: "sum_partial_rows<kSpanThreads, 4>(partial + lo, groups, cols, n,", New: "sum_partial_rows<kSpanThreads, 4>(partial + lo + cols, groups - 1, cols, n,",
		Op: "bias_grad", Shapes: []string{"4100x1000", "16384x768"},
	},
	{
		Name: "bias_grad's span blocks keep only their first row block", File: "cuda/bias_grad.cu",
		Old: "for (int b = 1; b < kSpanBlocks; ++b) sum +=", New: "for (int b = 1; b < 1; ++b) sum +=",
		Op: "bias_grad", Shapes: []string{"4100x1000", "16384x768"},
	},
}

// hopperAttention is an attention shape that takes attention.cu's Hopper
// kernels (variants 6 and 7) on an H100: heads of 64 columns, three tiles
// of keys and queries, the last partial.
const hopperAttention = "1x130x128x2"

// storedDS switches attention.cu's variants 5 and 20 (dq from stored dS) on
// in a mutant's source.
var storedDS = Edit{
	Old: `return v != nullptr && std::strcmp(v, "stored") == 0;`,
	New: `return v == nullptr || std::strcmp(v, "recompute") != 0;`,
}

// halfAwayLambda defines away(v): v rounded to f16 to nearest with ties away
// from zero, which CUDA has no intrinsic for: the value toward zero, or the
// next one away when v is at least halfway to it.
const halfAwayLambda = "auto away = [](float v) { const __half t = __float2half_rz(v); " +
	"const __half u = __ushort_as_half(static_cast<unsigned short>(__half_as_ushort(t) + 1)); " +
	"return fabsf(v) - fabsf(__half2float(t)) >= fabsf(__half2float(u)) - fabsf(v) ? u : t; };"

// Edits is m's edits in the order Plant applies them: its Setup, then
// the defect itself (Old by New, in m.File).
func (m Mutation) Edits() []Edit {
	return append(append(make([]Edit, 0, len(m.Setup)+1), m.Setup...), Edit{Old: m.Old, New: m.New})
}

// Plant returns the source edit that applies m (for vkern.Options'
// EditSources), failing when its snippet does not occur exactly once.
//
// m.File is a path among the sources (kernels.Sources: "cpu/gemm.cc"), or
// the path a declared op's kernel file was declared by
// ("kernels/cpu/rmsnorm.cc"), which Plant finds under kernels.DeclaredDir.
func (m Mutation) Plant() func(files map[string][]byte) error {
	return func(files map[string][]byte) error {
		for _, e := range m.Edits() {
			name := m.File
			if e.File != "" {
				name = e.File
			}
			file := name
			src, ok := files[file]
			if !ok {
				file = kernels.DeclaredPath(name)
				if src, ok = files[file]; !ok {
					return fmt.Errorf("planted defect %q: no source file %s, built-in or declared", m.Name, name)
				}
			}
			if n := bytes.Count(src, []byte(e.Old)); n != 1 {
				return fmt.Errorf("planted defect %q: %q occurs %d times in %s, want once; update the snippet to the current kernel", m.Name, e.Old, n, name)
			}
			files[file] = bytes.Replace(src, []byte(e.Old), []byte(e.New), 1)
		}
		return nil
	}
}
