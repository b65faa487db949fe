// The warp-level tensor-core and copy instructions of the mma.sync kernels
// (gemm.cuh's tensor-core path and attention.cu), as inline PTX: CUDA only,
// compute capability 8.0 or more (VKERN_PTX_MMA, compat.h). The Hopper
// warpgroup instructions are wgmma.cuh's.
#ifndef VKERN_CUDA_MMA_CUH
#define VKERN_CUDA_MMA_CUH

#include <cstdint>

#include "cuda/compat.h"

#if defined(VKERN_PTX_MMA)
namespace {
namespace vkern_mma {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes from global to shared; bytes < 16 reads that many and zero-fills
// the rest (bytes = 0: nothing is read, src must still be a valid pointer).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(bytes));
}
// 16 bytes from global to shared, all inside the source.
__device__ __forceinline__ void cp_async_16_full(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
}
// cp_async_16 and cp_async_16_full with the destination as a shared
// address (smem_addr's), for callers that step through a tile by adding
// offsets to one.
__device__ __forceinline__ void cp_async_16_at(uint32_t dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_16_full_at(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
// 4 bytes from global to shared (bytes 0 or 4; 0 writes a zero word).
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// cp_async_wait returns when at most N of the thread's committed groups are
// still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ldmatrix_x4: lanes 8m .. 8m + 7 give the addresses of the eight 16-byte
// rows of 8×8 matrix m; r[m] receives row lane / 4, halves 2·(lane % 4) and
// + 1 (the A fragment of a row-major tile, or the B fragment of one whose
// rows are the product's n dimension). ldmatrix_x4_trans receives the
// transposed matrix: column lane / 4, rows 2·(lane % 4) and + 1 (the B
// fragment of a tile whose rows are the k dimension).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// c += a · b for one m16n8k16 step: a row-major 16×16, b column-major 16×8,
// f16 products summed in f32. Lane l (g = l / 4, t = l % 4) holds a as rows
// g and g + 8, columns 2t, 2t + 1 and 2t + 8, 2t + 9 (a[0]: row g, a[1]:
// row g + 8, a[2], a[3] the same rows 8 columns on), b as rows 2t, 2t + 1
// (b0) and 2t + 8, 2t + 9 (b1) of column g, and c as rows g (c[0], c[1]) and
// g + 8 (c[2], c[3]), columns 2t, 2t + 1. (Not volatile: it only reads and
// writes registers, so the compiler may interleave it with the next step's
// loads.)
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// pack_f16 rounds lo and hi to f16 (to nearest even) as one fragment
// register, lo in the low half.
__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

}  // namespace vkern_mma
}  // namespace
#endif  // VKERN_PTX_MMA

#endif  // VKERN_CUDA_MMA_CUH
