// A stand-in for CUDA's cuda.h in .ci/sm90-syntax-check: the driver types
// and enums gemm_sm90.cu names (CUtensorMap and the tensor-map encoding's
// arguments), nothing more. Not a build header.
#pragma once
#include <cstdint>
typedef struct {
  alignas(64) unsigned long long opaque[16];
} CUtensorMap;
typedef int CUresult;
typedef uint64_t cuuint64_t;
typedef uint32_t cuuint32_t;
typedef enum { CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6, CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7 } CUtensorMapDataType;
typedef enum { CU_TENSOR_MAP_INTERLEAVE_NONE = 0 } CUtensorMapInterleave;
typedef enum { CU_TENSOR_MAP_SWIZZLE_NONE = 0, CU_TENSOR_MAP_SWIZZLE_128B = 3 } CUtensorMapSwizzle;
typedef enum {
  CU_TENSOR_MAP_L2_PROMOTION_NONE = 0,
  CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2,
  CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3
} CUtensorMapL2promotion;
typedef enum { CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0 } CUtensorMapFloatOOBfill;
#ifndef CUDA_SUCCESS
#define CUDA_SUCCESS 0
#endif
