// The coordinator's metrics: one place that names every series, so the
// engine, the worker group and the RPC handlers only count (docs/metrics.md).
//
//   MetricsRegistry registry;
//   ServiceMetrics metrics(&registry);
//   Engine::Options opts; opts.metrics = &metrics;
//   metrics.RequestDone("Generate", "OK", 0.35);
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "common/metrics.h"

namespace shardlm {

class ServiceMetrics {
 public:
  explicit ServiceMetrics(MetricsRegistry* registry);

  MetricsRegistry* registry() const { return registry_; }

  // An RPC of shardlm.v1.Inference ended with `code` (e.g. "OK",
  // "INVALID_ARGUMENT") after `seconds`.
  void RequestDone(const std::string& method, const std::string& code, double seconds);

  // A generating request ended: "stop", "length" or "abort" (cancelled or failed).
  void RequestEnded(const std::string& finished_reason);
  // vLLM's metric names beside shardlm's, for the routers that read them (docs/metrics.md).
  void AddVllmNames(const std::string& model_name, int64_t block_size, int64_t num_blocks);

  // A public call began / ended (CallRecord's life): everything a client
  // waits on, tokenizing, queued or running. Drain waits for this to be 0.
  void CallStarted();
  void CallEnded();
  int calls_in_flight() const { return calls_in_flight_.load(); }

  // One step's time on `rank`: the whole step and the part in collectives.
  void RankStep(int rank, double step_seconds, double collective_seconds);

  // Engine.
  Counter* prompt_tokens;      // prompt tokens computed (once per request)
  Counter* generation_tokens;  // tokens sampled
  Histogram* time_to_first_token;
  Histogram* time_per_output_token;  // per request: (last token - first token) / (tokens - 1)
  Histogram* inter_token_latency;    // per token after a request's first
  Histogram* e2e_request_latency;    // per generating request: arrival to end
  Counter* prefix_cache_queries;     // prompt tokens looked up in the prefix cache
  Counter* prefix_cache_hits;        // of those, found
  Counter* preemptions;
  Counter* spec_draft_tokens;     // tokens proposed and verified (speculative decoding)
  Counter* spec_accepted_tokens;  // of those, accepted
  Counter* spec_drafts;           // steps that verified a sequence's proposals
  // Of the proposed and accepted tokens, prompt lookup's (all of them with
  // --speculative ngram; with a draft model, where lookup matched first).
  Counter* spec_lookup_tokens;
  Counter* spec_lookup_accepted_tokens;
  Counter* steps;
  Counter* step_tokens;
  Histogram* step_duration;    // one engine step as the coordinator sees it
  Histogram* constraint_mask;  // one constrained sequence's token mask (llguidance)
  Gauge* requests_waiting;     // submitted, not yet in a step (or preempted)
  Gauge* requests_running;
  Gauge* kv_blocks_used;
  Gauge* kv_blocks_free;
  Gauge* kv_blocks_cached;  // evictable prefix cache
  Gauge* kv_cache_usage;    // used / all blocks, 0 to 1
  Gauge* handles;
  Gauge* calls;  // public calls in flight

  // Tensor-parallel group.
  Counter* group_restarts;  // workers started again by serve
  Counter* group_reforms;   // epochs after the first
  Gauge* group_epoch;
  Gauge* group_serving;

 private:
  MetricsRegistry* registry_;
  std::atomic<int> calls_in_flight_{0};
  std::mutex mu_;
  std::map<int, std::pair<Histogram*, Histogram*>> ranks_;
};

}  // namespace shardlm
