// Runs (docs/stateful_apis.md section 4): a run is detached from the request
// that made it. RunExecutor holds a queue and `threads` threads; each claims a
// queued run (queued -> in_progress, in the store), renders the thread
// (thread_prompt.h), generates on the serving core, and writes the reply, its
// step and the run's end in one transaction. A streamed run executes on its
// request's thread instead, telling a RunEventSink each event.
//
// A cancel marks the run cancelling in the store and stops its generation
// here within one engine step. Each serve is an instance in the store with a
// heartbeat (every 5 s); at start, and at each heartbeat, the runs of stopped
// instances are reaped: in_progress ones fail ("the server running this run
// stopped"), queued ones are run here.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/openai_wire/api_error.h"
#include "coordinator/openai_wire/model_context.h"
#include "coordinator/serving/call_record.h"
#include "coordinator/serving/generate_job.h"
#include "coordinator/serving/serving_core.h"
#include "coordinator/stateful/kv_turns.h"
#include "state/store.h"

namespace shardlm {
namespace stateful {

// The wall clock in Unix seconds: the stored objects' created_at, the heartbeats, the run ends.
int64_t NowSeconds();

using openai::Json;
struct FunctionTools;

// Hears a streamed run's events (OpenAI's names: thread.run.in_progress, thread.message.delta, ...).
class RunEventSink {
 public:
  virtual ~RunEventSink() = default;
  virtual void Send(const std::string& event, const Json& data) = 0;
};

struct RunExecutorOptions {
  int threads = 16;  // runs generating at once (--state-runs)
  openai::ModelContext model;
  std::function<void()> each_second;  // also called on the heartbeat thread each second (may be empty)
  KvTurnCache* turns = nullptr;       // each thread's KV between its runs (null: none kept)
};

class RunExecutor {
 public:
  RunExecutor(ServingCore* core, StateStore* store, RunExecutorOptions options);
  // Stops: runs still generating are cancelled and written failed ("server shutting down");
  // queued ones stay queued, for the next start to run.
  ~RunExecutor();

  // Registers this instance, reaps the runs of stopped ones (running their queued runs) and
  // starts the threads.
  absl::Status Start();
  void Enqueue(const RunRow& run);
  // Draining: queued runs stay queued (the next start runs them); those generating go on.
  void StopClaiming();
  // Cancels the runs generating here (written failed: "server shutting down"), streamed ones
  // too, and takes no more from the queue. The destructor then waits for the threads.
  void Stop();
  // Stops run `id` within one engine step when it generates here.
  void Cancel(const std::string& id);
  // Runs queued `run` on this thread to its end; `events` (may be null) hears each event.
  // False when it did not run (cancelled, deleted or claimed elsewhere meanwhile).
  bool Execute(const RunRow& run, RunEventSink* events);
  const openai::ModelContext& model() const { return options_.model; }
  // This serve's id in the store: a run it queues names it as its runner.
  const std::string& instance() const { return instance_; }

 private:
  void Work();
  // Execute's body; exceptions (a stored column that does not parse, memory) are Execute's.
  bool ExecuteClaimed(const RunRow& queued, std::shared_ptr<std::atomic<bool>> cancel, RunEventSink* events);
  // The engine job of a run's next generation: its thread rendered with its tools.
  absl::StatusOr<GenerateJob> JobOf(const RunRow& run, const Json& config, const FunctionTools& tools,
                                    const CallRecord& call);
  // Writes the end of run `run_id`, retrying a busy database; a last failure is logged.
  void WriteEnd(const RunEnd& end);
  // Each second: the runs here a cancel through another serve marked; every 5 s the heartbeat
  // and the reaper.
  void Heartbeats();
  void StopCancelledElsewhere();
  void Reap();
  std::shared_ptr<std::atomic<bool>> Track(const std::string& id);
  void Untrack(const std::string& id);

  ServingCore* core_;
  StateStore* store_;
  RunExecutorOptions options_;
  std::string instance_;  // this serve's id in the store
  std::string host_;

  std::mutex mu_;
  std::condition_variable wake_;  // workers: a run was queued, or stop
  std::condition_variable beat_;  // the heartbeat thread: stop
  std::deque<RunRow> queue_;
  std::map<std::string, std::shared_ptr<std::atomic<bool>>> running_;  // run id -> its cancel flag
  bool stopping_ = false;
  bool claiming_ = true;
  std::atomic<bool> shutting_down_{false};
  std::vector<std::thread> threads_;
  std::thread heartbeat_;
};

}  // namespace stateful
}  // namespace shardlm
