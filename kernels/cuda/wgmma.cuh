// Warpgroup MMA (wgmma) on Hopper, as inline PTX: the fences, commit and
// wait of an asynchronous group, the shared-memory matrix descriptor of a
// 128-byte-swizzled operand, and m64nNk16 f16 products with f32
// accumulators, both operands from shared memory (N = 64, 128, 192, 256) or A
// from registers (N = 64). CUDA only (VKERN_PTX_MMA, compat.h); the
// instructions exist only in an sm_90a pass, so a kernel that uses them keeps
// its body under __CUDA_ARCH_FEAT_SM90_ALL (gemm_sm90.cu, attention.cu).
//
// Layouts (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply"): a tile
// of rows of 64 halves (128 bytes, one swizzle atom wide), 1024-byte
// aligned, with the 16-byte unit u of row r stored at unit u ^ (r % 8) (what
// TMA's 128-byte swizzle writes). Read K-major (rows along M or N, the
// depth contiguous) its descriptor is smem_desc(addr, 16, 1024) and a
// 16-deep step adds 32 bytes; read MN-major (rows along the depth, M or N
// contiguous, the transpose bit set) it is smem_desc(addr, 8192, 1024) and a
// step adds 2048 bytes (16 rows), 8192 being the distance between 64-wide
// panels where N > 64.
#ifndef VKERN_CUDA_WGMMA_CUH
#define VKERN_CUDA_WGMMA_CUH

#include <cstdint>

#include "cuda/capture.h"
#include "cuda/compat.h"

#if defined(VKERN_PTX_MMA)
namespace {
namespace vkern_wgmma {

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Waits for the 128 threads of a warpgroup at named barrier id (1 …
// 15; 0 is __syncthreads's).
__device__ __forceinline__ void named_barrier(int id) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory");
}
// Pins the accumulators at this point of the instruction stream, so the
// compiler neither reads them before a wgmma_wait nor rematerialises them
// across one.
template <int R>
__device__ __forceinline__ void fence_registers(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Pins A fragments given to wgmma from registers until here (after the
// wait for the group that reads them), so that the compiler does not give
// their registers to other values while wgmma may still read them.
template <int R, int C>
__device__ __forceinline__ void fence_registers(uint32_t (&a)[R][C]) {
#pragma unroll
  for (int i = 0; i < R; ++i) {
#pragma unroll
    for (int j = 0; j < C; ++j) asm volatile("" : "+r"(a[i][j])::"memory");
  }
}

// Shared-memory matrix descriptor for a 128-byte-swizzled operand:
// start address, leading and stride byte offsets (all >> 4), layout 1 = 128B.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lead_bytes, uint32_t stride_bytes) {
  return uint64_t{(addr & 0x3FFFFu) >> 4} | uint64_t{lead_bytes >> 4} << 16 | uint64_t{stride_bytes >> 4} << 32 |
         uint64_t{1} << 62;
}

// The m64n64 products' PTX and their 32 accumulator operands, each with
// constraint C: "+f" where d is read (scale-d may be 1), "=f" where it is
// not (scale-d 0), so that the compiler need not give d a value first.
#define VKERN_WGMMA_M64N64_SS                              \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"           \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {" \
  "%0, %1, %2, %3, %4, %5, %6, %7,"                      \
  "%8, %9, %10, %11, %12, %13, %14, %15,"                \
  "%16, %17, %18, %19, %20, %21, %22, %23,"              \
  "%24, %25, %26, %27, %28, %29, %30, %31}, "            \
  "%32, %33, p, 1, 1, %35, %36;\n}\n"
#define VKERN_WGMMA_M64N64_RS                              \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"           \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {" \
  "%0, %1, %2, %3, %4, %5, %6, %7,"                      \
  "%8, %9, %10, %11, %12, %13, %14, %15,"                \
  "%16, %17, %18, %19, %20, %21, %22, %23,"              \
  "%24, %25, %26, %27, %28, %29, %30, %31}, "            \
  "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
#define VKERN_WGMMA_D32(C)                                                                                    \
  C(d[0]), C(d[1]), C(d[2]), C(d[3]), C(d[4]), C(d[5]), C(d[6]), C(d[7]), C(d[8]), C(d[9]), C(d[10]), C(d[11]), \
      C(d[12]), C(d[13]), C(d[14]), C(d[15]), C(d[16]), C(d[17]), C(d[18]), C(d[19]), C(d[20]), C(d[21]),     \
      C(d[22]), C(d[23]), C(d[24]), C(d[25]), C(d[26]), C(d[27]), C(d[28]), C(d[29]), C(d[30]), C(d[31])

// wgmma.mma_async.m64nNk16.f32.f16.f16: d (+)= A · B, A from desc_a (64 × 16),
// B from desc_b (16 × N); scale_d = 0 ignores d's old value. kTransA/kTransB
// = 1 read an MN-major operand. d[4j + e] is row 16·warp + lane/4 + 8·(e/2),
// column 8j + 2·(lane%4) + e%2 of the warpgroup's 64 × N tile.
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(VKERN_WGMMA_M64N64_SS
               : VKERN_WGMMA_D32("+f")
               : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB));
}

// wgmma_m64n64k16_set is wgmma_m64n64k16 with scale_d = 0: d = A · B, d
// written only, so that it needs no value before (no zeros for the
// compiler to put there).
template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n64k16_set(float (&d)[32], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(VKERN_WGMMA_M64N64_SS
               : VKERN_WGMMA_D32("=f")
               : "l"(desc_a), "l"(desc_b), "r"(0), "n"(kTransA), "n"(kTransB));
}

template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7,"
      "%8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23,"
      "%24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39,"
      "%40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55,"
      "%56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1, %67, %68;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB));
}

