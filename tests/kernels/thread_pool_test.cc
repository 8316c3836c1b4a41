// The step thread pool (kernels/cpu/thread_pool.h) and ParallelFor
// (kernels/parallel.h): every part runs once, on distinct threads; nested
// and concurrent runs complete; idle workers sleep; a forked child gets a
// pool of its own.
#include "kernels/cpu/thread_pool.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "kernels/parallel.h"

namespace shardlm::kernels {
namespace {

TEST(ThreadPoolTest, EveryPartRunsOnceEachOnItsOwnThread) {
  for (int rep = 0; rep < 200; ++rep) {
    std::vector<std::atomic<int>> runs(4);
    std::mutex mu;
    std::set<std::thread::id> ids;
    std::thread::id part0;
    RunParts(4, [&](int part) {
      runs[part].fetch_add(1);
      EXPECT_TRUE(InPoolPart());
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
      if (part == 0) part0 = std::this_thread::get_id();
    });
    for (auto& r : runs) EXPECT_EQ(r.load(), 1);
    EXPECT_EQ(ids.size(), 4u);
    EXPECT_EQ(part0, std::this_thread::get_id());  // part 0 on the caller
    EXPECT_FALSE(InPoolPart());
  }
}

TEST(ThreadPoolTest, NestedRunsStayOnTheirThread) {
  std::atomic<int> inner{0};
  RunParts(2, [&](int) {
    const auto me = std::this_thread::get_id();
    RunParts(3, [&](int) {
      EXPECT_EQ(std::this_thread::get_id(), me);
      inner.fetch_add(1);
    });
  });
  EXPECT_EQ(inner.load(), 6);
}

TEST(ThreadPoolTest, ConcurrentCallersAllFinish) {
  std::atomic<long> sum{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) RunParts(2, [&](int part) { sum.fetch_add(part + 1); });
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(sum.load(), 4L * 2000 * 3);
}

TEST(ThreadPoolTest, IdleWorkersSleepAndWakeForTheNextRun) {
  std::atomic<int> n{0};
  RunParts(2, [&](int) { n.fetch_add(1); });
  // Past the spin (100 us by default) the worker sleeps: the process uses
  // next to no CPU while idle.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  timespec a{}, b{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
  const double cpu_ms = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
  EXPECT_LT(cpu_ms, 30.0) << "idle pool workers kept spinning";
  RunParts(2, [&](int) { n.fetch_add(1); });
  EXPECT_EQ(n.load(), 4);
}

TEST(ThreadPoolTest, ForkedChildGetsItsOwnPool) {
  std::atomic<int> n{0};
  RunParts(2, [&](int) { n.fetch_add(1); });
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::atomic<int> m{0};
    RunParts(2, [&](int) { m.fetch_add(1); });
    _exit(m.load() == 2 ? 0 : 1);
  }
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  pid_t done = 0;
  while ((done = waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (done == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL() << "the child's run hung";
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(ParallelForTest, CoversTheRangeOnceInChunksOfAtLeastTheGrain) {
  at::set_num_threads(2);
  for (int64_t n : {1, 2, 7, 64, 1000, 4097}) {
    for (int64_t grain : {1, 3, 100, 5000}) {
      std::vector<std::atomic<int>> hits(n);
      std::mutex mu;
      std::vector<std::pair<int64_t, int64_t>> chunks;
      ParallelFor(5, 5 + n, grain, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i - 5].fetch_add(1);
        std::lock_guard<std::mutex> lock(mu);
        chunks.emplace_back(b, e);
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "n " << n << " grain " << grain;
      EXPECT_LE(static_cast<int>(chunks.size()), 2);
      if (n <= grain) {
        EXPECT_EQ(chunks.size(), 1u);
      }
      if (chunks.size() > 1) {
        for (auto [b, e] : chunks) EXPECT_GE(e - b, std::min(grain, n / 2));
      }
    }
  }
}

TEST(ParallelForTest, SmallRangesRunOnTheCallingThread) {
  at::set_num_threads(2);
  const auto me = std::this_thread::get_id();
  int calls = 0;
  ParallelFor(0, 10, 10, [&](int64_t b, int64_t e) {
    EXPECT_EQ(std::this_thread::get_id(), me);
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 10);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace shardlm::kernels
