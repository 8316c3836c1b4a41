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

#include "coordinator/serving/call_record.h"

namespace shardlm {

class GrpcCallRecord : public CallRecord {
 public:
  GrpcCallRecord(grpc::ServerContextBase* ctx, const char* method, ServiceMetrics* metrics);
  // CallRecord::Finish, then `status` as the client sees it.
  grpc::Status FinishGrpc(const grpc::Status& status);

 private:
  grpc::ServerContextBase* ctx_;
};

}  // namespace shardlm
