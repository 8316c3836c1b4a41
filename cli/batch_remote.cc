// `shardlm batch --server ADDR`: every line as one Generate stream, at most
// --concurrency in flight. Lines are parsed here first, so a bad line gets
// the same message as in-process and is never sent; the server's own
// rejections (e.g. an id outside the vocabulary) come back as that line's error.
#include <condition_variable>
#include <deque>
#include <mutex>

#include "cli/api_client.h"
#include "cli/batch.h"
#include "cli/batch_input.h"
#include "cli/remote_client.h"
#include "common/grpc_status.h"
#include "common/status.h"

namespace shardlm {

namespace {

namespace pb = ::shardlm::v1;

pb::GenerateRequest ToProto(const BatchItem& item) {
  pb::GenerateRequest req = GenerateRequestProto(item.request, item.stop, item.constraint);
  if (item.is_text) {
    req.mutable_prompt()->set_text(item.text);
  } else {
    req.mutable_prompt()->mutable_token_ids()->mutable_ids()->Add(item.request.prompt.begin(),
                                                                  item.request.prompt.end());
  }
  return req;
}

}  // namespace

absl::Status RunRemoteBatch(const BatchFlags& f, const CliEnv& env, const std::vector<BatchLine>& lines,
                            BatchResults& results, BatchRunInfo* info) {
  SHARDLM_ASSIGN_OR_RETURN(std::unique_ptr<ApiClient> client, ApiClient::Connect(f.remote));
  info->mode = "server " + client->server();
  const int concurrency = f.concurrency;

  // Streams end on gRPC threads; their records are handled on this one.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<size_t, StreamRecord>> ended;
  int in_flight = 0;
  GenerateStreams streams(client.get(), f.timeout_s);

  results.Start();
  size_t next = 0;
  absl::Status outcome = absl::OkStatus();
  bool cancelled = false;
  while (true) {
    if (!cancelled && env.stop != nullptr && env.stop->load()) {
      cancelled = true;
      streams.CancelAll();
      for (; next < lines.size(); ++next)
        results.Error(next, absl::CancelledError("interrupted before it ran"));
      outcome = absl::CancelledError("batch: interrupted; the lines not finished say CANCELLED");
    }
    // Start streams up to the concurrency (not under `mu`: a stream may end at once).
    while (next < lines.size()) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (in_flight >= concurrency) break;
      }
      const size_t slot = next++;
      absl::StatusOr<BatchItem> item = ParseBatchLine(lines[slot].text);
      if (!item.ok()) {
        results.Error(slot, item.status());
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        ++in_flight;
      }
      streams.Start(ToProto(*item), [slot, &mu, &cv, &ended](StreamRecord r) {
        std::lock_guard<std::mutex> lock(mu);
        ended.emplace_back(slot, std::move(r));
        cv.notify_one();
      });
    }
    std::deque<std::pair<size_t, StreamRecord>> batch;
    {
      std::unique_lock<std::mutex> lock(mu);
      if (ended.empty() && in_flight == 0 && next >= lines.size()) break;
      cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return !ended.empty(); });
      batch.swap(ended);
      in_flight -= static_cast<int>(batch.size());
    }
    for (auto& [slot, r] : batch) {
      if (!r.status.ok()) {
        results.Error(slot, FromGrpcStatus(r.status));
      } else {
        results.Ok(slot, r.tokens, r.text, r.finish_reason, r.prompt_tokens);
      }
    }
    results.ShowProgress();
  }
  return outcome;
}

}  // namespace shardlm
