#include "cli/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_format.h"

namespace shardlm {

namespace {

std::string FormatSeconds(double s) {
  if (s < 60) return absl::StrFormat("%.0fs", s);
  if (s < 3600) return absl::StrFormat("%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return absl::StrFormat("%dh%02dm", static_cast<int>(s) / 3600, static_cast<int>(s) / 60 % 60);
}

}  // namespace

Progress::Progress(std::string label, int64_t total) : Progress(std::move(label), total, isatty(2) != 0) {}

Progress::Progress(std::string label, int64_t total, bool terminal)
    : label_(std::move(label)),
      total_(total),
      terminal_(terminal),
      start_(Clock::now()),
      last_draw_(start_) {}

double Progress::elapsed_s() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

void Progress::Update(int64_t done, const std::string& detail) {
  const auto now = Clock::now();
  const double since = std::chrono::duration<double>(now - last_draw_).count();
  if (terminal_) {
    if (since >= 0.1 || !drawn_) Draw(done, detail);
    return;
  }
  const int64_t decile = total_ > 0 ? done * 10 / total_ : 0;
  if (since >= 2.0 || decile > last_decile_) {
    last_decile_ = decile;
    Draw(done, detail);
  }
}

void Progress::Finish(int64_t done, const std::string& detail) {
  if (finished_) return;
  finished_ = true;
  if (terminal_ || done != last_done_) Draw(done, detail);
  if (terminal_) std::fputc('\n', stderr);
  std::fflush(stderr);
}

void Progress::Draw(int64_t done, const std::string& detail) {
  last_draw_ = Clock::now();
  last_done_ = done;
  drawn_ = true;
  const double elapsed = elapsed_s();
  std::string line = label_;
  if (total_ > 0) {
    const double frac = std::min(1.0, static_cast<double>(done) / static_cast<double>(total_));
    if (terminal_) {
      constexpr int kWidth = 24;
      const int filled = static_cast<int>(frac * kWidth);
      line += " [" + std::string(filled, '#') + std::string(kWidth - filled, '.') + "]";
    }
    line += absl::StrFormat(" %d/%d (%.0f%%)", done, total_, 100 * frac);
  } else {
    line += absl::StrFormat(" %d done", done);
  }
  if (!detail.empty()) line += ", " + detail;
  line += ", " + FormatSeconds(elapsed);
  if (total_ > 0 && done > 0 && done < total_) {
    line +=
        ", ETA " + FormatSeconds(elapsed * static_cast<double>(total_ - done) / static_cast<double>(done));
  }
  if (terminal_) {
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

}  // namespace shardlm
