// One Generate call's work, apart from how its messages travel: n samples of
// one prompt, stop strings, text deltas, the closing usage update
// (generate_update.h). The gRPC stream (a callback reactor,
// coordinator/grpc/generate_call.cc) and the blocking StreamGenerate
// (generate_stream.h, which the OpenAI HTTP API uses) both drive it.
//
// With n > 1 the prompt is prefilled once into a hidden handle, and each
// sample continues from it (its full blocks shared, the partly filled one
// copied), so the prompt's KV is computed and stored once. The samples are
// submitted when that prefill's result arrives.
//
// Stop strings are matched on each sample's detokenized text. Text that could
// still turn into a stop string is held back, so a client never sees part of
// one; the sample is stopped (its blocks freed) as soon as one appears.
//
// Nothing here blocks: the engine's callbacks queue events and call `notify`;
// the driver then calls Drain, which turns them into updates.
//
//   GenerateSession session(&core, owner, &call);
//   absl::Status st = session.Start(std::move(job), [&] { wake_the_driver(); });
//   // on each wake:
//   std::vector<GenerateUpdate> updates;
//   absl::Status final;
//   bool ended = session.Drain(&updates, &final);  // send them; if ended, finish with `final`
//   // the client left:
//   session.Abandon();
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/engine/engine.h"
#include "coordinator/serving/call_record.h"
#include "coordinator/serving/engine_loop.h"
#include "coordinator/serving/generate_job.h"
#include "coordinator/serving/generate_update.h"

namespace shardlm {

class ServingCore;
class StopText;

class GenerateSession {
 public:
  GenerateSession(ServingCore* core, std::string owner, CallRecord* call);
  ~GenerateSession();  // abandons work still running

  // n and the stop strings within their limits for `core` (ValidateRequest
  // checks the rest when the samples are submitted). Start checks them too;
  // the gRPC driver asks first, before it tokenizes a text prompt.
  static absl::Status CheckJob(const ServingCore& core, const GenerateJob& job);
  // Checks the request and submits its work; `notify` is called (from the
  // engine loop's thread, any time until this session is destroyed) when
  // events wait for Drain. An error means nothing runs.
  absl::Status Start(GenerateJob job, std::function<void()> notify);
  // Appends the updates ready to send, in order. True once the stream has
  // ended: *status is then its status; when OK the last update appended is
  // the closing one (finish reasons, usage).
  bool Drain(std::vector<GenerateUpdate>* out, absl::Status* status);
  // The client left: cancels what runs and releases the handles samples
  // kept. Drain then reports nothing more.
  void Abandon();

 private:
  struct Event {
    int sample = 0;  // -1: the shared prefill of n > 1
    int32_t token = -1;
    float logprob = 0;
    std::vector<TopLogprob> top;
    std::optional<EngineResult> done;
  };
  // Engine callbacks hold this, not the session: it outlives an abandoned call.
  struct Channel {
    EngineLoop* loop = nullptr;
    std::string owner;
    std::mutex mu;
    std::deque<Event> events;
    std::function<void()> notify;
    bool abandoned = false;  // later results only release the handles they kept
    void Push(Event e);
  };

  // Start's parts (generate_session.cc says what each does).
  absl::Status FillBase(GenerateJob& job);
  absl::Status PrefillShared();
  // Submits the samples (from the shared handle when n > 1).
  absl::Status SubmitSamples();
  // Drain's parts.
  bool ApplyEvent(Event& e, std::optional<GenerateUpdate>& update, absl::Status* status);
  GenerateUpdate FinalUpdate();
  // Ends with `status` after cancelling the work; returns true for Drain.
  bool End(const absl::Status& status, absl::Status* out);

  ServingCore* core_;
  std::string owner_;
  CallRecord* call_;
  int n_ = 1;
  EngineRequest base_;  // what every sample starts from
  std::shared_ptr<Channel> channel_ = std::make_shared<Channel>();
  std::string shared_handle_;
  bool samples_submitted_ = false;
  std::vector<int64_t> ids_;
  std::vector<std::unique_ptr<StopText>> texts_;
  std::vector<std::string> finish_;
  std::vector<bool> stopping_;  // a stop string appeared; waiting for the result
  std::vector<int32_t> sent_tokens_;
  std::vector<std::optional<EngineResult>> results_;
  int finished_ = 0;
  bool first_ = true;
  bool ended_ = false;
  int32_t prompt_tokens_ = 0, cached_tokens_ = 0;
};

}  // namespace shardlm
