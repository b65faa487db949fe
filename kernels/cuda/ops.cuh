// The ops on a CUDA (or HIP) device: the host-side entry points.
//
// Every matrix is row-major and every pointer is a device pointer; f16 is
// IEEE binary16 (__half, the same bits as the server's uint16_t). Each call
// enqueues its kernels on stream s and returns the launch's error (a
// configuration error, or an error left by an earlier asynchronous failure);
// it does not synchronise. Dimensions are >= 1 (the server checks); index
// arithmetic that multiplies two dimensions is 64-bit.
//
// Semantics match the cpu backend (kernels/cpu/gemm.cc, softmax.cc,
// cross_entropy.cc, bias_grad.cc):
// products and sums in f32, f16 outputs rounded once to nearest-even, IEEE
// special values propagated as by the plain formula.
//
// Scratch (device memory allocated on first need with cudaMalloc, grown with
// cudaFree + cudaMalloc, which synchronise the device, and kept until the
// process exits; one buffer per file, on the device current at its first
// allocation):
// - vk_softmax, vk_softmax_grad: only for rows too long to hold on chip
//   (C > 65,536 for softmax; for softmax_grad, C > 32,768 and past what one
//   block's shared memory holds, 58,080 on Hopper), and on compute
//   capability 9 only past what a 16-block cluster holds (C > 524,288, or
//   262,144 with 2-byte accesses): 8 bytes per row per 32,768-element
//   segment. cudaErrorMemoryAllocation when it cannot be had.
// - the gemms, linear and linear_grad_w: only for products of at least 2³⁰
//   multiply-adds with an operand whose row length is not a multiple of 8
//   (or whose base is not 16-byte aligned): a copy of each such operand with
//   rows padded to a multiple of 64, at most 2 GiB in all. When that cannot
//   be had, the kernel reads the operand in place instead (slower, no
//   error).
// - vk_cross_entropy: one 8-byte word on first use (the count of rows kept,
//   set on the stream before each call with an ignore_index), and for rows
//   too long to hold on chip (V > 65,536) 8 bytes per
//   row per 32,768-element segment. cudaErrorMemoryAllocation when it cannot
//   be had.
// - global_norm: 16 bytes per 8,192-element tile of g, for the tiles' partial
//   sums. cudaErrorMemoryAllocation when it cannot be had.
// - bias_grad: 4 bytes per output column per group of 512 rows (the
//   partial column sums) and 4 bytes per tile of up to 256 columns (the
//   counters that pick the block which finishes a tile, cleared on the
//   stream once, when allocated), when M > 512; on its spans
//   (bias_grad.cu), 4 bytes per column per 128 rows and no counters.
//   cudaErrorMemoryAllocation when it cannot be had.
// The first gemm call on a device of compute capability 9.0 also copies one
// int from the device (which synchronises it) to learn whether the sm_90a
// kernels (gemm_sm90.cu) are loaded; later calls only enqueue.
// Each of the server's two lanes (beside.h) has its own scratch, chosen by
// vkern_beside::lane when a call is launched; calls launched on one lane
// must not run concurrently on different streams or host threads (the
// kernel server runs one request at a time, and a lane is a stream). Every
// allocator of scratch follows capture.h's rules, so that a batch the
// server replays as a CUDA graph never runs on freed scratch.
#ifndef VKERN_CUDA_OPS_CUH
#define VKERN_CUDA_OPS_CUH

#include <cstdint>

#include "cuda/compat.h"

// C (f32, M×N) = A (M×K) · B (K×N).
cudaError_t vk_gemm(const __half* A, const __half* B, float* C, int64_t M, int64_t N, int64_t K, cudaStream_t s);

// dA (M×K) = dC (M×N) · Bᵀ, where B is stored K×N.
cudaError_t vk_gemm_grad_a(const __half* dC, const __half* B, __half* dA, int64_t M, int64_t N, int64_t K,
                           cudaStream_t s);

// dB (K×N) = Aᵀ · dC (M×N), where A is stored M×K.
cudaError_t vk_gemm_grad_b(const __half* A, const __half* dC, __half* dB, int64_t M, int64_t N, int64_t K,
                           cudaStream_t s);

