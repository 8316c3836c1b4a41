// Counters, gauges and histograms, rendered in the Prometheus text format
// (version 0.0.4) for a /metrics endpoint.
//
// Written here rather than taken from a library: Debian 12 packages no
// Prometheus client for C++ (prometheus-cpp is not in bookworm), and the
// exposition format is a few lines of text. Only what shardlm needs: label
// sets fixed when a series is first asked for, lock-free counter and gauge
// updates, histograms with fixed buckets.
//
//   MetricsRegistry reg;
//   Counter* ok = reg.AddCounter("shardlm_requests_total", "RPCs by method and code",
//                                {{"method", "Generate"}, {"code", "OK"}});
//   ok->Add(1);
//   Histogram* ttft = reg.AddHistogram("shardlm_time_to_first_token_seconds", "...", LatencyBuckets());
//   ttft->Observe(0.012);
//   std::string text = reg.Render();
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace shardlm {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void Add(double v = 1.0);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, the last one +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Upper bounds in seconds from 1 ms to 60 s (for latencies).
std::vector<double> LatencyBuckets();

class MetricsRegistry {
 public:
  // The series `name` with `labels`, created on first use; the same call
  // again returns the same object. Pointers stay valid as long as the
  // registry. A name is one kind only (CHECKed).
  Counter* AddCounter(const std::string& name, const std::string& help, const MetricLabels& labels = {});
  Gauge* AddGauge(const std::string& name, const std::string& help, const MetricLabels& labels = {});
  Histogram* AddHistogram(const std::string& name, const std::string& help, const std::vector<double>& bounds,
                          const MetricLabels& labels = {});

  // Renders family `source` a second time under the name `alias`, with `labels` before each
  // series' own: one value under two names (vLLM's metric names beside shardlm's, which
  // Kubernetes' inference gateways read; docs/metrics.md). A source not (yet) registered
  // renders nothing.
  void AddAlias(const std::string& alias, const std::string& source, const std::string& help,
                const MetricLabels& labels = {});

  // Every series, families and aliases in name order.
  std::string Render() const;

 private:
  enum class Kind { kCounter, kGauge, kHistogram };
  struct Family {
    Kind kind;
    std::string help;
    std::map<MetricLabels, std::unique_ptr<Counter>> counters;
    std::map<MetricLabels, std::unique_ptr<Gauge>> gauges;
    std::map<MetricLabels, std::unique_ptr<Histogram>> histograms;
  };
  struct Alias {
    std::string source;
    std::string help;
    MetricLabels labels;
  };
  Family& FamilyOf(const std::string& name, const std::string& help, Kind kind);
  static std::string RenderFamily(const std::string& name, const std::string& help, const Family& family,
                                  const MetricLabels& extra);

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
  std::map<std::string, Alias> aliases_;
};

}  // namespace shardlm
