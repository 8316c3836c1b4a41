#include "common/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace shardlm {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MetricsTest, RendersCountersGaugesAndLabelsInTheTextFormat) {
  MetricsRegistry reg;
  reg.AddCounter("x_total", "things", {{"method", "Generate"}, {"code", "OK"}})->Add(3);
  reg.AddCounter("x_total", "things", {{"method", "Generate"}, {"code", "OK"}})->Add(2);  // same series
  reg.AddGauge("depth", "queue\ndepth")->Set(7.5);
  reg.AddGauge("weird", "w", {{"v", "a\"b\\c\nd"}})->Set(-1);
  EXPECT_EQ(reg.Render(),
            "# HELP depth queue\\ndepth\n"
            "# TYPE depth gauge\n"
            "depth 7.5\n"
            "# HELP weird w\n"
            "# TYPE weird gauge\n"
            "weird{v=\"a\\\"b\\\\c\\nd\"} -1\n"
            "# HELP x_total things\n"
            "# TYPE x_total counter\n"
            "x_total{method=\"Generate\",code=\"OK\"} 5\n");
}

TEST(MetricsTest, HistogramBucketsAreCumulativeWithInfAndSum) {
  MetricsRegistry reg;
  Histogram* h = reg.AddHistogram("lat_seconds", "latency", {0.1, 1.0}, {{"rank", "0"}});
  h->Observe(0.05);
  h->Observe(0.1);  // on a bound: counts in that bucket (le)
  h->Observe(0.5);
  h->Observe(30);
  EXPECT_EQ(reg.Render(),
            "# HELP lat_seconds latency\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{rank=\"0\",le=\"0.1\"} 2\n"
            "lat_seconds_bucket{rank=\"0\",le=\"1\"} 3\n"
            "lat_seconds_bucket{rank=\"0\",le=\"+Inf\"} 4\n"
            "lat_seconds_sum{rank=\"0\"} 30.65\n"
            "lat_seconds_count{rank=\"0\"} 4\n");
}

TEST(MetricsTest, ConcurrentUpdatesAreAllCounted) {
  MetricsRegistry reg;
  Counter* c = reg.AddCounter("n_total", "n");
  Histogram* h = reg.AddHistogram("h", "h", LatencyBuckets());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c->Add();
        h->Observe(0.002);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->value(), 40000);
  EXPECT_EQ(h->snapshot().count, 40000u);
  EXPECT_EQ(h->snapshot().cumulative[1], 40000u);  // 0.002 <= 0.0025
  EXPECT_EQ(h->snapshot().cumulative[0], 0u);
}

// One value under two names: the alias renders the source's series with its own name, help
// and extra labels, in name order among the families, and follows later updates.
TEST(MetricsTest, AnAliasRendersTheSourceUnderItsName) {
  MetricsRegistry reg;
  Counter* c = reg.AddCounter("shardlm_tokens_total", "tokens", {{"kind", "prompt"}});
  Histogram* h = reg.AddHistogram("shardlm_ttft_seconds", "ttft", {0.1});
  reg.AddAlias("vllm:tokens_total", "shardlm_tokens_total", "vLLM's tokens", {{"model_name", "m"}});
  reg.AddAlias("vllm:ttft_seconds", "shardlm_ttft_seconds", "vLLM's ttft", {{"model_name", "m"}});
  reg.AddAlias("vllm:missing", "shardlm_missing", "nothing behind it");
  c->Add(3);
  h->Observe(0.05);
  const std::string text = reg.Render();
  EXPECT_THAT(text, HasSubstr("# HELP vllm:tokens_total vLLM's tokens\n# TYPE vllm:tokens_total counter\n"
                              "vllm:tokens_total{model_name=\"m\",kind=\"prompt\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("vllm:ttft_seconds_bucket{model_name=\"m\",le=\"0.1\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("shardlm_tokens_total{kind=\"prompt\"} 3\n"));
  EXPECT_THAT(text, Not(HasSubstr("vllm:missing")));
  EXPECT_LT(text.find("shardlm_ttft_seconds"), text.find("vllm:tokens_total"));  // name order
}

TEST(MetricsDeathTest, OneNameIsOneKind) {
  MetricsRegistry reg;
  reg.AddCounter("a", "a");
  EXPECT_DEATH(reg.AddGauge("a", "a"), "two kinds");
}

}  // namespace
}  // namespace shardlm
