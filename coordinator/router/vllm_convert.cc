#include "coordinator/router/vllm_convert.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/status.h"

namespace shardlm {
namespace {

namespace vpb = ::vllm::grpc::engine;

// The fields the engine lacks: INVALID_ARGUMENT naming each, never dropped.
absl::Status RefuseMissing(const vpb::GenerateRequest& req) {
  const vpb::SamplingParams& sp = req.sampling_params();
  if (sp.min_tokens() != 0) {
    return InvalidField("sampling_params.min_tokens", "is not supported by shardlm (send 0)");
  }
  const char* no_logprobs =
      "is not supported on this protocol: its replies carry no log-probabilities (shardlm.v1's "
      "Generate top_logprobs and the OpenAI API's logprobs do)";
  if (sp.has_logprobs()) return InvalidField("sampling_params.logprobs", no_logprobs);
  if (sp.has_prompt_logprobs()) return InvalidField("sampling_params.prompt_logprobs", no_logprobs);
  if (sp.constraint_case() == vpb::SamplingParams::kStructuralTag) {
    return InvalidField("sampling_params.structural_tag",
                        "is not supported by shardlm (json_schema, json_object, regex, grammar (Lark) and "
                        "choice are)");
  }
  if (sp.n() > 1 && req.stream()) {
    return InvalidField("sampling_params.n",
                        absl::StrCat("is ", sp.n(),
                                     " with stream set: this protocol's chunks do not say which "
                                     "sample they belong to, so n > 1 is served unstreamed only"));
  }
  return absl::OkStatus();
}

SamplingParams Sampling(const vpb::SamplingParams& sp, bool* has_seed) {
  SamplingParams s;
  // Unset or 0 where 0 would make no sense: the parameter is off, as vLLM takes it.
  s.temperature = sp.has_temperature() ? sp.temperature() : 1.0f;
  s.top_p = sp.top_p() == 0 ? 1.0f : sp.top_p();
  s.top_k = static_cast<int32_t>(std::min<uint32_t>(sp.top_k(), INT32_MAX));
  s.min_p = sp.min_p();
  s.repetition_penalty = sp.repetition_penalty() == 0 ? 1.0f : sp.repetition_penalty();
  s.presence_penalty = sp.presence_penalty();
  s.frequency_penalty = sp.frequency_penalty();
  for (const auto& [id, bias] : sp.logit_bias()) s.logit_bias.emplace_back(id, bias);
  std::sort(s.logit_bias.begin(), s.logit_bias.end());  // a map's order is unspecified
  *has_seed = sp.has_seed();
  s.seed = static_cast<uint64_t>(static_cast<int64_t>(sp.seed()));
  return s;
}

ConstraintSpec Constraint(const vpb::SamplingParams& sp) {
  ConstraintSpec spec;
  switch (sp.constraint_case()) {
    case vpb::SamplingParams::kJsonSchema:
      spec.kind = ConstraintSpec::Kind::kJsonSchema;
      spec.text = sp.json_schema();
      break;
    case vpb::SamplingParams::kRegex:
      spec.kind = ConstraintSpec::Kind::kRegex;
      spec.text = sp.regex();
      break;
    case vpb::SamplingParams::kGrammar:
      spec.kind = ConstraintSpec::Kind::kGrammar;
      spec.text = sp.grammar();
      break;
    case vpb::SamplingParams::kJsonObject:
      if (sp.json_object()) spec.kind = ConstraintSpec::Kind::kJsonObject;
      break;
    case vpb::SamplingParams::kChoice:
      spec.kind = ConstraintSpec::Kind::kChoice;
      spec.choices.assign(sp.choice().choices().begin(), sp.choice().choices().end());
      break;
    case vpb::SamplingParams::kStructuralTag:  // refused before
    case vpb::SamplingParams::CONSTRAINT_NOT_SET:
      break;
  }
  return spec;
}

// truncate_prompt_tokens: k keeps the last k tokens, -1 the last max_context.
absl::Status Truncate(const vpb::SamplingParams& sp, int64_t max_context, std::vector<int32_t>* prompt) {
  if (!sp.has_truncate_prompt_tokens()) return absl::OkStatus();
  const int64_t k = sp.truncate_prompt_tokens() == -1 ? max_context : sp.truncate_prompt_tokens();
  if (k < 1) {
    return InvalidField(
        "sampling_params.truncate_prompt_tokens",
        absl::StrCat("must be -1 (the context length) or >= 1, got ", sp.truncate_prompt_tokens()));
  }
  if (static_cast<int64_t>(prompt->size()) > k) prompt->erase(prompt->begin(), prompt->end() - k);
  return absl::OkStatus();
}

// max_tokens, or the rest of the context when unset.
absl::StatusOr<int32_t> MaxTokens(const vpb::SamplingParams& sp, int64_t prompt, const VllmLimits& limits) {
  const int64_t max_context = limits.max_context;
  if (prompt >= max_context) {
    return InvalidField(limits.prompt_field, absl::StrCat("holds ", prompt, " tokens; the context holds ",
                                                          max_context, ", so nothing could be generated"));
  }
  if (!sp.has_max_tokens()) return static_cast<int32_t>(max_context - prompt);
  if (sp.max_tokens() < 1) return InvalidField("sampling_params.max_tokens", "must be >= 1, got 0");
  if (prompt + static_cast<int64_t>(sp.max_tokens()) > max_context) {
    return InvalidField(
        "sampling_params.max_tokens",
        absl::StrCat("is ", sp.max_tokens(), "; with the prompt's ", prompt, " tokens that is ",
                     prompt + static_cast<int64_t>(sp.max_tokens()), ", past the context length ",
                     max_context, "; lower max_tokens or shorten the prompt"));
  }
  return static_cast<int32_t>(sp.max_tokens());
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> VllmInputIds(const vpb::TokenizedInput& in, int32_t vocab_size) {
  std::vector<int32_t> ids;
  ids.reserve(in.input_ids_size());
  for (int i = 0; i < in.input_ids_size(); ++i) {
    if (in.input_ids(i) >= static_cast<uint32_t>(vocab_size)) {
      return InvalidField(
          "tokenized.input_ids",
          absl::StrCat("[", i, "] is ", in.input_ids(i), ", outside the vocabulary [0, ", vocab_size, ")"));
    }
    ids.push_back(static_cast<int32_t>(in.input_ids(i)));
  }
  if (ids.empty()) return InvalidField("tokenized.input_ids", "must hold at least one token");
  return ids;
}

absl::StatusOr<GenerateJob> VllmJob(const vpb::GenerateRequest& req, std::vector<int32_t> prompt,
                                    const VllmLimits& limits) {
  SHARDLM_RETURN_IF_ERROR(RefuseMissing(req));
  const vpb::SamplingParams& sp = req.sampling_params();
  SHARDLM_RETURN_IF_ERROR(Truncate(sp, limits.max_context, &prompt));
  GenerateJob job;
  EngineRequest& r = job.request;
  SHARDLM_ASSIGN_OR_RETURN(r.max_new_tokens, MaxTokens(sp, static_cast<int64_t>(prompt.size()), limits));
  r.prompt = std::move(prompt);
  r.sampling = Sampling(sp, &r.has_seed);
  for (uint32_t id : sp.stop_token_ids()) {
    if (id >= static_cast<uint32_t>(limits.vocab_size)) {
      return InvalidField(
          "sampling_params.stop_token_ids",
          absl::StrCat("holds ", id, ", outside the vocabulary [0, ", limits.vocab_size, ")"));
    }
    r.stop_token_ids.push_back(static_cast<int32_t>(id));
  }
  r.ignore_eos = sp.ignore_eos();
  job.constraint = Constraint(sp);
  job.n = sp.n() == 0 ? 1 : static_cast<int>(std::min<uint32_t>(sp.n(), INT32_MAX));
  job.stop.assign(sp.stop().begin(), sp.stop().end());
  return job;
}

absl::Status VllmStatus(const absl::Status& status, const std::string& prompt_field) {
  if (status.ok()) return status;
  // The serving core's and the engine's names of request fields; others (this
  // protocol's own, or none) pass unchanged.
  static const char* const kSampling[] = {"temperature",
                                          "top_p",
                                          "top_k",
                                          "min_p",
                                          "repetition_penalty",
                                          "presence_penalty",
                                          "frequency_penalty",
                                          "logit_bias",
                                          "stop_token_ids",
                                          "n",
                                          "stop",
                                          "seed"};
  const std::string field = ErrorField(status);
  std::string named = field;
  if (field == "prompt") {
    named = prompt_field;
  } else if (field == "max_new_tokens") {
    named = "sampling_params.max_tokens";
  } else if (absl::StartsWith(field, "constraint.")) {
    named = absl::StrCat("sampling_params.", field.substr(sizeof("constraint.") - 1));
  } else if (std::find(std::begin(kSampling), std::end(kSampling), field) != std::end(kSampling)) {
    named = absl::StrCat("sampling_params.", field);
  }
  absl::Status out(status.code(),
                   absl::StrReplaceAll(status.message(), {{"max_new_tokens", "max_tokens"},
                                                          {"constraint.", "sampling_params."}}));
  return named.empty() ? out : WithField(out, named);
}

VllmReplyWriter::VllmReplyWriter(const vpb::GenerateRequest& req, const std::vector<int32_t>& eos_ids, int n)
    : stream_(req.stream()), output_(n), generated_(n, 0) {
  const vpb::SamplingParams& sp = req.sampling_params();
  if (sp.include_stop_str_in_output()) return;
  hidden_.assign(sp.stop_token_ids().begin(), sp.stop_token_ids().end());
  if (!sp.ignore_eos()) hidden_.insert(hidden_.end(), eos_ids.begin(), eos_ids.end());
}

bool VllmReplyWriter::Shown(int32_t token) const {
  return std::find(hidden_.begin(), hidden_.end(), token) == hidden_.end();
}

void VllmReplyWriter::Write(const GenerateUpdate& update, std::deque<vpb::GenerateResponse>* out) {
  if (!update.prompt_token_ids.empty())
    prompt_tokens_ = static_cast<uint32_t>(update.prompt_token_ids.size());
  if (!update.last()) {
    const int s = update.sample;
    vpb::GenerateResponse msg;
    vpb::GenerateStreamChunk* chunk = msg.mutable_chunk();
    for (int32_t t : update.token_ids) {
      ++generated_[s];
      if (!Shown(t)) continue;
      output_[s].push_back(static_cast<uint32_t>(t));
      chunk->add_token_ids(static_cast<uint32_t>(t));
    }
    chunk->set_prompt_tokens(prompt_tokens_);
    chunk->set_completion_tokens(generated_[s]);
    if (stream_ && chunk->token_ids_size() > 0) out->push_back(std::move(msg));
    return;
  }
  const GenerateUsage& usage = *update.usage;
  for (const SampleEnd& end : update.ends) {
    vpb::GenerateResponse msg;
    vpb::GenerateComplete* done = msg.mutable_complete();
    done->mutable_output_ids()->Add(output_[end.sample].begin(), output_[end.sample].end());
    done->set_finish_reason(end.finish_reason);
    done->set_prompt_tokens(static_cast<uint32_t>(usage.prompt_tokens));
    done->set_completion_tokens(generated_[end.sample]);
    done->set_cached_tokens(static_cast<uint32_t>(usage.cached_tokens));
    out->push_back(std::move(msg));
  }
}

}  // namespace shardlm
