// InferenceService::Generate: a GenerateSession driven by a
// ServerWriteReactor per stream. No thread waits for tokens: the
// engine loop's callbacks wake the reactor, which writes one message at a
// time (the next when the last is done), so a thousand open streams cost a
// thousand small objects, not a thousand blocked threads. A client that
// cancels, disconnects or runs past its deadline has its work cancelled and
// its blocks freed at once (OnCancel).
#include <deque>
#include <memory>
#include <mutex>

#include "common/grpc_status.h"
#include "coordinator/grpc/inference_service.h"
#include "coordinator/grpc/proto_convert.h"
#include "coordinator/serving/generate_session.h"

namespace shardlm {
namespace {

namespace pb = ::shardlm::v1;

class GenerateReactor : public grpc::ServerWriteReactor<pb::GenerateResponse> {
 public:
  // Owned by itself until gRPC calls OnDone; engine callbacks reach it
  // through weak pointers, so a late token never touches a finished call.
  static GenerateReactor* Start(InferenceService* service, grpc::CallbackServerContext* ctx,
                                const pb::GenerateRequest& req) {
    auto r = std::shared_ptr<GenerateReactor>(new GenerateReactor(service, ctx));
    r->self_ = r;
    r->Begin(req);
    return r.get();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) {  // the client is gone
      Abandon();
      FinishCall(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    // Cancelled while this write was in flight: OnCancel left the finish to
    // here (without it the call would never end: no OnDone, a leaked record).
    if (cancelled_) return FinishCall(final_);
    PumpLocked();
  }

  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    Abandon();
    absl::Status why = CallGone(*ctx_);
    final_ = why.ok() ? grpc::Status(grpc::StatusCode::CANCELLED, "client cancelled") : ToGrpcStatus(why);
    pending_.clear();
    if (!writing_) FinishCall(final_);  // else when the write in flight returns
  }

  void OnDone() override {
    std::shared_ptr<GenerateReactor> last = std::move(self_);  // may delete this on return
  }

 private:
  GenerateReactor(InferenceService* service, grpc::CallbackServerContext* ctx)
      : service_(service), ctx_(ctx), call_(ctx, "Generate", service->core()->metrics()) {}

  void Begin(const pb::GenerateRequest& req) {
    std::lock_guard<std::mutex> lock(mu_);
    const grpc::Status unparsed = TakeParseError(&req);  // always taken, so none is left behind
    std::string owner;
    grpc::Status st = service_->Admit(*ctx_, &owner);
    if (st.ok()) st = unparsed;
    if (!st.ok()) return FinishCall(st);
    GenerateJob job = GenerateJobFromProto(req, {});
    session_ = std::make_unique<GenerateSession>(service_->core(), owner, &call_);
    // n and the stop strings before a text prompt is tokenized: the cheap
    // errors first, as a long text costs time to tokenize.
    if (absl::Status checked = session_->CheckJob(job); !checked.ok()) {
      ended_ = true;
      return FinishCall(ToGrpcStatus(checked));
    }
    auto prompt = service_->PromptIds(req.prompt(), req.prefix_handle().empty(), "prompt", call_);
    if (!prompt.ok()) {
      ended_ = true;
      return FinishCall(ToGrpcStatus(prompt.status()));
    }
    job.request.prompt = *std::move(prompt);
    std::weak_ptr<GenerateReactor> weak = self_;
    st = ToGrpcStatus(session_->Start(std::move(job), [weak] {
      if (auto r = weak.lock()) r->Pump();
    }));
    if (!st.ok()) {
      ended_ = true;
      return FinishCall(st);
    }
    PumpLocked();
  }

  void Pump() {
    std::lock_guard<std::mutex> lock(mu_);
    PumpLocked();
  }

  // Takes what the session has ready and writes the next message, or
  // finishes once everything is written. mu_ held.
  void PumpLocked() {
    if (finished_ || cancelled_) return;
    if (!ended_) {
      std::vector<GenerateUpdate> ready;
      absl::Status final;
      ended_ = session_->Drain(&ready, &final);
      if (ended_) final_ = ToGrpcStatus(final);
      for (const GenerateUpdate& u : ready) pending_.push_back(GenerateResponseFromUpdate(u));
    }
    if (writing_) return;
    if (!pending_.empty()) {
      current_ = std::move(pending_.front());
      pending_.pop_front();
      writing_ = true;
      StartWrite(&current_);
      return;
    }
    if (ended_) FinishCall(final_);
  }

  void Abandon() {
    cancelled_ = true;
    if (session_ && !ended_) session_->Abandon();
    ended_ = true;
  }

  void FinishCall(const grpc::Status& st) {
    if (finished_) return;
    finished_ = true;
    Finish(call_.FinishGrpc(st));
  }

  InferenceService* service_;
  grpc::CallbackServerContext* ctx_;
  GrpcCallRecord call_;
  std::mutex mu_;
  std::unique_ptr<GenerateSession> session_;
  std::deque<pb::GenerateResponse> pending_;
  pb::GenerateResponse current_;  // the message being written
  grpc::Status final_;
  bool writing_ = false;
  bool ended_ = false;      // the session has nothing more to say
  bool cancelled_ = false;  // the client left
  bool finished_ = false;   // Finish called
  std::shared_ptr<GenerateReactor> self_;
};

}  // namespace

grpc::ServerWriteReactor<pb::GenerateResponse>* InferenceService::Generate(grpc::CallbackServerContext* ctx,
                                                                           const pb::GenerateRequest* req) {
  return GenerateReactor::Start(this, ctx, *req);
}

}  // namespace shardlm
