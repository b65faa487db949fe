// The cpu backend's unity file: the only file the builder compiles.
//
//   $CXX -std=c++17 -O3 -march=native -pthread -I<dir>
//        -DVKERN_SOURCE_SHA256=\"<hex>\" -o server <dir>/cpu/main.cc
//
// (one command line; <dir> holds core/ and cpu/).
//
// One translation unit keeps the build to a single compiler call and lets the
// compiler inline across the core and the kernels.
// Order matters: the kernels use the pool and scratch (device.cc) and the
// bulk conversions (convert.cc); cross_entropy.cc uses softmax.cc's row
// helpers; kernels.cc, the list of every op's entry, comes last.
// clang-format off
#include "core/server.cc"
#include "cpu/device.cc"
#include "cpu/collective.cc"
#include "cpu/convert.cc"
#include "cpu/vmath.cc"
#include "cpu/gemm.cc"
#include "cpu/softmax.cc"
#include "cpu/cross_entropy.cc"
#include "cpu/op_files.inc"
#include "cpu/kernels.cc"
// clang-format on

int main() { return vkern::run_server(); }
