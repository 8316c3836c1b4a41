// Limits on one public request that more than one front end checks (the
// serving core's GenerateSession, the gRPC service, the OpenAI API).
#pragma once

namespace shardlm {

inline constexpr int kMaxSamples = 16;           // n (and best_of) of one request
inline constexpr int kMaxStopStrings = 8;        // stop strings of one request
inline constexpr int kMaxStopStringBytes = 256;  // bytes of one stop string
inline constexpr int kMaxPrefillChunks = 64;     // chunks of one Prefill

}  // namespace shardlm
