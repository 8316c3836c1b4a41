#include "tokenizer/stop_text.h"

#include <algorithm>

namespace shardlm {

StopText::StopText(const Tokenizer* tokenizer, std::vector<std::string> stops, int min_indent)
    : stops_(std::move(stops)), min_indent_(min_indent) {
  if (tokenizer != nullptr)
    detok_ = std::make_unique<IncrementalDetokenizer>(*tokenizer, /*skip_special=*/true);
}

std::string StopText::Add(int32_t token) {
  if (!detok_ || stopped_) return "";
  return Push(detok_->Append(token));
}

std::string StopText::Finish() {
  if (!detok_ || stopped_) return "";
  std::string out = Push(detok_->Finish());
  out += held_;
  held_.clear();
  return out;
}

size_t StopText::DedentAt(size_t* undecided) const {
  *undecided = 0;
  if (min_indent_ <= 0) return std::string::npos;
  size_t line = held_at_line_start_ ? 0 : held_.find('\n');
  if (line != std::string::npos && !held_at_line_start_) ++line;
  while (line != std::string::npos && line <= held_.size()) {
    size_t i = line;
    while (i < held_.size() && (held_[i] == ' ' || held_[i] == '\t')) ++i;
    const bool shallow = static_cast<int>(i - line) < min_indent_;
    // Only indentation so far (or a '\r' that may begin a "\r\n"): undecided while shallow.
    if (i == held_.size() || (held_[i] == '\r' && i + 1 == held_.size())) {
      if (shallow) *undecided = held_.size() - line;
      return std::string::npos;
    }
    const bool blank = held_[i] == '\n' || (held_[i] == '\r' && held_[i + 1] == '\n');
    if (!blank && shallow) return line;
    line = held_.find('\n', i);
    if (line != std::string::npos) ++line;
  }
  return std::string::npos;
}

// The earliest stop string found in the held tail plus the new piece ends the
// text before it, as does a line indented less than the minimum (whichever
// comes first); otherwise the longest tail that could still become either is
// held back.
std::string StopText::Push(const std::string& piece) {
  held_ += piece;
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) cut = std::min(cut, held_.find(s));
  size_t undecided = 0;
  cut = std::min(cut, DedentAt(&undecided));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  size_t keep = undecided;
  for (const std::string& s : stops_) {
    for (size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  held_at_line_start_ = out.empty() ? held_at_line_start_ : out.back() == '\n';
  return out;
}

}  // namespace shardlm
