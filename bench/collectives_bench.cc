// Latency of the Gloo collectives the forward pass uses, at decode-sized and
// prefill-sized activations, world size 2..N, ranks as threads over loopback.
//
//   build/shardlm_collectives_bench [--world 2] [--iters 200]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gloo/rendezvous/hash_store.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "cli/flags.h"
#include "collectives/gloo_communicator.h"

namespace shardlm {
namespace {

using Clock = std::chrono::steady_clock;

int Main(int argc, char** argv) {
  int world = 0, iters = 0;
  int64_t hidden = 0;
  FlagSet f("collectives_bench");
  f.Int("world", "ranks (threads)", 2, 2, 16).To(&world);
  f.Int("iters", "iterations per size", 200, 1, 100000).To(&iters);
  f.Int("hidden", "model width", 768, 8, 1 << 16).To(&hidden);
  int exit_code = 0;
  if (!ParseArguments(f, argc, argv, 1, "", 0, &exit_code)) return exit_code;
  at::set_num_threads(1);
  std::printf(
      "| world | tokens | all-gather us | reduce-scatter us | MB/s (reduce-scatter input) "
      "|\n|---|---|---|---|---|\n");
  for (int64_t tokens : {1, 8, 128}) {
    auto store = std::make_shared<gloo::rendezvous::HashStore>();
    double ag_us = 0, rs_us = 0;
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        auto comm = MakeGlooCommunicator({r, world}, store, GlooOptions{});
        if (!comm.ok()) return;
        at::Tensor shard = at::randn({tokens, hidden / world});
        at::Tensor full = at::randn({tokens, hidden});
        for (int i = 0; i < 10; ++i) (*comm)->AllGather(shard, 1).IgnoreError();  // warm-up
        auto t0 = Clock::now();
        for (int i = 0; i < iters; ++i) (*comm)->AllGather(shard, 1).IgnoreError();
        auto t1 = Clock::now();
        for (int i = 0; i < iters; ++i) (*comm)->ReduceScatter(full, 1).status().IgnoreError();
        auto t2 = Clock::now();
        if (r == 0) {
          ag_us = std::chrono::duration<double, std::micro>(t1 - t0).count() / iters;
          rs_us = std::chrono::duration<double, std::micro>(t2 - t1).count() / iters;
        }
      });
    }
    for (auto& t : threads) t.join();
    std::printf("| %d | %lld | %.1f | %.1f | %.0f |\n", world, static_cast<long long>(tokens), ag_us, rs_us,
                tokens * hidden * 4 / rs_us);
  }
  return 0;
}

}  // namespace
}  // namespace shardlm

int main(int argc, char** argv) { return shardlm::Main(argc, argv); }
