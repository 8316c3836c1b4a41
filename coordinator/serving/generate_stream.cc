#include "coordinator/serving/generate_stream.h"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "coordinator/serving/generate_session.h"

namespace shardlm {

absl::Status StreamGenerate(ServingCore& core, GenerateJob job, const std::string& owner, CallRecord& call,
                            const std::function<bool(const GenerateUpdate&)>& emit,
                            const std::function<bool()>& gone) {
  struct Signal {
    std::mutex mu;
    std::condition_variable cv;
    bool ready = false;
  };
  auto signal = std::make_shared<Signal>();
  GenerateSession session(&core, owner, &call);
  absl::Status st = session.Start(std::move(job), [signal] {
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
      return absl::CancelledError("client cancelled");
    }
    std::vector<GenerateUpdate> updates;
    absl::Status final;
    const bool ended = session.Drain(&updates, &final);
    for (const GenerateUpdate& update : updates) {
      if (!emit(update)) {
        session.Abandon();
        return absl::CancelledError("client went away");
      }
    }
    if (ended) return final;
  }
}

}  // namespace shardlm
