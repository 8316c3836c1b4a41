// Generate updates written as Ollama's replies (docs/ollama.md "Replies"):
// NDJSON chunks, or one object with stream false; the final chunk with the
// timings measured on the request, tool calls parsed from the reply.
//
//   ReplyWriter out(request, tokenizer, received, send_line);
//   out.Queued();  // the prompt is ready for the engine
//   StreamGenerate(..., [&](const GenerateUpdate& u) { return out.Add(u); }, ...);
//   out.Finish();  // the done chunk (or the whole object)
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "coordinator/ollama/ollama_request.h"
#include "coordinator/serving/generate_update.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {
namespace ollama {

// "2026-11-29T07:31:02.123456789Z", as Ollama writes created_at.
std::string CreatedAt();

class ReplyWriter {
 public:
  using Clock = std::chrono::steady_clock;
  // `send` gets each line (stream) or the whole object; false: the client is gone.
  ReplyWriter(const OllamaRequest& request, const Tokenizer* tokenizer, Clock::time_point received,
              std::function<bool(const std::string&)> send);

  void Queued() { queued_ = Clock::now(); }
  bool Add(const GenerateUpdate& update);
  bool Finish();
  // The reply to an empty prompt or message list: done at once, done_reason "load".
  bool Loaded();
  // Ends a stream that failed after it began: {"error": ...} as its last line.
  bool Fail(const std::string& message);

  int64_t prompt_tokens() const { return usage_.prompt_tokens; }
  int64_t cached_tokens() const { return usage_.cached_tokens; }
  int64_t completion_tokens() const { return usage_.generated_tokens; }

 private:
  Json Head() const;
  // A chunk (or the object) carrying `text` as its response or message content.
  Json Chunk(const std::string& text, bool done) const;
  bool Send(const Json& j);
  Json TokenEntry(int32_t id, float logprob) const;
  void AddLogprobs(const GenerateUpdate& update);
  // Streamed with tools: the text no call can start in, not sent yet.
  bool SendPlainText();
  // At the end: the text held back, then the calls in their own chunk.
  bool SendToolCalls();
  Json Metrics() const;

  const OllamaRequest& request_;
  const Tokenizer* tokenizer_;
  Clock::time_point received_, queued_, first_token_;
  bool has_first_token_ = false;
  std::function<bool(const std::string&)> send_;
  std::string text_;               // the whole reply so far
  size_t sent_ = 0;                // bytes of text_ streamed
  Json logprobs_ = Json::array();  // not sent yet
  Json tool_calls_;                // parsed at the end (null: none)
  std::vector<int32_t> context_;   // prompt and reply ids, for generate's `context`
  std::string done_reason_ = "stop";
  GenerateUsage usage_;
  std::mt19937_64 ids_{std::random_device{}()};
};

}  // namespace ollama
}  // namespace shardlm
