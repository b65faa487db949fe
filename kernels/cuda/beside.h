// The plan that runs some of a batch's entries beside the others, on a
// second stream, so that a product that leaves multiprocessors idle shares
// the device with the entries after it.
//
// The weight gradients of GPT-2's layers fill too few tiles to occupy every
// multiprocessor: the Hopper GEMM's grid is one block per tile when there
// are fewer tiles than multiprocessors, and c_fc's dW has 96 tiles of 132
// multiprocessors on an H100 or H200, attn.proj's 72. Nothing reads a dW
// until the batch's end (the norm, then AdamW), and its inputs are written
// well before it, so it can run on a second stream (the side lane) while
// the next entries' kernels (a dx product, a layernorm_grad, an
// attention_grad) take the multiprocessors it leaves. Every kernel
// computes what it computes on one stream, with the same arguments, so the
// batch's bits are the same either way.
//
// Plan orders the two lanes by the buffers the entries touch. An entry
// touches a byte range of each buffer (its pointer and the bytes its shape
// covers) and reads it, writes it, or both (its role in core/ops.h). Two
// entries conflict when a range of one overlaps a range of the other and
// one of the two writes it. Then the later must run after the earlier:
// - entries of one lane run in order, as a stream runs them;
// - a side entry forks: the side lane first waits for the end of the
//   latest main entry it conflicts with (an event of the main stream), and
//   with it for every main entry before that one, unless the side lane is
//   already past it. So it sees every earlier entry's writes, no earlier
//   entry still reads what it writes, and it starts beside the main
//   entries before it that it does not conflict with;
// - a main entry that conflicts with a side entry still pending (one the
//   main lane has not waited for) waits for the latest such side entry,
//   and with it for every side entry before it, which are no longer
//   pending;
// - the batch's end joins: the main lane waits for the last side entry.
// This is the check the host test (testdata/beside_check.cc) holds Plan
// to: every conflicting pair in every batch it draws is ordered.
//
// A lane's scratch: the launchers keep scratch between calls, all of it in
// rows.cuh's ScratchBuffers (gemm.cuh's pad_scratch and cross_entropy.cu's
// state word among them), which two kernels running at once must not
// share. A ScratchBuffer holds one buffer a lane: the server sets lane to
// the lane of the entry it launches.
//
// Lanes, in device.cu, runs the plan, and says what it measured.
//
// This file is plain C++ (no CUDA), so the host test compiles it.
#ifndef VKERN_CUDA_BESIDE_H
#define VKERN_CUDA_BESIDE_H

#include <cstdint>
#include <vector>

namespace vkern_beside {

constexpr int kLanes = 2;   // the main lane (0) and the side lane (1)
inline int lane = 0;        // the lane of the launch under way: its scratch

// Span is a byte range an entry touches, and whether it writes it.
struct Span {
  uintptr_t at;
  uint64_t bytes;
  bool writes;
};

// conflict answers whether two entries' spans conflict: some pair
// overlaps, one of the two writing. An empty span touches nothing.
inline bool conflict(const Span* a, int na, const Span* b, int nb) {
  for (int i = 0; i < na; ++i) {
    if (a[i].bytes == 0) continue;
    for (int j = 0; j < nb; ++j) {
      if (b[j].bytes == 0 || !(a[i].writes || b[j].writes)) continue;
      if (a[i].at < b[j].at + b[j].bytes && b[j].at < a[i].at + a[i].bytes) return true;
    }
  }
  return false;
}

// Step is what the server does for one entry, in order: for a side entry,
// wait first for the end of main entry fork (its index in the batch) when
// fork >= 0, then launch it on the side lane; for a main entry, wait first
// for the end of side entry wait when wait >= 0, then launch it on the main
// lane.
struct Step {
  bool side = false;
  int32_t fork = -1;
  int32_t wait = -1;
};

// Plan gives each entry of a batch, in order, its Step. The server plans a
// whole batch before it launches any of it, so that it records the end of
// a main entry only where a side entry forks from it; join answers the
// side entry the batch's end waits for (-1 when none runs beside).
class Plan {
 public:
  void reset() {
    pending_.clear();
    spans_.clear();
    mains_.clear();
    main_spans_.clear();
    forked_ = -1;
    last_side_ = -1;
  }

  // add plans entry index, whose spans are the n at spans; beside says
  // whether it may run on the side lane. It must come after every entry
  // before it.
  Step add(int32_t index, const Span* spans, int n, bool beside) {
    Step step;
    if (beside) {
      step.side = true;
      // The latest main entry it conflicts with, past those the side lane
      // already waits for.
      for (size_t k = mains_.size(); k-- > 0 && mains_[k].index > forked_;) {
        const Entry& m = mains_[k];
        if (conflict(spans, n, main_spans_.data() + m.first, m.count)) {
          step.fork = forked_ = m.index;
          break;
        }
      }
      pending_.push_back({index, spans_.size(), n});
      spans_.insert(spans_.end(), spans, spans + n);
      last_side_ = index;
      return step;
    }
    mains_.push_back({index, main_spans_.size(), n});
    main_spans_.insert(main_spans_.end(), spans, spans + n);
    // The latest pending side entry this one conflicts with: waiting for
    // it waits for every side entry before it too.
    size_t through = 0;
    for (size_t k = 0; k < pending_.size(); ++k) {
      const Entry& p = pending_[k];
      if (conflict(spans, n, spans_.data() + p.first, p.count)) through = k + 1;
    }
    if (through > 0) {
      step.wait = pending_[through - 1].index;
      pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(through));
      if (pending_.empty()) spans_.clear();
    }
    return step;
  }

  int32_t join() const { return last_side_; }

 private:
  struct Entry {
    int32_t index;
    size_t first;  // its spans in spans_ (a side entry's) or main_spans_
    int count;
  };
  std::vector<Entry> pending_;  // side entries the main lane has not waited for
  std::vector<Span> spans_;
  std::vector<Entry> mains_;  // every main entry so far
  std::vector<Span> main_spans_;
  int32_t forked_ = -1;  // the latest main entry the side lane waits for
  int32_t last_side_ = -1;
};

}  // namespace vkern_beside

#endif  // VKERN_CUDA_BESIDE_H
