// OpenAI's HTTP API, translated to and from the serving core's types (docs/openai.md).
//
// This file holds the translation only, with no HTTP in it: ParseJson and
// ParseRequest check an OpenAI request body (errors name the parameter and the
// limit, as OpenAI's do) and turn it into one GenerateJob per prompt, the
// engine's own request; ResponseWriter turns a Generate call's updates
// (coordinator/serving/generate_update.h) back into OpenAI's objects, as server-sent-event chunks or as one
// final object. The HTTP server (openai_http.h) wires the two to the serving core the gRPC API uses too.
//
//   OpenAiRequest r;
//   ApiError error;
//   if (!ParseRequest(Endpoint::kChat, ParseJson(body), model, &r, &error)) return Send(error);
//   ResponseWriter out(r, model.tokenizer, "chatcmpl-" + id, now, [&](const std::string& s) { return send(s);
//   }); StreamGenerate(core, r.prompts[0], owner, call, [&](auto& u) { return out.Add(0, u); }, gone);
//   out.Finish();
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/openai_wire/api_error.h"
#include "coordinator/openai_wire/model_context.h"
#include "coordinator/openai_wire/tool_calls.h"
#include "coordinator/serving/generate_job.h"
#include "coordinator/serving/generate_update.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer.h"

namespace shardlm {

class ChatTemplate;

namespace openai {

inline constexpr int kMaxPrompts = 64;  // prompts in one /v1/completions request

enum class Endpoint { kCompletions, kChat };

struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int n = 1;
  bool logprobs = false;             // report the sampled tokens' logprobs
  int top_logprobs = 0;              // and this many alternatives each
  std::vector<GenerateJob> prompts;  // one Generate per prompt
  std::string constraint_param;      // response_format, guided_* or tool_choice: where a constraint came in
  // Tools offered (tool_choice not "none"): replies are parsed into tool_calls.
  bool parse_tool_calls = false;
  ToolFormat tool_format = ToolFormat::kHermes;
  std::set<std::string> tool_names;
};

// Checks and translates a /v1/completions or /v1/chat/completions body into
// *out; false with *error set (naming the parameter and the limit) otherwise.
// A text longer than the model's context could hold is refused before it is
// tokenized, and tokenizing stops once `stop` says the client has gone.
bool ParseRequest(Endpoint endpoint, const Json& body, const ModelContext& model, OpenAiRequest* out,
                  ApiError* error, const Tokenizer::StopCheck& stop = Tokenizer::StopCheck());

// Turns Generate updates into OpenAI objects. With stream, each Add sends
// the chunks it makes through `send` (one "data: {...}\n\n" event each;
// never a chunk with an empty text delta); Finish sends the usage chunk (when
// asked) and "data: [DONE]". Without stream, Finish sends the whole object.
// Thread-safe: prompts may be generated concurrently.
class ResponseWriter {
 public:
  // `send` returns false when the client is gone.
  ResponseWriter(const OpenAiRequest& request, const Tokenizer* tokenizer, std::string id, int64_t created,
                 std::function<bool(const std::string&)> send);

  // An update of prompt `prompt`'s Generate call; false: the client is gone.
  bool Add(int prompt, const GenerateUpdate& update);
  // Ends the response (stream: usage chunk and [DONE]).
  bool Finish();
  // Ends a stream that failed after it started: an error event, then [DONE].
  bool Fail(const ApiError& error);
  // Totals over every prompt, from the Generate streams' usage.
  int64_t prompt_tokens() {
    std::lock_guard<std::mutex> lock(mu_);
    return prompt_tokens_;
  }
  int64_t cached_tokens() {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_tokens_;
  }
  int64_t completion_tokens() {
    std::lock_guard<std::mutex> lock(mu_);
    return completion_tokens_;
  }

 private:
  // A choice's text and its tokens' logprobs: all of them without stream;
  // with stream, those not sent yet (a token whose text is held back waits
  // for the next piece of text or the finish chunk).
  struct Choice {
    std::string text;
    std::string finish_reason;
    Json content = Json::array();  // chat: one entry per token
    Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(), offsets = Json::array();
    bool role_sent = false;
    size_t sent = 0;  // with tools, streamed: bytes of `text` sent as content
  };
  Json Chunk(Json choices) const;
  // A token as its text: its bytes (invalid UTF-8 is replaced when dumped).
  std::string TokenText(int32_t id) const;
  Json TokenEntry(int32_t id, float logprob) const;
  // Records the logprobs of `update`'s tokens into `c`; the text before them
  // is `text_chars` characters long.
  void AddLogprobs(Choice& c, const GenerateUpdate& update, int64_t text_chars);
  // `c`'s logprobs in the endpoint's format (null when none were asked for);
  // with `take`, they are cleared.
  Json Logprobs(Choice& c, bool take);
  bool Send(const Json& j);
  // With tools offered: the choice's text sent as content up to where a call
  // may start (streamed), and at its end its calls (OpenAI's tool_calls).
  bool SendPlainText(size_t index, Choice& c);
  bool SendToolCalls(size_t index, Choice& c);
  Json ToolCallsJson(const std::vector<ToolCall>& calls, bool stream);

  const OpenAiRequest& request_;
  const Tokenizer* tokenizer_;
  std::string id_;
  int64_t created_;
  std::function<bool(const std::string&)> send_;
  std::mutex mu_;
  std::vector<Choice> choices_;
  int64_t prompt_tokens_ = 0, cached_tokens_ = 0, completion_tokens_ = 0;
  std::mt19937_64 call_ids_{std::random_device{}()};  // tool call ids ("call_" + 24 letters)
};

// "data: <json>\n\n"
std::string Event(const Json& j);

}  // namespace openai
}  // namespace shardlm
