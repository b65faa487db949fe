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
		Name: "gelu_grad without the ½ of its first term", File: "cpu/elementwise.cc",
		Old: "return dy * (0.5f * (1.0f + T) + 0.5f * x * sech2 * inner);", New: "return dy * ((1.0f + T) + 0.5f * x * sech2 * inner);",
		Op: "gelu_grad", Shapes: []string{"4099"},
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
			dev := openBackend(t, backend, Options{editSources: plant(m)})
			m.Run(t, dev)
		})
	}
}
