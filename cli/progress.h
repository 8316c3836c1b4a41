// Progress of a long command on stderr. On a terminal: one line redrawn in
// place (at most 10 times a second) with a bar, done/total, the caller's
// detail and an ETA. Otherwise (a log file, CI): a plain line every ~2 s or
// whenever another 10% is done, so logs stay short and greppable.
//
//   Progress progress("batch", lines.size());
//   for (...) progress.Update(done, absl::StrFormat("%.1f tok/s", rate));
//   progress.Finish(done, "");  // ends the redrawn line
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace shardlm {

class Progress {
 public:
  // `total` 0: unknown (no bar, no ETA). `terminal`: redraw in place; by
  // default when stderr is a terminal.
  Progress(std::string label, int64_t total);
  Progress(std::string label, int64_t total, bool terminal);

  // Shows `done` of the total with `detail` when it is time to.
  void Update(int64_t done, const std::string& detail);
  // Shows the final state once and, on a terminal, ends the line.
  void Finish(int64_t done, const std::string& detail);
  double elapsed_s() const;

 private:
  void Draw(int64_t done, const std::string& detail);

  using Clock = std::chrono::steady_clock;
  std::string label_;
  int64_t total_;
  bool terminal_;
  Clock::time_point start_, last_draw_;
  int64_t last_decile_ = 0;
  int64_t last_done_ = -1;  // shown by the last Draw
  bool drawn_ = false;
  bool finished_ = false;
};

}  // namespace shardlm
