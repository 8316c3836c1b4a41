#include "tokenizer/stop_text.h"

#include <algorithm>

namespace shardlm {

StopText::StopText(const Tokenizer* tokenizer, std::vector<std::string> stops) : stops_(std::move(stops)) {
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

// The first stop string (in the order given) found in the held tail plus the
// new piece ends the text before it; otherwise the longest tail that could
// start a stop string is held back.
std::string StopText::Push(const std::string& piece) {
  held_ += piece;
  for (const std::string& s : stops_) {
    const size_t at = held_.find(s);
    if (at != std::string::npos) {
      stopped_ = true;
      std::string out = held_.substr(0, at);
      held_.clear();
      return out;
    }
  }
  size_t keep = 0;
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
  return out;
}

}  // namespace shardlm
