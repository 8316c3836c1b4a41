// InferenceService::Generate: shardlm.v1's Generate as a SessionStream
// (session_stream.h): the request checked and its prompt tokenized, then the
// session's updates written as GenerateResponses.
#include <deque>

#include "coordinator/grpc/inference_service.h"
#include "coordinator/grpc/proto_convert.h"
#include "coordinator/grpc/session_stream.h"

namespace shardlm {
namespace {

namespace pb = ::shardlm::v1;

class GenerateReactor : public SessionStream<pb::GenerateResponse> {
 public:
  GenerateReactor(grpc::CallbackServerContext* ctx, InferenceService* service)
      : SessionStream(ctx, service->core(), "Generate"), service_(service) {}

  void Begin(const pb::GenerateRequest& req) {
    const grpc::Status unparsed = TakeParseError(&req);  // always taken, so none is left behind
    std::string owner;
    grpc::Status st = service_->Admit(*ctx_, &owner);
    if (st.ok()) st = unparsed;
    if (!st.ok()) return FinishCall(st);
    GenerateJob job = GenerateJobFromProto(req, {});
    // n and the stop strings before a text prompt is tokenized: the cheap
    // errors first, as a long text costs time to tokenize.
    if (absl::Status checked = GenerateSession::CheckJob(*core_, job); !checked.ok()) {
      return Refuse(checked);
    }
    auto prompt = service_->PromptIds(req.prompt(), req.prefix_handle().empty(), "prompt", call_);
    if (!prompt.ok()) return Refuse(prompt.status());
    job.request.prompt = *std::move(prompt);
    Launch(std::move(job), owner);
  }

 private:
  void Write(const GenerateUpdate& update, std::deque<pb::GenerateResponse>* out) override {
    out->push_back(GenerateResponseFromUpdate(update));
  }

  InferenceService* service_;
};

}  // namespace

grpc::ServerWriteReactor<pb::GenerateResponse>* InferenceService::Generate(grpc::CallbackServerContext* ctx,
                                                                           const pb::GenerateRequest* req) {
  return SessionStream<pb::GenerateResponse>::Start<GenerateReactor>(ctx, *req, this);
}

}  // namespace shardlm
