// What the HTTP front ends (OpenAI's and Ollama's) need to know about the served model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardlm {

class ChatTemplate;
class Tokenizer;
struct FimTokens;

namespace openai {

// What the translation needs to know about the served model.
struct ModelContext {
  std::vector<std::string> names;  // accepted in "model"; the first is reported
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;  // null: /v1/chat/completions answers 400
  int64_t max_context = 0;                      // prompt + generated tokens at most
  int32_t vocab_size = 0;
  int64_t max_queued_sequences = 0;  // --max-queued-requests; 0: no check
  const FimTokens* fim = nullptr;    // null: the model has no fill-in-the-middle tokens (suffix is 400)
};

}  // namespace openai
}  // namespace shardlm
