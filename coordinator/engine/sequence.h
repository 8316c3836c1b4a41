// One request as the engine runs it. Each part has one writer:
//   - SchedSeq (scheduler.h): the scheduler's view (queue state, the tokens
//     computed, steps in flight); the Scheduler, and the Engine as it plans
//     and applies steps;
//   - `kv`: its hold on the KV cache, written by the KvManager alone;
//   - the rest: the Engine's (the request, its tokens, how it ends, its result).
// Nothing outside coordinator/engine/ sees it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "constraints/matcher.h"
#include "coordinator/engine/engine_request.h"
#include "coordinator/engine/scheduler.h"

namespace shardlm {

// A sequence's hold on the KV cache (KvManager).
struct KvHold {
  std::vector<int32_t> blocks;
  std::vector<uint64_t> hashes;                     // prefix hash through each published full block
  std::vector<std::pair<int32_t, int32_t>> copies;  // copy-on-write (src, dst) before the next step
  int32_t cow_src = -1;         // block to copy into the next block allocated (referenced), or -1
  bool started = false;         // has been in a step since arrival or its last preemption
  bool prefix_counted = false;  // its prefix-cache lookup is in the metrics
  int32_t cached_tokens = 0;    // tokens reused from a prefix handle or the prefix cache
  // Kept as a handle when it ended (EngineRequest::keep_handle): its id and expiry.
  std::string kept_handle;
  int64_t kept_expiry_ms = 0;
};

// A proposer's recent per-token acceptance for one sequence, hits / (hits +
// misses): each step adds its accepted proposals as hits and a rejection as
// a miss, the older ones weighing less. It starts at 2 / 3.
struct ProposalRate {
  // A step's hits and misses weigh this much.
  static constexpr double kWeight = 0.3;
  double hits = 2.0;
  double misses = 1.0;
  double rate() const { return hits / (hits + misses); }
  void Add(int32_t accepted, bool rejected) {
    hits = (1 - kWeight) * hits + accepted;
    misses = (1 - kWeight) * misses + (rejected ? 1 : 0);
  }
};

struct Sequence : SchedSeq {
  // Known tokens, the one a step in flight samples (overlapped steps), and
  // the proposals of the step being planned (speculation).
  int32_t length() const override {
    return static_cast<int32_t>(tokens.size() + draft.size()) + flight.pending;
  }
  int32_t proposed() const override { return static_cast<int32_t>(draft.size()); }

  EngineRequest request;
  std::vector<int32_t> tokens;   // prefix handle's tokens, prompt, then generated
  std::vector<int32_t> context;  // prefix + prompt: what penalties look back on
  // Tokens proposed after `tokens` for the step being planned (speculative
  // decoding, docs/speculative_decoding.md); empty between steps.
  std::vector<int32_t> draft;
  bool draft_by_lookup = false;  // `draft` came from prompt lookup (else the draft model)
  // Prompt lookup's proposals where the draft model's were chosen instead:
  // the step then tells how many it would have had accepted (the next
  // Propose clears what no step scored).
  std::vector<int32_t> shadow_lookup;
  // A constrained sequence's masks for its proposal rows: row i's after
  // proposals 1..i (Engine::ConstrainProposals); empty between steps.
  std::vector<std::vector<uint32_t>> draft_masks;
  // Its decoding steps without a proposal since its last one, and the
  // recent per-token acceptance of its proposals by each proposer (prompt
  // lookup's and the draft model's: with a draft, lookup proposes first
  // where it finds a long match), which sets its proposal lengths
  // (engine_speculate.cc).
  int32_t steps_unproposed = 0;
  ProposalRate lookup_rate;
  ProposalRate draft_rate;
  int32_t prompt_offset = 0;  // index of the first prompt token in `tokens`

  KvHold kv;

  bool prompt_counted = false;  // its prompt tokens are in the metrics
  // Engine::End: how it ends, once no step in flight still writes its blocks.
  bool end_requested = false;
  FinishReason end_reason = FinishReason::kNone;
  absl::Status end_status;
  std::chrono::steady_clock::time_point arrival, first_token, last_token;
  EngineResult result;
  // The request's constraint: its own matcher, and the mask of its next token.
  std::unique_ptr<Matcher> matcher;
  std::vector<uint32_t> mask;
};

}  // namespace shardlm
