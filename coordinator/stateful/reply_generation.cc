#include "coordinator/stateful/reply_generation.h"

#include <algorithm>
#include <climits>

#include "common/status.h"
#include "coordinator/openai_wire/response_format.h"
#include "coordinator/serving/generate_stream.h"

namespace shardlm {
namespace stateful {

absl::StatusOr<GenerateJob> ReplyJob(const openai::ModelContext& model, const ReplySettings& settings,
                                     std::vector<int32_t> prompt) {
  GenerateJob job;
  EngineRequest& r = job.request;
  r.sampling.temperature = static_cast<float>(settings.temperature.value_or(1.0));
  if (settings.top_p) r.sampling.top_p = static_cast<float>(*settings.top_p);
  int64_t budget = model.max_context - static_cast<int64_t>(prompt.size());
  if (settings.max_tokens) budget = std::min(budget, *settings.max_tokens);
  r.max_new_tokens = static_cast<int32_t>(std::clamp<int64_t>(budget, 1, INT32_MAX));
  r.prompt = std::move(prompt);
  if (settings.format.is_object()) {
    std::string error;
    if (!openai::ConstraintFromFormat(settings.format, &job.constraint, &error)) {
      return InvalidField(settings.format_param, error);
    }
  }
  return job;
}

Generated GenerateReply(ServingCore& core, GenerateJob job, const std::string& owner, CallRecord& call,
                        const std::function<void(const std::string&)>& on_text,
                        const std::function<bool()>& cancelled) {
  Generated g;
  auto emit = [&](const GenerateUpdate& u) {
    if (!u.text.empty()) {
      g.text += u.text;
      if (on_text) on_text(u.text);
    }
    if (u.last()) {
      g.usage = *u.usage;
      if (!u.ends.empty()) {
        g.finish_reason = u.ends[0].finish_reason;
        g.kept = u.ends[0].kept;
      }
    }
    return true;
  };
  g.status = StreamGenerate(core, std::move(job), owner, call, emit, cancelled);
  return g;
}

Generated GenerateTurn(ServingCore& core, const TurnKv& kv, GenerateJob job, const std::string& owner,
                       CallRecord& call, const std::function<void(const std::string&)>& on_text,
                       const std::function<bool()>& cancelled) {
  const std::vector<int32_t> full = job.request.prompt;
  const bool keep = kv.cache != nullptr && !kv.into.empty();
  job.request.keep_handle = keep;
  job.request.keep_handle_if_room = keep;
  KvTurnCache::Use use;
  if (kv.cache != nullptr && !kv.from.empty()) use = kv.cache->Find(kv.from, owner, full);
  GenerateJob whole = job;  // for a handle the engine no longer has
  if (!use.handle.empty()) {
    job.request.prefix_handle = use.handle;
    job.request.prefix_length = use.length;
    job.request.prompt.assign(full.begin() + use.length, full.end());
  }
  bool heard = false;
  auto hear = [&](const std::string& text) {
    heard = true;
    if (on_text) on_text(text);
  };
  Generated g = GenerateReply(core, std::move(job), owner, call, hear, cancelled);
  if (!use.handle.empty() && absl::IsNotFound(g.status) && !heard) {
    kv.cache->Lost(kv.from, use.handle);
    g = GenerateReply(core, std::move(whole), owner, call, on_text, cancelled);
  }
  if (keep && g.status.ok()) {
    if (g.kept && !g.kept->handle.empty()) {
      std::vector<int32_t> tokens = full;
      tokens.insert(tokens.end(), g.kept->tokens.begin(), g.kept->tokens.end());
      kv.cache->Put(kv.into, owner, g.kept->handle, std::move(tokens), g.kept->handle_expiry_ms);
    } else {
      kv.cache->ReleaseOldest(kv.into);  // no room was left: make some for the next turn
    }
  }
  return g;
}

}  // namespace stateful
}  // namespace shardlm
