#include "kernels/cpu/thread_pool.h"

#include <immintrin.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/kernel_options.h"

namespace shardlm::kernels {
namespace {

thread_local bool t_in_part = false;

int64_t SpinNanos() { return std::max<int64_t>(CurrentKernelOptions().pool_spin_us, 0) * 1000; }

// Spins until pred() holds or `nanos` have passed; true if it holds.
template <typename Pred>
bool SpinUntil(const Pred& pred, int64_t nanos) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(nanos);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (pred()) return true;
      _mm_pause();
    }
    if (std::chrono::steady_clock::now() >= deadline) return pred();
  }
}

class Pool {
 public:
  Pool() : spin_nanos_(SpinNanos()) {}

  void Run(int parts, void (*fn)(void*, int), void* ctx) {
    std::unique_lock<std::mutex> run(run_mu_, std::try_to_lock);
    if (!run.owns_lock()) {  // another thread's run: do this one here, serially
      for (int p = 0; p < parts; ++p) fn(ctx, p);
      return;
    }
    while (static_cast<int>(workers_.size()) < parts - 1) {
      const int w = static_cast<int>(workers_.size());
      workers_.emplace_back([this, w] { Work(w); });
    }
    fn_ = fn;
    ctx_ = ctx;
    pending_.store(parts - 1, std::memory_order_relaxed);
    run_ = ((run_ >> 16) + 1) << 16 | static_cast<uint64_t>(parts);
    word_.store(run_, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      // A worker asleep, or about to be: taking the lock orders this with its
      // check of word_, so it either sees the new one or gets the notify.
      { std::lock_guard<std::mutex> lock(sleep_mu_); }
      sleep_cv_.notify_all();
    }
    t_in_part = true;
    fn(ctx, 0);
    t_in_part = false;
    // The other parts: spin while they are likely to end soon, then yield
    // the core (a worker may be waiting for it on a busy host).
    auto done = [&] { return pending_.load(std::memory_order_acquire) == 0; };
    if (!SpinUntil(done, 200 * 1000)) {
      while (!done()) std::this_thread::yield();
    }
  }

 private:
  void Work(int w) {
    uint64_t seen = 0;
    for (;;) {
      auto fresh = [&] { return word_.load(std::memory_order_acquire) != seen; };
      if (!SpinUntil(fresh, spin_nanos_)) {
        std::unique_lock<std::mutex> lock(sleep_mu_);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        sleep_cv_.wait(lock, fresh);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      seen = word_.load(std::memory_order_acquire);
      // Only the workers a run counts in pending_ read fn_ and ctx_, and the
      // next run cannot begin before they are done with them.
      if (w + 1 < static_cast<int>(seen & 0xffff)) {
        t_in_part = true;
        fn_(ctx_, w + 1);
        t_in_part = false;
        pending_.fetch_sub(1, std::memory_order_release);
      }
    }
  }

  const int64_t spin_nanos_;
  std::mutex run_mu_;  // one run at a time
  std::vector<std::thread> workers_;
  // The run: fn_ and ctx_ are written before word_ moves and read after a
  // worker sees it. word_ is (run number << 16) | parts; run_ is its last
  // value (written under run_mu_).
  void (*fn_)(void*, int) = nullptr;
  void* ctx_ = nullptr;
  uint64_t run_ = 0;
  std::atomic<uint64_t> word_{0};
  std::atomic<int> pending_{0};
  std::mutex sleep_mu_;
  std::condition_variable sleep_cv_;
  std::atomic<int> sleepers_{0};
};

// Never destroyed (its workers live as long as the process, parked when
// idle), so no run can meet a pool being torn down. A child of fork() has none of the parent's workers (and
// perhaps a run's lock held by a thread that is not there): it starts a pool of its own.
std::atomic<Pool*> g_pool{nullptr};

void NewPoolInChild() { g_pool.store(nullptr); }

Pool& ThePool() {
  Pool* pool = g_pool.load(std::memory_order_acquire);
  if (pool != nullptr) return *pool;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  static bool registered = false;
  if (!registered) {
    pthread_atfork(nullptr, nullptr, NewPoolInChild);
    registered = true;
  }
  pool = g_pool.load();
  if (pool == nullptr) {
    pool = new Pool();
    g_pool.store(pool, std::memory_order_release);
  }
  return *pool;
}

}  // namespace

void RunParts(int parts, void (*fn)(void*, int), void* ctx) {
  if (parts <= 1 || t_in_part || parts > 0xffff) {
    for (int p = 0; p < parts; ++p) fn(ctx, p);
    return;
  }
  ThePool().Run(parts, fn, ctx);
}

bool InPoolPart() { return t_in_part; }

bool StepPoolEnabled() { return CurrentKernelOptions().step_pool; }

}  // namespace shardlm::kernels
