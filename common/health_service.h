// grpc.health.v1.Health, generated from the standard health.proto so that
// server reflection can describe it (gRPC C++'s built-in health service is
// invisible to reflection).
//
// Service names: "" (and "shardlm.v1.Inference") answer readiness, SERVING
// while `healthy` says so (the tensor-parallel group works), NOT_SERVING once
// it has failed; "liveness" is SERVING whenever the process answers at all,
// for liveness probes that must not restart a process waiting for its peers.
#pragma once

#include <functional>
#include <string>

#include "grpc/health/v1/health.grpc.pb.h"

namespace shardlm {

class HealthService final : public ::grpc::health::v1::Health::Service {
 public:
  // `healthy` reports the group's state; it must be cheap and thread-safe.
  explicit HealthService(std::function<bool()> healthy) : healthy_(std::move(healthy)) {}

  grpc::Status Check(grpc::ServerContext* ctx, const ::grpc::health::v1::HealthCheckRequest* req,
                     ::grpc::health::v1::HealthCheckResponse* resp) override;
  grpc::Status Watch(grpc::ServerContext* ctx, const ::grpc::health::v1::HealthCheckRequest* req,
                     grpc::ServerWriter<::grpc::health::v1::HealthCheckResponse>* writer) override;

 private:
  // The ServingStatus of `service`; SERVICE_UNKNOWN for a name not served here.
  int StatusOf(const std::string& service) const;

  std::function<bool()> healthy_;
};

}  // namespace shardlm
