// Included first by .ci/sm90-syntax-check's units: turns on the CUDA-only
// Hopper code (VKERN_PTX_MMA, the sm_90a bodies) under hipcc, and stands in
// for what CUDA has and HIP lacks: __grid_constant__, the generic-to-shared
// conversion, __syncwarp, __all_sync, __ldg on any type, the driver entry
// point and the extended launch. Syntax and types only: nothing built here
// runs, and the stand-ins compute nothing that matters.
#pragma once
#define VKERN_PTX_MMA 1
#define __CUDA_ARCH_FEAT_SM90_ALL 1
#define __grid_constant__
#include "cuda/compat.h"

__device__ inline size_t __cvta_generic_to_shared(const void* p) { return reinterpret_cast<size_t>(p); }
__device__ inline void __syncwarp(unsigned = 0xffffffffu) {}
__device__ inline bool vk_shim_all_sync(unsigned, int p) { return p != 0; }
#define __all_sync vk_shim_all_sync
template <typename T>
__device__ inline T vk_shim_ldg(const T* p) {
  return *p;
}
#define __ldg vk_shim_ldg

#define cudaDevAttrComputeCapabilityMinor hipDeviceAttributeComputeCapabilityMinor
#define cudaMemcpyFromSymbol hipMemcpyFromSymbol
#define cudaMemset hipMemset
#define cudaDeviceSynchronize hipDeviceSynchronize
#define cudaFuncAttributePreferredSharedMemoryCarveout hipFuncAttributePreferredSharedMemoryCarveout
typedef enum { cudaDriverEntryPointSuccess = 0, cudaDriverEntryPointSymbolNotFound = 1 } cudaDriverEntryPointQueryResult;
#define cudaEnableDefault 0
inline hipError_t cudaGetDriverEntryPoint(const char*, void**, unsigned long long, cudaDriverEntryPointQueryResult*) {
  return hipSuccess;
}
typedef enum { cudaLaunchAttributeClusterDimension = 4 } cudaLaunchAttributeID;
typedef struct {
  cudaLaunchAttributeID id;
  union {
    struct {
      unsigned x, y, z;
    } clusterDim;
  } val;
} cudaLaunchAttribute;
typedef struct {
  dim3 gridDim, blockDim;
  size_t dynamicSmemBytes;
  hipStream_t stream;
  cudaLaunchAttribute* attrs;
  unsigned numAttrs;
} cudaLaunchConfig_t;
template <typename... K, typename... A>
hipError_t cudaLaunchKernelEx(const cudaLaunchConfig_t*, void (*)(K...), A&&...) {
  return hipSuccess;
}
#define cudaOccupancyMaxActiveClusters(n, f, c) (*(n) = 1, hipSuccess)
