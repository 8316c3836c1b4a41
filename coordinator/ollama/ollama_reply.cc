#include "coordinator/ollama/ollama_reply.h"

#include <algorithm>
#include <ctime>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shardlm {
namespace ollama {
namespace {

int64_t Nanos(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

// A call's arguments (JSON text of an object, as ParseToolCalls found them) as the object.
// nlohmann's parser keeps its own stack, so no depth limit is needed for the model's text.
Json ArgumentsObject(const std::string& text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : Json::object();
}

}  // namespace

std::string CreatedAt() {
  const auto now = std::chrono::system_clock::now();
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ns / 1000000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return absl::StrFormat("%04d-%02d-%02dT%02d:%02d:%02d.%09dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                         tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ns % 1000000000));
}

ReplyWriter::ReplyWriter(const OllamaRequest& request, const Tokenizer* tokenizer, Clock::time_point received,
                         std::function<bool(const std::string&)> send)
    : request_(request),
      tokenizer_(tokenizer),
      received_(received),
      queued_(received),
      send_(std::move(send)) {}

Json ReplyWriter::Head() const { return Json{{"model", request_.model}, {"created_at", CreatedAt()}}; }

Json ReplyWriter::Chunk(const std::string& text, bool done) const {
  Json j = Head();
  if (request_.endpoint == OllamaEndpoint::kChat) {
    j["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    j["response"] = text;
  }
  j["done"] = done;
  return j;
}

bool ReplyWriter::Send(const Json& j) {
  // One compact line; invalid UTF-8 (a token ending mid-character) replaced.
  return send_(j.dump(-1, ' ', false, Json::error_handler_t::replace) + (request_.stream ? "\n" : ""));
}

Json ReplyWriter::TokenEntry(int32_t id, float logprob) const {
  const std::string& bytes = tokenizer_ ? tokenizer_->TokenBytes(id, /*skip_special=*/false) : std::string();
  Json b = Json::array();
  for (unsigned char c : bytes) b.push_back(static_cast<int>(c));
  return Json{
      {"token", tokenizer_ ? bytes : absl::StrCat("token_id:", id)}, {"logprob", logprob}, {"bytes", b}};
}

void ReplyWriter::AddLogprobs(const GenerateUpdate& u) {
  if (!request_.logprobs) return;
  for (size_t t = 0; t < u.token_ids.size() && t < u.logprobs.size(); ++t) {
    Json e = TokenEntry(u.token_ids[t], u.logprobs[t]);
    if (request_.top_logprobs > 0 && t < u.top_logprobs.size()) {
      Json top = Json::array();
      for (const TopLogprob& alt : u.top_logprobs[t]) {
        if (static_cast<int>(top.size()) == request_.top_logprobs) break;
        top.push_back(TokenEntry(alt.id, alt.logprob));
      }
      e["top_logprobs"] = std::move(top);
    }
    logprobs_.push_back(std::move(e));
  }
}

bool ReplyWriter::SendPlainText() {
  const size_t plain =
      request_.parse_tool_calls ? PlainTextPrefix(request_.tool_format, text_) : text_.size();
  if (plain <= sent_ && logprobs_.empty()) return true;
  Json j = Chunk(plain > sent_ ? text_.substr(sent_, plain - sent_) : "", false);
  if (!logprobs_.empty()) j["logprobs"] = std::exchange(logprobs_, Json::array());
  sent_ = std::max(sent_, plain);
  return Send(j);
}

bool ReplyWriter::Add(const GenerateUpdate& u) {
  if (!u.prompt_token_ids.empty() && request_.return_context) context_ = u.prompt_token_ids;
  if (!u.token_ids.empty() && !has_first_token_) {
    has_first_token_ = true;
    first_token_ = Clock::now();
  }
  if (request_.return_context) context_.insert(context_.end(), u.token_ids.begin(), u.token_ids.end());
  AddLogprobs(u);
  text_ += u.text;
  if (u.last()) {
    usage_ = *u.usage;
    if (!u.ends.empty() && !u.ends[0].finish_reason.empty()) done_reason_ = u.ends[0].finish_reason;
  }
  return request_.stream ? SendPlainText() : true;
}

bool ReplyWriter::SendToolCalls() {
  ParsedReply reply = ParseToolCalls(request_.tool_format, text_, request_.tool_names);
  if (reply.calls.empty()) {  // the text held back in case it began a call is plain text after all
    const bool ok = !request_.stream || sent_ >= text_.size() || Send(Chunk(text_.substr(sent_), false));
    sent_ = text_.size();
    return ok;
  }
  bool ok = true;
  // What is left of the content once the calls are taken out of it.
  if (request_.stream && reply.content.size() > sent_ &&
      reply.content.compare(0, sent_, text_, 0, sent_) == 0) {
    ok &= Send(Chunk(reply.content.substr(sent_), false));
  }
  sent_ = text_.size();
  tool_calls_ = Json::array();
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  for (size_t k = 0; k < reply.calls.size(); ++k) {
    std::string id = "call_";
    for (int c = 0; c < 8; ++c) id += kChars[ids_() % 36];
    tool_calls_.push_back({{"id", id},
                           {"function",
                            {{"index", k},
                             {"name", reply.calls[k].name},
                             {"arguments", ArgumentsObject(reply.calls[k].arguments)}}}});
  }
  if (!request_.stream) {
    text_ = reply.content;
    return ok;
  }
  Json j = Chunk("", false);
  j["message"]["tool_calls"] = tool_calls_;
  return ok && Send(j);
}

Json ReplyWriter::Metrics() const {
  const Clock::time_point end = Clock::now();
  const Clock::time_point first = has_first_token_ ? first_token_ : end;
  return Json{{"total_duration", Nanos(end - received_)},
              {"load_duration", Nanos(queued_ - received_)},
              {"prompt_eval_count", usage_.prompt_tokens - usage_.cached_tokens},
              {"prompt_eval_duration", Nanos(first - queued_)},
              {"eval_count", usage_.generated_tokens},
              {"eval_duration", Nanos(end - first)}};
}

bool ReplyWriter::Finish() {
  bool ok = request_.parse_tool_calls ? SendToolCalls() : true;
  Json j = Chunk(request_.stream ? "" : text_, true);
  if (!request_.stream && !tool_calls_.is_null()) j["message"]["tool_calls"] = tool_calls_;
  if (!request_.stream && request_.logprobs) j["logprobs"] = logprobs_;
  j["done_reason"] = done_reason_;
  if (request_.return_context) j["context"] = context_;
  j.update(Metrics());
  return ok && Send(j);
}

bool ReplyWriter::Loaded() {
  Json j = Chunk("", true);
  j["done_reason"] = "load";
  return send_(j.dump());
}

bool ReplyWriter::Fail(const std::string& message) {
  return send_(Json{{"error", message}}.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n");
}

}  // namespace ollama
}  // namespace shardlm
