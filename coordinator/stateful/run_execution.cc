// RunExecutor::Execute: one run from queued to its end (docs/stateful_apis.md sections 4 and 6).
#include <algorithm>
#include <chrono>
#include <climits>
#include <exception>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/random_token.h"
#include "common/status.h"
#include "coordinator/serving/call_record.h"
#include "coordinator/stateful/objects.h"
#include "coordinator/stateful/reply_generation.h"
#include "coordinator/stateful/run_executor.h"
#include "coordinator/stateful/thread_prompt.h"

namespace shardlm {
namespace stateful {
namespace {

// A run's sampling, budget and format, from its config.
ReplySettings SettingsOf(const Json& config) {
  ReplySettings s;
  if (config.contains("temperature") && config["temperature"].is_number())
    s.temperature = config["temperature"];
  if (config.contains("top_p") && config["top_p"].is_number()) s.top_p = config["top_p"];
  if (config.contains("max_completion_tokens") && config["max_completion_tokens"].is_number_integer()) {
    s.max_tokens = config["max_completion_tokens"].get<int64_t>();
  }
  if (config.contains("response_format")) s.format = config["response_format"];
  s.format_param = "response_format";
  return s;
}

Json TextContent(const std::string& text) {
  return Json::array(
      {Json{{"type", "text"}, {"text", Json{{"value", text}, {"annotations", Json::array()}}}}});
}

// The run's end as the store writes it: its status, the reply and its step.
RunEnd EndOf(const RunRow& run, const Json& config, const Generated& g, MessageRow message, RunStepRow step) {
  RunEnd end;
  end.owner = run.owner;
  end.run_id = run.id;
  end.at = NowSeconds();
  const bool budgeted =
      config.contains("max_completion_tokens") && config["max_completion_tokens"].is_number();
  if (g.status.ok()) {
    end.status = g.finish_reason == "length" && budgeted ? "incomplete" : "completed";
    if (end.status == "incomplete") end.incomplete_reason = "max_completion_tokens";
  } else if (absl::IsCancelled(g.status)) {
    end.status = "cancelled";
  } else {
    end.status = "failed";
    const char* code = absl::IsInvalidArgument(g.status) ? "invalid_prompt" : "server_error";
    end.last_error = Json{{"code", code}, {"message", std::string(g.status.message())}}.dump(
        -1, ' ', false, Json::error_handler_t::replace);
  }
  const Json usage = {{"prompt_tokens", g.usage.prompt_tokens},
                      {"completion_tokens", g.usage.generated_tokens},
                      {"total_tokens", g.usage.prompt_tokens + g.usage.generated_tokens},
                      {"prompt_tokens_details", {{"cached_tokens", g.usage.cached_tokens}}}};
  end.usage = usage.dump();
  message.content = TextContent(g.text).dump();
  message.status = end.status == "completed" ? "completed" : "incomplete";
  if (end.status == "completed") message.completed_at = end.at;
  if (end.status != "completed") {
    message.incomplete_at = end.at;
    message.incomplete_reason = end.status == "incomplete"  ? "max_tokens"
                                : end.status == "cancelled" ? "run_cancelled"
                                                            : "run_failed";
  }
  step.status = end.status == "incomplete" ? "completed" : end.status;
  step.usage = end.usage;
  step.last_error = end.last_error;
  (step.status == "completed"   ? step.completed_at
   : step.status == "cancelled" ? step.cancelled_at
                                : step.failed_at) = end.at;
  end.message = std::move(message);
  end.step = std::move(step);
  return end;
}

// The reply a run makes (in progress, no text yet) and its message_creation step.
MessageRow ReplyOf(const RunRow& run) {
  MessageRow message;
  message.id = RandomId("msg_");
  message.owner = run.owner;
  message.created_at = NowSeconds();
  message.thread_id = run.thread_id;
  message.role = "assistant";
  message.status = "in_progress";
  message.assistant_id = run.assistant_id;
  message.run_id = run.id;
  return message;
}

RunStepRow StepOf(const RunRow& run, const MessageRow& message) {
  RunStepRow step;
  step.id = RandomId("step_");
  step.owner = run.owner;
  step.created_at = message.created_at;
  step.run_id = run.id;
  step.thread_id = run.thread_id;
  step.assistant_id = run.assistant_id;
  step.status = "in_progress";
  step.step_details =
      Json{{"type", "message_creation"}, {"message_creation", {{"message_id", message.id}}}}.dump();
  return step;
}

// A run that failed before it generated: no reply, no step.
RunEnd FailedEnd(const RunRow& run, const std::string& why) {
  RunEnd end;
  end.owner = run.owner;
  end.run_id = run.id;
  end.status = "failed";
  end.at = NowSeconds();
  end.last_error =
      Json{{"code", "server_error"}, {"message", why}}.dump(-1, ' ', false, Json::error_handler_t::replace);
  return end;
}

void Tell(RunEventSink* events, const std::string& name, const Json& data) {
  if (events != nullptr) events->Send(name, data);
}

}  // namespace

bool RunExecutor::Execute(const RunRow& queued, RunEventSink* events) {
  // Tracked before the claim, so that a cancel arriving right after it is not lost.
  std::shared_ptr<std::atomic<bool>> cancel = Track(queued.id);
  bool ran = false;
  try {
    ran = ExecuteClaimed(queued, cancel, events);
  } catch (const std::exception& e) {
    LOG(ERROR) << "run " << queued.id << ": " << e.what();
    WriteEnd(FailedEnd(queued, "internal error"));
    ran = true;
  }
  Untrack(queued.id);
  return ran;
}

void RunExecutor::WriteEnd(const RunEnd& end) {
  absl::Status st;
  for (int attempt = 0; attempt < 3; ++attempt) {
    st = store_->FinishRun(end);
    if (st.ok() || absl::IsNotFound(st)) return;  // NOT_FOUND: deleted with its thread meanwhile
    std::this_thread::sleep_for(std::chrono::milliseconds(200 << attempt));
  }
  LOG(WARNING) << "run " << end.run_id << ": its end was not stored: " << st;
}

bool RunExecutor::ExecuteClaimed(const RunRow& queued, std::shared_ptr<std::atomic<bool>> cancel,
                                 RunEventSink* events) {
  absl::StatusOr<bool> claimed = store_->ClaimRun(queued.id, instance_, NowSeconds());
  if (!claimed.ok()) {
    // The database is busy or gone: the run stays queued, and runs once it answers again.
    LOG(WARNING) << "run " << queued.id << ": not claimed: " << claimed.status();
    if (!shutting_down_.load()) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      Enqueue(queued);
    }
    return false;
  }
  if (!*claimed) return false;  // cancelled, deleted or taken meanwhile
  absl::StatusOr<RunRow> run = store_->GetRun(queued.owner, queued.thread_id, queued.id);
  if (!run.ok()) {
    WriteEnd(FailedEnd(queued, std::string(run.status().message())));
    return true;
  }
  if (run->status == "cancelling") cancel->store(true);
  Tell(events, "thread.run.in_progress", RunObject(*run));
  const Json config = Json::parse(run->config);
  CallRecord call("", "ThreadRun", core_->metrics());
  call.SetAbandonedCheck([cancel] { return cancel->load(); });
  Generated g;
  absl::StatusOr<GenerateJob> job = [&]() -> absl::StatusOr<GenerateJob> {
    SHARDLM_ASSIGN_OR_RETURN(std::vector<MessageRow> history,
                             store_->ThreadHistory(run->owner, run->thread_id));
    SHARDLM_ASSIGN_OR_RETURN(BuiltPrompt prompt,
                             BuildThreadPrompt(*core_, options_.model, config, history, call));
    return ReplyJob(options_.model, SettingsOf(config), std::move(prompt.ids));
  }();
  MessageRow message = ReplyOf(*run);
  RunStepRow step = StepOf(*run, message);
  if (!job.ok()) {
    g.status = job.status();
  } else {
    Tell(events, "thread.run.step.created", RunStepObject(step));
    Tell(events, "thread.run.step.in_progress", RunStepObject(step));
    Tell(events, "thread.message.created", MessageObject(message));
    Tell(events, "thread.message.in_progress", MessageObject(message));
    auto on_text = [&](const std::string& text) {
      Tell(events, "thread.message.delta",
           Json{{"id", message.id},
                {"object", "thread.message.delta"},
                {"delta",
                 {{"content",
                   Json::array({Json{{"index", 0},
                                     {"type", "text"},
                                     {"text", {{"value", text}, {"annotations", Json::array()}}}}})}}}});
    };
    g = GenerateReply(*core_, std::move(*job), run->owner, call, on_text,
                      [cancel] { return cancel->load(); });
  }
  // Stopped by the server's shutdown, not by a cancel: the run failed.
  if (absl::IsCancelled(g.status) && shutting_down_.load())
    g.status = absl::UnavailableError("server shutting down");
  call.SetTokens(g.usage.prompt_tokens, g.usage.cached_tokens, g.usage.generated_tokens);
  call.Finish(g.status).IgnoreError();
  const bool made_reply = job.ok();
  RunEnd end = EndOf(*run, config, g, message, step);
  if (!made_reply) {
    end.message.reset();
    end.step.reset();
  }
  WriteEnd(end);
  if (made_reply) {
    const std::string kind = end.message->status == "completed" ? "completed" : "incomplete";
    Tell(events, "thread.message." + kind, MessageObject(*end.message));
    Tell(events, "thread.run.step." + end.step->status, RunStepObject(*end.step));
  }
  absl::StatusOr<RunRow> final_run = store_->GetRun(run->owner, run->thread_id, run->id);
  if (final_run.ok()) Tell(events, "thread.run." + final_run->status, RunObject(*final_run));
  return true;
}

}  // namespace stateful
}  // namespace shardlm
