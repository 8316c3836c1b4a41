// The public API, shardlm.v1.Inference: the gRPC front end over the serving
// core (coordinator/serving/serving_core.h). It converts each request into
// the core's types (proto_convert.h), and the core's results and errors back.
//
// Every request is validated before any work; errors carry canonical codes:
// INVALID_ARGUMENT naming the field and the limit, NOT_FOUND for an unknown,
// released or expired handle, UNAVAILABLE when the tensor-parallel group has
// failed. Generate streams tokens with text deltas from the incremental
// detokenizer; a client that cancels or disconnects has its requests
// cancelled and their KV blocks freed.
#pragma once

#include <string>
#include <vector>

#include "coordinator/engine/engine_request.h"
#include "coordinator/grpc/grpc_call_record.h"
#include "coordinator/serving/serving_core.h"
#include "shardlm/v1/inference.grpc.pb.h"

namespace shardlm {

// Generate, Prefill and Score run on gRPC's callback API (a reactor per
// call, no thread held while the engine works: coordinator/grpc/generate_call.cc,
// unary_call.cc); the other methods answer at once and are synchronous.
class InferenceService final
    : public ::shardlm::v1::Inference::WithCallbackMethod_Generate<
          ::shardlm::v1::Inference::WithCallbackMethod_Prefill<
              ::shardlm::v1::Inference::WithCallbackMethod_Score<::shardlm::v1::Inference::Service>>> {
 public:
  explicit InferenceService(ServingCore* core) : core_(core) {}

  // Admits a call from its `authorization` metadata: UNAVAILABLE while
  // draining, UNAUTHENTICATED without a valid key; sets *owner to the
  // caller's key (empty when keys are off).
  grpc::Status Admit(const grpc::ServerContextBase& ctx, std::string* owner) const;
  // Token ids of a prompt; text gets special tokens only when it starts a sequence.
  // Text longer than the model's context could hold is refused before tokenizing,
  // and tokenizing stops (CANCELLED) once `call` is abandoned.
  absl::StatusOr<std::vector<int32_t>> PromptIds(const ::shardlm::v1::Prompt& prompt, bool starts_sequence,
                                                 const std::string& field, const CallRecord& call) const;
  ServingCore* core() const { return core_; }

  grpc::ServerWriteReactor<::shardlm::v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* ctx, const ::shardlm::v1::GenerateRequest* req) override;
  grpc::ServerUnaryReactor* Prefill(grpc::CallbackServerContext* ctx,
                                    const ::shardlm::v1::PrefillRequest* req,
                                    ::shardlm::v1::PrefillResponse* resp) override;
  grpc::ServerUnaryReactor* Score(grpc::CallbackServerContext* ctx, const ::shardlm::v1::ScoreRequest* req,
                                  ::shardlm::v1::ScoreResponse* resp) override;
  grpc::Status ReleaseChunks(grpc::ServerContext* ctx, const ::shardlm::v1::ReleaseChunksRequest* req,
                             ::shardlm::v1::ReleaseChunksResponse* resp) override;
  grpc::Status Tokenize(grpc::ServerContext* ctx, const ::shardlm::v1::TokenizeRequest* req,
                        ::shardlm::v1::TokenizeResponse* resp) override;
  grpc::Status Detokenize(grpc::ServerContext* ctx, const ::shardlm::v1::DetokenizeRequest* req,
                          ::shardlm::v1::DetokenizeResponse* resp) override;
  grpc::Status GetModelInfo(grpc::ServerContext* ctx, const ::shardlm::v1::GetModelInfoRequest* req,
                            ::shardlm::v1::ModelInfo* resp) override;
  grpc::Status GetStats(grpc::ServerContext* ctx, const ::shardlm::v1::GetStatsRequest* req,
                        ::shardlm::v1::Stats* resp) override;

 private:
  // The handlers behind the public methods, which wrap each in a CallRecord.
  // Prefill's and Score's checks, and the engine requests they submit.
  grpc::Status PreparePrefill(const ::shardlm::v1::PrefillRequest& req, const std::string& owner,
                              CallRecord& call, std::vector<EngineRequest>* requests) const;
  grpc::Status PrepareScore(const ::shardlm::v1::ScoreRequest& req, const std::string& owner,
                            CallRecord& call, std::vector<EngineRequest>* requests) const;
  grpc::Status ReleaseChunksImpl(grpc::ServerContext* ctx, const ::shardlm::v1::ReleaseChunksRequest* req,
                                 ::shardlm::v1::ReleaseChunksResponse* out, CallRecord& call);
  grpc::Status TokenizeImpl(grpc::ServerContext* ctx, const ::shardlm::v1::TokenizeRequest* req,
                            ::shardlm::v1::TokenizeResponse* out, CallRecord& call);
  grpc::Status DetokenizeImpl(grpc::ServerContext* ctx, const ::shardlm::v1::DetokenizeRequest* req,
                              ::shardlm::v1::DetokenizeResponse* out, CallRecord& call);
  grpc::Status GetModelInfoImpl(grpc::ServerContext* ctx, const ::shardlm::v1::GetModelInfoRequest* req,
                                ::shardlm::v1::ModelInfo* out, CallRecord& call);
  grpc::Status GetStatsImpl(grpc::ServerContext* ctx, const ::shardlm::v1::GetStatsRequest* req,
                            ::shardlm::v1::Stats* out, CallRecord& call);
  ServingCore* core_;
};

}  // namespace shardlm
