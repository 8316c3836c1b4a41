// The serving core every front end adapts (gRPC's shardlm.v1 in
// coordinator/grpc/, OpenAI's HTTP API in coordinator/openai/): the engine
// loop, the tokenizer, API keys, draining, the constraint compiler and the
// request counters, with no transport in it. Errors are absl::Status with
// canonical codes (and the field a request error is about as its payload,
// common/status.h); each front end turns them into its own wire's errors, in
// one place of its own.
//
//   ServingCore core(&loop, tokenizer.get(), ServedModel{"bf16", 2, 16, 600000});
//   core.SetApiKeys(keys);
//   std::string owner;
//   SHARDLM_RETURN_IF_ERROR(core.AdmitKey(authorization, "header", &owner));
//   CallRecord call(client_request_id, "CreateCompletion", core.metrics());
//   absl::Status st = StreamGenerate(core, std::move(job), owner, call, emit, gone);
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "constraints/constraint_compiler.h"
#include "coordinator/serving/call_record.h"
#include "coordinator/serving/engine_loop.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {

// What the front ends report about the model served.
struct ServedModel {
  std::string dtype;
  int tp = 1;
  int64_t block_size = 16;
  int64_t handle_ttl_ms = 600000;
};

class ServingCore {
 public:
  ServingCore(EngineLoop* loop, const Tokenizer* tokenizer, ServedModel model)
      : loop_(loop), tokenizer_(tokenizer), model_(std::move(model)) {}

  // API keys (each call must send `authorization: Bearer KEY`); empty: open.
  // A ChunkResult handle belongs to the key that made it.
  void SetApiKeys(std::vector<std::string> keys) { api_keys_ = std::move(keys); }
  // After this every new call is UNAVAILABLE; calls in flight go on.
  void StartDraining() { draining_ = true; }
  // Counts every call into `metrics` (which must outlive the core).
  void SetMetrics(ServiceMetrics* metrics) { metrics_ = metrics; }

  // Admits a call from its `authorization` value (null: none sent):
  // UNAVAILABLE while draining, UNAUTHENTICATED without a valid key; sets
  // *owner to the caller's key (empty when keys are off). `carrier` is what
  // the front end calls the place the key travels in ("metadata", "header").
  absl::Status AdmitKey(const std::string* authorization, absl::string_view carrier,
                        std::string* owner) const;
  // Tokenizes `text` for a call: text longer than the model's context could
  // hold is refused before tokenizing, and tokenizing stops (CANCELLED) once
  // `call` is abandoned. Errors name `field`.
  absl::StatusOr<std::vector<int32_t>> EncodeForCall(const std::string& text, bool add_special_tokens,
                                                     const std::string& field, const CallRecord& call) const;
  // A request's constraint as a matcher in its start state (null for an
  // empty one); InvalidArgument naming constraint.<kind> and quoting
  // llguidance for a bad one. The compiler is built on the first call.
  absl::StatusOr<std::shared_ptr<const Matcher>> CompileConstraint(const ConstraintSpec& spec) const;

  EngineLoop* loop() const { return loop_; }
  const Tokenizer* tokenizer() const { return tokenizer_; }  // may be null: token-id prompts only
  const ServedModel& model() const { return model_; }
  ServiceMetrics* metrics() const { return metrics_; }

 private:
  EngineLoop* loop_;
  const Tokenizer* tokenizer_;
  ServedModel model_;
  mutable std::once_flag compiler_once_;
  mutable absl::Status compiler_status_;
  mutable std::unique_ptr<ConstraintCompiler> compiler_;
  std::vector<std::string> api_keys_;
  std::atomic<bool> draining_{false};
  ServiceMetrics* metrics_ = nullptr;
};

}  // namespace shardlm
