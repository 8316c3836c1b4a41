#include "coordinator/grpc/inference_service.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/status.h"
#include "coordinator/serving/request_limits.h"

namespace shardlm {

namespace pb = ::shardlm::v1;

grpc::Status InferenceService::Admit(const grpc::ServerContextBase& ctx, std::string* owner) const {
  return AdmitGrpc(*core_, ctx, owner);
}

absl::StatusOr<std::vector<int32_t>> InferenceService::PromptIds(const pb::Prompt& prompt,
                                                                 bool starts_sequence,
                                                                 const std::string& field,
                                                                 const CallRecord& call) const {
  switch (prompt.kind_case()) {
    case pb::Prompt::kTokenIds:
      return std::vector<int32_t>(prompt.token_ids().ids().begin(), prompt.token_ids().ids().end());
    case pb::Prompt::kText: {
      if (core_->tokenizer() == nullptr) {
        return WithField(
            absl::InvalidArgumentError(field + ".text needs a tokenizer.json in the model; send " + field +
                                       ".token_ids"),
            field);
      }
      return core_->EncodeForCall(prompt.text(), /*add_special_tokens=*/starts_sequence, field + ".text",
                                  call);
    }
    case pb::Prompt::KIND_NOT_SET:
      break;
  }
  return std::vector<int32_t>();
}

grpc::Status InferenceService::PreparePrefill(const pb::PrefillRequest& req, const std::string& owner,
                                              CallRecord& call, std::vector<EngineRequest>* requests) const {
  const int chunks = req.chunks_size();
  if (chunks < 1 || chunks > kMaxPrefillChunks) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("chunks must hold 1 to ", kMaxPrefillChunks, " chunks, got ", chunks)));
  }
  if (chunks > core_->loop()->max_queued_requests()) {
    return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
        "chunks holds ", chunks, " chunks; this server queues at most ", core_->loop()->max_queued_requests(),
        " at once (--max-queued-requests), so they could never run together")));
  }
  const int prefixes = req.prefix_handles_size();
  if (prefixes != 0 && prefixes != 1 && prefixes != chunks) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("prefix_handles must be empty, one handle for every chunk, or one per chunk (", chunks,
                     "); got ", prefixes)));
  }
  if (req.top_k() < 0 || req.top_k() > 20) {
    return ToGrpcStatus(
        absl::InvalidArgumentError(absl::StrCat("top_k must be in [0, 20], got ", req.top_k())));
  }
  for (int i = 0; i < chunks; ++i) {
    EngineRequest r;
    r.owner = owner;
    r.request_id = call.id();
    r.deadline = call.engine_deadline();
    if (prefixes > 0) r.prefix_handle = req.prefix_handles(prefixes == 1 ? 0 : i);
    auto ids = PromptIds(req.chunks(i), r.prefix_handle.empty(), absl::StrCat("chunks[", i, "]"), call);
    if (!ids.ok()) return ToGrpcStatus(ids.status());
    if (ids->empty()) {
      return ToGrpcStatus(
          absl::InvalidArgumentError(absl::StrCat("chunks[", i, "] must hold at least one token")));
    }
    r.prompt = std::move(*ids);
    r.max_new_tokens = 0;
    r.score_prompt = true;
    r.next_top = req.top_k() > 0;
    r.sampling.num_top_logprobs = req.top_k();
    r.keep_handle = req.keep();
    // Every chunk is checked before any runs.
    absl::Status st = core_->loop()->Validate(r);
    if (!st.ok()) {
      return ToGrpcStatus(WithField(absl::Status(st.code(), absl::StrCat("chunks[", i, "]: ", st.message())),
                                    ErrorField(st)));
    }
    requests->push_back(std::move(r));
  }
  int64_t tokens = 0;
  for (const EngineRequest& r : *requests) tokens += static_cast<int64_t>(r.prompt.size());
  call.SetTokens(tokens, 0, 0);
  return grpc::Status::OK;
}

grpc::Status InferenceService::PrepareScore(const pb::ScoreRequest& req, const std::string& owner,
                                            CallRecord& call, std::vector<EngineRequest>* requests) const {
  auto ids = PromptIds(req.prompt(), true, "prompt", call);
  if (!ids.ok()) return ToGrpcStatus(ids.status());
  EngineRequest r;
  r.owner = owner;
  r.request_id = call.id();
  r.deadline = call.engine_deadline();
  r.prompt = std::move(*ids);
  r.max_new_tokens = 0;
  r.score_prompt = true;
  call.SetTokens(static_cast<int64_t>(r.prompt.size()), 0, 0);
  requests->push_back(std::move(r));
  return grpc::Status::OK;
}

grpc::Status InferenceService::ReleaseChunksImpl(grpc::ServerContext* ctx,
                                                 const pb::ReleaseChunksRequest* req,
                                                 pb::ReleaseChunksResponse*, CallRecord& /*call*/) {
  std::string owner;
  if (grpc::Status st = Admit(*ctx, &owner); !st.ok()) return st;
  constexpr int kMaxHandles = 1024;
  if (req->handles_size() > kMaxHandles) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("handles must hold at most ", kMaxHandles, " handles, got ", req->handles_size())));
  }
  // All or nothing: an unknown handle releases none of the others.
  return ToGrpcStatus(core_->loop()->ReleaseHandles(
      std::vector<std::string>(req->handles().begin(), req->handles().end()), owner));
}