// The accumulator operands of the m64n192 and m64n256 products: their PTX
// lists (with the opening brace before them in each product) and their
// constraints C. The 256-wide lists are the 192-wide ones and 32 more.
#define VKERN_WGMMA_ACC0_95 \
  "%0, %1, %2, %3, %4, %5, %6, %7," \
  "%8, %9, %10, %11, %12, %13, %14, %15," \
  "%16, %17, %18, %19, %20, %21, %22, %23," \
  "%24, %25, %26, %27, %28, %29, %30, %31," \
  "%32, %33, %34, %35, %36, %37, %38, %39," \
  "%40, %41, %42, %43, %44, %45, %46, %47," \
  "%48, %49, %50, %51, %52, %53, %54, %55," \
  "%56, %57, %58, %59, %60, %61, %62, %63," \
  "%64, %65, %66, %67, %68, %69, %70, %71," \
  "%72, %73, %74, %75, %76, %77, %78, %79," \
  "%80, %81, %82, %83, %84, %85, %86, %87," \
  "%88, %89, %90, %91, %92, %93, %94, %95"
#define VKERN_WGMMA_ACC96 VKERN_WGMMA_ACC0_95 "}, "
#define VKERN_WGMMA_ACC128 \
  VKERN_WGMMA_ACC0_95 "," \
  "%96, %97, %98, %99, %100, %101, %102, %103," \
  "%104, %105, %106, %107, %108, %109, %110, %111," \
  "%112, %113, %114, %115, %116, %117, %118, %119," \
  "%120, %121, %122, %123, %124, %125, %126, %127}, "
#define VKERN_WGMMA_D96(C) \
      C(d[0]), C(d[1]), C(d[2]), C(d[3]), C(d[4]), C(d[5]), C(d[6]), C(d[7]), \
      C(d[8]), C(d[9]), C(d[10]), C(d[11]), C(d[12]), C(d[13]), C(d[14]), C(d[15]), \
      C(d[16]), C(d[17]), C(d[18]), C(d[19]), C(d[20]), C(d[21]), C(d[22]), C(d[23]), \
      C(d[24]), C(d[25]), C(d[26]), C(d[27]), C(d[28]), C(d[29]), C(d[30]), C(d[31]), \
      C(d[32]), C(d[33]), C(d[34]), C(d[35]), C(d[36]), C(d[37]), C(d[38]), C(d[39]), \
      C(d[40]), C(d[41]), C(d[42]), C(d[43]), C(d[44]), C(d[45]), C(d[46]), C(d[47]), \
      C(d[48]), C(d[49]), C(d[50]), C(d[51]), C(d[52]), C(d[53]), C(d[54]), C(d[55]), \
      C(d[56]), C(d[57]), C(d[58]), C(d[59]), C(d[60]), C(d[61]), C(d[62]), C(d[63]), \
      C(d[64]), C(d[65]), C(d[66]), C(d[67]), C(d[68]), C(d[69]), C(d[70]), C(d[71]), \
      C(d[72]), C(d[73]), C(d[74]), C(d[75]), C(d[76]), C(d[77]), C(d[78]), C(d[79]), \
      C(d[80]), C(d[81]), C(d[82]), C(d[83]), C(d[84]), C(d[85]), C(d[86]), C(d[87]), \
      C(d[88]), C(d[89]), C(d[90]), C(d[91]), C(d[92]), C(d[93]), C(d[94]), C(d[95])
