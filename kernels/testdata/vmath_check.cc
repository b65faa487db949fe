// vmath_check runs cpu/vmath.h's exp_run and tanh_run over binary32
// arguments and prints, as one line of JSON, the worst error of each against
// the float64 functions:
//
//   exp   |ê − e^x| over 2⁻²³·e^x where e^x is normal, over 2⁻¹⁴⁹ (an ulp)
//         where it is subnormal;
//   tanh  |t̂ − tanh x| over 2⁻²³·|tanh x|;
//
// and "bad", the arguments whose special result is wrong (NaN must give NaN,
// an overflowing e^x +Inf, an e^x below half the least subnormal +0, tanh
// 0 exactly 0, and tanh exactly ±1 wherever it rounds to ±1 in binary32).
//
// Usage: vmath_check STRIDE (1 checks every binary32 value; a larger odd
// stride checks every STRIDE-th bit pattern, all exponents).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "cpu/vmath.h"

namespace {

struct Worst {
  double exp = 0, exp_at = 0, tanh = 0, tanh_at = 0;
  long bad = 0;
};

constexpr int kBlock = 4096;

// check_block checks the bit patterns first, first + stride, … (kBlock of
// them, or fewer at the end of the range) into w.
void check_block(uint64_t first, uint64_t stride, Worst& w) {
  float in[kBlock], e[kBlock], t[kBlock];
  {
    int n = 0;
    for (; n < kBlock && first + uint64_t(n) * stride < (uint64_t{1} << 32); ++n) {
      const uint32_t bits = uint32_t(first + uint64_t(n) * stride);
      std::memcpy(&in[n], &bits, 4);
    }
    std::memcpy(e, in, sizeof(float) * n);
    std::memcpy(t, in, sizeof(float) * n);
    vkern::exp_run(e, n);
    vkern::tanh_run(t, n);
    for (int i = 0; i < n; ++i) {
      const double x = in[i];
      if (std::isnan(x)) {
        w.bad += !std::isnan(e[i]) || !std::isnan(t[i]);
        continue;
      }
      const double E = std::exp(x);
      if (E > 0x1.fffffep127) {
        w.bad += !(std::isinf(e[i]) && e[i] > 0);
      } else if (E < 0x1p-150) {
        w.bad += e[i] != 0;
      } else {
        const double err = std::fabs(e[i] - E) / (E >= 0x1p-126 ? E * 0x1p-23 : 0x1p-149);
        if (!(err <= w.exp)) w.exp = err, w.exp_at = x;
      }
      const double T = std::tanh(x);
      if (std::fabs(float(T)) == 1.0f) {
        w.bad += t[i] != float(T);
      } else if (T == 0) {
        w.bad += t[i] != 0;
      } else {
        const double err = std::fabs(t[i] - T) / (std::fabs(T) * 0x1p-23);
        if (!(err <= w.tanh)) w.tanh = err, w.tanh_at = x;
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t stride = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1;
  if (stride == 0) {
    std::fprintf(stderr, "vmath_check: the stride must be at least 1\n");
    return 2;
  }
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<Worst> worst(threads);
  std::vector<std::thread> pool;
  // Thread k takes blocks k, k + threads, …: block b starts at pattern
  // b·kBlock·stride.
  for (unsigned k = 0; k < threads; ++k) {
    pool.emplace_back([&, k] {
      for (uint64_t b = k;; b += threads) {
        const uint64_t first = b * kBlock * stride;
        if (first >= (uint64_t{1} << 32)) break;
        Worst w;
        check_block(first, stride, w);
        Worst& into = worst[k];
        if (w.exp > into.exp) into.exp = w.exp, into.exp_at = w.exp_at;
        if (w.tanh > into.tanh) into.tanh = w.tanh, into.tanh_at = w.tanh_at;
        into.bad += w.bad;
      }
    });
  }
  for (auto& t : pool) t.join();
  Worst all;
  for (const Worst& w : worst) {
    if (w.exp > all.exp) all.exp = w.exp, all.exp_at = w.exp_at;
    if (w.tanh > all.tanh) all.tanh = w.tanh, all.tanh_at = w.tanh_at;
    all.bad += w.bad;
  }
  std::printf("{\"exp\": %.6f, \"exp_at\": %.9g, \"tanh\": %.6f, \"tanh_at\": %.9g, \"bad\": %ld}\n", all.exp,
              all.exp_at, all.tanh, all.tanh_at, all.bad);
  return 0;
}
