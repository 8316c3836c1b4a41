// The public API, shardlm.v1.Inference, over an EngineLoop.
//
// Every request is validated before any work; errors carry canonical codes:
// INVALID_ARGUMENT naming the field and the limit, NOT_FOUND for an unknown,
// released or expired handle, UNAVAILABLE when the tensor-parallel group has
// failed. Generate streams tokens with text deltas from the incremental
// detokenizer; a client that cancels or disconnects has its requests
// cancelled and their KV blocks freed.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "constraints/constraint_compiler.h"
#include "coordinator/call_record.h"
#include "coordinator/engine_loop.h"
#include "coordinator/generate_job.h"
#include "coordinator/proto_convert.h"
#include "coordinator/request_limits.h"
#include "shardlm/v1/inference.grpc.pb.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {

struct ServedModel {
  std::string dtype;
  int tp = 1;
  int64_t block_size = 16;
  int64_t handle_ttl_ms = 600000;
};

// Generate, Prefill and Score run on gRPC's callback API (a reactor per
// call, no thread held while the engine works: coordinator/generate_call.cc,
// unary_call.cc); the other methods answer at once and are synchronous.
class InferenceService final
    : public ::shardlm::v1::Inference::WithCallbackMethod_Generate<
          ::shardlm::v1::Inference::WithCallbackMethod_Prefill<
              ::shardlm::v1::Inference::WithCallbackMethod_Score<::shardlm::v1::Inference::Service>>> {
 public:
  InferenceService(EngineLoop* loop, const Tokenizer* tokenizer, ServedModel info)
      : loop_(loop), tokenizer_(tokenizer), info_(std::move(info)) {}

  // API keys (each call must send `authorization: Bearer KEY`); empty: open.
  // A ChunkResult handle belongs to the key that made it.
  void SetApiKeys(std::vector<std::string> keys) { api_keys_ = std::move(keys); }
  // After this every new call gets UNAVAILABLE; calls in flight go on.
  void StartDraining() { draining_ = true; }
  // Counts every call into `metrics` (which must outlive the service).
  void SetMetrics(ServiceMetrics* metrics) { metrics_ = metrics; }

  // The Generate call's work, shared by gRPC and the OpenAI HTTP front end:
  // `emit` gets each response message in order (false: the client is gone),
  // and `gone` is polled while waiting for tokens. The request's work is
  // cancelled and its blocks freed when either says the client left.
  grpc::Status StreamGenerate(GenerateJob job, const std::string& owner, CallRecord& call,
                              const std::function<bool(const ::shardlm::v1::GenerateResponse&)>& emit,
                              const std::function<bool()>& gone);
  // Admits a call from its `authorization` value (empty: none sent):
  // UNAVAILABLE while draining, UNAUTHENTICATED without a valid key; sets
  // *owner to the caller's key (empty when keys are off).
  grpc::Status AdmitKey(const std::string* authorization, std::string* owner) const;
  // Admits a call: UNAVAILABLE while draining, UNAUTHENTICATED without a
  // valid key; sets *owner to the caller's key (empty when keys are off).
  grpc::Status Admit(const grpc::ServerContextBase& ctx, std::string* owner) const;
  // Token ids of a prompt; text gets special tokens only when it starts a sequence.
  // Text longer than the model's context could hold is refused before tokenizing,
  // and tokenizing stops (CANCELLED) once `call` is abandoned.
  absl::StatusOr<std::vector<int32_t>> PromptIds(const ::shardlm::v1::Prompt& prompt, bool starts_sequence,
                                                 const std::string& field, const CallRecord& call) const;
  // Tokenizes `text` for a call: the length check and the stop check above.
  absl::StatusOr<std::vector<int32_t>> EncodeForCall(const std::string& text, bool add_special_tokens,
                                                     const std::string& field, const CallRecord& call) const;
  const Tokenizer* tokenizer() const { return tokenizer_; }
  // A request's constraint as a matcher in its start state (null for an
  // empty one); InvalidArgument naming constraint.<kind> and quoting
  // llguidance for a bad one. The compiler is built on the first call.
  absl::StatusOr<std::shared_ptr<const Matcher>> CompileConstraint(const ConstraintSpec& spec) const;
  EngineLoop* loop() const { return loop_; }
  ServiceMetrics* metrics() const { return metrics_; }

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
  EngineLoop* loop_;
  const Tokenizer* tokenizer_;  // may be null: token-id prompts only
  mutable std::once_flag compiler_once_;
  mutable absl::Status compiler_status_;
  mutable std::unique_ptr<ConstraintCompiler> compiler_;
  ServedModel info_;
  std::vector<std::string> api_keys_;
  std::atomic<bool> draining_{false};
  ServiceMetrics* metrics_ = nullptr;
};

// OK while the call's client waits; CANCELLED once it cancelled or went
// away, DEADLINE_EXCEEDED once its deadline passed (or is within 200 ms: see
// inference_service.cc).
absl::Status CallGone(const grpc::ServerContextBase& ctx);

}  // namespace shardlm
