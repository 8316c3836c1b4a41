#include "cli/flags.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/config.h"
#include "common/status.h"

namespace shardlm {
namespace {

using Kind = FlagSpec::Kind;

// An int bound held as a double, back as an int (INT64_MAX comes back as 2^63).
int64_t IntBound(double d) {
  if (d >= 9223372036854775807.0) return INT64_MAX;
  if (d <= -9223372036854775807.0) return INT64_MIN;
  return static_cast<int64_t>(d);
}

std::string Range(const FlagSpec& s) {
  if (s.kind == Kind::kInt) return absl::StrCat("[", IntBound(s.min), ", ", IntBound(s.max), "]");
  return absl::StrCat(s.min_exclusive ? "(" : "[", s.min, ", ", s.max, "]");
}

absl::Status UsageError(const std::string& message) { return absl::InvalidArgumentError(message); }

}  // namespace

std::string FlagSpec::EnvName() const {
  std::string out = "SHARDLM_";
  for (char c : name) out += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

absl::Status FlagSpec::Validate(std::string* value) const {
  const std::string& v = *value;
  char* end = nullptr;
  errno = 0;
  switch (kind) {
    case Kind::kString:
      if (!choices.empty() && std::find(choices.begin(), choices.end(), v) == choices.end()) {
        return UsageError(absl::StrCat("must be one of ", absl::StrJoin(choices, "|"), ", got '", v, "'"));
      }
      return absl::OkStatus();
    case Kind::kBool:
      if (v != "true" && v != "false") return UsageError("must be true or false, got '" + v + "'");
      return absl::OkStatus();
    case Kind::kInt: {
      const int64_t n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || errno == ERANGE) {
        return UsageError("must be an integer, got '" + v + "'");
      }
      if (n < min || n > max) return UsageError(absl::StrCat("must be in ", Range(*this), ", got ", n));
      *value = std::to_string(n);
      return absl::OkStatus();
    }
    case Kind::kFloat: {
      const double d = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || errno == ERANGE || d != d) {
        return UsageError("must be a number, got '" + v + "'");
      }
      if ((min_exclusive ? d <= min : d < min) || d > max) {
        return UsageError(absl::StrCat("must be in ", Range(*this), ", got ", v));
      }
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

std::string FlagSpec::Describe() const {
  std::string out;
  switch (kind) {
    case Kind::kString:
      out = choices.empty() ? "STRING" : absl::StrJoin(choices, "|");
      break;
    case Kind::kInt:
      out = "INT in " + Range(*this);
      break;
    case Kind::kFloat:
      out = "FLOAT in " + Range(*this);
      break;
    case Kind::kBool:
      return "";  // a bare flag
  }
  if (required) {
    out += ", required";
  } else if (!default_value.empty()) {
    out += ", default " + default_value;
  }
  return out;
}

void BindingMismatch(const std::string& command, const std::string& name) {
  std::fprintf(stderr, "%s: --%s is bound to a field that cannot hold its values\n", command.c_str(),
               name.c_str());
  std::abort();
}

FlagBinding FlagSet::Declare(FlagSpec spec) {
  const std::string name = spec.name;
  auto [it, fresh] = index_.emplace(name, specs_.size());
  if (fresh) {
    specs_.push_back(std::move(spec));
  } else {
    specs_[it->second] = std::move(spec);  // a second declaration replaces the first
    bindings_.erase(name);
  }
  return FlagBinding(this, name);
}

void FlagSet::StoreBindings() const {
  for (const auto& [name, store] : bindings_) store(*this);
}

FlagBinding FlagSet::String(const std::string& name, const std::string& help, bool required,
                            const std::string& default_value, std::vector<std::string> choices) {
  return Declare(FlagSpec{name, Kind::kString, help, required, default_value, std::move(choices)});
}

FlagBinding FlagSet::Int(const std::string& name, const std::string& help, int64_t def, int64_t min,
                         int64_t max) {
  FlagSpec s{name, Kind::kInt, help, false, std::to_string(def), {}};
  s.min = static_cast<double>(min);
  s.max = static_cast<double>(max);
  return Declare(std::move(s));
}

FlagBinding FlagSet::Float(const std::string& name, const std::string& help, double def, double min,
                           double max, bool min_exclusive) {
  std::ostringstream d;
  d << def;
  FlagSpec s{name, Kind::kFloat, help, false, d.str(), {}};
  s.min = min;
  s.max = max;
  s.min_exclusive = min_exclusive;
  return Declare(std::move(s));
}

FlagBinding FlagSet::Bool(const std::string& name, const std::string& help) {
  return Declare(FlagSpec{name, Kind::kBool, help, false, "false", {}});
}

const FlagSpec& FlagSet::Spec(const std::string& name) const { return specs_.at(index_.at(name)); }

bool FlagSet::TakesValue(const std::string& name) const {
  auto it = index_.find(name);
  return it != index_.end() ? specs_[it->second].kind != Kind::kBool : config_enabled_ && name == "config";
}

// CLI11 reads "--name=" as "--name" with the next argument as its value;
// here the value is the empty string, as the "=" says.
std::vector<std::string> FlagSet::WithEmptyValues(const std::vector<std::string>& given) const {
  std::vector<std::string> args;
  bool options_ended = false;
  for (const std::string& a : given) {
    options_ended = options_ended || a == "--";
    const size_t eq = a.find('=');
    if (!options_ended && a.rfind("--", 0) == 0 && eq + 1 == a.size() && TakesValue(a.substr(2, eq - 2))) {
      args.push_back(a.substr(0, eq));
      args.push_back("");
    } else {
      args.push_back(a);
    }
  }
  return args;
}

absl::Status FlagSet::UnknownFlag(const std::string& extra) const {
  const std::string flag = extra.substr(0, extra.find('='));
  std::vector<std::string> names = {"help"};
  for (const FlagSpec& s : specs_) names.push_back(s.name);
  if (config_enabled_) names.insert(names.end(), {"config", "print-config"});
  const std::string near =
      ClosestName(flag.substr(std::min(flag.find_first_not_of('-'), flag.size())), names);
  return UsageError(absl::StrCat(command_, ": unknown flag ", flag,
                                 near.empty() ? "" : absl::StrCat(" (did you mean --", near, "?)"),
                                 "; `shardlm ", command_, " --help` lists the flags"));
}

absl::Status FlagSet::ParseArgv(const std::vector<std::string>& given,
                                std::map<std::string, std::string>* flags) {
  CLI::App app("shardlm " + command_);
  app.set_help_flag();  // --help prints Usage(), below
  app.allow_extras();   // unknown flags are reported here, by name
  std::map<std::string, CLI::Option*> options;
  CLI::Option* help = nullptr;
  CLI::Option* config = nullptr;
  CLI::Option* print_config = nullptr;
  std::vector<std::string> positional;
  try {
    for (const FlagSpec& s : specs_) {
      CLI::Option* opt = s.kind == Kind::kBool ? app.add_flag("--" + s.name) : app.add_option("--" + s.name);
      opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a repeated flag: the last one wins
      options[s.name] = opt;
    }
    help = app.add_flag("-h,--help");
    if (config_enabled_) {
      config = app.add_option("--config")->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
      print_config = app.add_flag("--print-config");
    }
    app.add_option("args", positional);
  } catch (const CLI::Error& e) {
    return absl::InternalError(absl::StrCat(command_, ": bad flag table: ", e.what()));
  }
  std::vector<std::string> args = WithEmptyValues(given);
  const std::string last = args.empty() ? "" : args.back();
  std::reverse(args.begin(), args.end());  // CLI11 consumes from the back
  try {
    app.parse(args);
  } catch (const CLI::ArgumentMismatch& e) {
    // An option runs short of values only at the end of the arguments.
    const std::string name = last.substr(0, last.find('='));
    if (name.rfind("--", 0) == 0 && TakesValue(name.substr(2))) {
      return UsageError(absl::StrCat(command_, ": ", name, " needs a value"));
    }
    return UsageError(absl::StrCat(command_, ": ", e.what()));
  } catch (const CLI::ParseError& e) {
    return UsageError(absl::StrCat(command_, ": ", e.what()));
  }
  if (help->count() > 0) {
    help_requested_ = true;
    return absl::OkStatus();
  }
  for (const std::string& extra : app.remaining()) {
    if (extra == "--") continue;  // CLI11 keeps the end-of-flags mark among the extras
    return UnknownFlag(extra);
  }
  for (const auto& [name, opt] : options) {
    if (opt->count() > 0) (*flags)[name] = opt->results().back();
  }
  if (config != nullptr && config->count() > 0) {
    config_given_ = true;
    config_file_ = config->results().back();
  }
  if (print_config != nullptr && print_config->count() > 0) {
    const std::string v = print_config->results().back();
    if (v != "true" && v != "false") {
      return UsageError(absl::StrCat(command_, ": --print-config must be true or false, got '", v, "'"));
    }
    print_config_requested_ = v == "true";
  }
  positional_ = std::move(positional);
  return absl::OkStatus();
}

absl::Status FlagSet::Parse(int argc, char** argv, int first, const std::map<std::string, std::string>& env) {
  std::vector<std::string> args;
  for (int i = first; i < argc; ++i) args.push_back(argv[i]);
  std::map<std::string, std::string> flags;
  SHARDLM_RETURN_IF_ERROR(ParseArgv(args, &flags));
  if (help_requested_) return absl::OkStatus();
  for (const FlagSpec& s : specs_) {
    auto it = flags.find(s.name);
    if (it == flags.end()) continue;
    std::string value = it->second;
    if (absl::Status st = s.Validate(&value); !st.ok()) {
      return UsageError(absl::StrCat(command_, ": --", s.name, " ", st.message()));
    }
    given_[s.name] = Value{value, FlagSource::kFlag};
  }
  if (config_enabled_) {
    // The flags are in; the variables, then the file, fill only what is still unset.
    SHARDLM_ASSIGN_OR_RETURN(auto vars, ReadConfigEnvironment(command_, env, specs_));
    for (auto& [name, value] : vars) given_.emplace(name, Value{value, FlagSource::kEnv});
    if (config_given_) {
      SHARDLM_ASSIGN_OR_RETURN(auto file, ReadConfigFile(config_file_, specs_));
      for (auto& [name, value] : file) given_.emplace(name, Value{value, FlagSource::kFile});
    }
  }
  if (print_config_requested_) return absl::OkStatus();  // shows what is missing instead
  for (const FlagSpec& s : specs_) {
    if (!s.required || given_.count(s.name)) continue;
    return UsageError(absl::StrCat(command_, ": --", s.name, " is required",
                                   config_enabled_
                                       ? absl::StrCat(" (or '", s.name, ":' in the --config file, or ",
                                                      s.EnvName(), " in the environment)")
                                       : ""));
  }
  StoreBindings();
  return absl::OkStatus();
}

std::string FlagSet::GetString(const std::string& name) const {
  auto it = given_.find(name);
  return it != given_.end() ? it->second.text : Spec(name).default_value;
}
int64_t FlagSet::GetInt(const std::string& name) const {
  return std::strtoll(GetString(name).c_str(), nullptr, 10);
}
double FlagSet::GetFloat(const std::string& name) const {
  return std::strtod(GetString(name).c_str(), nullptr);
}
bool FlagSet::GetBool(const std::string& name) const { return GetString(name) == "true"; }

FlagSource FlagSet::source(const std::string& name) const {
  auto it = given_.find(name);
  return it != given_.end() ? it->second.source : FlagSource::kDefault;
}

std::string FlagSet::SourceLabel(const std::string& name) const {
  switch (source(name)) {
    case FlagSource::kFlag:
      return "flag";
    case FlagSource::kEnv:
      return "env " + Spec(name).EnvName();
    case FlagSource::kFile:
      return "file " + config_file_;
    case FlagSource::kDefault:
      break;
  }
  return "default";
}

std::string FlagSet::Usage() const {
  std::string out = absl::StrCat("usage: shardlm ", command_, " [flags]\n");
  if (config_enabled_) {
    out +=
        "Each flag is also a key of the YAML file given with --config and an environment variable,\n"
        "shown in brackets. A flag beats the variable, the variable beats the file, the file beats\n"
        "the default. Bools: true/false in the file, 1/0/true/false in the environment. See\n"
        "docs/configuration.md.\n";
  }
  out += "\n";
  for (const FlagSpec& s : specs_) {
    out += "  --" + s.name;
    if (std::string d = s.Describe(); !d.empty()) out += " " + d;
    if (config_enabled_) out += absl::StrCat("  [", s.name, ", ", s.EnvName(), "]");
    out += "\n      " + s.help + "\n";
  }
  if (config_enabled_) {
    out +=
        "  --config FILE\n"
        "      read settings from a YAML file of 'key: value' lines\n"
        "  --print-config\n"
        "      print the effective configuration as YAML (which --config reads back) and exit\n";
  }
  out +=
      "  -h, --help\n"
      "      print this help and exit\n";
  return out;
}

bool ParseCommandLine(FlagSet& flags, int argc, char** argv, size_t max_positional, int* exit_code) {
  return ParseArguments(flags, argc, argv, 2, "shardlm", max_positional, exit_code);
}

bool ParseArguments(FlagSet& flags, int argc, char** argv, int first, const std::string& program,
                    size_t max_positional, int* exit_code) {
  absl::Status st =
      flags.Parse(argc, argv, first,
                  flags.config_enabled() ? ShardlmEnvironment() : std::map<std::string, std::string>{});
  if (st.ok() && flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    *exit_code = 0;
    return false;
  }
  if (st.ok() && flags.positional().size() > max_positional) {
    st = absl::InvalidArgumentError(absl::StrCat("unexpected argument '", flags.positional()[max_positional],
                                                 "' (quote values that contain spaces)"));
  }
  if (!st.ok()) {
    std::fprintf(stderr, "%s%s%s\n", program.c_str(), program.empty() ? "" : ": ",
                 std::string(st.message()).c_str());
    *exit_code = st.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    return false;
  }
  if (flags.print_config_requested()) {
    std::fputs(RenderConfig(flags).c_str(), stdout);
    *exit_code = 0;
    return false;
  }
  return true;
}

absl::Status ParseIdList(const std::string& flag, const std::string& text, std::vector<int32_t>* out) {
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno == ERANGE || v < 0 || v > INT32_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, " must be comma-separated token ids in [0, 2^31), got '", item, "'"));
    }
    out->push_back(static_cast<int32_t>(v));
  }
  if (out->empty()) return absl::InvalidArgumentError("--" + flag + " must hold at least one token id");
  return absl::OkStatus();
}

}  // namespace shardlm
