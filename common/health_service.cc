#include "common/health_service.h"

#include <chrono>
#include <thread>

namespace shardlm {
namespace {

namespace hpb = ::grpc::health::v1;

bool Known(const std::string& service) {
  return service.empty() || service == "shardlm.v1.Inference" || service == "liveness";
}

}  // namespace

grpc::Status HealthService::Check(grpc::ServerContext*, const hpb::HealthCheckRequest* req,
                                  hpb::HealthCheckResponse* resp) {
  if (!Known(req->service()))
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service '" + req->service() + "'");
  resp->set_status(req->service() == "liveness" || healthy_() ? hpb::HealthCheckResponse::SERVING
                                                              : hpb::HealthCheckResponse::NOT_SERVING);
  return grpc::Status::OK;
}

grpc::Status HealthService::Watch(grpc::ServerContext* ctx, const hpb::HealthCheckRequest* req,
                                  grpc::ServerWriter<hpb::HealthCheckResponse>* writer) {
  hpb::HealthCheckResponse resp;
  int last = -1;
  while (!ctx->IsCancelled()) {
    const int now = !Known(req->service())                       ? hpb::HealthCheckResponse::SERVICE_UNKNOWN
                    : req->service() == "liveness" || healthy_() ? hpb::HealthCheckResponse::SERVING
                                                                 : hpb::HealthCheckResponse::NOT_SERVING;
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
