#include "coordinator/group/remote_executor.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/grpc_security.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "proto/step_codec.h"
#include "proto/worker_protocol.h"

namespace shardlm {

using Clock = std::chrono::steady_clock;

absl::StatusOr<std::unique_ptr<RemoteExecutor>> RemoteExecutor::Connect(
    const std::vector<std::string>& addresses, uint64_t epoch, const std::string& fingerprint,
    RemoteExecutorOptions options) {
  auto exec = std::unique_ptr<RemoteExecutor>(new RemoteExecutor());
  exec->options_ = options;
  exec->epoch_ = epoch;
  exec->addresses_ = addresses;
  const grpc::ChannelArguments args = InternalChannelArguments();
  for (const std::string& addr : addresses) {
    exec->stubs_.push_back(wpb::Worker::NewStub(grpc::CreateCustomChannel(
        addr, options.credentials ? options.credentials : grpc::InsecureChannelCredentials(), args)));
  }
  // Handshake every rank; UNAVAILABLE means "still loading" (or still
  // joining this epoch), so retry until the deadline.
  const auto deadline = Clock::now() + options.handshake_timeout;
  for (size_t r = 0; r < exec->stubs_.size(); ++r) {
    auto next_report = Clock::now() + std::chrono::seconds(5);
    while (true) {
      grpc::ClientContext ctx;
      AttachInternalToken(ctx, options.internal_token);
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      wpb::HandshakeRequest req;
      req.set_protocol_version(kWorkerProtocolVersion);
      req.set_model_fingerprint(fingerprint);
      wpb::HandshakeResponse resp;
      grpc::Status st = exec->stubs_[r]->Handshake(&ctx, req, &resp);
      if (st.ok() && resp.epoch() != epoch) {
        if (resp.epoch() > epoch) {
          // The rank has moved on to a later formation: this one is gone, and
          // waiting cannot bring it back.
          return absl::AbortedError(absl::StrCat("handshake with rank ", r, " at ", addresses[r], ": epoch ",
                                                 epoch, " is over, the rank already serves epoch ",
                                                 resp.epoch()));
        }
        // An earlier epoch (0: not serving): still joining this one.
        st = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          absl::StrCat("serving epoch ", resp.epoch(), ", not ", epoch));
      }
      if (st.ok()) {
        if (resp.rank() != static_cast<int>(r)) {
          return absl::InternalError(
              absl::StrCat("worker at ", addresses[r], " says rank ", resp.rank(), ", expected ", r));
        }
        exec->ranks_.push_back(resp);
        break;
      }
      const bool retry = st.error_code() == grpc::StatusCode::UNAVAILABLE ||
                         st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
      if (!retry || Clock::now() > deadline) {
        return absl::Status(FromGrpcStatus(st).code(), absl::StrCat("handshake with rank ", r, " at ",
                                                                    addresses[r], ": ", st.error_message()));
      }
      if (Clock::now() > next_report) {
        // A rank that is slow to answer is worth a line while the group waits on it.
        LOG(WARNING) << "handshake with rank " << r << " at " << addresses[r] << " (epoch " << epoch
                     << "): still trying: " << st.error_message();
        next_report = Clock::now() + std::chrono::seconds(5);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  // Every rank must agree on the pool; the smallest budget wins.
  exec->num_blocks_ = static_cast<int32_t>(exec->ranks_[0].num_blocks());
  exec->block_size_ = static_cast<int32_t>(exec->ranks_[0].block_size());
  for (const auto& r : exec->ranks_) {
    exec->num_blocks_ = std::min<int32_t>(exec->num_blocks_, static_cast<int32_t>(r.num_blocks()));
  }
  return exec;
}

std::chrono::milliseconds RemoteExecutor::StepDeadline(size_t tokens) const {
  const double per_token =
      std::max<double>(static_cast<double>(options_.step_timeout_per_token.count()), 8.0 * ms_per_token_);
  return options_.step_timeout + std::chrono::milliseconds(static_cast<int64_t>(per_token * tokens));
}

// One step on every rank: the calls go out in the constructor, Wait collects them.
class RemoteExecutor::RemoteStep final : public PendingStep {
 public:
  RemoteStep(RemoteExecutor* exec, const StepInput& step, uint64_t id, uint64_t after)
      : exec_(exec), id_(id), tokens_(step.token_ids.size()), rows_(step.rows.size()), start_(Clock::now()) {
    const wpb::StepRequest request = EncodeStep(step, id, after, exec->epoch_);
    const size_t n = exec->stubs_.size();
    // A step queued behind another gets its own time after that one's:
    // the ranks start it only then.
    const auto deadline = std::max(std::chrono::system_clock::now(), exec->last_deadline_) +
                          exec->StepDeadline(step.token_ids.size());
    exec->last_deadline_ = deadline;
    deadline_ = deadline;
    contexts_.resize(n);
    responses_.resize(n);
    statuses_.resize(n);
    calls_.resize(n);
    for (size_t r = 0; r < n; ++r) {
      contexts_[r] = std::make_unique<grpc::ClientContext>();
      AttachInternalToken(*contexts_[r], exec->options_.internal_token);
      contexts_[r]->set_deadline(deadline);
      calls_[r] = exec->stubs_[r]->AsyncStep(contexts_[r].get(), request, &cq_);
      calls_[r]->Finish(&responses_[r], &statuses_[r], reinterpret_cast<void*>(r));
    }
  }

  ~RemoteStep() override {
    if (!waited_) {
      for (auto& ctx : contexts_) ctx->TryCancel();
      if (masks_context_) masks_context_->TryCancel();
      Collect().IgnoreError();  // abandoned: its rows are not wanted
    }
  }

  // To rank 0, which samples; answered on the step's own queue (tag: the rank count).
  void SendMasks(std::vector<RowMask> masks) override {
    if (masks_context_) return;  // once
    masks_context_ = std::make_unique<grpc::ClientContext>();
    AttachInternalToken(*masks_context_, exec_->options_.internal_token);
    masks_context_->set_deadline(deadline_);
    masks_call_ =
        exec_->stubs_[0]->AsyncStepMasks(masks_context_.get(), EncodeMasks(masks, id_, exec_->epoch_), &cq_);
    masks_call_->Finish(&masks_response_, &masks_status_, reinterpret_cast<void*>(calls_.size()));
  }

  absl::StatusOr<std::vector<RowResult>> Wait() override {
    waited_ = true;
    absl::Status failure = Collect();
    if (!failure.ok()) return failure;
    StepTiming& timing = exec_->timing_;
    timing.coordinator_us =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_).count();
    timing.worker_us = responses_[0].timing().total_us();
    timing.collective_us = responses_[0].timing().collective_us();
    if (exec_->options_.metrics) {
      for (size_t r = 0; r < responses_.size(); ++r) {
        exec_->options_.metrics->RankStep(static_cast<int>(r), responses_[r].timing().total_us() / 1e6,
                                          responses_[r].timing().collective_us() / 1e6);
      }
    }
    if (tokens_ > 0) {
      // The rank's own time: with a step queued behind another, the wall
      // time since sending includes the one before.
      const double ms = responses_[0].timing().total_us() / 1000.0 / static_cast<double>(tokens_);
      exec_->ms_per_token_ = exec_->ms_per_token_ == 0 ? ms : 0.8 * exec_->ms_per_token_ + 0.2 * ms;
    }
    std::vector<RowResult> rows = DecodeRows(responses_[0]);
    if (rows.size() != rows_) {
      return absl::InternalError(absl::StrCat("rank 0 returned ", rows.size(), " rows for ", rows_));
    }
    return rows;
  }

 private:
  // Every rank's answer; the first failure cancels the rest.
  absl::Status Collect() {
    absl::Status failure;
    const size_t expected = calls_.size() + (masks_call_ ? 1 : 0);
    for (size_t done = 0; done < expected; ++done) {
      void* tag = nullptr;
      bool ok = false;
      if (!cq_.Next(&tag, &ok)) break;
      const size_t r = reinterpret_cast<size_t>(tag);
      if (r == calls_.size()) {
        // Rank 0 would wait for these masks until the deadline: fail the step now.
        if (failure.ok() && !masks_status_.ok()) {
          failure = absl::UnavailableError(
              absl::StrCat("tensor-parallel rank 0 at ", exec_->addresses_[0],
                           " did not take the step's constraint masks: ", masks_status_.error_message()));
          for (auto& ctx : contexts_) ctx->TryCancel();
        }
        continue;
      }
      if (failure.ok() && !statuses_[r].ok()) {
        failure = absl::Status(statuses_[r].error_code() == grpc::StatusCode::INVALID_ARGUMENT
                                   ? absl::StatusCode::kInvalidArgument
                                   : absl::StatusCode::kUnavailable,
                               absl::StrCat("tensor-parallel rank ", r, " at ", exec_->addresses_[r],
                                            " failed the step: ", statuses_[r].error_message()));
        for (auto& ctx : contexts_) ctx->TryCancel();  // do not wait for the rest
        if (masks_context_) masks_context_->TryCancel();
      }
    }
    cq_.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (cq_.Next(&tag, &ok)) {
    }
    return failure;
  }

  RemoteExecutor* exec_;
  uint64_t id_;
  size_t tokens_, rows_;
  std::chrono::system_clock::time_point deadline_;
  Clock::time_point start_;
  bool waited_ = false;
  grpc::CompletionQueue cq_;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts_;
  std::vector<wpb::StepResponse> responses_;
  std::vector<grpc::Status> statuses_;
  std::vector<std::unique_ptr<grpc::ClientAsyncResponseReader<wpb::StepResponse>>> calls_;
  std::unique_ptr<grpc::ClientContext> masks_context_;  // set once masks were sent
  wpb::StepMasksResponse masks_response_;
  grpc::Status masks_status_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<wpb::StepMasksResponse>> masks_call_;
};

std::unique_ptr<PendingStep> RemoteExecutor::StartStep(const StepInput& step) {
  const uint64_t id = next_step_++;
  // The ranks run this step after the last one sent, whether or not its
  // rows are back (exact: a rank that never ran that one fails this one).
  const uint64_t after = last_sent_;
  last_sent_ = id;
  return std::make_unique<RemoteStep>(this, step, id, after);
}

absl::StatusOr<std::vector<RowResult>> RemoteExecutor::Execute(const StepInput& step) {
  return StartStep(step)->Wait();
}

std::vector<RankProbe> RemoteExecutor::Probe(std::chrono::milliseconds timeout) {
  const size_t n = stubs_.size();
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts(n);
  std::vector<wpb::HealthResponse> responses(n);
  std::vector<grpc::Status> statuses(n);
  std::vector<std::unique_ptr<grpc::ClientAsyncResponseReader<wpb::HealthResponse>>> calls(n);
  const wpb::HealthRequest request;
  for (size_t r = 0; r < n; ++r) {
    contexts[r] = std::make_unique<grpc::ClientContext>();
    AttachInternalToken(*contexts[r], options_.internal_token);
    contexts[r]->set_deadline(std::chrono::system_clock::now() + timeout);
    calls[r] = stubs_[r]->AsyncHealth(contexts[r].get(), request, &cq);
    calls[r]->Finish(&responses[r], &statuses[r], reinterpret_cast<void*>(r));
  }
  for (size_t done = 0; done < n; ++done) {
    void* tag = nullptr;
    bool ok = false;
    if (!cq.Next(&tag, &ok)) break;
  }
  cq.Shutdown();
  std::vector<RankProbe> out(n);
  for (size_t r = 0; r < n; ++r) {
    const std::string who = absl::StrCat("rank ", r, " at ", addresses_[r]);
    if (!statuses[r].ok()) {
      out[r].reachable = out[r].ready = false;
      // A missed keepalive is the channel's own "did not answer": the process
      // is stopped or hung, not known dead (a loaded machine can cause it too).
      out[r].timed_out =
          statuses[r].error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
          (statuses[r].error_code() == grpc::StatusCode::UNAVAILABLE &&
           statuses[r].error_message().find("keepalive watchdog timeout") != std::string::npos);
      out[r].detail =
          out[r].timed_out
              ? absl::StrCat(who, " did not answer within ", timeout.count(), " ms (stopped or hung)")
              : absl::StrCat(who, " is unreachable (", statuses[r].error_message(), ")");
    } else if (!responses[r].ready()) {
      out[r].ready = false;
      out[r].detail = absl::StrCat(who, " is not ready: ", responses[r].status());
    }
  }
  return out;
}

}  // namespace shardlm