// y (f16, M×N) = x (M×K) · W (K×N) + b, the bias b (N) added to every row
// in the epilogue; b null: no bias. r (f16, M×N) not null: y = that sum
// + r, the residual. pre (f16, M×N) not null (r null): pre = that sum and
// y = gelu of it.
cudaError_t vk_linear(const __half* x, const __half* W, const __half* b, const __half* r, __half* y, __half* pre,
                      int64_t M, int64_t N, int64_t K, cudaStream_t s);

// dx (f16, M×K) = dy (M×N) · Wᵀ, where W is stored K×N; pre (f16, M×K) not
// null: times gelu′(pre).
cudaError_t vk_linear_grad_x(const __half* dy, const __half* W, const __half* pre, __half* dx, int64_t M, int64_t N,
                             int64_t K, cudaStream_t s);

// y (f16, M×N) = x (M×K) · Wᵀ + b, where W is stored N×K, the bias b (N)
// added to every row in the epilogue; b null: no bias.
cudaError_t vk_linear_nt(const __half* x, const __half* W, const __half* b, __half* y, int64_t M, int64_t N,
                         int64_t K, cudaStream_t s);

// dW (f32, K×N) = xᵀ · dy, or dW += xᵀ · dy when accumulate, where x is
// stored M×K and dy M×N.
cudaError_t vk_linear_grad_w(const __half* x, const __half* dy, float* dW, int64_t M, int64_t N, int64_t K,
                             bool accumulate, cudaStream_t s);

// As vk_linear_grad_w, and db (f32, N) += the column sums of dy, as
// bias_grad forms them (linear_grad_w with bias 1; linear_grad.cu says
// which kernel forms them).
cudaError_t vk_linear_grad_w_bias(const __half* x, const __half* dy, float* dW, float* db, int64_t M, int64_t N,
                                  int64_t K, bool accumulate, cudaStream_t s);

// db (f32, N) += the column sums of dy (f16, M×N), as bias_grad forms them
// (bias_grad.cu): linear_grad_w's db with bias 1. spans false keeps to
// bias_grad's tiles, never its cooperative spans.
cudaError_t vk_bias_grad(const __half* dy, float* db, int64_t M, int64_t N, cudaStream_t s, bool spans = true);

// How the gemms (and linear, linear_nt, linear_grad_w) sum each dot product on a
// device of this compute capability major, for HELLO's dot_accumulation
// (PROTOCOL.md, "HELLO").
const char* vk_gemm_dot_accumulation(int cc_major);

// Y[r] = exp(X[r] − max X[r]) / Σ exp(X[r] − max X[r]), for each of R rows of C.
cudaError_t vk_softmax(const __half* X, __half* Y, int64_t R, int64_t C, cudaStream_t s);

// dX[r] = Y[r] ⊙ (dY[r] − Σ dY[r] ⊙ Y[r]), for each of R rows of C.
cudaError_t vk_softmax_grad(const __half* dY, const __half* Y, __half* dX, int64_t R, int64_t C, cudaStream_t s);

// cross_entropy with the mean reduction, forward and backward fused: for each
// of R rows of V logits whose label l is not ignore_index,
// loss[r] = log Σ exp(logits[r]) − logits[r, l] (unscaled) and
// dLogits[r] = grad_scale·(softmax(logits[r]) − onehot(l)) / n, n the rows
// not ignored;
// ignored rows get 0 and are not read. ignore_index is a 32-bit label value,
// or INT64_MIN for none. A label neither in [0, V) nor ignore_index is not
// used (its row gets loss NaN and zeros) and its row is recorded in the
// device word *bad_row by atomicMin (the caller sets it to ~0 first).
cudaError_t vk_cross_entropy(const __half* logits, const int32_t* labels, float* loss, __half* dLogits, int64_t R,
                             int64_t V, int64_t ignore_index, double grad_scale, unsigned long long* bad_row,
                             cudaStream_t s);

namespace vkern {

struct Call;

// A kernel entry: enqueues call's kernels on s without waiting. problem is
// the device word where an op with a checked input records the first
// element that broke its domain (atomicMin; nullptr for other ops). Each
// op's file defines run_<op>, with the return type at the start of the
// line; kernels.Sources lists them (kernel_list.inc).
using CudaKernel = cudaError_t (*)(const Call& call, unsigned long long* problem, cudaStream_t s);

// find_kernel returns the entry of op op_id, or nullptr when this backend
// has none.
CudaKernel find_kernel(uint32_t op_id);

}  // namespace vkern

#endif  // VKERN_CUDA_OPS_CUH