grpc::Status InferenceService::TokenizeImpl(grpc::ServerContext* ctx, const pb::TokenizeRequest* req,
                                            pb::TokenizeResponse* resp, CallRecord& call) {
  std::string owner;
  if (grpc::Status st = Admit(*ctx, &owner); !st.ok()) return st;
  if (core_->tokenizer() == nullptr)
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "the model has no tokenizer.json");
  auto ids = core_->EncodeForCall(req->text(), req->add_special_tokens(), "text", call);
  if (!ids.ok()) return ToGrpcStatus(ids.status());
  resp->mutable_ids()->Add(ids->begin(), ids->end());
  return grpc::Status::OK;
}

grpc::Status InferenceService::DetokenizeImpl(grpc::ServerContext* ctx, const pb::DetokenizeRequest* req,
                                              pb::DetokenizeResponse* resp, CallRecord& /*call*/) {
  std::string owner;
  if (grpc::Status st = Admit(*ctx, &owner); !st.ok()) return st;
  if (core_->tokenizer() == nullptr)
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "the model has no tokenizer.json");
  for (int i = 0; i < req->ids_size(); ++i) {
    if (req->ids(i) < 0 || req->ids(i) >= core_->tokenizer()->vocab_size()) {
      return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat("ids[", i, "] = ", req->ids(i),
                                                                  " is outside the vocabulary [0, ",
                                                                  core_->tokenizer()->vocab_size(), ")")));
    }
  }
  resp->set_text(core_->tokenizer()->Decode(std::vector<int32_t>(req->ids().begin(), req->ids().end()),
                                            req->skip_special_tokens()));
  return grpc::Status::OK;
}

grpc::Status InferenceService::GetModelInfoImpl(grpc::ServerContext* ctx, const pb::GetModelInfoRequest*,
                                                pb::ModelInfo* resp, CallRecord& /*call*/) {
  std::string owner;
  if (grpc::Status st = Admit(*ctx, &owner); !st.ok()) return st;
  const ModelConfig& cfg = core_->loop()->config();
  resp->set_architecture(cfg.architecture);
  resp->set_vocab_size(cfg.vocab_size);
  resp->set_hidden_size(cfg.hidden_size);
  resp->set_num_layers(cfg.num_layers);
  resp->set_tensor_parallel_size(core_->model().tp);
  resp->set_dtype(core_->model().dtype);
  resp->set_max_context_length(cfg.max_position_embeddings);
  resp->set_kv_cache_blocks(core_->loop()->num_blocks());
  resp->set_kv_block_size(core_->model().block_size);
  resp->set_has_tokenizer(core_->tokenizer() != nullptr);
  resp->set_max_top_logprobs(20);
  resp->set_max_samples(kMaxSamples);
  resp->set_handle_ttl_ms(core_->model().handle_ttl_ms);
  return grpc::Status::OK;
}

grpc::Status InferenceService::GetStatsImpl(grpc::ServerContext* ctx, const pb::GetStatsRequest*,
                                            pb::Stats* resp, CallRecord& /*call*/) {
  std::string owner;
  if (grpc::Status st = Admit(*ctx, &owner); !st.ok()) return st;
  const Engine::Stats s = core_->loop()->stats();
  resp->set_num_blocks(s.num_blocks);
  resp->set_free_blocks(s.free_blocks);
  resp->set_cached_blocks(s.cached_blocks);
  resp->set_referenced_blocks(s.referenced_blocks);
  resp->set_running(s.running);
  resp->set_waiting(s.waiting);
  resp->set_handles(s.handles);
  resp->set_prefix_cache_hits(s.prefix_cache_hits);
  resp->set_ranks(core_->model().tp);
  return grpc::Status::OK;
}

grpc::Status InferenceService::ReleaseChunks(grpc::ServerContext* ctx, const pb::ReleaseChunksRequest* req,
                                             pb::ReleaseChunksResponse* out) {
  GrpcCallRecord call(ctx, "ReleaseChunks", core_->metrics());
  return call.FinishGrpc(ReleaseChunksImpl(ctx, req, out, call));
}

grpc::Status InferenceService::Tokenize(grpc::ServerContext* ctx, const pb::TokenizeRequest* req,
                                        pb::TokenizeResponse* out) {
  GrpcCallRecord call(ctx, "Tokenize", core_->metrics());
  return call.FinishGrpc(TokenizeImpl(ctx, req, out, call));
}

grpc::Status InferenceService::Detokenize(grpc::ServerContext* ctx, const pb::DetokenizeRequest* req,
                                          pb::DetokenizeResponse* out) {
  GrpcCallRecord call(ctx, "Detokenize", core_->metrics());
  return call.FinishGrpc(DetokenizeImpl(ctx, req, out, call));
}

grpc::Status InferenceService::GetModelInfo(grpc::ServerContext* ctx, const pb::GetModelInfoRequest* req,
                                            pb::ModelInfo* out) {
  GrpcCallRecord call(ctx, "GetModelInfo", core_->metrics());
  return call.FinishGrpc(GetModelInfoImpl(ctx, req, out, call));
}

grpc::Status InferenceService::GetStats(grpc::ServerContext* ctx, const pb::GetStatsRequest* req,
                                        pb::Stats* out) {
  GrpcCallRecord call(ctx, "GetStats", core_->metrics());
  return call.FinishGrpc(GetStatsImpl(ctx, req, out, call));
}

}  // namespace shardlm
