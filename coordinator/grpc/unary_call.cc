// InferenceService::Prefill and ::Score on gRPC's callback API.
//
// A ServerUnaryReactor per call submits the call's engine requests and
// finishes the call from the engine loop's result callback when the last one
// arrives: no thread waits for the prefill. A client that cancels, disconnects
// or runs past its deadline is told to gRPC at once (OnCancel): its requests
// are cancelled (they end within a step and free their blocks), the handles
// the others kept are released, and the call ends CANCELLED or
// DEADLINE_EXCEEDED.
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/status.h"
#include "coordinator/grpc/inference_service.h"
#include "coordinator/grpc/proto_convert.h"

namespace shardlm {
namespace {

namespace pb = ::shardlm::v1;

class EngineUnaryReactor : public grpc::ServerUnaryReactor {
 public:
  // Checks the request and builds its engine requests (any error status ends
  // the call before anything runs).
  using Prepare =
      std::function<grpc::Status(const std::string& owner, CallRecord& call, std::vector<EngineRequest>*)>;
  // Fills the response from the results, in request order.
  using Respond = std::function<grpc::Status(std::vector<EngineResult>&, CallRecord& call)>;

  // Owned by itself until gRPC calls OnDone; result callbacks reach it
  // through weak pointers.
  static EngineUnaryReactor* Start(InferenceService* service, grpc::CallbackServerContext* ctx,
                                   const char* method, const google::protobuf::Message* request,
                                   const Prepare& prepare, Respond respond) {
    auto r =
        std::shared_ptr<EngineUnaryReactor>(new EngineUnaryReactor(service, ctx, method, std::move(respond)));
    r->self_ = r;
    r->Begin(request, prepare);
    return r.get();
  }

  void OnCancel() override {
    std::vector<int64_t> ids;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_ || cancelled_) return;
      cancelled_ = true;
      absl::Status why = CallGone(*ctx_);
      if (failure_.ok()) failure_ = why.ok() ? absl::CancelledError("the client cancelled") : why;
      ids = ids_;
    }
    // Outside the lock: the loop thread may be delivering a result.
    for (int64_t id : ids) service_->core()->loop()->Cancel(id);
  }

  void OnDone() override {
    std::shared_ptr<EngineUnaryReactor> last = std::move(self_);  // may delete this on return
  }

 private:
  EngineUnaryReactor(InferenceService* service, grpc::CallbackServerContext* ctx, const char* method,
                     Respond respond)
      : service_(service),
        ctx_(ctx),
        call_(ctx, method, service->core()->metrics()),
        respond_(std::move(respond)) {}

  void Begin(const google::protobuf::Message* request, const Prepare& prepare) {
    const grpc::Status unparsed = TakeParseError(request);  // always taken, so none is left behind
    std::string owner;
    grpc::Status st = service_->Admit(*ctx_, &owner);
    if (st.ok()) st = unparsed;
    std::vector<EngineRequest> requests;
    if (st.ok()) st = prepare(owner, call_, &requests);
    std::lock_guard<std::mutex> lock(mu_);
    owner_ = owner;
    if (!st.ok()) return FinishLocked(st);
    results_.resize(requests.size());
    std::weak_ptr<EngineUnaryReactor> weak = self_;
    const size_t count = requests.size();
    for (size_t i = 0; i < count; ++i) {
      // Submit does not call back on this thread (callbacks come from the
      // loop thread), so mu_ may stay held.
      auto id = service_->core()->loop()->Submit(std::move(requests[i]), [weak, i](EngineResult r) {
        if (auto self = weak.lock()) self->OnResult(i, std::move(r));
      });
      if (!id.ok()) {
        failure_ = WithField(
            absl::Status(id.status().code(), absl::StrCat(count > 1 ? absl::StrCat("chunks[", i, "]: ") : "",
                                                          id.status().message())),
            ErrorField(id.status()));
        break;
      }
      ids_.push_back(*id);
    }
    results_.resize(ids_.size());
    if (!failure_.ok()) {
      for (int64_t id : ids_) service_->core()->loop()->Cancel(id);  // the rest would be thrown away
    }
    if (ids_.empty()) FinishLocked(ToGrpcStatus(failure_));
  }

  void OnResult(size_t i, EngineResult r) {
    std::lock_guard<std::mutex> lock(mu_);
    results_[i] = std::move(r);
    if (++done_ < ids_.size()) return;
    std::vector<EngineResult> out;
    for (auto& res : results_) {
      if (failure_.ok() && !res->status.ok()) failure_ = res->status;
      out.push_back(std::move(*res));
    }
    if (!failure_.ok()) {
      for (const EngineResult& res : out) {
        if (!res.handle.empty()) service_->core()->loop()->ReleaseHandle(res.handle, owner_).IgnoreError();
      }
      return FinishLocked(ToGrpcStatus(failure_));
    }
    FinishLocked(respond_(out, call_));
  }

  void FinishLocked(const grpc::Status& st) {
    if (finished_) return;
    finished_ = true;
    Finish(call_.FinishGrpc(st));
  }

  InferenceService* service_;
  grpc::CallbackServerContext* ctx_;
  GrpcCallRecord call_;
  Respond respond_;
  std::mutex mu_;
  std::string owner_;
  std::vector<int64_t> ids_;
  std::vector<std::optional<EngineResult>> results_;
  size_t done_ = 0;
  absl::Status failure_;  // the first failure: a refused submit, a failed request or the client leaving
  bool cancelled_ = false;
  bool finished_ = false;
  std::shared_ptr<EngineUnaryReactor> self_;
};

}  // namespace

grpc::ServerUnaryReactor* InferenceService::Prefill(grpc::CallbackServerContext* ctx,
                                                    const pb::PrefillRequest* req,
                                                    pb::PrefillResponse* resp) {
  return EngineUnaryReactor::Start(
      this, ctx, "Prefill", req,
      [this, req](const std::string& owner, CallRecord& call, std::vector<EngineRequest>* requests) {
        return PreparePrefill(*req, owner, call, requests);
      },
      [resp](std::vector<EngineResult>& results, CallRecord& call) {
        int64_t tokens = 0, cached = 0;
        for (const EngineResult& r : results) {
          FillChunkResult(r, /*generated=*/false, resp->add_results());
          tokens += static_cast<int64_t>(r.prompt.size());
          cached += r.cached_tokens;
        }
        call.SetTokens(tokens, cached, 0);
        return grpc::Status::OK;
      });
}

grpc::ServerUnaryReactor* InferenceService::Score(grpc::CallbackServerContext* ctx,
                                                  const pb::ScoreRequest* req, pb::ScoreResponse* resp) {
  return EngineUnaryReactor::Start(
      this, ctx, "Score", req,
      [this, req](const std::string& owner, CallRecord& call, std::vector<EngineRequest>* requests) {
        return PrepareScore(*req, owner, call, requests);
      },
      [resp](std::vector<EngineResult>& results, CallRecord&) {
        const EngineResult& res = results[0];
        resp->mutable_token_ids()->Add(res.prompt.begin(), res.prompt.end());
        for (const auto& s : res.prompt_scores) {
          resp->add_scores(s ? *s : std::numeric_limits<float>::quiet_NaN());
        }
        return grpc::Status::OK;
      });
}

}  // namespace shardlm
