// The replies of the OpenAI endpoints: a request's Generate updates
// written as one JSON body or as server-sent events (coordinator/openai/openai_api.h,
// ResponseWriter).
#include <string>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"
#include "coordinator/openai/openai_api.h"

namespace shardlm {
namespace openai {

std::string Event(const Json& j) {
  return absl::StrCat("data: ", j.dump(-1, ' ', false, Json::error_handler_t::replace), "\n\n");
}

ResponseWriter::ResponseWriter(const OpenAiRequest& request, const Tokenizer* tokenizer, std::string id,
                               int64_t created, std::function<bool(const std::string&)> send)
    : request_(request),
      tokenizer_(tokenizer),
      id_(std::move(id)),
      created_(created),
      send_(std::move(send)) {
  choices_.resize(request_.prompts.size() * request_.n);
}

Json ResponseWriter::Chunk(Json choices) const {
  Json j = Json::object();
  j["id"] = id_;
  j["object"] = request_.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion";
  j["created"] = created_;
  j["model"] = request_.model;
  j["choices"] = std::move(choices);
  if (request_.include_usage) j["usage"] = nullptr;
  return j;
}

bool ResponseWriter::Send(const Json& j) { return send_(Event(j)); }

std::string ResponseWriter::TokenText(int32_t id) const {
  return tokenizer_ ? tokenizer_->TokenBytes(id, /*skip_special=*/false) : absl::StrCat("token_id:", id);
}

Json ResponseWriter::TokenEntry(int32_t id, float logprob) const {
  Json e = Json::object();
  e["token"] = TokenText(id);
  e["logprob"] = logprob;
  Json b = Json::array();
  if (tokenizer_) {
    for (unsigned char c : tokenizer_->TokenBytes(id, /*skip_special=*/false))
      b.push_back(static_cast<int>(c));
  }
  e["bytes"] = std::move(b);
  return e;
}

void ResponseWriter::AddLogprobs(Choice& c, const GenerateUpdate& msg, int64_t text_chars) {
  // text_offset counts characters, as OpenAI's does: each token starts where
  // the text before it ends (a token ending mid-character counts the
  // character where it completes).
  int64_t offset = text_chars;
  for (size_t t = 0; t < msg.token_ids.size(); ++t) {
    const std::vector<TopLogprob>* alts = t < msg.top_logprobs.size() ? &msg.top_logprobs[t] : nullptr;
    const int num_top = alts ? std::min(static_cast<int>(alts->size()), request_.top_logprobs) : 0;
    if (request_.endpoint == Endpoint::kChat) {
      Json e = TokenEntry(msg.token_ids[t], msg.logprobs[t]);
      Json top = Json::array();
      for (int k = 0; k < num_top; ++k) top.push_back(TokenEntry((*alts)[k].id, (*alts)[k].logprob));
      e["top_logprobs"] = std::move(top);
      c.content.push_back(std::move(e));
    } else {
      Json top = Json::object();
      for (int k = 0; k < num_top; ++k) top[TokenText((*alts)[k].id)] = (*alts)[k].logprob;
      c.tokens.push_back(TokenText(msg.token_ids[t]));
      c.token_logprobs.push_back(msg.logprobs[t]);
      c.top.push_back(std::move(top));
      c.offsets.push_back(offset);
      if (tokenizer_ != nullptr)
        offset += Utf8Length(tokenizer_->TokenBytes(msg.token_ids[t], /*skip_special=*/true));
    }
  }
}

Json ResponseWriter::Logprobs(Choice& c, bool take) {
  if (!request_.logprobs) return Json();
  Json out = request_.endpoint == Endpoint::kChat ? Json{{"content", c.content}}
                                                  : Json{{"tokens", c.tokens},
                                                         {"token_logprobs", c.token_logprobs},
                                                         {"top_logprobs", c.top},
                                                         {"text_offset", c.offsets}};
  if (take) c.content = c.tokens = c.token_logprobs = c.top = c.offsets = Json::array();
  return out;
}

bool ResponseWriter::SendPlainText(size_t index, Choice& c) {
  const size_t plain = PlainTextPrefix(request_.tool_format, c.text);
  if (plain <= c.sent) return true;
  Json choice = {{"index", index},
                 {"delta", {{"content", c.text.substr(c.sent, plain - c.sent)}}},
                 {"logprobs", Logprobs(c, /*take=*/true)},
                 {"finish_reason", nullptr}};
  c.sent = plain;
  return Send(Chunk(Json::array({choice})));
}

bool ResponseWriter::SendToolCalls(size_t index, Choice& c) {
  ParsedReply reply = ParseToolCalls(request_.tool_format, c.text, request_.tool_names);
  bool ok = true;
  // The held-back text: what is left of the content (all of it when there is no call).
  std::string rest;
  if (reply.calls.empty()) {
    rest = c.text.substr(std::min(c.sent, c.text.size()));
  } else if (reply.content.size() > c.sent && reply.content.compare(0, c.sent, c.text, 0, c.sent) == 0) {
    rest = reply.content.substr(c.sent);
  }
  if (!rest.empty()) {
    Json choice = {
        {"index", index}, {"delta", {{"content", rest}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    ok &= Send(Chunk(Json::array({choice})));
  }
  c.sent = c.text.size();
  if (reply.calls.empty()) return ok;
  // As OpenAI chunks a call: its id, type and name first, then its arguments.
  const Json calls = ToolCallsJson(reply.calls, /*stream=*/true);
  for (const Json& call : calls) {
    Json head = call;
    head["function"]["arguments"] = "";
    Json args = {{"index", call["index"]}, {"function", {{"arguments", call["function"]["arguments"]}}}};
    for (const Json& part : {head, args}) {
      Json choice = {{"index", index},
                     {"delta", {{"tool_calls", Json::array({part})}}},
                     {"logprobs", nullptr},
                     {"finish_reason", nullptr}};
      ok &= Send(Chunk(Json::array({choice})));
    }
  }
  c.finish_reason = "tool_calls";
  return ok;
}

Json ResponseWriter::ToolCallsJson(const std::vector<ToolCall>& calls, bool stream) {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    std::string id = "call_";
    for (int k = 0; k < 24; ++k) id += kAlphabet[call_ids_() % (sizeof(kAlphabet) - 1)];
    Json call = {{"id", id},
                 {"type", "function"},
                 {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (stream) call["index"] = i;
    out.push_back(std::move(call));
  }
  return out;
}

bool ResponseWriter::Add(int prompt, const GenerateUpdate& msg) {
  std::lock_guard<std::mutex> lock(mu_);
  if (msg.usage) {  // the last update: finish reasons and usage
    prompt_tokens_ += msg.usage->prompt_tokens;
    cached_tokens_ += msg.usage->cached_tokens;
    completion_tokens_ += msg.usage->generated_tokens;
  }
  const bool chat = request_.endpoint == Endpoint::kChat;
  const size_t index = static_cast<size_t>(prompt) * request_.n + msg.sample;
  Choice& c = choices_.at(index);
  if (request_.logprobs) AddLogprobs(c, msg, Utf8Length(c.text));
  c.text += msg.text;
  bool ok = true;
  if (request_.stream) {
    if (chat && !c.role_sent) {
      c.role_sent = true;
      Json choice = {{"index", index},
                     {"delta", {{"role", "assistant"}}},
                     {"logprobs", nullptr},
                     {"finish_reason", nullptr}};
      ok &= Send(Chunk(Json::array({choice})));
    }
    // Text only when there is some: a token whose text is held back (part of
    // a character, or perhaps of a stop string) waits for the next.
    if (request_.parse_tool_calls) {
      ok &= SendPlainText(index, c);
    } else if (!msg.text.empty()) {
      Json choice = Json::object();
      choice["index"] = index;
      if (chat) {
        choice["delta"] = {{"content", msg.text}};
      } else {
        choice["text"] = msg.text;
      }
      choice["logprobs"] = Logprobs(c, /*take=*/true);
      choice["finish_reason"] = nullptr;
      ok &= Send(Chunk(Json::array({choice})));
    }
  }
  for (const SampleEnd& end : msg.ends) {
    const size_t i = static_cast<size_t>(prompt) * request_.n + end.sample;
    Choice& done = choices_.at(i);
    done.finish_reason = end.finish_reason;
    if (!request_.stream) continue;
    if (request_.parse_tool_calls) ok &= SendToolCalls(i, done);
    Json choice = Json::object();
    choice["index"] = i;
    if (chat) {
      choice["delta"] = Json::object();
    } else {
      choice["text"] = "";
    }
    // Logprobs of tokens whose text never came (held back to the end).
    const bool left = chat ? !done.content.empty() : !done.tokens.empty();
    choice["logprobs"] = left ? Logprobs(done, /*take=*/true) : Json();
    choice["finish_reason"] = done.finish_reason;
    ok &= Send(Chunk(Json::array({choice})));
  }
  return ok;
}

bool ResponseWriter::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  Json usage = {{"prompt_tokens", prompt_tokens_},
                {"completion_tokens", completion_tokens_},
                {"total_tokens", prompt_tokens_ + completion_tokens_},
                {"prompt_tokens_details", {{"cached_tokens", cached_tokens_}}}};
  if (request_.stream) {
    bool ok = true;
    if (request_.include_usage) {
      Json j = Chunk(Json::array());
      j["usage"] = usage;
      ok &= Send(j);
    }
    return ok && send_("data: [DONE]\n\n");
  }
  const bool chat = request_.endpoint == Endpoint::kChat;
  Json choices = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    Json choice = Json::object();
    choice["index"] = i;
    if (chat && request_.parse_tool_calls) {
      ParsedReply reply = ParseToolCalls(request_.tool_format, c.text, request_.tool_names);
      if (reply.calls.empty()) {
        choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      } else {
        choice["message"] = {{"role", "assistant"},
                             {"content", reply.content.empty() ? Json() : Json(reply.content)},
                             {"tool_calls", ToolCallsJson(reply.calls, /*stream=*/false)}};
        c.finish_reason = "tool_calls";
      }
    } else if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = Logprobs(c, /*take=*/false);
    choice["finish_reason"] = c.finish_reason;
    choices.push_back(std::move(choice));
  }
  Json j = Json::object();
  j["id"] = id_;
  j["object"] = chat ? "chat.completion" : "text_completion";
  j["created"] = created_;
  j["model"] = request_.model;
  j["choices"] = std::move(choices);
  j["usage"] = std::move(usage);
  return send_(j.dump(-1, ' ', false, Json::error_handler_t::replace));
}

bool ResponseWriter::Fail(const ApiError& error) {
  std::lock_guard<std::mutex> lock(mu_);
  return send_(Event(error.Body())) && send_("data: [DONE]\n\n");
}

}  // namespace openai
}  // namespace shardlm
