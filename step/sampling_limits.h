// The one table of sampling bounds. The engine checks every request against
// it (Engine::Validate), the CLI flags take their ranges from it, the OpenAI
// front end names the same bounds in OpenAI's words, and a worker re-checks
// what comes off the wire (proto/step_codec.cc). Where OpenAI documents a
// narrower range (temperature 0-2), the OpenAI front end says so itself.
#pragma once

#include <string>

#include "absl/strings/str_cat.h"

namespace shardlm {

struct SamplingBound {
  double lo;
  double hi;
  bool lo_open = false;  // (lo, hi] rather than [lo, hi]

  bool Contains(double v) const { return (lo_open ? v > lo : v >= lo) && v <= hi; }
  // "[0, 100]" or "(0, 1]".
  std::string Text() const { return absl::StrCat(lo_open ? "(" : "[", lo, ", ", hi, "]"); }
};

inline constexpr SamplingBound kTemperatureBound{0, 100};
inline constexpr SamplingBound kTopPBound{0, 1, /*lo_open=*/true};
inline constexpr SamplingBound kMinPBound{0, 1};
inline constexpr SamplingBound kRepetitionPenaltyBound{0, 10, /*lo_open=*/true};
inline constexpr SamplingBound kPresencePenaltyBound{-2, 2};
inline constexpr SamplingBound kFrequencyPenaltyBound{-2, 2};
inline constexpr SamplingBound kLogitBiasBound{-100, 100};
inline constexpr int kMaxTopLogprobs = 20;        // alternatives reported per token
inline constexpr int kMaxLogitBiasEntries = 300;  // logit_bias entries of one request

}  // namespace shardlm
