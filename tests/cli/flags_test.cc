#include "cli/flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>

#include "tests/testing/status_matchers.h"

namespace shardlm {
namespace {

using ::shardlm::testing::IsOk;
using ::shardlm::testing::StatusIs;
using ::testing::_;
using ::testing::HasSubstr;

absl::Status ParseArgs(FlagSet& f, std::vector<std::string> args) {
  std::vector<char*> argv = {const_cast<char*>("shardlm"), const_cast<char*>("cmd")};
  for (auto& a : args) argv.push_back(a.data());
  return f.Parse(static_cast<int>(argv.size()), argv.data(), 2);
}

FlagSet Flags() {
  FlagSet f("generate");
  f.String("model", "dir", true);
  f.Int("max-new-tokens", "n", 16, 0, 100);
  f.Float("top-p", "p", 1.0, 0.0, 1.0, true);
  f.String("dtype", "d", false, "auto", {"auto", "f32"});
  f.Bool("json", "j");
  return f;
}

TEST(FlagsTest, ParsesValuesBothSpellingsAndDefaults) {
  FlagSet f = Flags();
  ASSERT_THAT(ParseArgs(f, {"--model", "m", "--top-p=0.5", "--json", "pos"}), IsOk());
  EXPECT_EQ(f.GetString("model"), "m");
  EXPECT_DOUBLE_EQ(f.GetFloat("top-p"), 0.5);
  EXPECT_EQ(f.GetInt("max-new-tokens"), 16);
  EXPECT_TRUE(f.GetBool("json"));
  EXPECT_FALSE(f.Has("dtype"));
  EXPECT_EQ(f.positional(), std::vector<std::string>({"pos"}));
}

TEST(FlagsTest, ErrorsNameTheFlagAndTheRange) {
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {{"--model", "m", "--max-new-tokens", "-1"}, "--max-new-tokens must be in [0, 100], got -1"},
           {{"--model", "m", "--max-new-tokens", "x"}, "--max-new-tokens must be an integer"},
           {{"--model", "m", "--top-p", "0"}, "--top-p must be in (0, 1], got 0"},
           {{"--model", "m", "--dtype", "f16"}, "--dtype must be one of auto|f32"},
           {{"--model", "m", "--bogus"}, "unknown flag --bogus"},
           {{"--json"}, "--model is required"},
           {{"--model"}, "--model needs a value"},
       }) {
    FlagSet f = Flags();
    EXPECT_THAT(ParseArgs(f, c.args), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)));
  }
}

