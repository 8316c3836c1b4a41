// StreamGenerate: a GenerateSession driven by one blocking thread, for front
// ends that hold a thread per request (the OpenAI HTTP API, on one of the HTTP
// server's request threads). The gRPC stream drives its session from a
// callback reactor instead (coordinator/grpc/generate_call.cc).
//
//   absl::Status st = StreamGenerate(core, std::move(job), owner, call,
//                                    [&](const GenerateUpdate& u) { return writer.Add(u); },
//                                    [&] { return exchange.ClientGone(); });
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "coordinator/serving/call_record.h"
#include "coordinator/serving/generate_job.h"
#include "coordinator/serving/generate_update.h"
#include "coordinator/serving/serving_core.h"

namespace shardlm {

// Runs `job` to its end: `emit` gets each update in order (false: the client
// is gone), and `gone` is polled while waiting for tokens. The job's work is
// cancelled and its blocks freed when either says the client left (the
// status is then CANCELLED).
absl::Status StreamGenerate(ServingCore& core, GenerateJob job, const std::string& owner, CallRecord& call,
                            const std::function<bool(const GenerateUpdate&)>& emit,
                            const std::function<bool()>& gone);

}  // namespace shardlm
