// InferenceService::Generate: the two drivers of a GenerateSession.
//
// gRPC: a ServerWriteReactor per stream. No thread waits for tokens: the
// engine loop's callbacks wake the reactor, which writes one message at a
// time (the next when the last is done), so a thousand open streams cost a
// thousand small objects, not a thousand blocked threads. A client that
// cancels, disconnects or runs past its deadline has its work cancelled and
// its blocks freed at once (OnCancel).
//
// The OpenAI HTTP API: StreamGenerate, a blocking loop on one of the HTTP
// server's request threads (http_server.h).
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

#include "common/grpc_status.h"
#include "coordinator/generate_session.h"
#include "coordinator/inference_service.h"

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
      : service_(service), ctx_(ctx), call_(ctx, "Generate", service->metrics()) {}

  void Begin(const pb::GenerateRequest& req) {
    std::lock_guard<std::mutex> lock(mu_);
    const grpc::Status unparsed = TakeParseError(&req);  // always taken, so none is left behind
    std::string owner;
    grpc::Status st = service_->Admit(*ctx_, &owner);
    if (st.ok()) st = unparsed;
    if (!st.ok()) return FinishCall(st);
    GenerateJob job = GenerateJobFromProto(req, {});
    session_ = std::make_unique<GenerateSession>(service_, owner, &call_);
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
    st = session_->Start(std::move(job), [weak] {
      if (auto r = weak.lock()) r->Pump();
    });
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
      std::vector<pb::GenerateResponse> ready;
      ended_ = session_->Drain(&ready, &final_);
      for (auto& m : ready) pending_.push_back(std::move(m));
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
    Finish(call_.Finish(st));
  }

  InferenceService* service_;
  grpc::CallbackServerContext* ctx_;
  CallRecord call_;
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

grpc::Status InferenceService::StreamGenerate(GenerateJob job, const std::string& owner, CallRecord& call,
                                              const std::function<bool(const pb::GenerateResponse&)>& emit,
                                              const std::function<bool()>& gone) {
  struct Signal {
    std::mutex mu;
    std::condition_variable cv;
    bool ready = false;
  };
  auto signal = std::make_shared<Signal>();
  GenerateSession session(this, owner, &call);
  grpc::Status st = session.Start(std::move(job), [signal] {
    std::lock_guard<std::mutex> lock(signal->mu);
    signal->ready = true;
    signal->cv.notify_all();
  });
  if (!st.ok()) return st;
  while (true) {
    {
      // Wake on news, or now and then to notice a client that left.
      std::unique_lock<std::mutex> lock(signal->mu);
      signal->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return signal->ready; });
      signal->ready = false;
    }
    if (gone()) {
      session.Abandon();
      return grpc::Status(grpc::StatusCode::CANCELLED, "client cancelled");
    }
    std::vector<pb::GenerateResponse> msgs;
    grpc::Status final;
    const bool ended = session.Drain(&msgs, &final);
    for (const pb::GenerateResponse& msg : msgs) {
      if (!emit(msg)) {
        session.Abandon();
        return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
      }
    }
    if (ended) return final;
  }
}

}  // namespace shardlm
