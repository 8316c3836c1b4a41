// The version of the coordinator <-> worker protocol (shardlm/worker/v1/worker.proto and the
// step codec). Both processes include it; a worker registering with another version, or a
// coordinator sending one, is refused with both numbers in the message.
#pragma once

#include <cstdint>

namespace shardlm {

// 3: overlapped steps; 4: steps carry the epoch; 5: constraint masks (in the step, and StepMasks).
inline constexpr uint32_t kWorkerProtocolVersion = 5;

}  // namespace shardlm
