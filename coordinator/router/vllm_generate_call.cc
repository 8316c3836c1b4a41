// VllmEngineService::Generate: vLLM's Generate as a SessionStream
// (coordinator/grpc/session_stream.h). The request is checked and converted
// (vllm_convert.h), registered under its request id for Abort, and the
// session's updates are written as token-delta chunks and completes.
#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "common/status.h"
#include "coordinator/grpc/grpc_call_record.h"
#include "coordinator/grpc/session_stream.h"
#include "coordinator/router/vllm_convert.h"
#include "coordinator/router/vllm_engine_service.h"

namespace shardlm {
namespace {

namespace vpb = ::vllm::grpc::engine;

class VllmGenerateCall : public SessionStream<vpb::GenerateResponse> {
 public:
  VllmGenerateCall(grpc::CallbackServerContext* ctx, VllmEngineService* service,
                   const std::string& request_id)
      : SessionStream(ctx, service->core(), "VllmGenerate", request_id), service_(service) {}

  void Begin(const vpb::GenerateRequest& req) {
    service_->Received();
    const grpc::Status unparsed = TakeParseError(&req);  // always taken, so none is left behind
    std::string owner;
    grpc::Status st = AdmitGrpc(*core_, *ctx_, &owner);
    if (st.ok()) st = unparsed;
    if (!st.ok()) return FinishCall(st);
    if (req.input_case() == vpb::GenerateRequest::kText) prompt_field_ = "text";
    auto prompt = Prompt(req);
    if (!prompt.ok()) return Refuse(prompt.status());
    const VllmModel& model = service_->model();
    auto job =
        VllmJob(req, *std::move(prompt), VllmLimits{model.max_context, model.vocab_size, prompt_field_});
    if (!job.ok()) return Refuse(job.status());
    if (absl::Status checked = GenerateSession::CheckJob(*core_, *job); !checked.ok()) return Refuse(checked);
    writer_.emplace(req, model.eos_ids, job->n);
    if (!req.request_id().empty()) {
      std::weak_ptr<SessionStream> weak = weak_self();
      std::string id = req.request_id();
      absl::Status added = service_->running().Add(owner, id, [weak, id] {
        if (auto call = weak.lock()) {
          call->Stop(grpc::Status(grpc::StatusCode::CANCELLED,
                                  "request '" + id + "' was aborted (Abort); its work was stopped"));
        }
      });
      if (!added.ok()) return Refuse(added);
      registered_ = std::make_pair(owner, id);
    }
    Launch(*std::move(job), owner);
  }

 private:
  // The prompt's token ids: the gateway's, or the text tokenized here (with the
  // tokenizer's special tokens, as vLLM adds them).
  absl::StatusOr<std::vector<int32_t>> Prompt(const vpb::GenerateRequest& req) {
    switch (req.input_case()) {
      case vpb::GenerateRequest::kTokenized:
        return VllmInputIds(req.tokenized(), service_->model().vocab_size);
      case vpb::GenerateRequest::kText:
        return core_->EncodeForCall(req.text(), /*add_special_tokens=*/true, "text", call_);
      case vpb::GenerateRequest::INPUT_NOT_SET:
        break;
    }
    return InvalidField("input", "is empty: set tokenized (input_ids) or text");
  }

  void Write(const GenerateUpdate& update, std::deque<vpb::GenerateResponse>* out) override {
    writer_->Write(update, out);
  }
  grpc::Status Told(const absl::Status& status) override {
    return ToGrpcStatus(VllmStatus(status, prompt_field_));
  }
  // The id is free again once the status is on its way: a retry may reuse it at once.
  void Finishing() override {
    if (registered_) service_->running().Remove(registered_->first, registered_->second);
  }

  VllmEngineService* service_;
  std::optional<VllmReplyWriter> writer_;
  std::optional<std::pair<std::string, std::string>> registered_;  // (owner, request id) for Abort
  std::string prompt_field_ = "tokenized.input_ids";               // where the prompt came from
};

}  // namespace

grpc::ServerWriteReactor<vpb::GenerateResponse>* VllmEngineService::Generate(
    grpc::CallbackServerContext* ctx, const vpb::GenerateRequest* req) {
  return SessionStream<vpb::GenerateResponse>::Start<VllmGenerateCall>(ctx, *req, this, req->request_id());
}

}  // namespace shardlm