#define VKERN_WGMMA_D128(C) \
      VKERN_WGMMA_D96(C), \
      C(d[96]), C(d[97]), C(d[98]), C(d[99]), C(d[100]), C(d[101]), C(d[102]), C(d[103]), \
      C(d[104]), C(d[105]), C(d[106]), C(d[107]), C(d[108]), C(d[109]), C(d[110]), C(d[111]), \
      C(d[112]), C(d[113]), C(d[114]), C(d[115]), C(d[116]), C(d[117]), C(d[118]), C(d[119]), \
      C(d[120]), C(d[121]), C(d[122]), C(d[123]), C(d[124]), C(d[125]), C(d[126]), C(d[127])

template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {" VKERN_WGMMA_ACC128 "%128, %129, p, 1, 1, %131, %132;\n}\n"
               : VKERN_WGMMA_D128("+f")
               : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB));
}


template <int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n192k16(float (&d)[96], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n192k16.f32.f16.f16 {" VKERN_WGMMA_ACC96 "%96, %97, p, 1, 1, %99, %100;\n}\n"
               : VKERN_WGMMA_D96("+f")
               : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA), "n"(kTransB));
}

template <int N, int kTransA, int kTransB>
__device__ __forceinline__ void wgmma(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  if constexpr (N == 256) wgmma_m64n256k16<kTransA, kTransB>(d, desc_a, desc_b, scale_d);
  if constexpr (N == 192) wgmma_m64n192k16<kTransA, kTransB>(d, desc_a, desc_b, scale_d);
  if constexpr (N == 128) wgmma_m64n128k16<kTransA, kTransB>(d, desc_a, desc_b, scale_d);
  if constexpr (N == 64) wgmma_m64n64k16<kTransA, kTransB>(d, desc_a, desc_b, scale_d);
}

// wgmma_m64n64k16_rs: d (+)= A · B with A from registers: each warp w of
// the warpgroup gives rows 16w .. 16w + 15 of the 64 × 16 A as an
// mma.sync m16n8k16 A fragment (vkern_mma::mma_16816's a), B from desc_b as
// in wgmma_m64n64k16. The registers of a must not change until the group
// that reads them is waited for.
template <int kTransB>
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b,
                                                   int scale_d) {
  asm volatile(VKERN_WGMMA_M64N64_RS
               : VKERN_WGMMA_D32("+f")
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(kTransB));
}

// wgmma_m64n64k16_rs_set is wgmma_m64n64k16_rs with scale_d = 0 (d written
// only, as wgmma_m64n64k16_set).
template <int kTransB>
__device__ __forceinline__ void wgmma_m64n64k16_rs_set(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(VKERN_WGMMA_M64N64_RS
               : VKERN_WGMMA_D32("=f")
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(0), "n"(kTransB));
}

// wgmma_m64n256k16_rs: d (+)= A · B with A from registers (each warp's
// 16 rows as an mma.sync m16n8k16 A fragment, as in wgmma_m64n64k16_rs), B
// from desc_b (16 × 256). The registers of a must not change until the
// group that reads them is waited for.
template <int kTransB>
__device__ __forceinline__ void wgmma_m64n256k16_rs(float (&d)[128], const uint32_t (&a)[4], uint64_t desc_b,
                                                    int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {" VKERN_WGMMA_ACC128
               "{%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"
               : VKERN_WGMMA_D128("+f")
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(kTransB));
}

// Whether the module loaded on a device holds the sm_90a bodies: each
// translation unit is a module of its own and has its own copy.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ const int kSm90aBody = 1;
#else
__device__ const int kSm90aBody = 0;
#endif

// sm90a_loaded says whether device has compute capability 9.0 and this
// unit's module there holds the sm_90a bodies, which the host must know
// before it launches a kernel that uses these instructions (other passes
// compile such a kernel's body to a trap). Read once per device (< 64): the
// first call copies one int from the device, which synchronises it (and
// so is not made during a batch's capture, which it spoils: capture.h). A
// failed runtime call's error is cleared, not left for the next launch's
// check.
inline bool sm90a_loaded(int device) {
  constexpr int kMaxDevices = 64;
  static signed char known[kMaxDevices];  // 0 unknown, 1 yes, -1 no
  if (device < 0 || device >= kMaxDevices) return false;
  if (known[device] == 0 && vkern_capture::spoil()) return false;
  if (known[device] == 0) {
    int major = 0, minor = 0, body = 0;
    cudaError_t err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    const bool hopper = err == cudaSuccess && major == 9 && minor == 0;
    if (hopper) err = cudaMemcpyFromSymbol(&body, kSm90aBody, sizeof body);
    if (err != cudaSuccess) (void)cudaGetLastError();
    known[device] = hopper && err == cudaSuccess && body == 1 ? 1 : -1;
  }
  return known[device] == 1;
}

}  // namespace vkern_wgmma
}  // namespace
#endif  // VKERN_PTX_MMA

#endif  // VKERN_CUDA_WGMMA_CUH
