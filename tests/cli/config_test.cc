#include "cli/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "cli/flags.h"
#include "tests/testing/status_matchers.h"

namespace shardlm {
namespace {

using ::shardlm::testing::IsOk;
using ::shardlm::testing::StatusIs;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;
using Env = std::map<std::string, std::string>;

// A slice of `serve`'s table.
FlagSet ServeFlags() {
  FlagSet f("serve");
  f.String("model", "checkpoint directory", true);
  f.Int("tp", "tensor-parallel size", 1, 1, 64);
  f.String("host", "address of the API", false, "127.0.0.1");
  f.Int("port", "port of the API", 50051, 0, 65535);
  f.String("dtype", "compute dtype", false, "auto", {"auto", "f32", "bf16"});
  f.Int("kv-cache-mb", "KV cache budget per rank in MiB", 256, 1, 1 << 20);
  f.Float("top-p", "nucleus", 1.0, 0.0, 1.0, true);
  f.Bool("no-reflection", "no gRPC reflection");
  f.Int("metrics-port", "metrics port (unset: off)", 0, 0, 65535);
  f.String("tls-cert", "PEM certificate");
  f.EnableConfig();
  return f;
}

absl::Status ParseArgs(FlagSet& f, std::vector<std::string> args, const Env& env = {}) {
  std::vector<char*> argv = {const_cast<char*>("shardlm"), const_cast<char*>("serve")};
  for (auto& a : args) argv.push_back(a.data());
  return f.Parse(static_cast<int>(argv.size()), argv.data(), 2, env);
}

// Writes `text` to a file named after the running test; returns its path.
std::string WriteConfig(const std::string& text, const std::string& suffix = ".yaml") {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string path = ::testing::TempDir() + "config_test_" + info->name() + suffix;
  std::ofstream(path) << text;
  return path;
}

TEST(ConfigTest, FlagOverridesEnvironmentOverridesFileOverridesDefault) {
  const std::string path = WriteConfig(
      "model: /m\n"
      "tp: 2\n"
      "port: 1000\n"
      "kv-cache-mb: 512\n"
      "host: file-host\n");
  FlagSet f = ServeFlags();
  ASSERT_THAT(
      ParseArgs(f, {"--config", path, "--port", "3000"}, {{"SHARDLM_TP", "3"}, {"SHARDLM_PORT", "2000"}}),
      IsOk());
  EXPECT_EQ(f.GetInt("port"), 3000);
  EXPECT_EQ(f.SourceLabel("port"), "flag");
  EXPECT_EQ(f.GetInt("tp"), 3);
  EXPECT_EQ(f.SourceLabel("tp"), "env SHARDLM_TP");
  EXPECT_EQ(f.GetInt("kv-cache-mb"), 512);
  EXPECT_EQ(f.SourceLabel("kv-cache-mb"), "file " + path);
  EXPECT_EQ(f.GetString("dtype"), "auto");
  EXPECT_EQ(f.source("dtype"), FlagSource::kDefault);
  EXPECT_FALSE(f.Has("dtype"));
  EXPECT_EQ(f.GetString("model"), "/m");  // a required setting may come from the file
}

TEST(ConfigTest, UnsetFlagsLeaveTheFileAloneAndHasSeesEverySource) {
  const std::string path = WriteConfig(
      "model: /m\n"
      "dtype: f32\n"
      "metrics-port: 0\n"
      "kv_cache_mb: 64\n"
      "no-reflection: true\n"
      "tls-cert:\n");  // no value: left unset
  FlagSet f = ServeFlags();
  ASSERT_THAT(ParseArgs(f, {"--config=" + path, "--tp", "2"}), IsOk());
  EXPECT_EQ(f.GetString("dtype"), "f32");
  EXPECT_TRUE(f.Has("metrics-port"));  // "unset means off" settings work from a file
  EXPECT_EQ(f.GetInt("metrics-port"), 0);
  EXPECT_EQ(f.GetInt("kv-cache-mb"), 64);
  EXPECT_TRUE(f.GetBool("no-reflection"));
  EXPECT_FALSE(f.Has("tls-cert"));
}

TEST(ConfigTest, FileErrorsNameTheFileLineKeyAndRange) {
  struct Case {
    std::string text;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {"model: /m\n\nkv-cahce-mb: 5\n", ":3: unknown key 'kv-cahce-mb' (did you mean kv-cache-mb?)"},
           {"model: /m\nkv-cache-mb: 0\n", ":2: kv-cache-mb must be in [1, 1048576], got 0"},
           {"kv_cache_mb: lots\n", ":1: kv_cache_mb must be an integer, got 'lots'"},
           {"dtype: f16\n", ":1: dtype must be one of auto|f32|bf16, got 'f16'"},
           {"top-p: 0\n", ":1: top-p must be in (0, 1], got 0"},
           {"no-reflection: yes\n", ":1: no-reflection must be true or false, got 'yes'"},
           {"tp: [1, 2]\n", ":1: tp must be a single value, got a list"},
           {"tp: {a: 1}\n", ":1: tp must be a single value, got a mapping"},
           {"tp: 1\nport: 2\ntp: 3\n", ":3: tp is set twice (also on line 1)"},
           {"- tp\n", ":1: expected 'key: value' lines"},
           {"tp: [1\nport: 2\n", ":2: not valid YAML"},
       }) {
    const std::string path = WriteConfig(c.text);
    FlagSet f = ServeFlags();
    EXPECT_THAT(ParseArgs(f, {"--model", "m", "--config", path}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(path + c.message)))
        << c.text;
  }
}

TEST(ConfigTest, UnknownKeyWithoutNearNameHasNoSuggestion) {
  const std::string path = WriteConfig("bogus: 1\n");
  FlagSet f = ServeFlags();
  absl::Status st = ParseArgs(f, {"--model", "m", "--config", path});
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(path + ":1: unknown key 'bogus'")));
  EXPECT_THAT(std::string(st.message()), Not(HasSubstr("did you mean")));
}

