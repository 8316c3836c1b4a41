#include "cli/remote_client.h"

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <cmath>

#include "common/grpc_status.h"
#include "shardlm/v1/inference.grpc.pb.h"

namespace shardlm {
namespace {

namespace pb = ::shardlm::v1;

std::unique_ptr<pb::Inference::Stub> Connect(const std::string& server) {
  return pb::Inference::NewStub(grpc::CreateChannel(server, grpc::InsecureChannelCredentials()));
}

void SetPrompt(const PromptSpec& prompt, pb::Prompt* out) {
  if (prompt.is_text) {
    out->set_text(prompt.text);
  } else {
    out->mutable_token_ids()->mutable_ids()->Add(prompt.ids.begin(), prompt.ids.end());
  }
}

absl::Status Rpc(const grpc::Status& st, const std::string& server) {
  // gRPC's own channel error starts so; a server's UNAVAILABLE (a tensor-parallel
  // group that failed, say) may quote it further in and is the server's answer.
  if (st.error_code() == grpc::StatusCode::UNAVAILABLE &&
      st.error_message().rfind("failed to connect", 0) == 0) {
    return absl::UnavailableError("cannot reach shardlm server at " + server + ": " + st.error_message());
  }
  return FromGrpcStatus(st);
}

}  // namespace

namespace {

void SetConstraint(const ConstraintSpec& spec, pb::Constraint* out) {
  switch (spec.kind) {
    case ConstraintSpec::Kind::kJsonSchema:
      out->set_json_schema(spec.text);
      break;
    case ConstraintSpec::Kind::kJsonObject:
      out->set_json_object(true);
      break;
    case ConstraintSpec::Kind::kRegex:
      out->set_regex(spec.text);
      break;
    case ConstraintSpec::Kind::kGrammar:
      out->set_grammar(spec.text);
      break;
    case ConstraintSpec::Kind::kChoice:
      out->mutable_choice()->mutable_options()->Add(spec.choices.begin(), spec.choices.end());
      break;
    case ConstraintSpec::Kind::kNone:
      break;
  }
}

}  // namespace

pb::GenerateRequest GenerateRequestProto(const EngineRequest& r, const std::vector<std::string>& stop,
                                         const ConstraintSpec& constraint) {
  pb::GenerateRequest req;
  if (!constraint.empty()) SetConstraint(constraint, req.mutable_constraint());
  req.set_prefix_handle(r.prefix_handle);
  for (const std::string& s : stop) req.add_stop(s);
  for (const auto& [id, bias] : r.sampling.logit_bias)
    (*req.mutable_sampling()->mutable_logit_bias())[id] = bias;
  pb::SamplingParams* s = req.mutable_sampling();
  s->set_temperature(r.sampling.temperature);
  s->set_top_k(r.sampling.top_k);
  s->set_top_p(r.sampling.top_p);
  s->set_min_p(r.sampling.min_p);
  s->set_repetition_penalty(r.sampling.repetition_penalty);
  s->set_presence_penalty(r.sampling.presence_penalty);
  s->set_frequency_penalty(r.sampling.frequency_penalty);
  if (r.has_seed) s->set_seed(r.sampling.seed);
  req.set_max_new_tokens(r.max_new_tokens);
  req.mutable_stop_token_ids()->Add(r.stop_token_ids.begin(), r.stop_token_ids.end());
  req.set_ignore_eos(r.ignore_eos);
  req.set_top_logprobs(r.sampling.num_top_logprobs);
  return req;
}

absl::StatusOr<std::pair<EngineResult, std::string>> RemoteGenerate(
    const std::string& server, const PromptSpec& prompt, const EngineRequest& r,
    const std::vector<std::string>& stop, const ConstraintSpec& constraint,
    const std::function<void(const std::string&)>& on_text) {
  pb::GenerateRequest req = GenerateRequestProto(r, stop, constraint);
  if (prompt.is_text || !prompt.ids.empty()) SetPrompt(prompt, req.mutable_prompt());
  auto stub = Connect(server);
  grpc::ClientContext ctx;
  auto reader = stub->Generate(&ctx, req);
  EngineResult result;
  std::string text;
  pb::GenerateResponse msg;
  while (reader->Read(&msg)) {
    if (!msg.prompt_token_ids().empty())
      result.prompt.assign(msg.prompt_token_ids().begin(), msg.prompt_token_ids().end());
    result.tokens.insert(result.tokens.end(), msg.token_ids().begin(), msg.token_ids().end());
    result.logprobs.insert(result.logprobs.end(), msg.logprobs().begin(), msg.logprobs().end());
    for (const auto& alts : msg.top_logprobs()) {
      std::vector<TopLogprob> top;
      for (const auto& a : alts.alternatives()) top.push_back({a.id(), a.logprob()});
      result.top_logprobs.push_back(std::move(top));
    }
    if (!msg.text().empty()) {
      text += msg.text();
      on_text(msg.text());
    }
    for (const auto& r : msg.results()) {
      if (r.finish_reason() == "length") result.finish_reason = FinishReason::kLength;
      if (r.finish_reason() == "stop") result.finish_reason = FinishReason::kStop;
    }
  }
  absl::Status st = Rpc(reader->Finish(), server);
  if (!st.ok()) return st;
  return std::make_pair(std::move(result), std::move(text));
}

absl::StatusOr<std::string> RemotePrefill(const std::string& server, const PromptSpec& chunk,
                                          const std::string& prefix_handle, int32_t top_k, bool keep) {
  pb::PrefillRequest req;
  SetPrompt(chunk, req.add_chunks());
  if (!prefix_handle.empty()) req.add_prefix_handles(prefix_handle);
  req.set_top_k(top_k);
  req.set_keep(keep);
  pb::PrefillResponse resp;
  grpc::ClientContext ctx;
  absl::Status st = Rpc(Connect(server)->Prefill(&ctx, req, &resp), server);
  if (!st.ok()) return st;
  std::string json;
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  auto printed = google::protobuf::util::MessageToJsonString(resp, &json, opts);
  if (!printed.ok()) return absl::InternalError("cannot print the prefill response as JSON");
  return json;
}

absl::StatusOr<EngineResult> RemoteScore(const std::string& server, const PromptSpec& prompt) {
  pb::ScoreRequest req;
  SetPrompt(prompt, req.mutable_prompt());
  pb::ScoreResponse resp;
  grpc::ClientContext ctx;
  absl::Status st = Rpc(Connect(server)->Score(&ctx, req, &resp), server);
  if (!st.ok()) return st;
  EngineResult r;
  r.prompt.assign(resp.token_ids().begin(), resp.token_ids().end());
  for (float s : resp.scores())
    r.prompt_scores.push_back(std::isnan(s) ? std::nullopt : std::optional<float>(s));
  r.finish_reason = FinishReason::kLength;
  return r;
}

absl::StatusOr<std::vector<int32_t>> RemoteTokenize(const std::string& server, const std::string& text,
                                                    bool add_special_tokens) {
  pb::TokenizeRequest req;
  req.set_text(text);
  req.set_add_special_tokens(add_special_tokens);
  pb::TokenizeResponse resp;
  grpc::ClientContext ctx;
  absl::Status st = Rpc(Connect(server)->Tokenize(&ctx, req, &resp), server);
  if (!st.ok()) return st;
  return std::vector<int32_t>(resp.ids().begin(), resp.ids().end());
}

}  // namespace shardlm
