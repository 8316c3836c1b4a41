#include "coordinator/stateful/response_execution.h"

#include <chrono>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/random_token.h"
#include "common/status.h"
#include "coordinator/openai_wire/http_replies.h"
#include "coordinator/stateful/chat_prompt.h"
#include "coordinator/stateful/function_tools.h"
#include "coordinator/stateful/reply_generation.h"
#include "coordinator/stateful/response_items.h"
#include "coordinator/stateful/response_objects.h"
#include "coordinator/stateful/response_request.h"
#include "coordinator/stateful/response_stream.h"
#include "coordinator/stateful/stateful_params.h"

namespace shardlm {
namespace stateful {
namespace {

// A create made ready to run: the request, its tools, its engine job and its row (in progress).
struct Prepared {
  ResponseRequest request;
  FunctionTools tools;
  GenerateJob job;
  ResponseRow row;
};

// The turns before this response's input: the chain its previous_response_id ends, or its
// conversation's items.
absl::Status HistoryInto(const ResponseContext& ctx, const StatefulCall& call, const ResponseRequest& r,
                         std::vector<Json>* items) {
  if (r.previous_response_id) {
    absl::StatusOr<std::vector<ResponseItemRow>> chain =
        ctx.store->ResponseChain(call.owner, *r.previous_response_id);
    if (!chain.ok()) return WithField(chain.status(), "previous_response_id");
    for (const ResponseItemRow& item : *chain) items->push_back(Json::parse(item.item));
  }
  if (r.conversation_id) {  // stored (ParseResponseRequest), so there is a store (Prepare)
    absl::StatusOr<std::vector<ConversationItemRow>> rows =
        ctx.store->ConversationHistory(call.owner, *r.conversation_id);
    if (!rows.ok()) return WithField(rows.status(), "conversation");
    for (const ConversationItemRow& item : *rows) items->push_back(Json::parse(item.item));
  }
  return absl::OkStatus();
}

absl::StatusOr<Prepared> Prepare(const ResponseContext& ctx, const StatefulCall& call,
                                 const CallRecord& record) {
  Prepared p;
  SHARDLM_ASSIGN_OR_RETURN(p.request, ParseResponseRequest(call.body, ctx.model->names));
  const ResponseRequest& r = p.request;
  if (ctx.store == nullptr && (r.store || r.previous_response_id)) {
    return BadParam(r.store ? "store" : "previous_response_id",
                    "this server keeps no responses (--state-db none): send store: false and no "
                    "previous_response_id");
  }
  SHARDLM_ASSIGN_OR_RETURN(p.tools, FunctionToolsOf(*ctx.model, r.chat_tools, r.tool_choice,
                                                    r.config["parallel_tool_calls"].get<bool>()));
  PromptSpec spec;
  spec.system = r.instructions;
  std::vector<Json> items;
  SHARDLM_RETURN_IF_ERROR(HistoryInto(ctx, call, r, &items));
  items.insert(items.end(), r.input.begin(), r.input.end());
  spec.turns = TurnsOf(items);
  spec.tools = p.tools.chat_tools;
  spec.may_drop = r.truncation_auto;
  spec.budget = ctx.model->max_context - 1;
  spec.budget_param = "input";
  SHARDLM_ASSIGN_OR_RETURN(BuiltPrompt prompt, BuildPrompt(*ctx.core, *ctx.model, spec, record));
  SHARDLM_ASSIGN_OR_RETURN(p.job, ReplyJob(*ctx.model, r.settings, std::move(prompt.ids)));
  SHARDLM_RETURN_IF_ERROR(ConstrainCalls(p.tools, &p.job));
  p.row.id = RandomId("resp_");
  p.row.owner = call.owner;
  p.row.created_at = call.now_s;
  p.row.runner = ctx.runner;
  p.row.previous_response_id = r.previous_response_id;
  p.row.conversation_id = r.conversation_id;
  p.row.config = r.config.dump();
  return p;
}

// The row's end from how the generation went.
ResponseEnd EndOf(const ResponseRow& row, const ResponseRequest& r, const Generated& g) {
  ResponseEnd end;
  end.owner = row.owner;
  end.response_id = row.id;
  end.at = absl::ToUnixSeconds(absl::Now());
  end.usage = ResponseUsage(g.usage).dump();
  if (g.status.ok()) {
    end.status = g.finish_reason == "length" && r.settings.max_tokens ? "incomplete" : "completed";
    if (end.status == "incomplete") end.incomplete_reason = "max_output_tokens";
  } else if (absl::IsCancelled(g.status)) {
    end.status = "cancelled";
  } else {
    end.status = "failed";
    end.error = Json{{"code", "server_error"}, {"message", std::string(g.status.message())}}.dump(
        -1, ' ', false, Json::error_handler_t::replace);
  }
  return end;
}

ResponseItemRow OutputRow(const ResponseRow& row, const Json& output, int64_t at) {
  ResponseItemRow item;
  item.id = output["id"];
  item.owner = row.owner;
  item.created_at = at;
  item.response_id = row.id;
  item.kind = "output";
  item.item = output.dump();
  return item;
}

std::vector<ResponseItemRow> InputRows(const ResponseRow& row, const std::vector<Json>& input) {
  std::vector<ResponseItemRow> rows;
  for (const Json& item : input) {
    ResponseItemRow r;
    r.id = item["id"];
    r.owner = row.owner;
    r.created_at = row.created_at;
    r.response_id = row.id;
    r.kind = "input";
    r.item = item.dump();
    rows.push_back(std::move(r));
  }
  return rows;
}

// What a response that answered adds to its conversation: its input items, then its output.
void IntoConversation(const ResponseRow& row, const std::vector<Json>& input, const Json& output,
                      ResponseEnd* end) {
  if (!row.conversation_id || (end->status != "completed" && end->status != "incomplete")) return;
  end->conversation_id = row.conversation_id;
  auto add = [&](const Json& item, int64_t at) {
    ConversationItemRow c;
    c.id = item["id"];
    c.owner = row.owner;
    c.created_at = at;
    c.conversation_id = *row.conversation_id;
    c.item = item.dump();
    end->conversation_items.push_back(std::move(c));
  };
  for (const Json& item : input) add(item, row.created_at);
  for (const Json& item : output) add(item, end->at);
}

// Writes the end, retrying a busy database; a last failure is logged (the reaper of a later
// start marks the response failed).
void StoreEnd(StateStore& store, const ResponseEnd& end) {
  absl::Status st;
  for (int attempt = 0; attempt < 3; ++attempt) {
    st = store.FinishResponse(end);
    if (st.ok()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(200 << attempt));
  }
  LOG(WARNING) << "response " << end.response_id << ": its end was not stored: " << st;
}

// The row as it ended (what the store now holds, or would).
ResponseRow Ended(ResponseRow row, const ResponseEnd& end) {
  row.status = end.status;
  row.usage = end.usage;
  row.error = end.error;
  row.incomplete_reason = end.incomplete_reason;
  row.completed_at = end.at;
  return row;
}

// A generation's end: what is stored (the output, and the turn for a conversation), the output
// items (the reply message, when it has text, was shown or made no call; then its calls), and
// the Response object as it ended.
struct Concluded {
  ResponseEnd end;
  Json output = Json::array();
  Json object;
};

Concluded Conclude(const Prepared& p, const std::string& message_id, const Generated& g, bool shown) {
  Concluded c;
  c.end = EndOf(p.row, p.request, g);
  const ParsedReply reply = SplitReply(p.tools, g.text, g.status);
  if (MakesMessage(reply, shown)) {
    c.output.push_back(
        OutputMessage(message_id, c.end.status == "completed" ? "completed" : "incomplete", reply.content));
  }
  for (const ToolCall& call : reply.calls) c.output.push_back(FunctionCallItem(call.name, call.arguments));
  for (const Json& item : c.output) c.end.output.push_back(OutputRow(p.row, item, c.end.at));
  IntoConversation(p.row, p.request.input, c.output, &c.end);
  c.object = ResponseObject(Ended(p.row, c.end), c.output);
  return c;
}

// Generates `p`'s reply, counted on `record`; a generation the stopping server cut short reads
// "server shutting down".
Generated GenerateCounted(const ResponseContext& ctx, Prepared& p, CallRecord& record,
                          const std::function<void(const std::string&)>& on_text,
                          const std::function<bool()>& stop) {
  // The KV of the chain or conversation it continues; its own filed under the conversation, or
  // under this response when it is stored (a chain may fork: each response keeps its entry).
  const ResponseRequest& r = p.request;
  TurnKv kv{ctx.turns, r.previous_response_id.value_or(r.conversation_id.value_or("")),
            r.conversation_id ? *r.conversation_id
            : r.store         ? p.row.id
                              : ""};
  Generated g = GenerateTurn(*ctx.core, kv, std::move(p.job), p.row.owner, record, on_text, stop);
  if (absl::IsCancelled(g.status) && ctx.stopping->load())
    g.status = absl::UnavailableError("server shutting down");
  record.SetTokens(g.usage.prompt_tokens, g.usage.cached_tokens, g.usage.generated_tokens);
  record.Finish(g.status).IgnoreError();
  return g;
}

// A background response's generation, on a thread of its own; `cancel` stops it (a cancel, or
// the server stopping).
void RunInBackground(const ResponseContext& ctx, Prepared& p, const std::atomic<bool>& cancel) {
  CallRecord record("", "CreateResponse", ctx.core->metrics());
  auto stop = [&] { return cancel.load() || ctx.stopping->load(); };
  record.SetAbandonedCheck(stop);
  const std::string message_id = RandomId("msg_");
  ResponseStream shown(nullptr, p.tools, message_id);
  Generated g = GenerateCounted(
      ctx, p, record, [&](const std::string& text) { shown.OnText(text); }, stop);
  StoreEnd(*ctx.store, Conclude(p, message_id, g, shown.message_shown()).end);
}

// Answers a stored background create at once (in_progress, no output) and hands its
// generation to ctx.background.
void StartInBackground(const ResponseContext& ctx, Prepared p, CallRecord& record, HttpExchange& exchange) {
  auto shared = std::make_shared<Prepared>(std::move(p));
  const Json object = ResponseObject(shared->row, Json::array());
  const ResponseContext copy = ctx;
  const bool started = ctx.background->Start(shared->row.id, [copy, shared](const std::atomic<bool>& cancel) {
    RunInBackground(copy, *shared, cancel);
  });
  if (!started) {  // the server began to stop, or the others took the last place meanwhile
    Generated none;
    none.status = absl::UnavailableError("the server could not start this background response; retry");
    StoreEnd(*ctx.store, Conclude(*shared, RandomId("msg_"), none, false).end);
    exchange.Send(openai::ErrorReply(ErrorOf(record.Finish(none.status))));
    return;
  }
  record.Finish(absl::OkStatus()).IgnoreError();
  exchange.Send(openai::JsonReply(object));
}

// A foreground create: generated on this request's thread, streamed or answered whole.
void RunInForeground(const ResponseContext& ctx, Prepared& p, CallRecord& record, HttpExchange& exchange) {
  auto gone = [&] { return exchange.ClientGone() || ctx.stopping->load(); };
  const std::string message_id = RandomId("msg_");
  ResponseStream stream(p.request.stream ? &exchange : nullptr, p.tools, message_id);
  stream.Start(ResponseObject(p.row, Json::array()));
  Generated g = GenerateCounted(
      ctx, p, record, [&](const std::string& text) { stream.OnText(text); }, gone);
  const Concluded c = Conclude(p, message_id, g, stream.message_shown());
  if (p.request.store) StoreEnd(*ctx.store, c.end);
  if (p.request.stream) {
    stream.Finish(c.output, c.object);
  } else {
    exchange.Send(g.status.ok() ? openai::JsonReply(c.object) : openai::ErrorReply(ErrorOf(g.status)));
  }
}

}  // namespace

void CreateResponse(const ResponseContext& ctx, const StatefulCall& call, const HttpRequest& req,
                    HttpExchange& exchange) {
  const std::string* request_id = req.Header("x-request-id");
  CallRecord record(request_id ? *request_id : "", "CreateResponse", ctx.core->metrics());
  record.SetAbandonedCheck([&] { return exchange.ClientGone() || ctx.stopping->load(); });
  absl::StatusOr<Prepared> p = Prepare(ctx, call, record);
  if (p.ok() && p->request.background && !ctx.background->HasRoom()) {
    p = absl::ResourceExhaustedError(absl::StrCat("this server generates at most ", ctx.background->limit(),
                                                  " background responses at once; retry later"));
  }
  if (!p.ok()) {
    exchange.Send(openai::ErrorReply(ErrorOf(record.Finish(p.status()))));
    return;
  }
  if (p->request.store) {
    std::vector<ResponseItemRow> input = InputRows(p->row, p->request.input);
    if (absl::Status st = ctx.store->CreateResponse(&p->row, &input); !st.ok()) {
      exchange.Send(openai::ErrorReply(ErrorOf(record.Finish(st))));
      return;
    }
  }
  if (p->request.background) {
    StartInBackground(ctx, std::move(*p), record, exchange);
  } else {
    RunInForeground(ctx, *p, record, exchange);
  }
}

}  // namespace stateful
}  // namespace shardlm