TEST(ConfigTest, MissingFileAndMissingValueAreNamed) {
  FlagSet f = ServeFlags();
  const std::string missing = ::testing::TempDir() + "config_test_no_such.yaml";
  EXPECT_THAT(ParseArgs(f, {"--model", "m", "--config", missing}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cannot read --config file '" + missing + "': No such file or directory")));
  FlagSet g = ServeFlags();
  EXPECT_THAT(ParseArgs(g, {"--model", "m", "--config"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("serve: --config needs a value")));
  FlagSet h = ServeFlags();
  EXPECT_THAT(ParseArgs(h, {"--model", "m", "--config="}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot read --config file ''")));
  FlagSet i = ServeFlags();
  EXPECT_THAT(ParseArgs(i, {"--model", "m", "--config", ::testing::TempDir()}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("it is a directory")));
}

TEST(ConfigTest, EmptyFileSetsNothing) {
  FlagSet f = ServeFlags();
  ASSERT_THAT(ParseArgs(f, {"--model", "m", "--config", WriteConfig("# nothing here\n")}), IsOk());
  EXPECT_FALSE(f.Has("tp"));
}

TEST(ConfigTest, EnvironmentValuesAreCheckedAndNamed) {
  FlagSet f = ServeFlags();
  EXPECT_THAT(
      ParseArgs(f, {"--model", "m"}, {{"SHARDLM_TP", "0"}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("serve: SHARDLM_TP must be in [1, 64], got 0")));
  FlagSet g = ServeFlags();
  EXPECT_THAT(ParseArgs(g, {"--model", "m"}, {{"SHARDLM_NO_REFLECTION", "maybe"}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("serve: SHARDLM_NO_REFLECTION must be 1, 0, true or false, got 'maybe'")));
  FlagSet h = ServeFlags();
  EXPECT_THAT(
      ParseArgs(h, {"--model", "m"}, {{"SHARDLM_DTYPE", "f16"}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("SHARDLM_DTYPE must be one of auto|f32|bf16")));
  // A flag does not excuse a bad variable.
  FlagSet i = ServeFlags();
  EXPECT_THAT(
      ParseArgs(i, {"--model", "m", "--tp", "2"}, {{"SHARDLM_TP", "x"}}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("SHARDLM_TP must be an integer, got 'x'")));
}

TEST(ConfigTest, EnvironmentBoolsAndUnrelatedVariables) {
  FlagSet f = ServeFlags();
  const Env env = {{"SHARDLM_NO_REFLECTION", "1"},
                   {"SHARDLM_INTERNAL_TOKEN", "secret"},  // main()'s, not a setting
                   {"SHARDLM_NPM_DIR", "/x"},
                   {"SHARDLM_BOGUS", "1"},
                   {"TP", "9"}};
  ASSERT_THAT(ParseArgs(f, {"--model", "m"}, env), IsOk());
  EXPECT_TRUE(f.GetBool("no-reflection"));
  EXPECT_FALSE(f.Has("tp"));
  FlagSet g = ServeFlags();
  ASSERT_THAT(ParseArgs(g, {"--model", "m"}, {{"SHARDLM_NO_REFLECTION", "FALSE"}}), IsOk());
  EXPECT_TRUE(g.Has("no-reflection"));
  EXPECT_FALSE(g.GetBool("no-reflection"));
}

TEST(ConfigTest, CommandsWithoutConfigIgnoreTheEnvironment) {
  FlagSet f("generate");
  f.Int("tp", "n", 1, 1, 64);
  ASSERT_THAT(ParseArgs(f, {}, {{"SHARDLM_TP", "0"}}), IsOk());
  EXPECT_FALSE(f.Has("tp"));
}

TEST(ConfigTest, ASettingMayNotShadowMainsVariables) {
  FlagSet f = ServeFlags();
  f.String("internal-token", "would read SHARDLM_INTERNAL_TOKEN");
  EXPECT_THAT(ParseArgs(f, {"--model", "m"}),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("SHARDLM_INTERNAL_TOKEN")));
}

TEST(ConfigTest, RequiredSettingsMayComeFromAnySource) {
  FlagSet f = ServeFlags();
  ASSERT_THAT(ParseArgs(f, {}, {{"SHARDLM_MODEL", "/env-model"}}), IsOk());
  EXPECT_EQ(f.GetString("model"), "/env-model");
  FlagSet g = ServeFlags();
  ASSERT_THAT(ParseArgs(g, {"--config", WriteConfig("model: /file-model\n")}), IsOk());
  EXPECT_EQ(g.GetString("model"), "/file-model");
  FlagSet h = ServeFlags();
  EXPECT_THAT(
      ParseArgs(h, {}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("serve: --model is required (or 'model:' in the --config file, or SHARDLM_MODEL "
                         "in the environment)")));
}

TEST(ConfigTest, PrintConfigSaysWhereEachValueCameFrom) {
  const std::string path = WriteConfig("kv-cache-mb: 512\nmodel: /file-model\n");
  FlagSet f = ServeFlags();
  ASSERT_THAT(
      ParseArgs(f, {"--config", path, "--model", "/flag-model", "--print-config"}, {{"SHARDLM_TP", "2"}}),
      IsOk());
  EXPECT_TRUE(f.print_config_requested());
  const std::string yaml = RenderConfig(f);
  EXPECT_THAT(yaml, ContainsRegex("\nmodel: /flag-model +# flag\n"));
  EXPECT_THAT(yaml, ContainsRegex("\ntp: 2 +# env SHARDLM_TP\n"));
  EXPECT_THAT(yaml, ContainsRegex("\n# host: 127.0.0.1 +# default\n"));
  EXPECT_THAT(yaml, ContainsRegex("\nkv-cache-mb: 512 +# file " + path + "\n"));
  EXPECT_THAT(yaml, ContainsRegex("\n# no-reflection: false +# default\n"));
  EXPECT_THAT(yaml, ContainsRegex("\n# tls-cert: +# default \\(unset\\)\n"));
  // Table order.
  EXPECT_LT(yaml.find("\nmodel:"), yaml.find("\ntp:"));
  EXPECT_LT(yaml.find("\ntp:"), yaml.find("\n# host:"));
  EXPECT_LT(yaml.find("# metrics-port:"), yaml.find("# tls-cert:"));
}

TEST(ConfigTest, PrintConfigShowsAMissingRequiredSetting) {
  FlagSet f = ServeFlags();
  ASSERT_THAT(ParseArgs(f, {"--print-config"}), IsOk());
  EXPECT_THAT(RenderConfig(f), HasSubstr("# model:"));
  EXPECT_THAT(RenderConfig(f), HasSubstr("# required, not set\n"));
}

TEST(ConfigTest, PrintedConfigReadsBackToTheSameSettings) {
  FlagSet f = ServeFlags();
  ASSERT_THAT(ParseArgs(f,
                        {"--model", "/m #1: x", "--host", "~", "--tls-cert=", "--top-p", "0.25",
                         "--no-reflection", "--dtype", "bf16"},
                        {{"SHARDLM_METRICS_PORT", "0"}, {"SHARDLM_PORT", "8080"}}),
              IsOk());
  const std::string path = WriteConfig(RenderConfig(f));
  FlagSet g = ServeFlags();
  ASSERT_THAT(ParseArgs(g, {"--config", path}), IsOk());
  for (const FlagSpec& s : f.specs()) {
    EXPECT_EQ(g.Has(s.name), f.Has(s.name)) << s.name;
    EXPECT_EQ(g.GetString(s.name), f.GetString(s.name)) << s.name;
    if (f.Has(s.name)) {
      EXPECT_EQ(g.SourceLabel(s.name), "file " + path) << s.name;
    }
  }
  EXPECT_EQ(g.GetString("host"), "~");
  EXPECT_TRUE(g.Has("tls-cert"));
  EXPECT_EQ(g.GetString("tls-cert"), "");
}

TEST(ConfigTest, ClosestName) {
  const std::vector<std::string> names = {"kv-cache-mb", "max-batch-tokens", "port", "tp"};
  EXPECT_EQ(ClosestName("kv-cahce-mb", names), "kv-cache-mb");
  EXPECT_EQ(ClosestName("kv_cache_mb", names), "kv-cache-mb");
  EXPECT_EQ(ClosestName("max-batch-token", names), "max-batch-tokens");
  EXPECT_EQ(ClosestName("prot", names), "port");
  EXPECT_EQ(ClosestName("bogus", names), "");
  EXPECT_EQ(ClosestName("x", names), "");
}

}  // namespace
}  // namespace shardlm
