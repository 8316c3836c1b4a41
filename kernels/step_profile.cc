#include "kernels/step_profile.h"

#include <atomic>

namespace shardlm::kernels {
namespace {

std::atomic<bool> g_on{false};
std::array<std::atomic<int64_t>, static_cast<int>(StepPart::kCount)> g_ns{};

}  // namespace

void EnableStepProfile(bool on) { g_on.store(on); }

bool StepProfileEnabled() { return g_on.load(std::memory_order_relaxed); }

StepProfile TakeStepProfile() {
  StepProfile p;
  for (size_t i = 0; i < g_ns.size(); ++i) p.seconds[i] = static_cast<double>(g_ns[i].exchange(0)) * 1e-9;
  return p;
}

void AddStepTime(StepPart part, int64_t ns) { g_ns[static_cast<int>(part)] += ns; }

}  // namespace shardlm::kernels
