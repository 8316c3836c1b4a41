// The settings of a subcommand: one table that the command line, `--help` and,
// for commands that opt in, a YAML file, SHARDLM_* environment variables and
// `--print-config` all come from (docs/configuration.md).
//
// Every setting is declared with its kind and range; anything unknown, missing
// a value, malformed or out of range is an InvalidArgument error whose message
// names the flag (or the file key, or the variable) and the allowed range (the
// CLI exits 2 on it). The command line is tokenized by CLI11; the checks and
// their messages are this file's.
//
//   FlagSet f("serve");
//   f.String("model", "checkpoint directory", /*required=*/true);
//   f.Int("kv-cache-mb", "KV cache budget per rank in MiB", 256, 1, 1 << 20);
//   f.EnableConfig();  // also --config FILE, --print-config, $SHARDLM_KV_CACHE_MB
//   int code = 0;
//   if (!ParseCommandLine(f, argc, argv, 0, &code)) return code;
//   int64_t mb = f.GetInt("kv-cache-mb");
//
// For a config-enabled command a setting's value comes from the first of:
// the command line, the environment, the --config file, the default.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace shardlm {

// Where a setting's effective value came from, from lowest to highest precedence.
enum class FlagSource { kDefault, kFile, kEnv, kFlag };

// One row of the table: the flag --NAME, the file key NAME and the variable
// SHARDLM_NAME (upper case, dashes as underscores) share it.
struct FlagSpec {
  enum class Kind { kString, kInt, kFloat, kBool };
  std::string name;  // "kv-cache-mb"
  Kind kind = Kind::kString;
  std::string help;
  bool required = false;
  std::string default_value;         // as text: "256", "auto", "false"
  std::vector<std::string> choices;  // strings only; empty: any text
  double min = 0, max = 0;           // ints and floats
  bool min_exclusive = false;        // floats: (min, max]

  // "SHARDLM_KV_CACHE_MB".
  std::string EnvName() const;
  // Checks *value against the kind, range and choices and rewrites it in
  // canonical form ("+07" -> "7"). The error says why, not where the value
  // came from: "must be in [1, 1048576], got 0".
  absl::Status Validate(std::string* value) const;
  // The kind with its range or choices and the default, as --help shows it:
  // "INT in [1, 1048576], default 256".
  std::string Describe() const;
};

class FlagSet {
 public:
  explicit FlagSet(std::string command) : command_(std::move(command)) {}

  void String(const std::string& name, const std::string& help, bool required = false,
              const std::string& default_value = "", std::vector<std::string> choices = {});
  void Int(const std::string& name, const std::string& help, int64_t default_value, int64_t min, int64_t max);
  void Float(const std::string& name, const std::string& help, double default_value, double min, double max,
             bool min_exclusive = false);
  void Bool(const std::string& name, const std::string& help);

  // Opts in to --config FILE, --print-config and SHARDLM_* variables.
  void EnableConfig() { config_enabled_ = true; }
  bool config_enabled() const { return config_enabled_; }

  // Parses argv[first..argc); positional arguments are collected in order.
  // For a config-enabled command, `env` holds the environment (only the
  // SHARDLM_<NAME> entries of declared settings are read) and --config names
  // the file. `--help` skips the file, the environment and the checks of
  // required settings and sets help_requested(); --print-config skips only the
  // required check and sets print_config_requested().
  absl::Status Parse(int argc, char** argv, int first, const std::map<std::string, std::string>& env = {});
  bool help_requested() const { return help_requested_; }
  bool print_config_requested() const { return print_config_requested_; }

  // True when any source (flag, variable, file) set the setting.
  bool Has(const std::string& name) const { return given_.count(name) > 0; }
  std::string GetString(const std::string& name) const;
  int64_t GetInt(const std::string& name) const;
  double GetFloat(const std::string& name) const;
  bool GetBool(const std::string& name) const;
  FlagSource source(const std::string& name) const;
  // "default", "flag", "env SHARDLM_TP" or "file config.yaml".
  std::string SourceLabel(const std::string& name) const;

  const std::string& command() const { return command_; }
  const std::vector<FlagSpec>& specs() const { return specs_; }  // in declaration order
  const std::vector<std::string>& positional() const { return positional_; }
  std::string Usage() const;

 private:
  struct Value {
    std::string text;
    FlagSource source;
  };
  void Declare(FlagSpec spec);
  const FlagSpec& Spec(const std::string& name) const;
  // The command line (CLI11): flag values as given, positionals, --help,
  // --config, --print-config.
  absl::Status ParseArgv(const std::vector<std::string>& args, std::map<std::string, std::string>* flags);

  std::string command_;
  bool config_enabled_ = false;
  std::vector<FlagSpec> specs_;
  std::map<std::string, size_t> index_;  // name -> position in specs_
  std::map<std::string, Value> given_;
  std::vector<std::string> positional_;
  bool config_given_ = false;
  std::string config_file_;  // as given to --config
  bool help_requested_ = false;
  bool print_config_requested_ = false;
};

// Parses a subcommand's flags (argv[2..]); a config-enabled command also reads
// the process's SHARDLM_* variables here. Returns true when the command should
// go on; otherwise it printed usage (--help) or the configuration
// (--print-config) with *exit_code = 0, or the error with *exit_code = 2.
// Positional arguments beyond `max_positional` are errors.
bool ParseCommandLine(FlagSet& flags, int argc, char** argv, size_t max_positional, int* exit_code);
// The same for any program: its flags from argv[first..], errors prefixed
// with `program` and ": " (nothing when empty: a benchmark, whose messages
// name it already).
bool ParseArguments(FlagSet& flags, int argc, char** argv, int first, const std::string& program,
                    size_t max_positional, int* exit_code);

// "1,2,3" -> {1, 2, 3}; InvalidArgument naming `flag` otherwise.
absl::Status ParseIdList(const std::string& flag, const std::string& text, std::vector<int32_t>* out);

}  // namespace shardlm
