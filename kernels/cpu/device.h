// The cpu backend's device, as its kernel files see it: the thread pool
// every kernel fans out on, the scratch memory kept across RUNs, and the
// functions device.cc defines for them. Each kernel file is its own
// translation unit and includes this header; device.cc defines the pool,
// the scratch and the dispatch.
#ifndef VKERN_CPU_DEVICE_H
#define VKERN_CPU_DEVICE_H

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.h"

namespace vkern {

// ThreadPool runs one batch of independent tasks at a time on a fixed set of
// threads: the calling thread (worker 0) plus size() - 1 workers that sleep
// between batches. Tasks are handed out one index at a time from a shared
// counter, so uneven tasks balance themselves. A task learns which worker runs
// it, so kernels can give each worker its own scratch memory, allocated by the
// caller before the batch (an allocation failure then stays on the calling
// thread, where it becomes an OUT_OF_MEMORY response).
class ThreadPool {
 public:
  explicit ThreadPool(unsigned threads) : threads_(threads < 1 ? 1 : threads) {
    try {
      for (unsigned w = 1; w < threads_; ++w) workers_.emplace_back([this, w] { work(w); });
    } catch (...) {
      stop();  // the threads already started must be joined before the members go
      throw;
    }
  }

  ~ThreadPool() { stop(); }

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  unsigned size() const { return threads_; }

  // Calls task(i, worker) once for every i in [0, count), worker in
  // [0, size()), and returns when all are done. Tasks must not throw.
  template <class Task>
  void parallel_for(size_t count, const Task& task) {
    if (count == 0) return;
    if (count == 1 || workers_.empty()) {
      for (size_t i = 0; i < count; ++i) task(i, 0u);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      task_ = [](const void* ctx, size_t i, unsigned worker) { (*static_cast<const Task*>(ctx))(i, worker); };
      ctx_ = &task;
      count_ = count;
      next_.store(0, std::memory_order_relaxed);
      busy_ = static_cast<unsigned>(workers_.size());
      ++generation_;
    }
    wake_.notify_all();
    drain(0);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return busy_ == 0; });
  }

 private:
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
  }

  void drain(unsigned worker) {
    for (size_t i = next_.fetch_add(1); i < count_; i = next_.fetch_add(1)) task_(ctx_, i, worker);
  }

  void work(unsigned worker) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
      }
      drain(worker);
      std::lock_guard<std::mutex> lock(mu_);
      if (--busy_ == 0) done_.notify_one();
    }
  }

  const unsigned threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  bool stopping_ = false;
  uint64_t generation_ = 0;
  unsigned busy_ = 0;
  void (*task_)(const void*, size_t, unsigned) = nullptr;
  const void* ctx_ = nullptr;
  size_t count_ = 0;
  std::atomic<size_t> next_{0};
};

// Scratch is kernel working memory kept across RUNs and only ever grown, so
// a repeated shape allocates nothing. Each kernel owns its slots.
class Scratch {
 public:
  enum Slot { kGemmPackedL, kGemmPackedR, kGemmSums, kSoftmaxRows, kCrossEntropyRows, kSlotCount };

  // floats returns room for count floats in slot; growing zero-fills.
  float* floats(Slot slot, size_t count) {
    std::vector<float>& v = slots_[slot];
    if (v.size() < count) {
      v.clear();
      v.shrink_to_fit();
      v.resize(count);
    }
    return v.data();
  }

 private:
  std::vector<float> slots_[kSlotCount];
};

// The kernels, one file per op (gemm.cc, softmax.cc, cross_entropy.cc, …),
// each defining run_<op>(call, problem); kernels.cc lists them
// (kernel_list.inc declares them). They run on cpu_pool() with
// cpu_scratch(); matrices are row-major, every dimension is >= 1 and every
// buffer holds its whole shape (core/ops.h).
using Kernel = Result (*)(const Call& call, uint64_t* problem);
Kernel find_kernel(uint32_t op_id);
ThreadPool& cpu_pool();
Scratch& cpu_scratch();
// How the three gemms sum each dot product, for HELLO's dot_accumulation.
std::string gemm_dot_accumulation();

}  // namespace vkern

#endif  // VKERN_CPU_DEVICE_H
