// A server stream that drives one GenerateSession (coordinator/serving/generate_session.h):
// the callback reactor every gRPC Generate uses, whatever its protocol (shardlm.v1's in
// generate_call.cc, vLLM's engine protocol in coordinator/router/). No thread waits for
// tokens: the engine loop's callbacks wake the reactor, which writes one message at a time
// (the next when the last is done). A client that cancels, disconnects or runs past its
// deadline has its work cancelled and its blocks freed at once (OnCancel); so does a call
// ended from elsewhere (Stop, as an Abort by request id does).
//
// A protocol derives from it, says how its request becomes a job (Begin) and how updates
// become its messages (Write):
//
//   class MyStream : public SessionStream<MyResponse> {
//     void Begin(const MyRequest& req) {        // under the lock, from Start
//       ... Launch(std::move(job), owner) or FinishCall(status) ...
//     }
//     void Write(const GenerateUpdate& u, std::deque<MyResponse>* out) override;
//   };
//   auto* r = SessionStream<MyResponse>::Start<MyStream>(ctx, args..., req);
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/grpc_status.h"
#include "coordinator/grpc/grpc_call_record.h"
#include "coordinator/serving/generate_session.h"
#include "coordinator/serving/serving_core.h"

namespace shardlm {

template <typename Response>
class SessionStream : public grpc::ServerWriteReactor<Response> {
 public:
  // Makes a Derived (constructed from ctx and args), owned by itself until gRPC calls
  // OnDone, and begins it with `req`. Engine callbacks reach it through weak pointers,
  // so a late token never touches a finished call.
  template <typename Derived, typename Request, typename... Args>
  static Derived* Start(grpc::CallbackServerContext* ctx, const Request& req, Args&&... args) {
    auto r = std::shared_ptr<Derived>(new Derived(ctx, std::forward<Args>(args)...));
    r->self_ = r;
    std::lock_guard<std::mutex> lock(r->mu_);
    r->Begin(req);
    return r.get();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) {  // the client is gone
      Abandon();
      return FinishCall(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
    }
    // Cancelled while this write was in flight: the finish was left to here
    // (without it the call would never end: no OnDone, a leaked record).
    if (cancelled_) return FinishCall(final_);
    PumpLocked();
  }

  void OnCancel() override {
    absl::Status why = CallGone(*ctx_);
    Stop(why.ok() ? grpc::Status(grpc::StatusCode::CANCELLED, "client cancelled") : ToGrpcStatus(why));
  }

  void OnDone() override {
    std::shared_ptr<SessionStream> last = std::move(self_);  // may delete this on return
  }

  // Ends the call with `status` from outside (an Abort): its work is cancelled, nothing
  // more is written, and the stream finishes once a write in flight returns.
  void Stop(const grpc::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_ || cancelled_) return;
    Abandon();
    final_ = status;
    pending_.clear();
    if (!writing_) FinishCall(final_);  // else when the write in flight returns
  }

 protected:
  SessionStream(grpc::CallbackServerContext* ctx, ServingCore* core, const char* method,
                const std::string& client_id = "")
      : core_(core), ctx_(ctx), call_(ctx, method, core->metrics(), client_id) {}

  // The protocol's messages for one update, appended to *out.
  virtual void Write(const GenerateUpdate& update, std::deque<Response>* out) = 0;
  // The status the client gets for the serving core's `status` (a protocol may name
  // fields its own way): for a refused call, and for the end of a session.
  virtual grpc::Status Told(const absl::Status& status) { return ToGrpcStatus(status); }

  // Starts `job` for `owner` once the derived class has checked and converted its
  // request; the call ends with the error when it cannot start. mu_ held.
  void Launch(GenerateJob job, const std::string& owner) {
    session_ = std::make_unique<GenerateSession>(core_, owner, &call_);
    std::weak_ptr<SessionStream> weak = self_;
    absl::Status st = session_->Start(std::move(job), [weak] {
      if (auto r = weak.lock()) r->Pump();
    });
    if (!st.ok()) return Refuse(st);
    PumpLocked();
  }
  // Ends a call that never started its work. mu_ held.
  void Refuse(const absl::Status& status) {
    ended_ = true;
    FinishCall(Told(status));
  }
  std::weak_ptr<SessionStream> weak_self() const { return self_; }
  void FinishCall(const grpc::Status& st) {
    if (finished_) return;
    finished_ = true;
    Finishing();
    this->Finish(call_.FinishGrpc(st));
  }
  // The call is about to end (once, mu_ held): what a protocol keeps for a running call goes.
  virtual void Finishing() {}

  ServingCore* core_;
  grpc::CallbackServerContext* ctx_;
  GrpcCallRecord call_;
  std::mutex mu_;

 private:
  void Pump() {
    std::lock_guard<std::mutex> lock(mu_);
    PumpLocked();
  }

  // Takes what the session has ready and writes the next message, or
  // finishes once everything is written. mu_ held.
  void PumpLocked() {
    if (finished_ || cancelled_ || !session_) return;
    if (!ended_) {
      std::vector<GenerateUpdate> ready;
      absl::Status final;
      ended_ = session_->Drain(&ready, &final);
      for (const GenerateUpdate& u : ready) Write(u, &pending_);
      if (ended_) final_ = Told(final);
    }
    if (writing_) return;
    if (!pending_.empty()) {
      current_ = std::move(pending_.front());
      pending_.pop_front();
      writing_ = true;
      this->StartWrite(&current_);
      return;
    }
    if (ended_) FinishCall(final_);
  }

  void Abandon() {
    cancelled_ = true;
    if (session_ && !ended_) session_->Abandon();
    ended_ = true;
  }

  std::unique_ptr<GenerateSession> session_;
  std::deque<Response> pending_;
  Response current_;  // the message being written
  grpc::Status final_;
  bool writing_ = false;
  bool ended_ = false;      // the session has nothing more to say
  bool cancelled_ = false;  // the client left, or Stop
  bool finished_ = false;   // Finish called
  std::shared_ptr<SessionStream> self_;
};

}  // namespace shardlm
