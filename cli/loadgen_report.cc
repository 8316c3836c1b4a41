#include "cli/loadgen_report.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_format.h"

namespace shardlm {

namespace {

using json = nlohmann::json;

double Ms(StreamRecord::Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// numpy.percentile's "linear": between the values at ranks floor and ceil of q (n - 1).
double Percentile(const std::vector<double>& sorted, double q) {
  const double rank = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(sorted.size() - 1, lo + 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - static_cast<double>(lo));
}

}  // namespace

LatencySummary LatencySummary::Of(std::vector<double> values) {
  LatencySummary s;
  s.count = static_cast<int64_t>(values.size());
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  s.p50 = Percentile(values, 0.50);
  s.p90 = Percentile(values, 0.90);
  s.p99 = Percentile(values, 0.99);
  return s;
}

json LatencySummary::Json() const {
  auto v = [&](double x) { return count > 0 ? json(x) : json(nullptr); };
  return {{"count", count}, {"mean", v(mean)}, {"p50", v(p50)}, {"p90", v(p90)}, {"p99", v(p99)}};
}

void BenchRecorder::Add(const StreamRecord& r) {
  if (!r.status.ok()) {
    ++report_.failed;
    auto& [count, example] = report_.errors[GrpcCodeName(r.status.error_code())];
    if (count++ == 0) example = r.status.error_message();
    return;
  }
  ++report_.completed;
  report_.prompt_tokens += r.prompt_tokens;
  const int64_t out = static_cast<int64_t>(r.tokens.size());
  report_.output_tokens += out;
  const double e2e = Ms(r.end - r.start);
  e2e_.push_back(e2e);
  if (r.arrivals.empty()) return;
  const double ttft = Ms(r.arrivals.front().first - r.start);
  ttft_.push_back(ttft);
  if (out > 1) tpot_.push_back((e2e - ttft) / static_cast<double>(out - 1));
  // Inter-token latency, per token: tokens that came with the first one have
  // gap 0; a later message of n tokens after a gap g gives n gaps of g / n.
  // So a request's mean ITL is its TPOT measured to its last token.
  itl_.insert(itl_.end(), static_cast<size_t>(r.arrivals.front().second - 1), 0.0);
  for (size_t k = 1; k < r.arrivals.size(); ++k) {
    const int32_t n = r.arrivals[k].second;
    const double gap = Ms(r.arrivals[k].first - r.arrivals[k - 1].first) / n;
    itl_.insert(itl_.end(), static_cast<size_t>(n), gap);
  }
}

BenchReport BenchRecorder::Report(double duration_s) const {
  BenchReport r = report_;
  r.duration_s = duration_s;
  r.ttft = LatencySummary::Of(ttft_);
  r.tpot = LatencySummary::Of(tpot_);
  r.itl = LatencySummary::Of(itl_);
  r.e2e = LatencySummary::Of(e2e_);
  return r;
}

double BenchReport::requests_per_s() const {
  return duration_s > 0 ? static_cast<double>(completed) / duration_s : 0.0;
}
double BenchReport::output_tokens_per_s() const {
  return duration_s > 0 ? static_cast<double>(output_tokens) / duration_s : 0.0;
}
double BenchReport::total_tokens_per_s() const {
  return duration_s > 0 ? static_cast<double>(prompt_tokens + output_tokens) / duration_s : 0.0;
}

json BenchReport::Json(const json& config) const {
  json errs = json::object();
  for (const auto& [code, ce] : errors) errs[code] = {{"count", ce.first}, {"example", ce.second}};
  return {{"config", config},
          {"completed", completed},
          {"failed", failed},
          {"duration_s", duration_s},
          {"requests_per_s", requests_per_s()},
          {"output_tokens_per_s", output_tokens_per_s()},
          {"total_tokens_per_s", total_tokens_per_s()},
          {"prompt_tokens", prompt_tokens},
          {"output_tokens", output_tokens},
          {"ttft_ms", ttft.Json()},
          {"tpot_ms", tpot.Json()},
          {"itl_ms", itl.Json()},
          {"e2e_ms", e2e.Json()},
          {"errors", errs}};
}

std::string BenchReport::Table(const std::string& header) const {
  std::string t = header + "\n\n";
  auto row = [&](const char* name, const std::string& value) {
    t += absl::StrFormat("%-22s %14s\n", name, value);
  };
  row("completed requests", absl::StrFormat("%d", completed));
  row("failed requests", absl::StrFormat("%d", failed));
  row("duration (s)", absl::StrFormat("%.2f", duration_s));
  row("requests/s", absl::StrFormat("%.2f", requests_per_s()));
  row("output tokens/s", absl::StrFormat("%.1f", output_tokens_per_s()));
  row("total tokens/s", absl::StrFormat("%.1f", total_tokens_per_s()));
  row("prompt tokens", absl::StrFormat("%d", prompt_tokens));
  row("output tokens", absl::StrFormat("%d", output_tokens));
  t += absl::StrFormat("\n%-22s %10s %10s %10s %10s %8s\n", "latency (ms)", "mean", "p50", "p90", "p99",
                       "count");
  auto lat = [&](const char* name, const LatencySummary& s) {
    if (s.count == 0) {
      t += absl::StrFormat("%-22s %10s %10s %10s %10s %8d\n", name, "-", "-", "-", "-", 0);
    } else {
      t += absl::StrFormat("%-22s %10.2f %10.2f %10.2f %10.2f %8d\n", name, s.mean, s.p50, s.p90, s.p99,
                           s.count);
    }
  };
  lat("time to first token", ttft);
  lat("time per output token", tpot);
  lat("inter-token latency", itl);
  lat("end-to-end latency", e2e);
  if (!errors.empty()) {
    t += absl::StrFormat("\n%-22s %8s  %s\n", "errors", "count", "example");
    for (const auto& [code, ce] : errors) {
      t += absl::StrFormat("%-22s %8d  %s\n", code, ce.first, ce.second.substr(0, 160));
    }
  }
  return t;
}

}  // namespace shardlm
