#include "coordinator/inference_service.h"

#include <cmath>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/status.h"

namespace shardlm {
namespace {

namespace pb = ::shardlm::v1;

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::Status CallGone(const grpc::ServerContextBase& ctx) {
  if (!ctx.IsCancelled()) return absl::OkStatus();
  // The client's deadline runs from when it sent the call, this side's from
  // when the headers were read: the client's expiry (a RST_STREAM, which
  // reads as a cancellation) can arrive before this side's own. Within the
  // margin it is the deadline (load_test.py's deadlines case saw a 0.3 s call
  // logged CANCELLED once in ten runs without it).
  constexpr auto kDeadlineMargin = std::chrono::milliseconds(200);
  if (ctx.deadline() <= std::chrono::system_clock::now() + kDeadlineMargin) {
    return absl::DeadlineExceededError(
        "the call's deadline passed; its work was stopped and its blocks freed");
  }
  return absl::CancelledError("the client cancelled; its work was stopped and its blocks freed");
}

grpc::Status InferenceService::Admit(const grpc::ServerContextBase& ctx, std::string* owner) const {
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return AdmitKey(nullptr, owner);
  const std::string value(it->second.data(), it->second.size());
  return AdmitKey(&value, owner);
}

grpc::Status InferenceService::AdmitKey(const std::string* authorization, std::string* owner) const {
  if (draining_.load()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "server is shutting down");
  if (api_keys_.empty()) return grpc::Status::OK;
  const std::string value = authorization == nullptr ? "" : *authorization;
  // The scheme is case-insensitive and may be followed by more than one space (RFC 7235).
  constexpr absl::string_view kBearer = "bearer ";
  if (absl::StartsWithIgnoreCase(value, kBearer)) {
    const std::string key(absl::StripLeadingAsciiWhitespace(absl::string_view(value).substr(kBearer.size())));
    bool match = false;
    for (const std::string& k : api_keys_) match |= ConstantTimeEquals(k, key);
    if (match) {
      *owner = key;
      return grpc::Status::OK;
    }
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      authorization == nullptr
                          ? "missing API key: send the metadata 'authorization: Bearer <key>'"
                          : "invalid API key in 'authorization' (expected 'Bearer <key>')");
}

absl::StatusOr<std::vector<int32_t>> InferenceService::EncodeForCall(const std::string& text,
                                                                     bool add_special_tokens,
                                                                     const std::string& field,
                                                                     const CallRecord& call) const {
  return EncodeField(*tokenizer_, text, add_special_tokens, loop_->config().max_position_embeddings, field,
                     [&call] { return call.Abandoned(); });
}

absl::StatusOr<std::vector<int32_t>> InferenceService::PromptIds(const pb::Prompt& prompt,
                                                                 bool starts_sequence,
                                                                 const std::string& field,
                                                                 const CallRecord& call) const {
  switch (prompt.kind_case()) {
    case pb::Prompt::kTokenIds:
      return std::vector<int32_t>(prompt.token_ids().ids().begin(), prompt.token_ids().ids().end());
    case pb::Prompt::kText: {
      if (tokenizer_ == nullptr) {
        return WithField(
            absl::InvalidArgumentError(field + ".text needs a tokenizer.json in the model; send " + field +
                                       ".token_ids"),
            field);
      }
      return EncodeForCall(prompt.text(), /*add_special_tokens=*/starts_sequence, field + ".text", call);
    }
    case pb::Prompt::KIND_NOT_SET:
      break;
  }
  return std::vector<int32_t>();
}

absl::StatusOr<std::shared_ptr<const Matcher>> InferenceService::CompileConstraint(
    const ConstraintSpec& spec) const {
  if (spec.empty()) return nullptr;
  const std::string field = absl::StrCat("constraint.", std::string(KindName(spec.kind)));
  if (tokenizer_ == nullptr) {
    return InvalidField(field, "needs the model's tokenizer.json (a constraint is compiled against it)");
  }
  std::call_once(compiler_once_, [this] {
    const auto& eos = loop_->config().eos_token_ids;
    auto compiler = ConstraintCompiler::Create(*tokenizer_, std::vector<int32_t>(eos.begin(), eos.end()));
    if (compiler.ok()) {
      compiler_ = *std::move(compiler);
    } else {
      compiler_status_ = compiler.status();
    }
  });
  if (!compiler_) {
    return WithField(
        absl::FailedPreconditionError(absl::StrCat(
            field, ": constraints are unavailable for this tokenizer: ", compiler_status_.message())),
        field);
  }
  auto matcher = compiler_->Compile(spec);
  if (!matcher.ok()) return WithField(matcher.status(), field);
  return std::shared_ptr<const Matcher>(*std::move(matcher));
}

grpc::Status InferenceService::PreparePrefill(const pb::PrefillRequest& req, const std::string& owner,
                                              CallRecord& call, std::vector<EngineRequest>* requests) const {
  const int chunks = req.chunks_size();
  if (chunks < 1 || chunks > kMaxPrefillChunks) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("chunks must hold 1 to ", kMaxPrefillChunks, " chunks, got ", chunks)));
  }
  if (chunks > loop_->max_queued_requests()) {
    return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
        "chunks holds ", chunks, " chunks; this server queues at most ", loop_->max_queued_requests(),
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
    absl::Status st = loop_->Validate(r);
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
  return ToGrpcStatus(
      loop_->ReleaseHandles(std::vector<std::string>(req->handles().begin(), req->handles().end()), owner));
}

