// Renders chat templates line by line, for tests/chat/check_chat_templates.py.
//
//   render_chat_template MODEL_DIR_OR_TOKENIZER_CONFIG_JSON < requests.jsonl
//
// Each stdin line is a JSON object {"messages": [...], "add_generation_prompt":
// bool, "tools": [...] (optional), ...}; keys other than those three become
// template variables. Each answer is one line: {"text": "..."} or
// {"error": "..."}. Exit status 2 when the template cannot be loaded.
#include <iostream>
#include <string>

#include "chat/chat_template.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace {

absl::StatusOr<std::unique_ptr<shardlm::ChatTemplate>> LoadTemplate(const std::string& path) {
  const std::string suffix = ".json";
  if (path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0) {
    SHARDLM_ASSIGN_OR_RETURN(std::string text, shardlm::ReadFileToString(path));
    return shardlm::ChatTemplate::FromConfig(text, path);
  }
  return shardlm::ChatTemplate::Load(path);
}

nlohmann::ordered_json RenderOne(const shardlm::ChatTemplate& chat, const std::string& line) {
  nlohmann::ordered_json request;
  try {
    request = nlohmann::ordered_json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    return {{"error", std::string("request is not JSON: ") + e.what()}};
  }
  if (!request.is_object()) return {{"error", "request is not a JSON object"}};
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  for (const auto& [key, value] : request.items()) {
    if (key != "messages" && key != "add_generation_prompt" && key != "tools") extra[key] = value;
  }
  const bool add_generation_prompt = request.contains("add_generation_prompt") &&
                                     request["add_generation_prompt"].is_boolean() &&
                                     request["add_generation_prompt"].get<bool>();
  const nlohmann::ordered_json tools =
      request.contains("tools") ? request["tools"] : nlohmann::ordered_json();
  const nlohmann::ordered_json messages =
      request.contains("messages") ? request["messages"] : nlohmann::ordered_json::array();
  absl::StatusOr<std::string> text = chat.Apply(messages, add_generation_prompt, tools, extra);
  if (!text.ok()) return {{"error", std::string(text.status().message())}};
  return {{"text", *text}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " MODEL_DIR|tokenizer_config.json < requests.jsonl\n";
    return 2;
  }
  absl::StatusOr<std::unique_ptr<shardlm::ChatTemplate>> chat = LoadTemplate(argv[1]);
  if (!chat.ok()) {
    std::cerr << chat.status() << "\n";
    return 2;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    std::cout << RenderOne(**chat, line).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
    std::cout.flush();
  }
  return 0;
}
