// Stands in for cuBLAS, and for the CUDA runtime calls compat.h does not
// map, in .ci/sm90-syntax-check's unit of bench/gemm_lab.cu: declarations
// only, so that the lab's own code is type-checked; nothing here runs.
#pragma once
typedef int cublasStatus_t;
typedef void* cublasHandle_t;
enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_OP_N = 0,
  CUBLAS_OP_T = 1,
  CUDA_R_32F = 0,
  CUDA_R_16F = 2,
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_GEMM_DEFAULT = -1
};
cublasStatus_t cublasCreate(cublasHandle_t*);
cublasStatus_t cublasDestroy(cublasHandle_t);
cublasStatus_t cublasGemmEx(cublasHandle_t, int, int, long, long, long, const void*, const void*, int, long, const void*,
                            int, long, const void*, void*, int, long, int, int);
#define cudaMemcpy hipMemcpy
#define cudaMemcpyDeviceToHost hipMemcpyDeviceToHost
#define cudaMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define cudaMemset hipMemset
#define cudaDeviceSynchronize hipDeviceSynchronize
