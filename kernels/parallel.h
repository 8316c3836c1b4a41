// at::parallel_for's contract on the step thread pool (cpu/thread_pool.h):
// f(b, e) over contiguous chunks of [begin, end), at most at::get_num_threads()
// of them and none shorter than `grain` unless the range is, all on the
// calling thread when the range is no longer than `grain`, when one thread is
// configured, or when called from inside a parallel part (ATen's or the
// pool's). The step's loops use it; ATen's own operators keep OpenMP.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/cpu/thread_pool.h"

namespace shardlm::kernels {

// Threads a loop here may use: ATen's setting, 1 inside a parallel part.
inline int LoopThreads() {
  return at::in_parallel_region() || InPoolPart() ? 1 : std::max(1, at::get_num_threads());
}

template <typename F>
void ParallelFor(int64_t begin, int64_t end, int64_t grain, const F& f) {
  if (begin >= end) return;
  const int64_t n = end - begin;
  const int threads = LoopThreads();
  if (n <= grain || n == 1 || threads == 1) {
    f(begin, end);
    return;
  }
  if (!StepPoolEnabled()) {
    at::parallel_for(begin, end, grain, f);
    return;
  }
  const int64_t g = std::max<int64_t>(1, grain);
  const int parts = static_cast<int>(std::min<int64_t>(threads, (n + g - 1) / g));
  const int64_t chunk = (n + parts - 1) / parts;
  RunParts(parts, [&](int part) {
    const int64_t b = begin + part * chunk;
    const int64_t e = std::min(end, b + chunk);
    if (b < e) f(b, e);
  });
}

// ParallelFor's contract, but each thread takes its next run of units as it
// finishes its last: remaining / (2 threads) of them, at least `grain` and at
// most `most` (guided scheduling); on one thread when no longer than `grain`.
// A thread slowed by the host does less of the work, and the runs shrink
// toward the end so that neither thread waits long for the other's last one
// (a quantized product's stream, kernels/linear.cc). With the pool off:
// ParallelFor.
template <typename F>
void ParallelForGuided(int64_t begin, int64_t end, int64_t grain, int64_t most, const F& f) {
  const int64_t n = end - begin;
  const int threads = LoopThreads();
  if (n <= std::max<int64_t>(grain, 1) || threads == 1 || !StepPoolEnabled()) {
    ParallelFor(begin, end, grain, f);
    return;
  }
  const int64_t g = std::max<int64_t>(1, grain), hi = std::max(g, most);
  const int parts = static_cast<int>(std::min<int64_t>(threads, (n + g - 1) / g));
  std::atomic<int64_t> next{begin};
  RunParts(parts, [&](int) {
    int64_t b = next.load(std::memory_order_relaxed);
    for (;;) {
      if (b >= end) return;
      const int64_t take = std::clamp<int64_t>((end - b) / (2 * parts), g, hi);
      if (!next.compare_exchange_weak(b, b + take, std::memory_order_relaxed)) continue;
      f(b, std::min(end, b + take));
      b = next.load(std::memory_order_relaxed);
    }
  });
}

// RunParts(parts, f) on the pool, or with the pool off on an OpenMP team of
// `parts` threads (one part each).
template <typename F>
void RunLoopParts(int parts, const F& f) {
  if (parts <= 1 || StepPoolEnabled()) {
    RunParts(parts, f);
    return;
  }
  at::parallel_for(0, parts, 1, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) f(static_cast<int>(p));
  });
}

}  // namespace shardlm::kernels
