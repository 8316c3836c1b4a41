#include "coordinator/engine/service_metrics.h"

#include <string>
#include <utility>

namespace shardlm {
namespace {

std::vector<double> StepBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

}  // namespace

ServiceMetrics::ServiceMetrics(MetricsRegistry* r) : registry_(r) {
  prompt_tokens = r->AddCounter("shardlm_prompt_tokens_total", "Prompt tokens computed");
  generation_tokens = r->AddCounter("shardlm_generation_tokens_total", "Tokens generated");
  time_to_first_token =
      r->AddHistogram("shardlm_time_to_first_token_seconds",
                      "From a request's arrival to its first generated token", LatencyBuckets());
  time_per_output_token =
      r->AddHistogram("shardlm_time_per_output_token_seconds",
                      "Per request: time between its first and last token over the tokens after "
                      "the first",
                      StepBuckets());
  inter_token_latency = r->AddHistogram("shardlm_inter_token_latency_seconds",
                                        "Between two consecutive tokens of a request", StepBuckets());
  e2e_request_latency = r->AddHistogram("shardlm_e2e_request_latency_seconds",
                                        "A generating request from its arrival to its end", LatencyBuckets());
  prefix_cache_queries = r->AddCounter("shardlm_prefix_cache_queries_total",
                                       "Prompt tokens looked up in the automatic prefix cache");
  prefix_cache_hits = r->AddCounter("shardlm_prefix_cache_hits_total",
                                    "Prompt tokens whose KV the prefix cache already held");
  preemptions = r->AddCounter("shardlm_preemptions_total", "Sequences preempted for lack of KV blocks");
  spec_draft_tokens = r->AddCounter("shardlm_spec_decode_num_draft_tokens_total",
                                    "Tokens proposed and verified by speculative decoding");
  spec_accepted_tokens = r->AddCounter("shardlm_spec_decode_num_accepted_tokens_total",
                                       "Proposed tokens the target model accepted");
  spec_drafts =
      r->AddCounter("shardlm_spec_decode_num_drafts_total", "Sequence steps that verified proposals");
  spec_lookup_tokens = r->AddCounter("shardlm_spec_decode_num_lookup_tokens_total",
                                     "Of the proposed tokens, those prompt lookup proposed");
  spec_lookup_accepted_tokens = r->AddCounter("shardlm_spec_decode_num_lookup_accepted_tokens_total",
                                              "Of prompt lookup's proposed tokens, those accepted");
  constraint_mask = r->AddHistogram(
      "shardlm_constraint_mask_seconds", "Computing one constrained sequence's mask of allowed tokens",
      {0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1});
  steps = r->AddCounter("shardlm_steps_total", "Engine steps run");
  step_tokens = r->AddCounter("shardlm_step_tokens_total", "Tokens computed in engine steps");
  step_duration =
      r->AddHistogram("shardlm_step_duration_seconds",
                      "One engine step as the coordinator sees it, worker RPCs included", StepBuckets());
  const char kWaiting[] = "Requests submitted and not yet scheduled (or preempted)";
  requests_waiting = r->AddGauge("shardlm_requests_waiting", kWaiting);
  requests_running = r->AddGauge("shardlm_requests_running", "Requests with KV in the cache, being computed");
  const char kBlocks[] = "KV cache blocks per rank: used (referenced), free, cached (evictable prefix cache)";
  kv_blocks_used = r->AddGauge("shardlm_kv_cache_blocks", kBlocks, {{"state", "used"}});
  kv_blocks_free = r->AddGauge("shardlm_kv_cache_blocks", kBlocks, {{"state", "free"}});
  kv_blocks_cached = r->AddGauge("shardlm_kv_cache_blocks", kBlocks, {{"state", "cached"}});
  kv_cache_usage =
      r->AddGauge("shardlm_kv_cache_usage_ratio",
                  "Share of the KV cache's blocks in use (0 to 1; evictable cache counts as free)");
  handles = r->AddGauge("shardlm_chunk_handles", "ChunkResult handles holding KV blocks");
  calls = r->AddGauge("shardlm_calls_in_flight",
                      "Public calls (gRPC and HTTP) begun and not ended: tokenizing, queued or running");
  group_restarts = r->AddCounter("shardlm_worker_restarts_total", "Worker processes started again by serve");
  group_reforms = r->AddCounter("shardlm_group_reforms_total",
                                "Times the tensor-parallel group failed and was formed again");
  group_epoch = r->AddGauge("shardlm_group_epoch", "Formation number of the tensor-parallel group");
  group_serving = r->AddGauge("shardlm_group_serving", "1 while the tensor-parallel group serves, else 0");
}

void ServiceMetrics::RequestEnded(const std::string& finished_reason) {
  registry_
      ->AddCounter("shardlm_request_success_total", "Generating requests ended, by how (stop, length, abort)",
                   {{"finished_reason", finished_reason}})
      ->Add();
}

// vLLM's names, which the Gateway API Inference Extension's endpoint picker, llm-d and vLLM
// dashboards read: the same series again, each with the model's name as vLLM labels them.
void ServiceMetrics::AddVllmNames(const std::string& model_name, int64_t block_size, int64_t num_blocks) {
  const MetricLabels model{{"model_name", model_name}};
  const std::pair<const char*, const char*> names[] = {
      {"vllm:num_requests_running", "shardlm_requests_running"},
      {"vllm:num_requests_waiting", "shardlm_requests_waiting"},
      {"vllm:kv_cache_usage_perc", "shardlm_kv_cache_usage_ratio"},
      {"vllm:prompt_tokens_total", "shardlm_prompt_tokens_total"},
      {"vllm:generation_tokens_total", "shardlm_generation_tokens_total"},
      {"vllm:time_to_first_token_seconds", "shardlm_time_to_first_token_seconds"},
      {"vllm:inter_token_latency_seconds", "shardlm_inter_token_latency_seconds"},
      {"vllm:time_per_output_token_seconds", "shardlm_inter_token_latency_seconds"},
      {"vllm:request_time_per_output_token_seconds", "shardlm_time_per_output_token_seconds"},
      {"vllm:e2e_request_latency_seconds", "shardlm_e2e_request_latency_seconds"},
      {"vllm:prefix_cache_queries_total", "shardlm_prefix_cache_queries_total"},
      {"vllm:prefix_cache_hits_total", "shardlm_prefix_cache_hits_total"},
      {"vllm:num_preemptions_total", "shardlm_preemptions_total"},
      {"vllm:spec_decode_num_draft_tokens_total", "shardlm_spec_decode_num_draft_tokens_total"},
      {"vllm:spec_decode_num_accepted_tokens_total", "shardlm_spec_decode_num_accepted_tokens_total"},
      {"vllm:spec_decode_num_drafts_total", "shardlm_spec_decode_num_drafts_total"},
      {"vllm:request_success_total", "shardlm_request_success_total"},
  };
  for (const auto& [alias, source] : names) {
    registry_->AddAlias(alias, source, std::string("vLLM's name for ") + source, model);
  }
  registry_
      ->AddGauge("vllm:cache_config_info", "The KV cache's configuration (vLLM's name; the value is 1)",
                 {{"block_size", std::to_string(block_size)}, {"num_gpu_blocks", std::to_string(num_blocks)}})
      ->Set(1);
}

void ServiceMetrics::RequestDone(const std::string& method, const std::string& code, double seconds) {
  registry_
      ->AddCounter("shardlm_requests_total", "RPCs of shardlm.v1.Inference by method and status code",
                   {{"method", method}, {"code", code}})
      ->Add();
  registry_
      ->AddHistogram("shardlm_request_duration_seconds", "RPCs of shardlm.v1.Inference from start to status",
                     LatencyBuckets(), {{"method", method}})
      ->Observe(seconds);
}

void ServiceMetrics::RankStep(int rank, double step_seconds, double collective_seconds) {
  std::pair<Histogram*, Histogram*> h;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = ranks_.find(rank);
    if (it == ranks_.end()) {
      const MetricLabels labels = {{"rank", std::to_string(rank)}};
      h.first = registry_->AddHistogram("shardlm_rank_step_seconds", "A step's time on one worker rank",
                                        StepBuckets(), labels);
      h.second = registry_->AddHistogram("shardlm_rank_collective_seconds",
                                         "A step's time in collectives on one worker rank (waiting for peers "
                                         "included)",
                                         StepBuckets(), labels);
      it = ranks_.emplace(rank, h).first;
    }
    h = it->second;
  }
  h.first->Observe(step_seconds);
  h.second->Observe(collective_seconds);
}

void ServiceMetrics::CallStarted() { calls->Set(++calls_in_flight_); }

void ServiceMetrics::CallEnded() { calls->Set(--calls_in_flight_); }

}  // namespace shardlm
