#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/logging.h"

namespace shardlm {
namespace {

// Label values escape backslash, double quote and newline; help text
// backslash and newline (the exposition format's rules).
std::string Escape(const std::string& s, bool quote) {
  std::string out;
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.15g", v);
  return buf;
}

std::string LabelText(const MetricLabels& labels, const std::string& extra_key = "",
                      const std::string& extra_value = "") {
  MetricLabels all = labels;
  if (!extra_key.empty()) all.emplace_back(extra_key, extra_value);
  if (all.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < all.size(); ++i) {
    if (i > 0) out += ",";
    out += all[i].first + "=\"" + Escape(all[i].second, true) + "\"";
  }
  return out + "}";
}

}  // namespace

void Counter::Add(double v) {
  double old = value_.load(std::memory_order_relaxed);
  while (!value_.compare_exchange_weak(old, old + v, std::memory_order_relaxed)) {
  }
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  CHECK(std::is_sorted(bounds_.begin(), bounds_.end())) << "histogram bounds must ascend";
}

void Histogram::Observe(double v) {
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[bucket];
  sum_ += v;
  ++count_;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    s.cumulative.push_back(running);
  }
  s.sum = sum_;
  s.count = count_;
  return s;
}

std::vector<double> LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 10, 30, 60};
}

MetricsRegistry::Family& MetricsRegistry::FamilyOf(const std::string& name, const std::string& help,
                                                   Kind kind) {
  auto [it, inserted] = families_.try_emplace(name);
  if (inserted) {
    it->second.kind = kind;
    it->second.help = help;
  }
  CHECK(it->second.kind == kind) << "metric " << name << " registered with two kinds";
  return it->second;
}

Counter* MetricsRegistry::AddCounter(const std::string& name, const std::string& help,
                                     const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = FamilyOf(name, help, Kind::kCounter).counters[labels];
  if (!slot) slot = std::make_unique<Counter>();
  return slot.get();
}

Gauge* MetricsRegistry::AddGauge(const std::string& name, const std::string& help,
                                 const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = FamilyOf(name, help, Kind::kGauge).gauges[labels];
  if (!slot) slot = std::make_unique<Gauge>();
  return slot.get();
}

Histogram* MetricsRegistry::AddHistogram(const std::string& name, const std::string& help,
                                         const std::vector<double>& bounds, const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = FamilyOf(name, help, Kind::kHistogram).histograms[labels];
  if (!slot) slot = std::make_unique<Histogram>(bounds);
  return slot.get();
}

void MetricsRegistry::AddAlias(const std::string& alias, const std::string& source, const std::string& help,
                               const MetricLabels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  aliases_[alias] = Alias{source, help, labels};
}

// One family's lines under `name`, each series with `extra` labels first.
std::string MetricsRegistry::RenderFamily(const std::string& name, const std::string& help,
                                          const Family& family, const MetricLabels& extra) {
  static const char* const kTypes[] = {"counter", "gauge", "histogram"};
  auto with = [&extra](const MetricLabels& labels) {
    MetricLabels all = extra;
    all.insert(all.end(), labels.begin(), labels.end());
    return all;
  };
  std::string out = "# HELP " + name + " " + Escape(help, false) + "\n";
  out += "# TYPE " + name + " " + kTypes[static_cast<int>(family.kind)] + "\n";
  for (const auto& [labels, c] : family.counters)
    out += name + LabelText(with(labels)) + " " + Number(c->value()) + "\n";
  for (const auto& [labels, g] : family.gauges)
    out += name + LabelText(with(labels)) + " " + Number(g->value()) + "\n";
  for (const auto& [labels, h] : family.histograms) {
    const Histogram::Snapshot s = h->snapshot();
    for (size_t i = 0; i <= s.bounds.size(); ++i) {
      const std::string le = i < s.bounds.size() ? Number(s.bounds[i]) : "+Inf";
      out +=
          name + "_bucket" + LabelText(with(labels), "le", le) + " " + std::to_string(s.cumulative[i]) + "\n";
    }
    out += name + "_sum" + LabelText(with(labels)) + " " + Number(s.sum) + "\n";
    out += name + "_count" + LabelText(with(labels)) + " " + std::to_string(s.count) + "\n";
  }
  return out;
}

std::string MetricsRegistry::Render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::string> rendered;  // by name, so families and aliases interleave in order
  for (const auto& [name, family] : families_) rendered[name] = RenderFamily(name, family.help, family, {});
  for (const auto& [name, alias] : aliases_) {
    auto it = families_.find(alias.source);
    if (it != families_.end()) rendered[name] = RenderFamily(name, alias.help, it->second, alias.labels);
  }
  std::string out;
  for (const auto& [name, text] : rendered) out += text;
  return out;
}

}  // namespace shardlm
