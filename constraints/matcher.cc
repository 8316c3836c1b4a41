#include "constraints/matcher.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "llguidance.h"

namespace shardlm {

std::string LlgErrorMessage(LlgMatcher* m) {
  const char* e = llg_matcher_get_error(m);
  std::string message = e != nullptr ? std::string(e) : std::string("unknown llguidance error");
  // Without verbose errors llguidance ends its runtime messages with this marker.
  const std::string marker = "<non-verbose/>";
  absl::StripTrailingAsciiWhitespace(&message);
  if (absl::EndsWith(message, marker)) message.resize(message.size() - marker.size());
  absl::StripTrailingAsciiWhitespace(&message);
  return message;
}

Matcher::Matcher(LlgMatcher* matcher, int32_t vocab_size, std::vector<int32_t> eos_ids)
    : m_(matcher), vocab_size_(vocab_size), eos_ids_(std::move(eos_ids)) {}

Matcher::~Matcher() { llg_free_matcher(m_); }

Matcher::Matcher(Matcher&& other) noexcept
    : m_(std::exchange(other.m_, nullptr)),
      vocab_size_(other.vocab_size_),
      eos_ids_(std::move(other.eos_ids_)) {}

Matcher& Matcher::operator=(Matcher&& other) noexcept {
  if (this != &other) {
    llg_free_matcher(m_);
    m_ = std::exchange(other.m_, nullptr);
    vocab_size_ = other.vocab_size_;
    eos_ids_ = std::move(other.eos_ids_);
  }
  return *this;
}

absl::Status Matcher::ComputeMask(std::vector<uint32_t>& mask) {
  if (m_ == nullptr) return absl::FailedPreconditionError("constraint: matcher was moved from");
  const size_t bytes = llg_matcher_get_mask_byte_size(m_);
  mask.resize(bytes / sizeof(uint32_t));
  if (llg_matcher_compute_mask_into(m_, mask.data(), bytes) != 0) {
    return absl::InternalError(
        absl::StrCat("constraint: computing the token mask failed: ", LlgErrorMessage(m_)));
  }
  return absl::OkStatus();
}

absl::Status Matcher::Consume(int32_t token) {
  if (m_ == nullptr) return absl::FailedPreconditionError("constraint: matcher was moved from");
  if (token < 0 || token >= vocab_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("constraint: token ", token, " is outside the vocabulary of ", vocab_size_));
  }
  if (llg_matcher_is_stopped(m_) && !llg_matcher_is_error(m_)) {
    if (std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "constraint: token ", token, " was refused: the constraint has ended (only EOS may follow)"));
  }
  if (llg_matcher_consume_token(m_, static_cast<uint32_t>(token)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("constraint: token ", token, " was refused: ", LlgErrorMessage(m_)));
  }
  return absl::OkStatus();
}

bool Matcher::stopped() const { return m_ == nullptr || llg_matcher_is_stopped(m_); }

bool Matcher::failed() const { return m_ == nullptr || llg_matcher_is_error(m_); }

bool Matcher::accepting() { return m_ != nullptr && llg_matcher_is_accepting(m_); }

std::unique_ptr<Matcher> Matcher::Clone() const {
  if (m_ == nullptr) return nullptr;
  return std::make_unique<Matcher>(llg_clone_matcher(m_), vocab_size_, eos_ids_);
}

int64_t Matcher::mask_words() const {
  return m_ == nullptr ? 0 : static_cast<int64_t>(llg_matcher_get_mask_byte_size(m_) / sizeof(uint32_t));
}

}  // namespace shardlm
