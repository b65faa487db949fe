package vkern

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/vkern/vkern/kerneltest"
)

// plantedDefects are real defects planted in the real C++ kernels by editing
// their sources; each mutant server is built and verified, and must be
// reported incorrect. If the verifier is weakened so that one passes, this
// test fails. If a kernel is rewritten so that a snippet is gone, this test
// fails too, and the snippet must be updated to the new code.
var plantedDefects = []kerneltest.Mutation{
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
		Name: "gelu with x² where x³ belongs", File: "cpu/elementwise.cc",
		Old: "const float t = kGeluC * (x + kGeluK * x * x * x);", New: "const float t = kGeluC * (x + kGeluK * x * x);",
		Op: "gelu", Shapes: []string{"4099"},
	},
	{
		Name: "gelu with erf where the tanh approximation belongs", File: "cpu/elementwise.cc",
		Old: "return 0.5f * x * (1.0f + std::tanh(t));", New: "return 0.5f * x * (1.0f + std::erf(x * 0.70710678f));",
		Op: "gelu", Shapes: []string{"4099", "65536"},
	},
	{
		Name: "gelu_grad with 1 − T where 1 − T² belongs", File: "cpu/elementwise.cc",
		Old: "const float sech2 = 1.0f - T * T;", New: "const float sech2 = 1.0f - T;",
		Op: "gelu_grad", Shapes: []string{"4099"},
	},
	{
		Name: "fill leaves the last element unwritten", File: "cpu/fill.cc",
		Old: "std::fill(y + chunk * kChunk, y + std::min(n, (chunk + 1) * kChunk), v);", New: "std::fill(y + chunk * kChunk, y + std::min(n - 1, (chunk + 1) * kChunk), v);",
		Op: "fill", Shapes: []string{"4099"},
	},
	{
		Name: "gelu_grad without the ½ of its first term", File: "cpu/elementwise.cc",
		Old: "return dy * (0.5f * (1.0f + T) + 0.5f * x * sech2 * inner);", New: "return dy * ((1.0f + T) + 0.5f * x * sech2 * inner);",
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
		Name: "adamw without the bias corrections", File: "cpu/adamw.cc",
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
		Old: "a.load(qkv, 3 * a.C, 1, b, h, r1, k);\n    a.load(qkv, 3 * a.C, 2, b, h, r1, v);",
		New: "a.load(qkv, 3 * a.C, 2, b, h, r1, k);\n    a.load(qkv, 3 * a.C, 1, b, h, r1, v);",
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
		Old: "dvj[c] += p[j] * gi[c];", New: "dvj[c] += ds[j] * gi[c];",
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
		Op:  "gemm_grad_b", Shapes: []string{"4100x40x40"},
	},
	{
		Name: "f16 outputs rounded half away from zero (eight-lane conversion)", File: "cpu/convert.cc",
		Old: "const u32x8 normal = (rebiased + 0x0fffu + ((rebiased >> 13) & 1u)) >> 13;",
		New: "const u32x8 normal = (rebiased + 0x1000u) >> 13;",
		Op:  "softmax_grad", Shapes: []string{"64x1000"},
	},
	{
		Name: "f16 outputs rounded toward zero (eight-lane conversion)", File: "cpu/convert.cc",
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
	// linear's bias, linear_grad_w's accumulation and bias_grad's column
	// sums.
	{
		Name: "linear's bias skipped when the depth is one block", File: "cpu/gemm.cc",
		Old: "if (out.bias != nullptr) value += bias[j];\n        c16_row[j] = f32_to_f16(value);",
		New: "if (out.bias != nullptr && !first_block) value += bias[j];\n        c16_row[j] = f32_to_f16(value);",
		Op:  "linear", Shapes: []string{"17x31x129"},
	},
	{
		Name: "linear's bias added twice", File: "cpu/gemm.cc",
		Old: "if (out.bias != nullptr) value += bias[j];\n        c16_row[j] = f32_to_f16(value);",
		New: "if (out.bias != nullptr) value += bias[j] + bias[j];\n        c16_row[j] = f32_to_f16(value);",
		Op:  "linear", Shapes: []string{"17x31x129"},
	},
	{
		Name: "linear's bias indexed by the row", File: "cpu/gemm.cc",
		Old: "if (last_block && out.bias != nullptr) f16_to_f32_run(out.bias + col0, bias, nr);",
		New: "if (last_block && out.bias != nullptr) f16_to_f32_run(out.bias + std::min(row0, out.cols - nr), bias, nr);",
		Op:  "linear", Shapes: []string{"17x31x129", "64x48x80"},
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
		Name: "linear_grad_w with x where xᵀ belongs", File: "cpu/gemm.cc",
		Old: "product(pool, scratch, Operand::transpose_of(x, K), Operand::row_major(dy, N), K, N, M, out);",
		New: "product(pool, scratch, Operand::row_major(x, M), Operand::row_major(dy, N), K, N, M, out);",
		Op:  "linear_grad_w", Shapes: []string{"33x33x33"},
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

// plant returns a source edit that applies m, failing when its snippet does
// not occur exactly once.
func plant(m kerneltest.Mutation) func(files map[string][]byte) error {
	return func(files map[string][]byte) error {
		src, ok := files[m.File]
		if !ok {
			return fmt.Errorf("planted defect %q: no source file %s", m.Name, m.File)
		}
		if n := bytes.Count(src, []byte(m.Old)); n != 1 {
			return fmt.Errorf("planted defect %q: %q occurs %d times in %s, want once; update the snippet to the current kernel", m.Name, m.Old, n, m.File)
		}
		files[m.File] = bytes.Replace(src, []byte(m.Old), []byte(m.New), 1)
		return nil
	}
}

func TestPlantedDefectsInTheCPUKernelsAreIncorrect(t *testing.T) {
	runPlanted(t, "cpu", plantedDefects)
}

// runPlanted builds one server per defect on backend, in parallel, and
// checks that each is reported incorrect.
func runPlanted(t *testing.T, backend string, defects []kerneltest.Mutation) {
	if testing.Short() {
		t.Skip("builds one server per planted defect")
	}
	for _, m := range defects {
		t.Run(m.Name, func(t *testing.T) {
			t.Parallel()
			dev := openBackend(t, backend, Options{EditSources: plant(m), QuickBuild: true})
			m.Run(t, dev)
		})
	}
}
