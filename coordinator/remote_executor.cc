#include "coordinator/remote_executor.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "worker/step_codec.h"
#include "worker/worker_server.h"

namespace shardlm {

using Clock = std::chrono::steady_clock;

absl::StatusOr<std::unique_ptr<RemoteExecutor>> RemoteExecutor::Connect(
    const std::vector<std::string>& addresses, const std::string& fingerprint,
    RemoteExecutorOptions options) {
  auto exec = std::unique_ptr<RemoteExecutor>(new RemoteExecutor());
  exec->options_ = options;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  for (const std::string& addr : addresses) {
    exec->stubs_.push_back(
        wpb::Worker::NewStub(grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), args)));
  }
  // Handshake every rank; UNAVAILABLE means "still loading", so retry until the deadline.
  const auto deadline = Clock::now() + options.handshake_timeout;
  for (size_t r = 0; r < exec->stubs_.size(); ++r) {
    while (true) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      wpb::HandshakeRequest req;
      req.set_protocol_version(kWorkerProtocolVersion);
      req.set_model_fingerprint(fingerprint);
      wpb::HandshakeResponse resp;
      grpc::Status st = exec->stubs_[r]->Handshake(&ctx, req, &resp);
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

absl::StatusOr<std::vector<RowResult>> RemoteExecutor::Execute(const StepInput& step) {
  if (!broken_.ok()) return broken_;
  const auto start = Clock::now();
  const wpb::StepRequest request = EncodeStep(step, next_step_++);
  const size_t n = stubs_.size();
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts(n);
  std::vector<wpb::StepResponse> responses(n);
  std::vector<grpc::Status> statuses(n);
  std::vector<std::unique_ptr<grpc::ClientAsyncResponseReader<wpb::StepResponse>>> calls(n);
  for (size_t r = 0; r < n; ++r) {
    contexts[r] = std::make_unique<grpc::ClientContext>();
    contexts[r]->set_deadline(std::chrono::system_clock::now() + options_.step_timeout);
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
      failure = absl::UnavailableError(
          absl::StrCat("tensor-parallel rank ", r, " failed the step: ", statuses[r].error_message()));
      for (auto& ctx : contexts) ctx->TryCancel();  // do not wait for the rest
    }
  }
  cq.Shutdown();
  if (!failure.ok()) {
    broken_ = failure;
    healthy_ = false;
    return failure;
  }
  timing_.coordinator_us =
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
  timing_.worker_us = responses[0].timing().total_us();
  timing_.collective_us = responses[0].timing().collective_us();
  std::vector<RowResult> rows = DecodeRows(responses[0]);
  if (rows.size() != step.rows.size()) {
    broken_ =
        absl::InternalError(absl::StrCat("rank 0 returned ", rows.size(), " rows for ", step.rows.size()));
    return broken_;
  }
  return rows;
}

}  // namespace shardlm
