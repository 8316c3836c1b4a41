// RunExecutor::Execute: one run from queued to its end (docs/stateful_apis.md sections 4, 6, 7).
#include <algorithm>
#include <chrono>
#include <climits>
#include <exception>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/random_token.h"
#include "common/status.h"
#include "coordinator/serving/call_record.h"
#include "coordinator/stateful/function_tools.h"
#include "coordinator/stateful/objects.h"
#include "coordinator/stateful/reply_generation.h"
#include "coordinator/stateful/run_executor.h"
#include "coordinator/stateful/thread_prompt.h"

namespace shardlm {
namespace stateful {
namespace {

constexpr int64_t kToolOutputsWithinS = 600;  // a run waiting for tool outputs expires then (OpenAI: 10 min)

// What the run's earlier generations (before its tool calls) used: its stored usage, or {}.
Json UsageSoFar(const RunRow& run) { return run.usage ? Json::parse(*run.usage) : Json::object(); }

int64_t UsedTokens(const Json& usage, const char* key) {
  return usage.contains(key) && usage[key].is_number_integer() ? usage[key].get<int64_t>() : 0;
}

// A run's sampling, budget and format, from its config; max_completion_tokens counts what the
// run's earlier generations (before its tool calls) used.
ReplySettings SettingsOf(const Json& config, const RunRow& run) {
  ReplySettings s;
  if (config.contains("temperature") && config["temperature"].is_number())
    s.temperature = config["temperature"];
  if (config.contains("top_p") && config["top_p"].is_number()) s.top_p = config["top_p"];
  if (config.contains("max_completion_tokens") && config["max_completion_tokens"].is_number_integer()) {
    s.max_tokens = std::max<int64_t>(
        1, config["max_completion_tokens"].get<int64_t>() - UsedTokens(UsageSoFar(run), "completion_tokens"));
  }
  if (config.contains("response_format")) s.format = config["response_format"];
  s.format_param = "response_format";
  return s;
}

Json TextContent(const std::string& text) {
  return Json::array(
      {Json{{"type", "text"}, {"text", Json{{"value", text}, {"annotations", Json::array()}}}}});
}

// This generation's usage added to the run's earlier generations'.
std::string RunUsage(const RunRow& run, const GenerateUsage& u) {
  const Json old = UsageSoFar(run);
  const int64_t prompt = UsedTokens(old, "prompt_tokens") + u.prompt_tokens;
  const int64_t completion = UsedTokens(old, "completion_tokens") + u.generated_tokens;
  const int64_t cached =
      u.cached_tokens +
      (old.contains("prompt_tokens_details") ? UsedTokens(old["prompt_tokens_details"], "cached_tokens") : 0);
  return Json{{"prompt_tokens", prompt},
              {"completion_tokens", completion},
              {"total_tokens", prompt + completion},
              {"prompt_tokens_details", {{"cached_tokens", cached}}}}
      .dump();
}

// The run's status from how the generation went (calls: requires_action).
void StatusInto(const Json& config, const Generated& g, bool calls, RunEnd* end) {
  const bool budgeted =
      config.contains("max_completion_tokens") && config["max_completion_tokens"].is_number();
  if (g.status.ok() && calls) {
    end->status = "requires_action";
  } else if (g.status.ok()) {
    end->status = g.finish_reason == "length" && budgeted ? "incomplete" : "completed";
    if (end->status == "incomplete") end->incomplete_reason = "max_completion_tokens";
  } else if (absl::IsCancelled(g.status)) {
    end->status = "cancelled";
  } else {
    end->status = "failed";
    const char* code = absl::IsInvalidArgument(g.status) ? "invalid_prompt" : "server_error";
    end->last_error = Json{{"code", code}, {"message", std::string(g.status.message())}}.dump(
        -1, ' ', false, Json::error_handler_t::replace);
  }
}

void CloseStep(const RunEnd& end, RunStepRow* step) {
  step->status = end.status == "incomplete" || end.status == "requires_action" ? "completed" : end.status;
  step->usage = end.usage;
  step->last_error = end.last_error;
  (step->status == "completed"   ? step->completed_at
   : step->status == "cancelled" ? step->cancelled_at
                                 : step->failed_at) = end.at;
}

// The reply message as it ended.
void CloseMessage(const RunEnd& end, const std::string& text, MessageRow* message) {
  message->content = TextContent(text).dump();
  const bool whole = end.status == "completed" || end.status == "requires_action";
  message->status = whole ? "completed" : "incomplete";
  (whole ? message->completed_at : message->incomplete_at) = end.at;
  if (!whole) {
    message->incomplete_reason = end.status == "incomplete"  ? "max_tokens"
                                 : end.status == "cancelled" ? "run_cancelled"
                                                             : "run_failed";
  }
}

// The calls as a tool_calls step's details and as the run's required_action.
void CallsInto(const std::vector<ToolCall>& calls, RunEnd* end, RunStepRow* tool_step) {
  Json step_calls = Json::array(), asked = Json::array();
  for (const ToolCall& c : calls) {
    const std::string id = RandomId("call_");
    step_calls.push_back(
        Json{{"id", id},
             {"type", "function"},
             {"function", {{"name", c.name}, {"arguments", c.arguments}, {"output", nullptr}}}});
    asked.push_back(
        Json{{"id", id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  tool_step->type = "tool_calls";
  tool_step->status = "in_progress";
  tool_step->usage = end->usage;
  tool_step->step_details = Json{{"type", "tool_calls"}, {"tool_calls", std::move(step_calls)}}.dump();
  end->required_action =
      Json{{"type", "submit_tool_outputs"}, {"submit_tool_outputs", {{"tool_calls", std::move(asked)}}}}
          .dump();
  end->expires_at = end->at + kToolOutputsWithinS;
}

// A step of the run (in progress), for its message or its calls.
RunStepRow NewStep(const RunRow& run, const std::string& message_id) {
  RunStepRow step;
  step.id = RandomId("step_");
  step.owner = run.owner;
  step.created_at = NowSeconds();
  step.run_id = run.id;
  step.thread_id = run.thread_id;
  step.assistant_id = run.assistant_id;
  step.status = "in_progress";
  step.step_details =
      Json{{"type", "message_creation"}, {"message_creation", {{"message_id", message_id}}}}.dump();
  return step;
}

// The reply a run makes (in progress, no text yet).
MessageRow NewReply(const RunRow& run) {
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

// An end of `run` now, its status and what it made still to say.
RunEnd EndNow(const RunRow& run) {
  RunEnd end;
  end.owner = run.owner;
  end.run_id = run.id;
  end.at = NowSeconds();
  return end;
}

// A run that failed before it generated: no reply, no step.
RunEnd FailedEnd(const RunRow& run, const std::string& why) {
  RunEnd end = EndNow(run);
  end.status = "failed";
  end.last_error =
      Json{{"code", "server_error"}, {"message", why}}.dump(-1, ' ', false, Json::error_handler_t::replace);
  return end;
}

void Tell(RunEventSink* events, const std::string& name, const Json& data) {
  if (events != nullptr) events->Send(name, data);
}

// One generation of a run and its events: the reply message is announced with its first text
// no call can start in (a reply of calls only makes none), and the calls, at the end, as a
// tool_calls step.
class RunTurn {
 public:
  RunTurn(const RunRow& run, const FunctionTools& tools, RunEventSink* events)
      : run_(run),
        tools_(tools),
        events_(events),
        streamed_(tools),
        message_(NewReply(run)),
        step_(NewStep(run, message_.id)) {}

  void OnText(const std::string& piece) {
    const std::string text = streamed_.Take(piece);
    if (text.empty()) return;
    Announce();
    Tell(events_, "thread.message.delta",
         Json{{"id", message_.id},
              {"object", "thread.message.delta"},
              {"delta",
               {{"content",
                 Json::array({Json{{"index", 0},
                                   {"type", "text"},
                                   {"text", {{"value", text}, {"annotations", Json::array()}}}}})}}}});
  }

  // The end as the store writes it, from how the generation went.
  RunEnd EndOf(const Json& config, const Generated& g) {
    RunEnd end = EndNow(run_);
    const ParsedReply reply = SplitReply(tools_, g.text, g.status);
    StatusInto(config, g, !reply.calls.empty(), &end);
    end.usage = RunUsage(run_, g.usage);
    if (MakesMessage(reply, announced_)) {
      CloseMessage(end, reply.content, &message_);
      CloseStep(end, &step_);
      if (!reply.calls.empty()) step_.usage.reset();  // counted on the tool step
      end.message = message_;
      end.step = step_;
    }
    if (!reply.calls.empty()) {
      RunStepRow tool_step = NewStep(run_, "");
      CallsInto(reply.calls, &end, &tool_step);
      end.tool_step = std::move(tool_step);
    }
    return end;
  }

  // The events of the stored end.
  void TellEnd(const RunEnd& end) {
    if (end.message) {
      Announce();
      Tell(events_,
           "thread.message." + std::string(end.message->status == "completed" ? "completed" : "incomplete"),
           MessageObject(*end.message));
      Tell(events_, "thread.run.step." + end.step->status, RunStepObject(*end.step));
    }
    if (end.tool_step) {
      RunStepRow shown = *end.tool_step;
      const Json details = Json::parse(shown.step_details);
      shown.step_details = Json{{"type", "tool_calls"}, {"tool_calls", Json::array()}}.dump();
      Tell(events_, "thread.run.step.created", RunStepObject(shown));
      Tell(events_, "thread.run.step.in_progress", RunStepObject(shown));
      int index = 0;
      for (Json call : details["tool_calls"]) {
        call["index"] = index++;
        Tell(events_, "thread.run.step.delta",
             Json{{"id", shown.id},
                  {"object", "thread.run.step.delta"},
                  {"delta",
                   {{"step_details", {{"type", "tool_calls"}, {"tool_calls", Json::array({call})}}}}}});
      }
    }
  }

 private:
  void Announce() {
    if (announced_) return;
    announced_ = true;
    Tell(events_, "thread.run.step.created", RunStepObject(step_));
    Tell(events_, "thread.run.step.in_progress", RunStepObject(step_));
    Tell(events_, "thread.message.created", MessageObject(message_));
    Tell(events_, "thread.message.in_progress", MessageObject(message_));
  }

  const RunRow& run_;
  const FunctionTools& tools_;
  RunEventSink* events_;
  StreamedText streamed_;
  MessageRow message_;
  RunStepRow step_;
  bool announced_ = false;
};

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

absl::StatusOr<GenerateJob> RunExecutor::JobOf(const RunRow& run, const Json& config,
                                               const FunctionTools& tools, const CallRecord& call) {
  SHARDLM_ASSIGN_OR_RETURN(std::vector<MessageRow> history, store_->ThreadHistory(run.owner, run.thread_id));
  SHARDLM_ASSIGN_OR_RETURN(std::vector<RunStepRow> steps, store_->ThreadToolSteps(run.owner, run.thread_id));
  SHARDLM_ASSIGN_OR_RETURN(BuiltPrompt prompt, BuildThreadPrompt(*core_, options_.model, config, history,
                                                                 steps, tools.chat_tools, call));
  SHARDLM_ASSIGN_OR_RETURN(GenerateJob job,
                           ReplyJob(options_.model, SettingsOf(config, run), std::move(prompt.ids)));
  SHARDLM_RETURN_IF_ERROR(ConstrainCalls(tools, &job));
  return job;
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
  absl::StatusOr<FunctionTools> tools =
      FunctionToolsOf(options_.model, config.value("tools", Json::array()),
                      config.value("tool_choice", Json("auto")), config.value("parallel_tool_calls", true));
  // "required" or a named function: the run's first generation calls; after the outputs the
  // model answers freely (else it could only call again).
  if (tools.ok() && run->usage) tools->forced.clear();
  absl::StatusOr<GenerateJob> job = tools.ok() ? JobOf(*run, config, *tools, call) : tools.status();
  Generated g;
  RunEnd end;
  if (!job.ok()) {  // no prompt (too long, the template refused it): no reply, no step
    g.status = job.status();
    end = EndNow(*run);
    StatusInto(config, g, false, &end);
    WriteEnd(end);
  } else {
    RunTurn turn(*run, *tools, events);
    // The thread's KV from its last turn, and this turn's filed in its place.
    g = GenerateTurn(
        *core_, TurnKv{options_.turns, run->thread_id, run->thread_id}, std::move(*job), run->owner, call,
        [&](const std::string& t) { turn.OnText(t); }, [cancel] { return cancel->load(); });
    // Stopped by the server's shutdown, not by a cancel: the run failed.
    if (absl::IsCancelled(g.status) && shutting_down_.load())
      g.status = absl::UnavailableError("server shutting down");
    end = turn.EndOf(config, g);
    WriteEnd(end);
    turn.TellEnd(end);
  }
  call.SetTokens(g.usage.prompt_tokens, g.usage.cached_tokens, g.usage.generated_tokens);
  call.Finish(g.status).IgnoreError();
  absl::StatusOr<RunRow> final_run = store_->GetRun(run->owner, run->thread_id, run->id);
  if (final_run.ok()) Tell(events, "thread.run." + final_run->status, RunObject(*final_run));
  return true;
}

}  // namespace stateful
}  // namespace shardlm
