// beside_check holds cuda/beside.h's Plan to what the server relies on
// when it runs entries on two lanes: in every batch it draws (entries with
// one to four spans over a few buffers, overlapping, adjacent or apart,
// some empty, each read, written or both, each allowed beside or not),
// every pair of conflicting entries is ordered by the lanes' order, the
// forks, the waits and the final join; a side entry forks only from a main
// entry it conflicts with, and a main entry waits only for a side
// entry it conflicts with; and conflict itself agrees with a byte-by-byte
// reading of the spans. It prints {"checked": N, "bad": M} and exits 1
// when M > 0 (the first few failures on stderr).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "cuda/beside.h"

using vkern_beside::Span;

namespace {

// overlaps_bytewise is conflict's meaning, spelled out one byte at a time.
bool conflicts_bytewise(const std::vector<Span>& a, const std::vector<Span>& b) {
  for (const Span& x : a) {
    for (const Span& y : b) {
      if (!(x.writes || y.writes)) continue;
      for (uint64_t i = 0; i < x.bytes; ++i) {
        const uintptr_t byte = x.at + i;
        if (byte >= y.at && byte < y.at + y.bytes) return true;
      }
    }
  }
  return false;
}

}  // namespace

int main() {
  long checked = 0, bad = 0;
  auto fail = [&](const char* what, int batch, int a, int b) {
    if (bad++ < 10) std::fprintf(stderr, "%s: batch %d, entries %d and %d\n", what, batch, a, b);
  };
  std::mt19937_64 rng(20261128);
  auto pick = [&](uint64_t n) { return static_cast<uint64_t>(rng() % n); };
  vkern_beside::Plan plan;
  long sides = 0, waits = 0, forks = 0;  // so that the draws are seen to exercise each
  for (int batch = 0; batch < 4000; ++batch) {
    const int count = 1 + static_cast<int>(pick(40));
    // Three buffers of 64 bytes, 256 bytes apart: spans within one may
    // overlap, touch or miss; spans of different ones never meet.
    std::vector<std::vector<Span>> spans(count);
    std::vector<bool> beside(count);
    for (int e = 0; e < count; ++e) {
      const int n = 1 + static_cast<int>(pick(4));
      for (int k = 0; k < n; ++k) {
        const uintptr_t at = 0x10000 + 256 * pick(3) + 8 * pick(8);
        const uint64_t bytes = pick(6) == 0 ? 0 : 8 * (1 + pick(4));
        spans[e].push_back({at, bytes, pick(3) == 0});
      }
      beside[e] = pick(3) == 0;
    }
    plan.reset();
    // lane[e], and clock[e][l]: the latest entry of lane l that runs
    // before e ends (e itself for its own lane), -1 for none.
    std::vector<int> lane(count);
    std::vector<std::array<int, 2>> clock(count);
    int last_main = -1, last_side = -1;
    for (int e = 0; e < count; ++e) {
      const vkern_beside::Step step = plan.add(e, spans[e].data(), static_cast<int>(spans[e].size()), beside[e]);
      lane[e] = step.side ? 1 : 0;
      if (step.side) {
        if (!beside[e]) fail("a side entry that may not run beside", batch, e, e);
        if (step.wait >= 0) fail("a side entry that waits", batch, e, step.wait);
        // After the previous side entry, and forked after main entry
        // step.fork and so after every main entry before it.
        clock[e] = {-1, e};
        if (last_side >= 0) clock[e] = clock[last_side];
        clock[e][1] = e;
        if (step.fork >= 0) {
          const int f = step.fork;
          if (f >= e || lane[f] != 0) {
            fail("a fork from an entry that is not an earlier main entry", batch, e, f);
          } else {
            if (!conflicts_bytewise(spans[e], spans[f])) fail("a fork without a conflict", batch, e, f);
            clock[e][0] = std::max(clock[e][0], clock[f][0]);
            clock[e][1] = std::max(clock[e][1], clock[f][1]);
            ++forks;
          }
        }
        last_side = e;
        ++sides;
      } else {
        if (step.fork >= 0) fail("a main entry that forks", batch, e, step.fork);
        clock[e] = {e, -1};
        if (last_main >= 0) clock[e][1] = clock[last_main][1];
        if (step.wait >= 0) {
          const int w = step.wait;
          if (w >= e || lane[w] != 1) {
            fail("a wait for an entry that is not an earlier side entry", batch, e, w);
          } else {
            if (!conflicts_bytewise(spans[e], spans[w])) fail("a wait without a conflict", batch, e, w);
            clock[e][1] = std::max(clock[e][1], clock[w][1]);
            ++waits;
          }
        }
        last_main = e;
      }
    }
    // The end joins the side lane into the main one.
    if (plan.join() != last_side) fail("join is not the last side entry", batch, plan.join(), last_side);
    for (int b = 0; b < count; ++b) {
      for (int a = 0; a < b; ++a) {
        ++checked;
        const bool c = conflicts_bytewise(spans[a], spans[b]);
        const bool got = vkern_beside::conflict(spans[a].data(), static_cast<int>(spans[a].size()), spans[b].data(),
                                                static_cast<int>(spans[b].size()));
        if (c != got) fail("conflict disagrees with the bytes", batch, a, b);
        if (c && clock[b][lane[a]] < a) fail("conflicting entries not ordered", batch, a, b);
      }
    }
  }
  if (sides == 0 || waits == 0 || forks == 0) fail("the draws ran nothing beside, or no wait or fork", 0, 0, 0);
  std::printf("{\"checked\": %ld, \"bad\": %ld}\n", checked, bad);
  return bad == 0 ? 0 : 1;
}
