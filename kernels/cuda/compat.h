// One kernel source for CUDA and HIP: the CUDA names the kernels use, mapped
// to their HIP equivalents when hipcc compiles for an AMD GPU.
//
// The kernels are written in CUDA C++ and use only the names below from the
// runtime, so this list is the whole porting surface. Add a name here before
// using it in a kernel file. Under nvcc (and under hipcc for an NVIDIA
// target) nothing is renamed.
//
// What is not mapped, on purpose: inline PTX (mma.sync, ldmatrix, cp.async)
// has no HIP meaning. gemm.cu compiles its tensor-core path only where
// VKERN_PTX_MMA is defined (CUDA) and uses a portable tiled kernel elsewhere.
//
// Status: the HIP side is written against the HIP 5.x headers and has not
// been compiled or run here; the CUDA side is built and tested with nvcc.
#ifndef VKERN_CUDA_COMPAT_H
#define VKERN_CUDA_COMPAT_H

#include <cstdint>

// hipcc compiling for AMD defines __HIP__ (the compiler) before any header
// defines __HIP_PLATFORM_AMD__ (hip_runtime.h); after this block both hold.
#if defined(__HIP_PLATFORM_AMD__) || (defined(__HIP__) && !defined(__HIP_PLATFORM_NVIDIA__))

#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>

#define cudaError_t hipError_t
#define cudaSuccess hipSuccess
#define cudaErrorInvalidValue hipErrorInvalidValue
#define cudaErrorMemoryAllocation hipErrorOutOfMemory
#define cudaErrorNotSupported hipErrorNotSupported
#define cudaStream_t hipStream_t
#define cudaGetLastError hipGetLastError
#define cudaGetDevice hipGetDevice
#define cudaDeviceGetAttribute hipDeviceGetAttribute
#define cudaDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define cudaDevAttrComputeCapabilityMajor hipDeviceAttributeComputeCapabilityMajor
#define cudaMalloc hipMalloc
#define cudaFree hipFree
#define cudaFuncSetAttribute hipFuncSetAttribute
#define cudaFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize
#define cudaOccupancyMaxActiveBlocksPerMultiprocessor hipOccupancyMaxActiveBlocksPerMultiprocessor
// The server's device layer (device.cu).
#define cudaDeviceProp hipDeviceProp_t
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaEvent_t hipEvent_t
#define cudaEventCreate hipEventCreate
#define cudaEventDestroy hipEventDestroy
#define cudaEventRecord hipEventRecord
#define cudaEventSynchronize hipEventSynchronize
#define cudaEventElapsedTime hipEventElapsedTime
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamNonBlocking hipStreamNonBlocking
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaMallocHost hipHostMalloc
#define cudaFreeHost hipHostFree
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaMemsetAsync hipMemsetAsync
#define cudaMemcpyHostToDevice hipMemcpyHostToDevice
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemGetInfo hipMemGetInfo
#define cudaDriverGetVersion hipDriverGetVersion
#define cudaRuntimeGetVersion hipRuntimeGetVersion
#define cudaGetErrorName hipGetErrorName
#define cudaGetErrorString hipGetErrorString
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaSetDevice hipSetDevice
// The batches replayed as graphs (device.cu, capture.h).
#define cudaErrorStreamCaptureUnsupported hipErrorStreamCaptureUnsupported
#define cudaGraph_t hipGraph_t
#define cudaGraphExec_t hipGraphExec_t
#define cudaStreamBeginCapture hipStreamBeginCapture
#define cudaStreamCaptureModeThreadLocal hipStreamCaptureModeThreadLocal
#define cudaStreamEndCapture hipStreamEndCapture
#define cudaGraphInstantiateWithFlags hipGraphInstantiateWithFlags
#define cudaGraphLaunch hipGraphLaunch
#define cudaGraphExecDestroy hipGraphExecDestroy
#define cudaGraphDestroy hipGraphDestroy
// The collectives (nccl.cu): a second stream, ordered by events.
#define cudaStreamWaitEvent hipStreamWaitEvent
#define cudaStreamQuery hipStreamQuery
#define cudaErrorNotReady hipErrorNotReady
#define cudaEventCreateWithFlags hipEventCreateWithFlags
#define cudaEventDisableTiming hipEventDisableTiming
#define cudaStreamCreateWithPriority hipStreamCreateWithPriority
#define cudaDeviceGetStreamPriorityRange hipDeviceGetStreamPriorityRange
// RCCL: NCCL's API under its own library name.
#define VK_COLLECTIVES_NAME "rccl"
#define VK_NCCL_SONAME "librccl.so.1"
#define VK_NCCL_PYTHON_LIB "rccl/lib/librccl.so*"
#define VK_NCCL_PYTHON_PACKAGE "rccl (ROCm's)"

