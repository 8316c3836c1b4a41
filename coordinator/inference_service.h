// The public API, shardlm.v1.Inference, over an EngineLoop.
//
// Every request is validated before any work; errors carry canonical codes
// (INVALID_ARGUMENT naming the field and the limit). Generate streams tokens
// with text deltas from the incremental detokenizer; a client that cancels or
// disconnects has its request cancelled and its KV blocks freed.
#pragma once

#include <memory>
#include <string>

#include "coordinator/engine_loop.h"
#include "shardlm/v1/inference.grpc.pb.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {

struct ServedModel {
  std::string dtype;
  int tp = 1;
  int64_t block_size = 16;
};

class InferenceService final : public ::shardlm::v1::Inference::Service {
 public:
  InferenceService(EngineLoop* loop, const Tokenizer* tokenizer, ServedModel info)
      : loop_(loop), tokenizer_(tokenizer), info_(std::move(info)) {}

  grpc::Status Generate(grpc::ServerContext* ctx, const ::shardlm::v1::GenerateRequest* req,
                        grpc::ServerWriter<::shardlm::v1::GenerateResponse>* writer) override;
  grpc::Status Score(grpc::ServerContext* ctx, const ::shardlm::v1::ScoreRequest* req,
                     ::shardlm::v1::ScoreResponse* resp) override;
  grpc::Status Tokenize(grpc::ServerContext* ctx, const ::shardlm::v1::TokenizeRequest* req,
                        ::shardlm::v1::TokenizeResponse* resp) override;
  grpc::Status GetModelInfo(grpc::ServerContext* ctx, const ::shardlm::v1::GetModelInfoRequest* req,
                            ::shardlm::v1::ModelInfo* resp) override;

 private:
  absl::StatusOr<std::vector<int32_t>> PromptIds(const ::shardlm::v1::Prompt& prompt) const;

  EngineLoop* loop_;
  const Tokenizer* tokenizer_;  // may be null: token-id prompts only
  ServedModel info_;
};

}  // namespace shardlm
