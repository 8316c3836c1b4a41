// A CallRecord (coordinator/serving/call_record.h) for a gRPC call: its id
// from the `x-request-id` metadata, echoed back as initial metadata; it counts
// as abandoned once the context is cancelled or past its deadline. FinishGrpc
// is where a gRPC call's status is logged and made public: the field an
// INVALID_ARGUMENT is about goes to the client as trailing metadata
// (`shardlm-error-field`), never as details.
//
//   grpc::Status InferenceService::Tokenize(ctx, req, resp) {
//     GrpcCallRecord call(ctx, "Tokenize", core_->metrics());
//     return call.FinishGrpc(TokenizeImpl(ctx, req, resp, call));
//   }
#pragma once

#include <grpcpp/server_context.h>

#include <string>

#include "absl/status/status.h"
#include "coordinator/serving/call_record.h"
#include "coordinator/serving/serving_core.h"

namespace shardlm {

// OK while the call's client waits; CANCELLED once it cancelled or went
// away, DEADLINE_EXCEEDED once its deadline passed (or is within 200 ms: the
// client's clock starts first).
absl::Status CallGone(const grpc::ServerContextBase& ctx);

// Admits a call from its `authorization` metadata (ServingCore::AdmitKey):
// UNAVAILABLE while draining, UNAUTHENTICATED without a valid key; sets
// *owner to the caller's key (empty when keys are off).
grpc::Status AdmitGrpc(const ServingCore& core, const grpc::ServerContextBase& ctx, std::string* owner);

class GrpcCallRecord : public CallRecord {
 public:
  // `client_id`: the request id the request itself carries (vLLM's engine protocol);
  // empty: the `x-request-id` metadata's.
  GrpcCallRecord(grpc::ServerContextBase* ctx, const char* method, ServiceMetrics* metrics,
                 const std::string& client_id = "");
  // CallRecord::Finish, then `status` as the client sees it.
  grpc::Status FinishGrpc(const grpc::Status& status);

 private:
  grpc::ServerContextBase* ctx_;
};

}  // namespace shardlm
