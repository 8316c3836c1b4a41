// coordinator/openai_wire/tool_calls.h: the syntax read from a template, replies parsed
// into calls (known functions only, malformed calls left as text), the
// streamed text held back only where a call may start, and the forcing grammar.
#include "coordinator/openai_wire/tool_calls.h"

#include <gtest/gtest.h>

namespace shardlm {
namespace {

using Json = nlohmann::json;

const std::set<std::string> kNames = {"get_weather", "get_time"};

TEST(ToolCallsTest, FormatFromTheTemplate) {
  EXPECT_EQ(ToolFormatOf("{{- '<tool_call>\\n' }}{{ tool_call | tojson }}"), ToolFormat::kHermes);
  EXPECT_EQ(ToolFormatOf("{{- '[TOOL_CALLS][' }}"), ToolFormat::kMistral);
  EXPECT_EQ(ToolFormatOf("{{- '<|start_header_id|>ipython<|end_header_id|>' }}"), ToolFormat::kLlama);
  EXPECT_EQ(ToolFormatOf("{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}"),
            ToolFormat::kHermes)
      << "a template without tools gets the Hermes syntax";
}

TEST(ToolCallsTest, HermesCallsAndTheTextAround) {
  const ParsedReply r =
      ParseToolCalls(ToolFormat::kHermes,
                     "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                     "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"get_time\", "
                     "\"arguments\": \"{\\\"city\\\": \\\"Rome\\\"}\"}</tool_call>",
                     kNames);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(r.calls[0].arguments), Json({{"city", "Paris"}}));
  EXPECT_EQ(r.calls[1].name, "get_time");
  EXPECT_EQ(Json::parse(r.calls[1].arguments), Json({{"city", "Rome"}})) << "arguments sent as a JSON string";
  EXPECT_EQ(r.content, "Let me check.");
}

TEST(ToolCallsTest, WhatIsNotAWellFormedCallOfAKnownFunctionStaysText) {
  for (const std::string text :
       {"<tool_call>{\"name\": \"launch_rockets\", \"arguments\": {}}</tool_call>",   // unknown function
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {</tool_call>",        // malformed
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}",                  // cut off
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": [1]}</tool_call>"}) {  // not an object
    const ParsedReply r = ParseToolCalls(ToolFormat::kHermes, text, kNames);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text);
  }
}

TEST(ToolCallsTest, LlamaAndMistralReplies) {
  ParsedReply r = ParseToolCalls(
      ToolFormat::kLlama, " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", kNames);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(Json::parse(r.calls[0].arguments), Json({{"city", "Oslo"}}));
  EXPECT_EQ(r.content, "");
  r = ParseToolCalls(ToolFormat::kLlama, "{\"answer\": 42}", kNames);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "{\"answer\": 42}");
  r = ParseToolCalls(ToolFormat::kMistral,
                     "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {\"city\": \"Lima\"}}, {\"name\": "
                     "\"get_weather\", \"arguments\": {\"city\": \"Quito\"}}]",
                     kNames);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[1].name, "get_weather");
  // The marker is a special token the reply's text may have lost.
  r = ParseToolCalls(ToolFormat::kMistral, "[{\"name\": \"get_time\", \"arguments\": {}}]", kNames);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{}");
}

TEST(ToolCallsTest, StreamedTextHeldOnlyWhereACallMayStart) {
  EXPECT_EQ(PlainTextPrefix(ToolFormat::kHermes, "Hello there"), 11u);
  EXPECT_EQ(PlainTextPrefix(ToolFormat::kHermes, "Hello <tool"), 6u) << "may grow into <tool_call>";
  EXPECT_EQ(PlainTextPrefix(ToolFormat::kHermes, "Hello <b>"), 9u);
  EXPECT_EQ(PlainTextPrefix(ToolFormat::kHermes, "Ok <tool_call>{\"na"), 3u);
  EXPECT_EQ(PlainTextPrefix(ToolFormat::kMistral, "Sure [TOOL"), 5u);
  EXPECT_EQ(PlainTextPrefix(ToolFormat::kLlama, "  {\"name\""), 0u) << "a Llama call is the whole reply";
  EXPECT_EQ(PlainTextPrefix(ToolFormat::kLlama, "The answer"), 10u);
}

TEST(ToolCallsTest, ForcedGrammarNamesTheFunctionsAndTheirSchemas) {
  const Json tools = Json::parse(R"([
    {"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time"}}])");
  const std::string any = ForcedCallGrammar(ToolFormat::kHermes, tools, "");
  EXPECT_NE(any.find("start: \"<tool_call>\\n\" call \"\\n</tool_call>\""), std::string::npos) << any;
  EXPECT_NE(any.find("anyOf"), std::string::npos);
  EXPECT_NE(any.find("\"const\":\"get_time\""), std::string::npos);
  const std::string one = ForcedCallGrammar(ToolFormat::kLlama, tools, "get_weather");
  EXPECT_EQ(one.find("get_time"), std::string::npos) << one;
  EXPECT_NE(one.find("\"parameters\":{\"properties\""), std::string::npos) << one;
}

}  // namespace
}  // namespace shardlm
