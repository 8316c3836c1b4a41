#include "coordinator/remote_executor.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/grpc_security.h"
#include "common/grpc_status.h"
#include "worker/step_codec.h"
#include "worker/worker_server.h"

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

absl::StatusOr<std::vector<RowResult>> RemoteExecutor::Execute(const StepInput& step) {
  const auto start = Clock::now();
  const wpb::StepRequest request = EncodeStep(step, next_step_++);
  const size_t n = stubs_.size();
  const auto timeout = StepDeadline(step.token_ids.size());
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts(n);
  std::vector<wpb::StepResponse> responses(n);
  std::vector<grpc::Status> statuses(n);
  std::vector<std::unique_ptr<grpc::ClientAsyncResponseReader<wpb::StepResponse>>> calls(n);
  for (size_t r = 0; r < n; ++r) {
    contexts[r] = std::make_unique<grpc::ClientContext>();
    AttachInternalToken(*contexts[r], options_.internal_token);
    contexts[r]->set_deadline(std::chrono::system_clock::now() + timeout);
    calls[r] = stubs_[r]->AsyncStep(contexts[r].get(), request, &cq);
    calls[r]->Finish(&responses[r], &statuses[r], reinterpret_cast<void*>(r));
  }
  absl::Status failure;
  for (size_t done = 0; done < n; ++done) {
    void* tag = nullptr;
    bool ok = false;
    if (!cq.Next(&tag, &ok)) break;
    const size_t r = reinterpret_cast<size_t>(tag);
    if (failure.ok() && !statuses[r].ok()) {
      failure = absl::Status(statuses[r].error_code() == grpc::StatusCode::INVALID_ARGUMENT
                                 ? absl::StatusCode::kInvalidArgument
                                 : absl::StatusCode::kUnavailable,
                             absl::StrCat("tensor-parallel rank ", r, " at ", addresses_[r],
                                          " failed the step: ", statuses[r].error_message()));
      for (auto& ctx : contexts) ctx->TryCancel();  // do not wait for the rest
    }
  }
  cq.Shutdown();
  if (!failure.ok()) return failure;
  const auto elapsed = Clock::now() - start;
  timing_.coordinator_us = std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count();
  timing_.worker_us = responses[0].timing().total_us();
  timing_.collective_us = responses[0].timing().collective_us();
  if (options_.metrics) {
    for (size_t r = 0; r < n; ++r) {
      options_.metrics->RankStep(static_cast<int>(r), responses[r].timing().total_us() / 1e6,
                                 responses[r].timing().collective_us() / 1e6);
    }
  }
  if (!step.token_ids.empty()) {
    const double ms = timing_.coordinator_us / 1000.0 / step.token_ids.size();
    ms_per_token_ = ms_per_token_ == 0 ? ms : 0.8 * ms_per_token_ + 0.2 * ms;
  }
  std::vector<RowResult> rows = DecodeRows(responses[0]);
  if (rows.size() != step.rows.size()) {
    return absl::InternalError(absl::StrCat("rank 0 returned ", rows.size(), " rows for ", step.rows.size()));
  }
  return rows;
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
