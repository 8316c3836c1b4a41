// What `shardlm bench` measures and how it reports it: per-request latencies
// from the timestamped stream records, their mean and percentiles, and the
// errors by gRPC status code. Printed as an aligned table or as one JSON
// object (--json).
//
//   BenchRecorder rec;
//   rec.Add(record);                 // one StreamRecord per finished request
//   BenchReport report = rec.Report(duration_s);
//   std::cout << report.Table(header) or report.Json(config).dump();
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cli/api_client.h"
#include "nlohmann/json.hpp"

namespace shardlm {

// Mean and percentiles of a sample, in ms (count 0: nothing measured).
struct LatencySummary {
  int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
  // Percentiles interpolate linearly between the closest ranks (numpy's default).
  static LatencySummary Of(std::vector<double> values);
  nlohmann::json Json() const;  // {"count", "mean", "p50", "p90", "p99"}; nulls when count is 0
};

struct BenchReport {
  int64_t completed = 0, failed = 0;
  int64_t prompt_tokens = 0, output_tokens = 0;  // of completed requests
  double duration_s = 0;
  LatencySummary ttft, tpot, itl, e2e;
  std::map<std::string, std::pair<int64_t, std::string>> errors;  // code name -> (count, an example message)

  double requests_per_s() const;
  double output_tokens_per_s() const;
  double total_tokens_per_s() const;
  // `config` is copied into the object under "config".
  nlohmann::json Json(const nlohmann::json& config) const;
  // An aligned table; `header` is its first line.
  std::string Table(const std::string& header) const;
};

// Collects the records of one measured run (not thread safe).
class BenchRecorder {
 public:
  void Add(const StreamRecord& r);
  int64_t done() const { return report_.completed + report_.failed; }
  int64_t failed() const { return report_.failed; }
  BenchReport Report(double duration_s) const;

 private:
  BenchReport report_;
  std::vector<double> ttft_, tpot_, itl_, e2e_;
};

}  // namespace shardlm
