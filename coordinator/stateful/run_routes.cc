// /v1/threads/{thread_id}/runs and /v1/threads/runs: create (queued for the executor),
// create-and-run, list, retrieve, modify, cancel; run steps list and retrieve (client.beta.threads.runs).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/random_token.h"
#include "common/status.h"
#include "coordinator/stateful/function_tools.h"
#include "coordinator/stateful/objects.h"
#include "coordinator/stateful/run_executor.h"
#include "coordinator/stateful/stateful_params.h"
#include "coordinator/stateful/stateful_routes.h"

namespace shardlm {
namespace stateful {
namespace {

constexpr int64_t kRunExpiresAfterS = 600;  // a queued run not started by then expires (OpenAI: 10 minutes)

// What both creates take; a run create adds additional_*, create-and-run adds thread and tool_resources.
const std::set<std::string> kRunKeys = {"assistant_id",
                                        "model",
                                        "instructions",
                                        "tools",
                                        "metadata",
                                        "temperature",
                                        "top_p",
                                        "stream",
                                        "max_prompt_tokens",
                                        "max_completion_tokens",
                                        "truncation_strategy",
                                        "tool_choice",
                                        "parallel_tool_calls",
                                        "response_format",
                                        "include",
                                        "reasoning_effort"};

absl::StatusOr<std::optional<int64_t>> OptionalCount(const Json& body, const std::string& key, int64_t min) {
  if (!body.contains(key) || body[key].is_null()) return std::optional<int64_t>();
  if (!body[key].is_number_integer() || body[key].get<int64_t>() < min) {
    return BadParam(key, absl::StrCat(key, " must be an integer of at least ", min));
  }
  return std::optional<int64_t>(body[key].get<int64_t>());
}

absl::StatusOr<Json> TruncationOf(const Json& body) {
  if (!body.contains("truncation_strategy") || body["truncation_strategy"].is_null()) {
    return Json{{"type", "auto"}, {"last_messages", nullptr}};
  }
  const Json& t = body["truncation_strategy"];
  const std::string type =
      t.is_object() && t.contains("type") && t["type"].is_string() ? t["type"].get<std::string>() : "";
  if (type == "auto") return Json{{"type", "auto"}, {"last_messages", nullptr}};
  if (type == "last_messages" && t.contains("last_messages") && t["last_messages"].is_number_integer() &&
      t["last_messages"].get<int64_t>() >= 1) {
    return Json{{"type", "last_messages"}, {"last_messages", t["last_messages"]}};
  }
  return BadParam("truncation_strategy",
                  "truncation_strategy must be {\"type\": \"auto\"} or {\"type\": \"last_messages\", "
                  "\"last_messages\": N} with N >= 1");
}

// The run's config: the body's settings over the assistant's.
absl::StatusOr<Json> ConfigOf(const StatefulContext& ctx, const Json& body, const AssistantRow& a) {
  Json c = Json::object();
  c["model"] =
      body.contains("model") && body["model"].is_string() ? body["model"].get<std::string>() : a.model;
  if (std::find(ctx.model_names.begin(), ctx.model_names.end(), c["model"].get<std::string>()) ==
      ctx.model_names.end()) {
    return BadParam("model", absl::StrCat("The model '", c["model"].get<std::string>().substr(0, 128),
                                          "' does not exist; this server serves '",
                                          absl::StrJoin(ctx.model_names, "', '"), "'"));
  }
  SHARDLM_ASSIGN_OR_RETURN(std::optional<std::string> instructions,
                           OptionalText(body, "instructions", kMaxInstructionsChars));
  c["instructions"] = instructions.value_or(a.instructions.value_or(""));
  SHARDLM_ASSIGN_OR_RETURN(std::optional<std::string> extra,
                           OptionalText(body, "additional_instructions", kMaxInstructionsChars));
  if (extra) c["additional_instructions"] = *extra;
  SHARDLM_ASSIGN_OR_RETURN(std::string tools, ToolsOf(body));
  c["tools"] = body.contains("tools") && !body["tools"].is_null() ? Json::parse(tools) : Json::parse(a.tools);
  SHARDLM_ASSIGN_OR_RETURN(c["tool_choice"], ToolChoiceOf(body));
  SHARDLM_ASSIGN_OR_RETURN(std::optional<double> temperature, OptionalNumber(body, "temperature", 0, 2));
  c["temperature"] = temperature ? Json(*temperature) : a.temperature ? Json(*a.temperature) : Json(1.0);
  SHARDLM_ASSIGN_OR_RETURN(std::optional<double> top_p, OptionalNumber(body, "top_p", 0, 1));
  c["top_p"] = top_p ? Json(*top_p) : a.top_p ? Json(*a.top_p) : Json(1.0);
  SHARDLM_ASSIGN_OR_RETURN(std::optional<int64_t> max_prompt, OptionalCount(body, "max_prompt_tokens", 1));
  c["max_prompt_tokens"] = max_prompt ? Json(*max_prompt) : Json();
  SHARDLM_ASSIGN_OR_RETURN(std::optional<int64_t> max_completion,
                           OptionalCount(body, "max_completion_tokens", 1));
  c["max_completion_tokens"] = max_completion ? Json(*max_completion) : Json();
  SHARDLM_ASSIGN_OR_RETURN(c["truncation_strategy"], TruncationOf(body));
  SHARDLM_ASSIGN_OR_RETURN(std::optional<std::string> format, ResponseFormatOf(body));
  if (!format) format = a.response_format;
  c["response_format"] = format ? Json::parse(*format) : Json("auto");
  if (body.contains("parallel_tool_calls") && !body["parallel_tool_calls"].is_boolean()) {
    return BadParam("parallel_tool_calls", "parallel_tool_calls must be true or false");
  }
  c["parallel_tool_calls"] = body.contains("parallel_tool_calls") && body["parallel_tool_calls"].is_boolean()
                                 ? body["parallel_tool_calls"]
                                 : Json(true);
  // tool_choice checked against the tools and the format now, not when the run starts.
  SHARDLM_ASSIGN_OR_RETURN(FunctionTools checked,
                           FunctionToolsOf(ctx.runs->model(), c["tools"], c["tool_choice"], true));
  if (!checked.forced.empty() && c["response_format"].is_object() &&
      c["response_format"].value("type", "text") != "text") {
    return BadParam("tool_choice", "response_format and tool_choice each constrain the output; give one");
  }
  return c;
}

// A create's body as a queued run of thread `thread_id` (not stored).
absl::StatusOr<RunRow> RunFrom(const StatefulContext& ctx, const StatefulCall& call,
                               const std::string& thread_id) {
  const Json& body = call.body;
  SHARDLM_RETURN_IF_ERROR(RefusedUnlessEmpty(body, "include", "no file_search results to include"));
  SHARDLM_RETURN_IF_ERROR(RefusedUnlessEmpty(body, "reasoning_effort", "the model does not reason"));
  if (body.contains("stream") && !body["stream"].is_null() && !body["stream"].is_boolean()) {
    return BadParam("stream", "stream must be true or false");
  }
  if (!body.contains("assistant_id") || !body["assistant_id"].is_string()) {
    return BadParam("assistant_id", "assistant_id is required (a string)");
  }
  SHARDLM_ASSIGN_OR_RETURN(AssistantRow a, ctx.store->GetAssistant(call.owner, body["assistant_id"]));
  RunRow run;
  SHARDLM_ASSIGN_OR_RETURN(Json config, ConfigOf(ctx, body, a));
  run.config = config.dump();
  run.id = RandomId("run_");
  run.owner = call.owner;
  run.created_at = call.now_s;
  run.thread_id = thread_id;
  run.assistant_id = a.id;
  run.status = "queued";
  run.runner = ctx.runs->instance();
  run.expires_at = call.now_s + kRunExpiresAfterS;
  SHARDLM_ASSIGN_OR_RETURN(run.metadata, MetadataOf(body));
  return run;
}

absl::StatusOr<RunRow> CreateOnThread(const StatefulContext& ctx, const StatefulCall& call) {
  std::set<std::string> known = kRunKeys;
  known.insert({"additional_instructions", "additional_messages"});
  SHARDLM_RETURN_IF_ERROR(OnlyKnown(call.body, known));
  const std::string& thread_id = call.path[1];
  SHARDLM_ASSIGN_OR_RETURN(RunRow run, RunFrom(ctx, call, thread_id));
  std::vector<MessageRow> additional;
  if (call.body.contains("additional_messages") && !call.body["additional_messages"].is_null()) {
    const Json& list = call.body["additional_messages"];
    if (!list.is_array()) return BadParam("additional_messages", "additional_messages must be a list");
    for (size_t i = 0; i < list.size(); ++i) {
      SHARDLM_ASSIGN_OR_RETURN(
          MessageRow m, MessageFrom(call, list[i], thread_id, absl::StrCat("additional_messages[", i, "]")));
      additional.push_back(std::move(m));
    }
  }
  SHARDLM_RETURN_IF_ERROR(ctx.store->CreateRun(&run, &additional));
  return run;
}

absl::StatusOr<RunRow> CreateWithThread(const StatefulContext& ctx, const StatefulCall& call) {
  std::set<std::string> known = kRunKeys;
  known.insert({"thread", "tool_resources"});
  SHARDLM_RETURN_IF_ERROR(OnlyKnown(call.body, known));
  SHARDLM_RETURN_IF_ERROR(
      RefusedUnlessEmpty(call.body, "tool_resources", "no file_search or code_interpreter"));
  ThreadRow thread;
  std::vector<MessageRow> messages;
  SHARDLM_RETURN_IF_ERROR(ThreadFrom(call,
                                     call.body.contains("thread") ? call.body["thread"] : Json::object(),
                                     "thread", &thread, &messages));
  SHARDLM_ASSIGN_OR_RETURN(RunRow run, RunFrom(ctx, call, thread.id));
  SHARDLM_RETURN_IF_ERROR(ctx.store->CreateThreadAndRun(&thread, &messages, &run));
  return run;
}

// Each output of a submit_tool_outputs body by the call it answers; one for every call the run
// asked for, no more.
absl::StatusOr<std::map<std::string, std::string>> ToolOutputsOf(const Json& body) {
  if (!body.contains("tool_outputs") || !body["tool_outputs"].is_array()) {
    return BadParam("tool_outputs", "tool_outputs is required: a list of {tool_call_id, output}");
  }
  std::map<std::string, std::string> outputs;
  const Json& list = body["tool_outputs"];
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& o = list[i];
    if (!o.is_object() || !o.contains("tool_call_id") || !o["tool_call_id"].is_string() ||
        (o.contains("output") && !o["output"].is_string() && !o["output"].is_null())) {
      return BadParam("tool_outputs", absl::StrCat("tool_outputs[", i,
                                                   "] must be {\"tool_call_id\": \"call_...\", \"output\": "
                                                   "\"...\"}"));
    }
    const std::string id = o["tool_call_id"];
    const std::string output =
        o.contains("output") && o["output"].is_string() ? o["output"].get<std::string>() : "";
    if (output.size() > kMaxInstructionsChars) {
      return BadParam("tool_outputs", absl::StrCat("tool_outputs[", i, "].output is longer than ",
                                                   kMaxInstructionsChars, " characters"));
    }
    if (!outputs.emplace(id, output).second) {
      return BadParam("tool_outputs", absl::StrCat("tool_outputs[", i, "]: a second output for tool call '",
                                                   id.substr(0, 64), "'"));
    }
  }
  return outputs;
}

// The open tool step's details with each call's output filled in.
absl::StatusOr<std::string> FilledDetails(const RunStepRow& step,
                                          const std::map<std::string, std::string>& outputs) {
  Json details = Json::parse(step.step_details);
  size_t answered = 0;
  for (Json& call : details["tool_calls"]) {
    auto it = outputs.find(call["id"].get<std::string>());
    if (it == outputs.end()) {
      return BadParam("tool_outputs", absl::StrCat("Expected tool outputs for call_ids ", call["id"].dump(),
                                                   ", got none for it."));
    }
    call["function"]["output"] = it->second;
    ++answered;
  }
  if (answered != outputs.size()) {
    return BadParam("tool_outputs", "tool_outputs names a tool call the run did not ask for");
  }
  return details.dump();
}

absl::StatusOr<QueuedRun> SubmitToolOutputs(const StatefulContext& ctx, const StatefulCall& call) {
  SHARDLM_RETURN_IF_ERROR(OnlyKnown(call.body, {"tool_outputs", "stream"}));
  if (call.body.contains("stream") && !call.body["stream"].is_null() && !call.body["stream"].is_boolean()) {
    return BadParam("stream", "stream must be true or false");
  }
  SHARDLM_ASSIGN_OR_RETURN(auto outputs, ToolOutputsOf(call.body));
  ToolOutputsSubmit submit{call.owner,           call.path[1], call.path[3],
                           ctx.runs->instance(), call.now_s,   call.now_s + kRunExpiresAfterS};
  SHARDLM_ASSIGN_OR_RETURN(auto done,
                           ctx.store->SubmitToolOutputs(submit, [&](const RunRow&, const RunStepRow& step) {
                             return FilledDetails(step, outputs);
                           }));
  return QueuedRun{std::move(done.first), std::move(done.second)};
}

// /v1/threads/{thread_id}/runs/{run_id}[/cancel | /steps[/{step_id}]]
absl::StatusOr<Json> OneRun(const StatefulContext& ctx, const StatefulCall& call) {
  const auto& path = call.path;
  const std::string& thread_id = path[1];
  const std::string& run_id = path[3];
  if (path.size() == 4 && call.method == "GET") {
    SHARDLM_ASSIGN_OR_RETURN(RunRow run, ctx.store->GetRun(call.owner, thread_id, run_id));
    return RunObject(run);
  }
  if (path.size() == 4 && call.method == "POST") {
    SHARDLM_RETURN_IF_ERROR(OnlyKnown(call.body, {"metadata"}));
    SHARDLM_ASSIGN_OR_RETURN(std::string metadata, MetadataOf(call.body));
    SHARDLM_ASSIGN_OR_RETURN(RunRow run,
                             ctx.store->UpdateRunMetadata(call.owner, thread_id, run_id, metadata));
    return RunObject(run);
  }
  if (path.size() == 5 && path[4] == "cancel" && call.method == "POST") {
    SHARDLM_ASSIGN_OR_RETURN(RunRow run, ctx.store->CancelRun(call.owner, thread_id, run_id, call.now_s));
    ctx.runs->Cancel(run_id);
    return RunObject(run);
  }
  if (path.size() == 5 && path[4] == "steps" && call.method == "GET") {
    SHARDLM_ASSIGN_OR_RETURN(ListQuery q, ListQueryOf(call.query, {"include[]"}));
    SHARDLM_ASSIGN_OR_RETURN(ListPage<RunStepRow> page,
                             ctx.store->ListRunSteps(call.owner, thread_id, run_id, q));
    return ListObject(page, RunStepObject);
  }
  if (path.size() == 6 && path[4] == "steps" && call.method == "GET") {
    SHARDLM_ASSIGN_OR_RETURN(RunStepRow step, ctx.store->GetRunStep(call.owner, thread_id, run_id, path[5]));
    return RunStepObject(step);
  }
  return InvalidUrl(call);
}

}  // namespace

bool CreatesRun(const StatefulCall& call) {
  const auto& path = call.path;
  return call.method == "POST" &&
         ((path.size() == 2 && path[1] == "runs") || (path.size() == 3 && path[2] == "runs") ||
          (path.size() == 5 && path[2] == "runs" && path[4] == "submit_tool_outputs"));
}

absl::StatusOr<QueuedRun> CreateRunFrom(const StatefulContext& ctx, const StatefulCall& call) {
  if (call.path.size() == 5) return SubmitToolOutputs(ctx, call);
  SHARDLM_ASSIGN_OR_RETURN(RunRow run,
                           call.path.size() == 2 ? CreateWithThread(ctx, call) : CreateOnThread(ctx, call));
  return QueuedRun{std::move(run), std::nullopt};
}

absl::StatusOr<Json> RunsRoute(const StatefulContext& ctx, const StatefulCall& call) {
  const auto& path = call.path;
  if (CreatesRun(call)) {
    SHARDLM_ASSIGN_OR_RETURN(QueuedRun queued, CreateRunFrom(ctx, call));
    ctx.runs->Enqueue(queued.run);
    return RunObject(queued.run);
  }
  if (path.size() == 3 && call.method == "GET") {
    SHARDLM_ASSIGN_OR_RETURN(ListQuery q, ListQueryOf(call.query));
    SHARDLM_ASSIGN_OR_RETURN(ListPage<RunRow> page, ctx.store->ListRuns(call.owner, path[1], q));
    return ListObject(page, RunObject);
  }
  if (path.size() >= 4 && path[1] != "runs") return OneRun(ctx, call);
  return InvalidUrl(call);
}

}  // namespace stateful
}  // namespace shardlm
