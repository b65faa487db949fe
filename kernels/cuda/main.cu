// The cuda backend's unity file: the only file the builder compiles, with
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xcompiler=-pthread
//        -I<dir> -DVKERN_SOURCE_SHA256=\"<hex>\" -o server -x cu <dir>/cuda/main.cu
//
// (the arch from the GPU's own compute capability; <dir> holds core/ and
// cuda/). The same files build for AMD GPUs with hipcc through compat.h.
// clang-format off
#include "core/server.cc"
#include "cuda/nccl.cu"
#include "cuda/device.cu"
#include "cuda/gemm_sm90.cu"
#include "cuda/gemm.cu"
#include "cuda/softmax.cu"
#include "cuda/cross_entropy.cu"
#include "cuda/op_files.inc"
#include "cuda/kernels.cu"
// clang-format on

int main() { return vkern::run_server(); }
