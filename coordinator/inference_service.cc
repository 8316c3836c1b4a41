#include "coordinator/inference_service.h"

#include <cmath>
#include <condition_variable>
#include <deque>
#include <limits>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "tokenizer/incremental_detokenizer.h"

namespace shardlm {
namespace {

namespace pb = ::shardlm::v1;

// What the engine thread hands to a streaming handler.
struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  struct Token {
    int32_t id;
    float logprob;
    std::vector<TopLogprob> top;
  };
  std::deque<Token> tokens;
  std::optional<GenerateResult> done;
};

absl::Status ToSampling(const pb::SamplingParams& in, SamplingParams* out, bool* has_seed) {
  out->temperature = in.has_temperature() ? in.temperature() : 1.0f;
  out->top_k = in.top_k();
  out->top_p = in.has_top_p() ? in.top_p() : 1.0f;
  out->min_p = in.min_p();
  out->repetition_penalty = in.has_repetition_penalty() ? in.repetition_penalty() : 1.0f;
  out->presence_penalty = in.presence_penalty();
  out->frequency_penalty = in.frequency_penalty();
  *has_seed = in.has_seed();
  out->seed = in.seed();
  return absl::OkStatus();
}

// Field names as the client wrote them, for error messages.
absl::Status Prefixed(const absl::Status& st, const char* prefix) {
  if (st.ok()) return st;
  return absl::Status(st.code(), absl::StrCat(prefix, st.message()));
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> InferenceService::PromptIds(const pb::Prompt& prompt) const {
  switch (prompt.kind_case()) {
    case pb::Prompt::kTokenIds:
      return std::vector<int32_t>(prompt.token_ids().ids().begin(), prompt.token_ids().ids().end());
    case pb::Prompt::kText:
      if (tokenizer_ == nullptr) {
        return absl::InvalidArgumentError(
            "prompt.text needs a tokenizer.json in the model; send prompt.token_ids");
      }
      {
        auto ids = tokenizer_->Encode(prompt.text(), /*add_special_tokens=*/true);
        if (!ids.ok()) return Prefixed(ids.status(), "prompt.text: ");
        return ids;
      }
    case pb::Prompt::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("prompt must set text or token_ids");
}

grpc::Status InferenceService::Generate(grpc::ServerContext* ctx, const pb::GenerateRequest* req,
                                        grpc::ServerWriter<pb::GenerateResponse>* writer) {
  auto prompt = PromptIds(req->prompt());
  if (!prompt.ok()) return ToGrpcStatus(prompt.status());
  GenerateRequest r;
  r.prompt = std::move(*prompt);
  ToSampling(req->sampling(), &r.sampling, &r.has_seed).IgnoreError();
  r.sampling.num_top_logprobs = req->top_logprobs();
  r.max_new_tokens = req->max_new_tokens();
  r.stop_token_ids.assign(req->stop_token_ids().begin(), req->stop_token_ids().end());
  r.ignore_eos = req->ignore_eos();
  const std::vector<int32_t> prompt_ids = r.prompt;
  auto channel = std::make_shared<Channel>();
  r.on_token = [channel](int32_t token, float logprob, const std::vector<TopLogprob>& top) {
    std::lock_guard<std::mutex> lock(channel->mu);
    channel->tokens.push_back({token, logprob, top});
    channel->cv.notify_all();
  };
  auto id = loop_->Submit(std::move(r), [channel](GenerateResult result) {
    std::lock_guard<std::mutex> lock(channel->mu);
    channel->done = std::move(result);
    channel->cv.notify_all();
  });
  if (!id.ok()) return ToGrpcStatus(id.status());

  std::unique_ptr<IncrementalDetokenizer> detok;
  if (tokenizer_ != nullptr) detok = std::make_unique<IncrementalDetokenizer>(*tokenizer_, true);
  bool first = true;
  while (true) {
    std::deque<Channel::Token> batch;
    std::optional<GenerateResult> done;
    {
      std::unique_lock<std::mutex> lock(channel->mu);
      channel->cv.wait_for(lock, std::chrono::milliseconds(100),
                           [&] { return !channel->tokens.empty() || channel->done.has_value(); });
      batch.swap(channel->tokens);
      if (channel->done) done = std::move(channel->done);
    }
    if (ctx->IsCancelled()) {
      loop_->Cancel(*id);
      return grpc::Status(grpc::StatusCode::CANCELLED, "client cancelled");
    }
    if (batch.empty() && !done) continue;
    if (done && !done->status.ok()) return ToGrpcStatus(done->status);
    pb::GenerateResponse msg;
    if (first) msg.mutable_prompt_token_ids()->Add(prompt_ids.begin(), prompt_ids.end());
    for (const Channel::Token& t : batch) {
      msg.add_token_ids(t.id);
      msg.add_logprobs(t.logprob);
      if (detok) msg.mutable_text()->append(detok->Append(t.id));
      if (req->top_logprobs() > 0) {
        auto* alts = msg.add_top_logprobs();
        for (const TopLogprob& alt : t.top) {
          auto* a = alts->add_alternatives();
          a->set_id(alt.id);
          a->set_logprob(alt.logprob);
        }
      }
    }
    if (done) {
      if (detok) msg.mutable_text()->append(detok->Finish());
      msg.set_finish_reason(FinishReasonName(done->finish_reason));
    }
    first = false;
    if (!writer->Write(msg)) {
      loop_->Cancel(*id);
      return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
    }
    if (done) return grpc::Status::OK;
  }
}

grpc::Status InferenceService::Score(grpc::ServerContext*, const pb::ScoreRequest* req,
                                     pb::ScoreResponse* resp) {
  auto prompt = PromptIds(req->prompt());
  if (!prompt.ok()) return ToGrpcStatus(prompt.status());
  GenerateRequest r;
  r.prompt = std::move(*prompt);
  r.max_new_tokens = 0;
  r.score_prompt = true;
  auto channel = std::make_shared<Channel>();
  auto id = loop_->Submit(std::move(r), [channel](GenerateResult result) {
    std::lock_guard<std::mutex> lock(channel->mu);
    channel->done = std::move(result);
    channel->cv.notify_all();
  });
  if (!id.ok()) return ToGrpcStatus(id.status());
  std::unique_lock<std::mutex> lock(channel->mu);
  channel->cv.wait(lock, [&] { return channel->done.has_value(); });
  if (!channel->done->status.ok()) return ToGrpcStatus(channel->done->status);
  resp->mutable_token_ids()->Add(channel->done->prompt.begin(), channel->done->prompt.end());
  for (const auto& s : channel->done->prompt_scores)
    resp->add_scores(s ? *s : std::numeric_limits<float>::quiet_NaN());
  return grpc::Status::OK;
}

grpc::Status InferenceService::Tokenize(grpc::ServerContext*, const pb::TokenizeRequest* req,
                                        pb::TokenizeResponse* resp) {
  if (tokenizer_ == nullptr)
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "the model has no tokenizer.json");
  auto ids = tokenizer_->Encode(req->text(), req->add_special_tokens());
  if (!ids.ok()) return ToGrpcStatus(Prefixed(ids.status(), "text: "));
  resp->mutable_ids()->Add(ids->begin(), ids->end());
  return grpc::Status::OK;
}

grpc::Status InferenceService::GetModelInfo(grpc::ServerContext*, const pb::GetModelInfoRequest*,
                                            pb::ModelInfo* resp) {
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
  return grpc::Status::OK;
}

}  // namespace shardlm