// What the server reports in HELLO: the backend, the device's architecture
// name, and the compiler that built it.
#define VK_BACKEND_NAME "hip"
#define VK_DEVICE_ARCH(props) std::string((props).gcnArchName)
#define VK_COMPILER_VERSION                                                                          \
  ("hipcc (HIP " + std::to_string(HIP_VERSION_MAJOR) + "." + std::to_string(HIP_VERSION_MINOR) + "." + \
   std::to_string(HIP_VERSION_PATCH) + ")")

// A butterfly step inside groups of 32 lanes. The kernels treat 32 lanes as
// their reduction unit; on a 64-wide wavefront the two halves reduce
// independently because of the explicit width.
#define VK_SHFL_XOR(value, lane_mask) __shfl_xor((value), (lane_mask), 32)

// A read-only global load (HIP 5.x has no __ldg overload for 16-bit types;
// a plain load is what __ldg amounts to there).
#define VK_LDG(pointer) (*(pointer))
// A load of what other blocks of the same kernel wrote, after the fence
// that orders it (rows.cuh's last_to_arrive): a plain load, which that
// fence makes coherent on AMD.
#define VK_LOAD_COHERENT(pointer) (*(pointer))

#else  // CUDA

#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define VK_SHFL_XOR(value, lane_mask) __shfl_xor_sync(0xffffffffu, (value), (lane_mask), 32)
#define VK_LDG(pointer) __ldg(pointer)
// Cached in L2 only (ld.global.cg), never in the SM's L1, which is not
// coherent with other SMs' writes.
#define VK_LOAD_COHERENT(pointer) __ldcg(pointer)

#define VK_BACKEND_NAME "cuda"
#define VK_COLLECTIVES_NAME "nccl"
#define VK_NCCL_SONAME "libnccl.so.2"
#define VK_NCCL_PYTHON_LIB "nvidia/nccl/lib/libnccl.so*"
#define VK_NCCL_PYTHON_PACKAGE "nvidia-nccl-cu12"
#define VK_DEVICE_ARCH(props) ("sm_" + std::to_string((props).major) + std::to_string((props).minor))
#define VK_COMPILER_VERSION                                                                       \
  ("nvcc " + std::to_string(__CUDACC_VER_MAJOR__) + "." + std::to_string(__CUDACC_VER_MINOR__) + \
   "." + std::to_string(__CUDACC_VER_BUILD__))

// Tensor-core gemm through inline PTX (mma.sync.m16n8k16, ldmatrix,
// cp.async: sm_80 and later). The host picks that path only on a device of
// compute capability 8 or more; for older targets the kernel body is empty.
#define VKERN_PTX_MMA 1

#endif

// vk_ex2_ftz is 2^z by the multiprocessor's EX2 alone on CUDA
// (ex2.approx.ftz.f32: exp2f's bits for z ≥ −126, +0 where exp2f gives a
// subnormal; bench/exp2_check.cu), exp2f on HIP. Its callers (gelu.cuh,
// attention.cu's exp2_tile, rows.cuh's row_exp) say why the flush is within
// their bounds.
__device__ __forceinline__ float vk_ex2_ftz(float z) {
#if defined(__HIP_PLATFORM_AMD__)
  return exp2f(z);
#else
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(z));
  return r;
#endif
}

// vk_prefetch_l2 asks for the 128-byte line at p to be brought into L2
// (prefetch.global.L2) without waiting for it: a hint, which a kernel
// issues for what it reads next so that the read finds it nearer. Nothing
// on HIP.
__device__ __forceinline__ void vk_prefetch_l2(const void* p) {
#if defined(__HIP_PLATFORM_AMD__)
  (void)p;
#else
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}

#endif  // VKERN_CUDA_COMPAT_H
