// The cpu backend's main translation unit: the server core, the device (its
// buffers and pool, device.cc, and its collectives, collective.cc) and the op
// dispatch. Each op kernel file (gemm.cc, softmax.cc, …) and each declared
// op's kernel file is a unit of its own (kernels.Sources lists them); the
// builder compiles the units at once, one compiler process each, and links
// the objects:
//
//   $CXX -std=c++17 -O3 -march=native -pthread -I<dir>
//        -c -o <unit>.o -MD -MF <unit>.o.d <dir>/<unit>   (each unit)
//   $CXX -std=c++17 -O3 -march=native -pthread -o server <unit>.o …
//
// (<dir> holds core/ and cpu/, and the builder's vkern_source.cc, one more
// unit, which defines the sources' SHA-256 that HELLO reports; the
// dependency files let the builder reuse a unit's object when nothing it
// reads has changed: package cache, objects.go). What the units share is in headers:
// cpu/device.h (the pool and scratch), cpu/convert.h, cpu/vmath.h and
// cpu/rows.h (inline helpers), and the run_<op> declarations in
// kernel_list.inc, which kernels.cc includes.
// clang-format off
#include "core/server.cc"
#include "cpu/device.cc"
#include "cpu/collective.cc"
#include "cpu/kernels.cc"
// clang-format on

int main() { return vkern::run_server(); }
