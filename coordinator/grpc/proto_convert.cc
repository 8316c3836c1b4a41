#include "coordinator/grpc/proto_convert.h"

#include <limits>
#include <optional>

namespace shardlm {

namespace pb = ::shardlm::v1;

SamplingParams SamplingFromProto(const pb::SamplingParams& sp, bool* has_seed) {
  SamplingParams s;
  s.temperature = sp.has_temperature() ? sp.temperature() : 1.0f;
  s.top_k = sp.top_k();
  s.top_p = sp.has_top_p() ? sp.top_p() : 1.0f;
  s.min_p = sp.min_p();
  s.repetition_penalty = sp.has_repetition_penalty() ? sp.repetition_penalty() : 1.0f;
  s.presence_penalty = sp.presence_penalty();
  s.frequency_penalty = sp.frequency_penalty();
  for (const auto& [id, bias] : sp.logit_bias()) s.logit_bias.emplace_back(id, bias);
  *has_seed = sp.has_seed();
  s.seed = sp.seed();
  return s;
}

ConstraintSpec ConstraintFromProto(const pb::Constraint& c) {
  ConstraintSpec spec;
  switch (c.kind_case()) {
    case pb::Constraint::kJsonSchema:
      spec.kind = ConstraintSpec::Kind::kJsonSchema;
      spec.text = c.json_schema();
      break;
    case pb::Constraint::kJsonObject:
      if (c.json_object()) spec.kind = ConstraintSpec::Kind::kJsonObject;
      break;
    case pb::Constraint::kRegex:
      spec.kind = ConstraintSpec::Kind::kRegex;
      spec.text = c.regex();
      break;
    case pb::Constraint::kGrammar:
      spec.kind = ConstraintSpec::Kind::kGrammar;
      spec.text = c.grammar();
      break;
    case pb::Constraint::kChoice:
      spec.kind = ConstraintSpec::Kind::kChoice;
      spec.choices.assign(c.choice().options().begin(), c.choice().options().end());
      break;
    case pb::Constraint::KIND_NOT_SET:
      break;
  }
  return spec;
}

GenerateJob GenerateJobFromProto(const pb::GenerateRequest& req, std::vector<int32_t> prompt) {
  GenerateJob job;
  EngineRequest& r = job.request;
  r.prefix_handle = req.prefix_handle();
  r.prompt = std::move(prompt);
  r.sampling = SamplingFromProto(req.sampling(), &r.has_seed);
  r.sampling.num_top_logprobs = req.top_logprobs();
  r.max_new_tokens = req.max_new_tokens();
  r.stop_token_ids.assign(req.stop_token_ids().begin(), req.stop_token_ids().end());
  r.ignore_eos = req.ignore_eos();
  r.speculate = !req.no_speculation();
  r.keep_handle = req.return_chunk_result();
  job.constraint = ConstraintFromProto(req.constraint());
  job.n = req.n() == 0 ? 1 : req.n();
  job.stop.assign(req.stop().begin(), req.stop().end());
  return job;
}

void FillTop(const std::vector<TopLogprob>& top, pb::TopLogprobs* out) {
  for (const TopLogprob& t : top) {
    auto* a = out->add_alternatives();
    a->set_id(t.id);
    a->set_logprob(t.logprob);
  }
}

void FillChunkResult(const EngineResult& r, bool generated, pb::ChunkResult* out) {
  out->set_handle(r.handle);
  out->set_expires_at_unix_ms(r.handle_expiry_ms);
  out->set_prefix_tokens(r.prefix_tokens + (generated ? static_cast<int32_t>(r.prompt.size()) : 0));
  if (generated) {
    out->mutable_token_ids()->Add(r.tokens.begin(), r.tokens.end());
    out->mutable_scores()->Add(r.logprobs.begin(), r.logprobs.end());
    for (const auto& top : r.top_logprobs) FillTop(top, out->add_top());
    return;
  }
  out->mutable_token_ids()->Add(r.prompt.begin(), r.prompt.end());
  for (size_t i = 0; i < r.prompt.size(); ++i) {
    const auto& s = i < r.prompt_scores.size() ? r.prompt_scores[i] : std::nullopt;
    out->add_scores(s ? *s : std::numeric_limits<float>::quiet_NaN());
    FillTop(i < r.prompt_top.size() ? r.prompt_top[i] : std::vector<TopLogprob>{}, out->add_top());
  }
  FillTop(r.next_top, out->mutable_next_token_top());
}

pb::GenerateResponse GenerateResponseFromUpdate(const GenerateUpdate& update) {
  pb::GenerateResponse msg;
  if (!update.last()) {
    msg.set_sample(update.sample);
    msg.mutable_token_ids()->Add(update.token_ids.begin(), update.token_ids.end());
    msg.mutable_logprobs()->Add(update.logprobs.begin(), update.logprobs.end());
    for (const auto& top : update.top_logprobs) FillTop(top, msg.add_top_logprobs());
    msg.set_text(update.text);
  }
  for (const SampleEnd& end : update.ends) {
    pb::SampleResult* sr = msg.add_results();
    sr->set_sample(end.sample);
    sr->set_finish_reason(end.finish_reason);
    sr->set_constraint_unfinished(end.constraint_unfinished);
    if (end.kept) FillChunkResult(*end.kept, /*generated=*/true, sr->mutable_chunk_result());
  }
  if (update.usage) {
    msg.mutable_usage()->set_prompt_tokens(update.usage->prompt_tokens);
    msg.mutable_usage()->set_cached_tokens(update.usage->cached_tokens);
    msg.mutable_usage()->set_generated_tokens(update.usage->generated_tokens);
  }
  msg.mutable_prompt_token_ids()->Add(update.prompt_token_ids.begin(), update.prompt_token_ids.end());
  return msg;
}

}  // namespace shardlm