grpc::Status InferenceService::TokenizeImpl(grpc::ServerContext* ctx, const pb::TokenizeRequest* req,
                                            pb::TokenizeResponse* resp, CallRecord& call) {
  std::string owner;
  if (grpc::Status st = Admit(*ctx, &owner); !st.ok()) return st;
  if (tokenizer_ == nullptr)
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "the model has no tokenizer.json");
  auto ids = EncodeForCall(req->text(), req->add_special_tokens(), "text", call);
  if (!ids.ok()) return ToGrpcStatus(ids.status());
  resp->mutable_ids()->Add(ids->begin(), ids->end());
  return grpc::Status::OK;
}

grpc::Status InferenceService::DetokenizeImpl(grpc::ServerContext* ctx, const pb::DetokenizeRequest* req,
                                              pb::DetokenizeResponse* resp, CallRecord& /*call*/) {
  std::string owner;
  if (grpc::Status st = Admit(*ctx, &owner); !st.ok()) return st;
  if (tokenizer_ == nullptr)
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "the model has no tokenizer.json");
  for (int i = 0; i < req->ids_size(); ++i) {
    if (req->ids(i) < 0 || req->ids(i) >= tokenizer_->vocab_size()) {
      return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
          "ids[", i, "] = ", req->ids(i), " is outside the vocabulary [0, ", tokenizer_->vocab_size(), ")")));
    }
  }
  resp->set_text(tokenizer_->Decode(std::vector<int32_t>(req->ids().begin(), req->ids().end()),
                                    req->skip_special_tokens()));
  return grpc::Status::OK;
}

grpc::Status InferenceService::GetModelInfoImpl(grpc::ServerContext* ctx, const pb::GetModelInfoRequest*,
                                                pb::ModelInfo* resp, CallRecord& /*call*/) {
  std::string owner;
  if (grpc::Status st = Admit(*ctx, &owner); !st.ok()) return st;
  const ModelConfig& cfg = loop_->config();
  resp->set_architecture(cfg.architecture);
  resp->set_vocab_size(cfg.vocab_size);
  resp->set_hidden_size(cfg.hidden_size);
  resp->set_num_layers(cfg.num_layers);
  resp->set_tensor_parallel_size(info_.tp);
  resp->set_dtype(info_.dtype);
  resp->set_max_context_length(cfg.max_position_embeddings);
  resp->set_kv_cache_blocks(loop_->num_blocks());
  resp->set_kv_block_size(info_.block_size);
  resp->set_has_tokenizer(tokenizer_ != nullptr);
  resp->set_max_top_logprobs(20);
  resp->set_max_samples(kMaxSamples);
  resp->set_handle_ttl_ms(info_.handle_ttl_ms);
  return grpc::Status::OK;
}

grpc::Status InferenceService::GetStatsImpl(grpc::ServerContext* ctx, const pb::GetStatsRequest*,
                                            pb::Stats* resp, CallRecord& /*call*/) {
  std::string owner;
  if (grpc::Status st = Admit(*ctx, &owner); !st.ok()) return st;
  const Engine::Stats s = loop_->stats();
  resp->set_num_blocks(s.num_blocks);
  resp->set_free_blocks(s.free_blocks);
  resp->set_cached_blocks(s.cached_blocks);
  resp->set_referenced_blocks(s.referenced_blocks);
  resp->set_running(s.running);
  resp->set_waiting(s.waiting);
  resp->set_handles(s.handles);
  resp->set_prefix_cache_hits(s.prefix_cache_hits);
  resp->set_ranks(info_.tp);
  return grpc::Status::OK;
}

grpc::Status InferenceService::ReleaseChunks(grpc::ServerContext* ctx, const pb::ReleaseChunksRequest* req,
                                             pb::ReleaseChunksResponse* out) {
  CallRecord call(ctx, "ReleaseChunks", metrics_);
  return call.Finish(ReleaseChunksImpl(ctx, req, out, call));
}

grpc::Status InferenceService::Tokenize(grpc::ServerContext* ctx, const pb::TokenizeRequest* req,
                                        pb::TokenizeResponse* out) {
  CallRecord call(ctx, "Tokenize", metrics_);
  return call.Finish(TokenizeImpl(ctx, req, out, call));
}

grpc::Status InferenceService::Detokenize(grpc::ServerContext* ctx, const pb::DetokenizeRequest* req,
                                          pb::DetokenizeResponse* out) {
  CallRecord call(ctx, "Detokenize", metrics_);
  return call.Finish(DetokenizeImpl(ctx, req, out, call));
}

grpc::Status InferenceService::GetModelInfo(grpc::ServerContext* ctx, const pb::GetModelInfoRequest* req,
                                            pb::ModelInfo* out) {
  CallRecord call(ctx, "GetModelInfo", metrics_);
  return call.Finish(GetModelInfoImpl(ctx, req, out, call));
}

grpc::Status InferenceService::GetStats(grpc::ServerContext* ctx, const pb::GetStatsRequest* req,
                                        pb::Stats* out) {
  CallRecord call(ctx, "GetStats", metrics_);
  return call.Finish(GetStatsImpl(ctx, req, out, call));
}

}  // namespace shardlm
