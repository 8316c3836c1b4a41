// vLLM's engine protocol, vllm.grpc.engine.VllmEngine, on the public gRPC port beside
// shardlm.v1: the front end SGLang's model gateway (sglang-router) and other routers of
// vLLM-style engines call (docs/routers.md). A sibling of the shardlm.v1 and OpenAI front
// ends over the serving core; tokens in, tokens out (the gateway tokenizes, renders chat
// templates and detokenizes itself).
//
//   VllmEngineService vllm(&core, {model_path, max_context, eos_ids}, ready);
//   builder.RegisterService(&vllm);
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "coordinator/router/running_calls.h"
#include "coordinator/serving/serving_core.h"
#include "vllm/grpc/engine/vllm_engine.grpc.pb.h"

namespace shardlm {

// What GetModelInfo says and requests are checked against.
struct VllmModel {
  // model_path: the name the gateway routes requests by and loads a tokenizer from (a
  // directory holding tokenizer.json; serve --router-model-path).
  std::string model_path;
  int64_t max_context = 0;  // prompt + generated tokens at most
  int32_t vocab_size = 0;
  std::vector<int32_t> eos_ids;  // left out of replies (the gateway detokenizes them)
};

class VllmEngineService final : public ::vllm::grpc::engine::VllmEngine::WithCallbackMethod_Generate<
                                    ::vllm::grpc::engine::VllmEngine::Service> {
 public:
  // `ready`: whether the server serves (listening, the group formed, not draining), for
  // HealthCheck.
  VllmEngineService(ServingCore* core, VllmModel model, std::function<bool()> ready);

  ServingCore* core() const { return core_; }
  const VllmModel& model() const { return model_; }
  RunningCalls& running() { return running_; }
  // Stamps the arrival of a Generate call (GetServerInfo's last_receive_timestamp).
  void Received() { last_receive_ms_ = NowMs(); }

  grpc::ServerWriteReactor<::vllm::grpc::engine::GenerateResponse>* Generate(
      grpc::CallbackServerContext* ctx, const ::vllm::grpc::engine::GenerateRequest* req) override;
  grpc::Status Embed(grpc::ServerContext* ctx, const ::vllm::grpc::engine::EmbedRequest* req,
                     ::vllm::grpc::engine::EmbedResponse* resp) override;
  grpc::Status HealthCheck(grpc::ServerContext* ctx, const ::vllm::grpc::engine::HealthCheckRequest* req,
                           ::vllm::grpc::engine::HealthCheckResponse* resp) override;
  grpc::Status Abort(grpc::ServerContext* ctx, const ::vllm::grpc::engine::AbortRequest* req,
                     ::vllm::grpc::engine::AbortResponse* resp) override;
  grpc::Status GetModelInfo(grpc::ServerContext* ctx, const ::vllm::grpc::engine::GetModelInfoRequest* req,
                            ::vllm::grpc::engine::GetModelInfoResponse* resp) override;
  grpc::Status GetServerInfo(grpc::ServerContext* ctx, const ::vllm::grpc::engine::GetServerInfoRequest* req,
                             ::vllm::grpc::engine::GetServerInfoResponse* resp) override;

 private:
  static int64_t NowMs();

  ServingCore* core_;
  VllmModel model_;
  std::function<bool()> ready_;
  RunningCalls running_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::atomic<int64_t> last_receive_ms_{0};
};

}  // namespace shardlm
