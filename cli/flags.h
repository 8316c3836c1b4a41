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
//   ServeFlags o;
//   FlagSet f("serve");
//   f.String("model", "checkpoint directory", /*required=*/true).To(&o.model);
//   f.Int("kv-cache-mb", "KV cache budget per rank in MiB", 256, 1, 1 << 20).To(&o.kv_cache_mb);
//   f.Int("http-port", "...", 0, 1, 65535).To(&o.http_port);  // std::optional: set only when given
//   f.EnableConfig();  // also --config FILE, --print-config, $SHARDLM_KV_CACHE_MB
//   int code = 0;
//   if (!ParseCommandLine(f, argc, argv, 0, &code)) return code;
//   // o.kv_cache_mb holds the effective value now.
//
// Each setting's name is written once, where it is declared; the code after
// Parse reads the option struct, not the FlagSet.
//
// For a config-enabled command a setting's value comes from the first of:
// the command line, the environment, the --config file, the default.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"

namespace shardlm {

// A binding whose field cannot hold its setting: prints the names and aborts.
[[noreturn]] void BindingMismatch(const std::string& command, const std::string& name);

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

class FlagSet;

// What a declaration returns: To binds the setting to a field of an option
// struct, which a successful Parse sets to the effective value (the default
// when no source gave one). A std::optional field is set only when a source
// gave the setting, and reset otherwise. Fields: std::string, bool, an
// integer type wide enough for the setting's range, a floating type.
class FlagBinding {
 public:
  FlagBinding(FlagSet* set, std::string name) : set_(set), name_(std::move(name)) {}
  template <class T>
  void To(T* field);
  template <class T>
  void To(std::optional<T>* field);

 private:
  FlagSet* set_;
  std::string name_;
};

class FlagSet {
 public:
  explicit FlagSet(std::string command) : command_(std::move(command)) {}

  FlagBinding String(const std::string& name, const std::string& help, bool required = false,
                     const std::string& default_value = "", std::vector<std::string> choices = {});
  FlagBinding Int(const std::string& name, const std::string& help, int64_t default_value, int64_t min,
                  int64_t max);
  FlagBinding Float(const std::string& name, const std::string& help, double default_value, double min,
                    double max, bool min_exclusive = false);
  FlagBinding Bool(const std::string& name, const std::string& help);

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

  // The setting's value as a T (see FlagBinding::To).
  template <class T>
  T Get(const std::string& name) const {
    if constexpr (std::is_same_v<T, std::string>) {
      return GetString(name);
    } else if constexpr (std::is_same_v<T, bool>) {
      return GetBool(name);
    } else if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(GetInt(name));
    } else {
      static_assert(std::is_floating_point_v<T>, "a flag binds to a string, bool, integer or float");
      return static_cast<T>(GetFloat(name));
    }
  }

 private:
  friend class FlagBinding;
  struct Value {
    std::string text;
    FlagSource source;
  };
  // Adds the row (a second declaration of a name replaces the first, and
  // drops its binding).
  FlagBinding Declare(FlagSpec spec);
  // Checks that a T holds every value of the setting (a programming error
  // otherwise: aborts), then records the binding.
  template <class T>
  void AddBinding(const std::string& name, std::function<void(const FlagSet&)> store);
  // Stores every bound setting (after a successful Parse).
  void StoreBindings() const;
  const FlagSpec& Spec(const std::string& name) const;
  // The command line (CLI11): flag values as given, positionals, --help,
  // --config, --print-config.
  absl::Status ParseArgv(const std::vector<std::string>& args, std::map<std::string, std::string>* flags);
  // ParseArgv's parts: whether --name takes a value; the arguments with
  // "--name=" as an empty value; the error for a flag nobody declared.
  bool TakesValue(const std::string& name) const;
  std::vector<std::string> WithEmptyValues(const std::vector<std::string>& given) const;
  absl::Status UnknownFlag(const std::string& extra) const;

  std::string command_;
  bool config_enabled_ = false;
  std::vector<FlagSpec> specs_;
  std::map<std::string, size_t> index_;  // name -> position in specs_
  std::map<std::string, Value> given_;
  std::map<std::string, std::function<void(const FlagSet&)>> bindings_;
  std::vector<std::string> positional_;
  bool config_given_ = false;
  std::string config_file_;  // as given to --config
  bool help_requested_ = false;
  bool print_config_requested_ = false;
};

template <class T>
void FlagSet::AddBinding(const std::string& name, std::function<void(const FlagSet&)> store) {
  const FlagSpec& spec = Spec(name);
  bool fits = true;
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    fits = spec.kind == FlagSpec::Kind::kInt &&
           spec.min >= static_cast<double>(std::numeric_limits<T>::lowest()) &&
           spec.max <= static_cast<double>(std::numeric_limits<T>::max());
  } else if constexpr (std::is_same_v<T, bool>) {
    fits = spec.kind == FlagSpec::Kind::kBool;
  } else if constexpr (std::is_floating_point_v<T>) {
    fits = spec.kind == FlagSpec::Kind::kFloat;
  } else {
    fits = spec.kind == FlagSpec::Kind::kString;
  }
  if (!fits) BindingMismatch(command_, name);
  bindings_[name] = std::move(store);
}

template <class T>
void FlagBinding::To(T* field) {
  const std::string name = name_;
  set_->AddBinding<T>(name, [field, name](const FlagSet& f) { *field = f.Get<T>(name); });
}

template <class T>
void FlagBinding::To(std::optional<T>* field) {
  const std::string name = name_;
  set_->AddBinding<T>(name, [field, name](const FlagSet& f) {
    if (f.Has(name)) {
      *field = f.Get<T>(name);
    } else {
      field->reset();
    }
  });
}

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
