package vkern

import (
	"testing"

	"github.com/vkern/vkern/kernels"
	"github.com/vkern/vkern/kerneltest"
)

// The cuda backend runs the same conformance suite and must catch the same
// kinds of planted defect as the cpu backend. These tests skip where nvcc or
// an NVIDIA GPU does not answer; on a GPU machine without Go, build the test
// binary here (CGO_ENABLED=0 go test -c -o bin/vkern.test .) and run
// bin/vkern.test -test.run CUDA there.

func TestCUDABackendConformance(t *testing.T) {
	dev := openBackend(t, "cuda", Options{})
	kerneltest.All(t, dev)
	t.Run("add in place", func(t *testing.T) { checkAddInPlace(t, dev) })
}

// cudaDefects plant the cpu suite's kinds of defect in the CUDA kernels.
// On a Hopper GPU every GEMM whose operands are 16-byte aligned runs the
// TMA + wgmma kernels of gemm_sm90.cu, so the defects in gemm.cu's mma.sync
// kernels run at shapes with a row length that is not a multiple of 8 (81,
// 47), and the Hopper kernels get defects of their own at aligned shapes.
var cudaDefects = []kerneltest.Mutation{
	{
		Name: "output elements left unwritten", File: "cuda/gemm.cu",
		Old: "if (row < rows) store_pair(out, row, col, cols, pairs_aligned, acc[i][j][0], acc[i][j][1]);",
		New: "if (row < rows && (row | col) != 0) store_pair(out, row, col, cols, pairs_aligned, acc[i][j][0], acc[i][j][1]);",
		Op:  "gemm", Shapes: []string{"64x48x81"},
	},
	{
		Name: "f32 output rounded through f16", File: "cuda/gemm.cu",
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
		Name: "off-by-one row", File: "cuda/gemm.cu",
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
		Old: "const int swz = sizeof(Out) == 2 ? (r & 7) : ((r & 3) << 1);",
		New: "const int swz = sizeof(Out) == 2 ? (r & 7) : ((r & 1) << 1);",
		Op:  "gemm", Shapes: []string{"256x256x64"},
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
		Old: "const int mine = RowSlice<T, E, VW>::slot(label, t);", New: "const int mine = RowSlice<T, E, VW>::slot(label + 1, t);",
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
		Name: "gelu with x² where x³ belongs", File: "cuda/elementwise.cu",
		Old: "const float t = kGeluC * (x + kGeluK * x * x * x);", New: "const float t = kGeluC * (x + kGeluK * x * x);",
		Op: "gelu", Shapes: []string{"4099", "65536"},
	},
	{
		Name: "gelu with erf where the tanh approximation belongs", File: "cuda/elementwise.cu",
		Old: "return 0.5f * x * (1.0f + tanhf(t));", New: "return 0.5f * x * (1.0f + erff(x * 0.70710678f));",
		Op: "gelu", Shapes: []string{"4099", "65536"},
	},
	{
		Name: "gelu_grad with 1 − T where 1 − T² belongs", File: "cuda/elementwise.cu",
		Old: "const float sech2 = 1.0f - T * T;", New: "const float sech2 = 1.0f - T;",
		Op: "gelu_grad", Shapes: []string{"4099", "65536"},
	},
	{
		Name: "gelu_grad without the ½ of its first term", File: "cuda/elementwise.cu",
		Old: "return dy * (0.5f * (1.0f + T) + 0.5f * x * sech2 * inner);", New: "return dy * ((1.0f + T) + 0.5f * x * sech2 * inner);",
		Op: "gelu_grad", Shapes: []string{"4099", "65536"},
	},
	// The f16 output rounding, toward zero and half away from zero: in the
	// Hopper GEMM epilogue (the staged path of interior tiles, and the
	// element path of edge tiles) and in the row ops' store (pack, used by
	// every softmax and softmax_grad path).
	// attention: the quick shapes run the tensor-core kernels on the
	// finite distributions and the exact row kernels on special.
	{
		Name: "attention without the causal mask (tensor cores)", File: "cuda/attention.cu",
		Old: "s[n][e] = diagonal && key > row[e / 2] ? vkern_rows::neg_inf() : s[n][e] * scale2;",
		New: "s[n][e] = s[n][e] * scale2;",
		Op:  "attention", Shapes: []string{"2x17x24x3", "1x64x64x4"},
	},
	{
		Name: "attention's lse without the row max (tensor cores)", File: "cuda/attention.cu",
		Old: "if (t == 0) lse[bh * a.T + row[r]] = (m[r] + log2f(l[r])) * kLn2;",
		New: "if (t == 0) lse[bh * a.T + row[r]] = log2f(l[r]) * kLn2;",
		Op:  "attention", Shapes: []string{"2x17x24x3"},
	},
	{
		Name: "attention's scores scaled by 1/D where 1/√D belongs", File: "cuda/attention.cu",
		Old: "const float scale2 = static_cast<float>(kLog2eDouble / std::sqrt(static_cast<double>(a.D)));",
		New: "const float scale2 = static_cast<float>(kLog2eDouble / static_cast<double>(a.D));",
		Op:  "attention", Shapes: []string{"2x17x24x3"},
	},
	{
		Name: "attention's P rounded to f16 once (the low half dropped)", File: "cuda/attention.cu",
		Old: "out[n][e] += scaled<kShift>(sum_hi[e] + sum_lo[e] * (1.0f / 2048.0f), shift[e / 2]);",
		New: "out[n][e] += scaled<kShift>(sum_hi[e], shift[e / 2]);",
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
		Old: "out[a.C + c] = __float2half_rn(dk[n][2 * r + e] * scale);",
		New: "out[a.C + c] = __float2half_rn(dk[n][2 * r + e]);",
		Op:  "attention_grad", Shapes: []string{"2x17x24x3"},
	},
	{
		Name: "attention_grad's D from head 0's y", File: "cuda/attention.cu",
		Old: "const __half* v = y + row * a.C + h * a.D;",
		New: "const __half* v = y + row * a.C;",
		Op:  "attention_grad", Shapes: []string{"2x17x24x3"},
	},
	{
		Name: "attention_grad's dk never scaled back from the split (tensor cores)", File: "cuda/attention.cu",
		Old: "product_split<DP, true>(hi, lo, qs, lane, shift, dk);",
		New: "product_split<DP, false>(hi, lo, qs, lane, shift, dk);",
		Op:  "attention_grad", Shapes: []string{"2x17x24x3"},
	},
	{
		Name: "attention_grad's dq without the causal mask (tensor cores)", File: "cuda/attention.cu",
		Old: "p[n][e] = diagonal && j > row[e / 2] ? 0.0f : exp2f(p[n][e] * scale2 - lse2[e / 2]);",
		New: "p[n][e] = exp2f(p[n][e] * scale2 - lse2[e / 2]);",
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
}

// halfAwayLambda defines away(v): v rounded to f16 to nearest with ties away
// from zero, which CUDA has no intrinsic for: the value toward zero, or the
// next one away when v is at least halfway to it.
const halfAwayLambda = "auto away = [](float v) { const __half t = __float2half_rz(v); " +
	"const __half u = __ushort_as_half(static_cast<unsigned short>(__half_as_ushort(t) + 1)); " +
	"return fabsf(v) - fabsf(__half2float(t)) >= fabsf(__half2float(u)) - fabsf(v) ? u : t; };"

func TestPlantedDefectsInTheCUDAKernelsAreIncorrect(t *testing.T) {
	runPlanted(t, "cuda", cudaDefects)
}

// Every planted defect's snippet must match the current sources exactly
// once, checked here without building anything, so that a kernel edit that
// orphans a snippet fails on CI, not only on a GPU machine.
func TestPlantedDefectSnippetsMatchTheSources(t *testing.T) {
	for backend, defects := range map[string][]kerneltest.Mutation{"cpu": plantedDefects, "cuda": cudaDefects} {
		for _, m := range defects {
			files, _, err := kernels.Sources(backend)
			if err != nil {
				t.Fatal(err)
			}
			if err := plant(m)(files); err != nil {
				t.Errorf("%s: %v", backend, err)
			}
		}
	}
}
