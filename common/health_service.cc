#include "common/health_service.h"

#include <chrono>
#include <thread>

namespace shardlm {
namespace {

namespace hpb = ::grpc::health::v1;

}  // namespace

int HealthService::StatusOf(const std::string& service) const {
  if (service == "liveness") return hpb::HealthCheckResponse::SERVING;
  if (!service.empty() && service != "shardlm.v1.Inference") return hpb::HealthCheckResponse::SERVICE_UNKNOWN;
  return healthy_() ? hpb::HealthCheckResponse::SERVING : hpb::HealthCheckResponse::NOT_SERVING;
}

grpc::Status HealthService::Check(grpc::ServerContext*, const hpb::HealthCheckRequest* req,
                                  hpb::HealthCheckResponse* resp) {
  const int status = StatusOf(req->service());
  if (status == hpb::HealthCheckResponse::SERVICE_UNKNOWN)
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service '" + req->service() + "'");
  resp->set_status(static_cast<hpb::HealthCheckResponse::ServingStatus>(status));
  return grpc::Status::OK;
}

grpc::Status HealthService::Watch(grpc::ServerContext* ctx, const hpb::HealthCheckRequest* req,
                                  grpc::ServerWriter<hpb::HealthCheckResponse>* writer) {
  hpb::HealthCheckResponse resp;
  int last = -1;
  while (!ctx->IsCancelled()) {
    const int now = StatusOf(req->service());
    if (now != last) {
      resp.set_status(static_cast<hpb::HealthCheckResponse::ServingStatus>(now));
      if (!writer->Write(resp)) break;
      last = now;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // changes reach watchers quickly
  }
  return grpc::Status::OK;
}

}  // namespace shardlm
