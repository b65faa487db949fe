// The cuda backend's main translation unit: the server core, the device
// (device.cu, and its collectives through NCCL, nccl.cu) and the op
// dispatch. Every other .cu file of cuda/ (one per op, or a few: the
// matmul family's are gemm.cu, linear.cu, linear_nt.cu and linear_grad.cu,
// sharing gemm.cuh) is a translation unit of its own, and so is each
// declared op's kernel file; kernels.Sources lists them (Units), the builder
// compiles them at once, one nvcc each, and links the objects:
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xcompiler=-pthread
//        -I<dir> -c -o <unit>.o -x cu <dir>/<unit>   (each unit, and the builder's vkern_source.cc)
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Xcompiler=-pthread -o server <unit>.o …
//
// (the arch from the GPU's own compute capability; <dir> holds core/ and
// cuda/). Device code never calls across units (no -rdc): each unit's
// kernels are launched from its own host code, and units share only
// headers (ops.cuh, rows.cuh, epilogue.cuh) and the run_<op> declarations
// in kernel_list.inc. The same files build for AMD GPUs with hipcc through
// compat.h.
// clang-format off
#include "core/server.cc"
#include "cuda/nccl.cu"
#include "cuda/device.cu"
#include "cuda/kernels.cu"
// clang-format on

int main() { return vkern::run_server(); }