TEST(FlagsTest, RepeatedFlagsEmptyValuesNegativeNumbersAndPositionals) {
  FlagSet f = Flags();
  ASSERT_THAT(ParseArgs(f, {"--model", "a", "--model=b", "--max-new-tokens", "0", "--prompt-like", "x"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown flag --prompt-like")));
  FlagSet g = Flags();
  ASSERT_THAT(ParseArgs(g, {"--model", "a", "--model=b", "--json", "p1", "--", "--p2"}), IsOk());
  EXPECT_EQ(g.GetString("model"), "b");  // the last one wins
  EXPECT_EQ(g.positional(), std::vector<std::string>({"p1", "--p2"}));
  FlagSet h = Flags();
  ASSERT_THAT(ParseArgs(h, {"--model=", "-5"}), IsOk());  // "--model=" is the empty value
  EXPECT_TRUE(h.Has("model"));
  EXPECT_EQ(h.GetString("model"), "");
  EXPECT_EQ(h.positional(), std::vector<std::string>({"-5"}));
  FlagSet i = Flags();
  EXPECT_THAT(
      ParseArgs(i, {"--model", "m", "--dtype="}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--dtype must be one of auto|f32, got ''")));
  FlagSet j = Flags();
  ASSERT_THAT(ParseArgs(j, {"--model", "m", "--json=false", "--max-new-tokens=+07"}), IsOk());
  EXPECT_FALSE(j.GetBool("json"));
  EXPECT_TRUE(j.Has("json"));
  EXPECT_EQ(j.GetString("max-new-tokens"), "7");  // canonical form
  FlagSet k = Flags();
  EXPECT_THAT(ParseArgs(k, {"--model", "m", "--json=maybe"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--json must be true or false")));
}

TEST(FlagsTest, UnknownFlagsSuggestTheNearestName) {
  FlagSet f = Flags();
  EXPECT_THAT(ParseArgs(f, {"--model", "m", "--max-new-token=3"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("generate: unknown flag --max-new-token (did you mean --max-new-tokens?)")));
  FlagSet g = Flags();
  EXPECT_THAT(ParseArgs(g, {"--model", "m", "--config", "x.yaml"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown flag --config")));
}

TEST(FlagsTest, HelpWinsAndUsageComesFromTheTable) {
  FlagSet f = Flags();
  ASSERT_THAT(ParseArgs(f, {"--bogus", "--help"}), IsOk());
  EXPECT_TRUE(f.help_requested());
  const std::string usage = f.Usage();
  EXPECT_THAT(usage, HasSubstr("usage: shardlm generate [flags]"));
  EXPECT_THAT(usage, HasSubstr("--model STRING, required\n      dir\n"));
  EXPECT_THAT(usage, HasSubstr("--max-new-tokens INT in [0, 100], default 16\n      n\n"));
  EXPECT_THAT(usage, HasSubstr("--top-p FLOAT in (0, 1], default 1\n"));
  EXPECT_THAT(usage, HasSubstr("--dtype auto|f32, default auto\n"));
  EXPECT_THAT(usage, HasSubstr("--json\n      j\n"));
  EXPECT_THAT(usage, ::testing::Not(HasSubstr("SHARDLM_")));
  EXPECT_THAT(usage, ::testing::Not(HasSubstr("--config")));
  f.EnableConfig();
  EXPECT_THAT(f.Usage(), HasSubstr("--max-new-tokens INT in [0, 100], default 16  [max-new-tokens, "
                                   "SHARDLM_MAX_NEW_TOKENS]\n"));
  EXPECT_THAT(f.Usage(), HasSubstr("--config FILE"));
  EXPECT_THAT(f.Usage(), HasSubstr("--print-config"));
}

TEST(FlagsTest, IdLists) {
  std::vector<int32_t> ids;
  ASSERT_THAT(ParseIdList("prompt-ids", "1,22,333", &ids), IsOk());
  EXPECT_EQ(ids, std::vector<int32_t>({1, 22, 333}));
  std::vector<int32_t> bad;
  EXPECT_THAT(ParseIdList("prompt-ids", "1,,3", &bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--prompt-ids")));
  EXPECT_THAT(ParseIdList("prompt-ids", "-4", &bad),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'-4'")));
}

// Bound fields get the effective value after a successful Parse: what was
// given, else the default; an optional field only what was given.
TEST(FlagsTest, BindingsHoldTheEffectiveValues) {
  struct Options {
    std::string model;
    int32_t max_new_tokens = -1;
    float top_p = -1;
    std::optional<std::string> dtype = "stale";
    bool json = true;
    std::optional<int64_t> seed = 99;
  } o;
  FlagSet f("generate");
  f.String("model", "dir", true).To(&o.model);
  f.Int("max-new-tokens", "n", 16, 0, 100).To(&o.max_new_tokens);
  f.Float("top-p", "p", 1.0, 0.0, 1.0, true).To(&o.top_p);
  f.String("dtype", "d", false, "auto", {"auto", "f32"}).To(&o.dtype);
  f.Bool("json", "j").To(&o.json);
  f.Int("seed", "s", 0, 0, INT64_MAX).To(&o.seed);
  ASSERT_THAT(ParseArgs(f, {"--model", "m", "--top-p=0.5", "--seed", "7"}), IsOk());
  EXPECT_EQ(o.model, "m");
  EXPECT_EQ(o.max_new_tokens, 16);  // the default
  EXPECT_FLOAT_EQ(o.top_p, 0.5f);
  EXPECT_FALSE(o.dtype.has_value());  // not given: reset, not "auto"
  EXPECT_FALSE(o.json);
  EXPECT_EQ(o.seed, 7);
}

TEST(FlagsTest, NothingIsBoundAfterAFailedParseOrHelp) {
  int32_t n = -1;
  FlagSet f("generate");
  f.Int("max-new-tokens", "n", 16, 0, 100).To(&n);
  EXPECT_THAT(ParseArgs(f, {"--max-new-tokens", "101"}), StatusIs(absl::StatusCode::kInvalidArgument, _));
  EXPECT_EQ(n, -1);
  FlagSet h("generate");
  h.Int("max-new-tokens", "n", 16, 0, 100).To(&n);
  ASSERT_THAT(ParseArgs(h, {"--help"}), IsOk());
  EXPECT_EQ(n, -1);
}

TEST(FlagsTest, ABindingTooNarrowForTheRangeIsAProgrammingError) {
  int8_t small = 0;
  EXPECT_DEATH(
      {
        FlagSet f("generate");
        f.Int("max-new-tokens", "n", 16, 0, 1000).To(&small);
      },
      "cannot hold its values");
}

}  // namespace
}  // namespace shardlm
