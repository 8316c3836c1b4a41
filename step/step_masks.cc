#include "step/step_masks.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

namespace shardlm {

absl::Status PointRowsAtMasks(const std::vector<RowMask>& masks, int64_t vocab_size,
                              std::vector<SampleRow>& rows) {
  const int64_t max_words = (vocab_size + 31) / 32;
  std::vector<bool> given(rows.size(), false);
  for (const RowMask& m : masks) {
    if (m.row < 0 || m.row >= static_cast<int32_t>(rows.size()) || !rows[m.row].mask_follows) {
      return absl::InvalidArgumentError(
          absl::StrCat("step masks: row ", m.row, " of ", rows.size(), " does not wait for a mask"));
    }
    if (given[m.row]) return absl::InvalidArgumentError(absl::StrCat("step masks: row ", m.row, " twice"));
    if (static_cast<int64_t>(m.allowed.size()) > max_words) {
      return absl::InvalidArgumentError(absl::StrCat("step masks: row ", m.row, "'s mask of ",
                                                     m.allowed.size(), " words does not fit a vocabulary of ",
                                                     vocab_size));
    }
    given[m.row] = true;
    SampleRow& row = rows[m.row];
    row.allowed = m.allowed.empty() ? nullptr : m.allowed.data();
    row.allowed_words = static_cast<int64_t>(m.allowed.size());
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].mask_follows && !given[i]) {
      return absl::InvalidArgumentError(absl::StrCat("step masks: none for row ", i));
    }
  }
  return absl::OkStatus();
}

void MaskMailbox::Put(StepKey step, absl::StatusOr<std::vector<RowMask>> masks) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (step <= dropped_through_) return;
    masks_[step] = std::move(masks);
  }
  cv_.notify_all();
}

absl::StatusOr<std::vector<RowMask>> MaskMailbox::Take(StepKey step, const std::function<bool()>& give_up) {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    auto it = masks_.find(step);
    if (it != masks_.end()) {
      absl::StatusOr<std::vector<RowMask>> out = std::move(it->second);
      masks_.erase(it);
      return out;
    }
    if (give_up()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "step ", step.second, "'s constraint masks never came (the coordinator gave the step up)"));
    }
    cv_.wait_for(lock, std::chrono::milliseconds(20));
  }
}

void MaskMailbox::DropThrough(StepKey step) {
  std::lock_guard<std::mutex> lock(mu_);
  dropped_through_ = std::max(dropped_through_, step);
  masks_.erase(masks_.begin(), masks_.upper_bound(step));
}

void MaskMailbox::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  masks_.clear();
  dropped_through_ = {0, 0};
}

std::function<absl::Status(std::vector<SampleRow>&)> AwaitMasks(MaskMailbox* mailbox, StepKey step,
                                                                int64_t vocab_size,
                                                                std::function<bool()> give_up) {
  // The masks stay with the function, which the step keeps while it samples.
  auto kept = std::make_shared<std::vector<RowMask>>();
  return [=](std::vector<SampleRow>& rows) -> absl::Status {
    absl::StatusOr<std::vector<RowMask>> masks = mailbox->Take(step, give_up);
    if (!masks.ok()) return masks.status();
    *kept = *std::move(masks);
    return PointRowsAtMasks(*kept, vocab_size, rows);
  };
}

}  // namespace shardlm
