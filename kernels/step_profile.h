// Where a forward step's time goes, for the benchmarks' breakdown: each part
// of the step is timed by a scope, off unless enabled (then two clock reads
// per scope; a step has about a hundred).
//
//   { StepPartTimer t(StepPart::kAttention); ... }
//   EnableStepProfile(true); ... ; StepProfile p = TakeStepProfile();
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

namespace shardlm::kernels {

enum class StepPart {
  kProjections,  // kernels::Linear: the matrix products, the LM head included
  kAttention,    // writing K/V to the pool and paged attention
  kElementwise,  // embedding, norms, rotary, residual adds, SiLU x up
  kCollectives,  // all-gather, reduce-scatter, the logits' gather
  kSampling,     // logits to tokens on rank 0
  kCount
};

struct StepProfile {
  std::array<double, static_cast<int>(StepPart::kCount)> seconds{};
  double operator[](StepPart p) const { return seconds[static_cast<int>(p)]; }
};

void EnableStepProfile(bool on);
bool StepProfileEnabled();
StepProfile TakeStepProfile();  // what was counted since the last take; resets
void AddStepTime(StepPart part, int64_t ns);

class StepPartTimer {
 public:
  explicit StepPartTimer(StepPart part) : part_(part), on_(StepProfileEnabled()) {
    if (on_) start_ = std::chrono::steady_clock::now();
  }
  ~StepPartTimer() {
    if (on_) {
      AddStepTime(part_, std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now() - start_)
                             .count());
    }
  }
  StepPartTimer(const StepPartTimer&) = delete;
  StepPartTimer& operator=(const StepPartTimer&) = delete;

 private:
  StepPart part_;
  bool on_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace shardlm::kernels
