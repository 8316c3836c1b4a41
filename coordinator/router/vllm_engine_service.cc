#include "coordinator/router/vllm_engine_service.h"

#include <utility>

#include "common/grpc_status.h"
#include "coordinator/grpc/grpc_call_record.h"

namespace shardlm {

namespace vpb = ::vllm::grpc::engine;

VllmEngineService::VllmEngineService(ServingCore* core, VllmModel model, std::function<bool()> ready)
    : core_(core), model_(std::move(model)), ready_(std::move(ready)) {}

int64_t VllmEngineService::NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

grpc::Status VllmEngineService::Embed(grpc::ServerContext* ctx, const vpb::EmbedRequest*,
                                      vpb::EmbedResponse*) {
  GrpcCallRecord call(ctx, "VllmEmbed", core_->metrics());
  return call.FinishGrpc(
      grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "Embed is not served: shardlm serves generation only"));
}

// For the gateway's periodic checks (and probes): no key needed, as for grpc.health.v1.
grpc::Status VllmEngineService::HealthCheck(grpc::ServerContext*, const vpb::HealthCheckRequest*,
                                            vpb::HealthCheckResponse* resp) {
  const bool healthy = ready_();
  resp->set_healthy(healthy);
  resp->set_message(healthy ? "serving" : "not serving: starting, re-forming its worker group or draining");
  return grpc::Status::OK;
}

grpc::Status VllmEngineService::Abort(grpc::ServerContext* ctx, const vpb::AbortRequest* req,
                                      vpb::AbortResponse*) {
  GrpcCallRecord call(ctx, "VllmAbort", core_->metrics());
  std::string owner;
  if (grpc::Status st = AdmitGrpc(*core_, *ctx, &owner); !st.ok()) return call.FinishGrpc(st);
  running_.Abort(owner, {req->request_ids().begin(), req->request_ids().end()});
  return call.FinishGrpc(grpc::Status::OK);
}

grpc::Status VllmEngineService::GetModelInfo(grpc::ServerContext* ctx, const vpb::GetModelInfoRequest*,
                                             vpb::GetModelInfoResponse* resp) {
  GrpcCallRecord call(ctx, "VllmGetModelInfo", core_->metrics());
  std::string owner;
  if (grpc::Status st = AdmitGrpc(*core_, *ctx, &owner); !st.ok()) return call.FinishGrpc(st);
  resp->set_model_path(model_.model_path);
  resp->set_is_generation(true);
  resp->set_max_context_length(static_cast<uint32_t>(model_.max_context));
  resp->set_vocab_size(static_cast<uint32_t>(model_.vocab_size));
  resp->set_supports_vision(false);
  return call.FinishGrpc(grpc::Status::OK);
}

grpc::Status VllmEngineService::GetServerInfo(grpc::ServerContext* ctx, const vpb::GetServerInfoRequest*,
                                              vpb::GetServerInfoResponse* resp) {
  GrpcCallRecord call(ctx, "VllmGetServerInfo", core_->metrics());
  std::string owner;
  if (grpc::Status st = AdmitGrpc(*core_, *ctx, &owner); !st.ok()) return call.FinishGrpc(st);
  const Engine::Stats stats = core_->loop()->stats();
  resp->set_active_requests(static_cast<uint32_t>(stats.running + stats.waiting));
  resp->set_is_paused(!ready_());
  resp->set_last_receive_timestamp(static_cast<double>(last_receive_ms_.load()) / 1000.0);
  const std::chrono::duration<double> up = std::chrono::steady_clock::now() - started_;
  resp->set_uptime_seconds(up.count());
  resp->set_server_type("shardlm");
  return call.FinishGrpc(grpc::Status::OK);
}

}  // namespace shardlm
