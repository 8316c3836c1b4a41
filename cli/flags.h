// A small, strict command-line parser for the subcommands.
//
// Every flag is declared with its kind and range; anything unknown, missing a
// value, malformed or out of range is a UsageError whose message names the
// flag and the allowed range (the CLI exits 2 on it).
//
//   FlagSet f("generate");
//   f.String("model", "checkpoint directory", /*required=*/true);
//   f.Int("max-new-tokens", "tokens to generate", 16, 0, 1 << 20);
//   SHARDLM_RETURN_IF_ERROR(f.Parse(argc, argv));
//   int64_t n = f.GetInt("max-new-tokens");
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace shardlm {

class FlagSet {
 public:
  explicit FlagSet(std::string command) : command_(std::move(command)) {}

  void String(const std::string& name, const std::string& help, bool required = false,
              const std::string& default_value = "", std::vector<std::string> choices = {});
  void Int(const std::string& name, const std::string& help, int64_t default_value, int64_t min, int64_t max);
  void Float(const std::string& name, const std::string& help, double default_value, double min, double max,
             bool min_exclusive = false);
  void Bool(const std::string& name, const std::string& help);

  // Parses argv[first..argc); positional arguments are collected in order.
  // `--help` stops parsing and sets help_requested().
  absl::Status Parse(int argc, char** argv, int first);
  bool help_requested() const { return help_requested_; }

  bool Has(const std::string& name) const { return given_.count(name) > 0; }
  std::string GetString(const std::string& name) const;
  int64_t GetInt(const std::string& name) const;
  double GetFloat(const std::string& name) const;
  bool GetBool(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }
  std::string Usage() const;

 private:
  enum class Kind { kString, kInt, kFloat, kBool };
  struct Spec {
    Kind kind;
    std::string help;
    bool required = false;
    std::string default_value;
    std::vector<std::string> choices;
    double min = 0, max = 0;
    bool min_exclusive = false;
  };
  absl::Status Check(const std::string& name, const Spec& spec, const std::string& value) const;

  std::string command_;
  std::map<std::string, Spec> specs_;
  std::vector<std::string> order_;
  std::map<std::string, std::string> given_;
  std::vector<std::string> positional_;
  bool help_requested_ = false;
};

// Parses a subcommand's flags. Returns true when the command should go on;
// otherwise it printed usage (--help: *exit_code = 0) or the error
// (*exit_code = 2). Positional arguments beyond `max_positional` are errors.
bool ParseCommandLine(FlagSet& flags, int argc, char** argv, size_t max_positional, int* exit_code);

// "1,2,3" -> {1, 2, 3}; InvalidArgument naming `flag` otherwise.
absl::Status ParseIdList(const std::string& flag, const std::string& text, std::vector<int32_t>* out);

}  // namespace shardlm
