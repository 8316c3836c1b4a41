#include "cli/flags.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardlm {

void FlagSet::String(const std::string& name, const std::string& help, bool required,
                     const std::string& default_value, std::vector<std::string> choices) {
  specs_[name] = Spec{Kind::kString, help, required, default_value, std::move(choices)};
  order_.push_back(name);
}

void FlagSet::Int(const std::string& name, const std::string& help, int64_t def, int64_t min, int64_t max) {
  Spec s{Kind::kInt, help, false, std::to_string(def), {}};
  s.min = static_cast<double>(min);
  s.max = static_cast<double>(max);
  specs_[name] = s;
  order_.push_back(name);
}

void FlagSet::Float(const std::string& name, const std::string& help, double def, double min, double max,
                    bool min_exclusive) {
  std::ostringstream d;
  d << def;
  Spec s{Kind::kFloat, help, false, d.str(), {}};
  s.min = min;
  s.max = max;
  s.min_exclusive = min_exclusive;
  specs_[name] = s;
  order_.push_back(name);
}

void FlagSet::Bool(const std::string& name, const std::string& help) {
  specs_[name] = Spec{Kind::kBool, help, false, "false", {}};
  order_.push_back(name);
}

absl::Status FlagSet::Check(const std::string& name, const Spec& spec, const std::string& value) const {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(command_, ": --", name, " ", why));
  };
  if (spec.kind == Kind::kString) {
    if (!spec.choices.empty() &&
        std::find(spec.choices.begin(), spec.choices.end(), value) == spec.choices.end()) {
      return bad(absl::StrCat("must be one of ", absl::StrJoin(spec.choices, "|"), ", got '", value, "'"));
    }
    return absl::OkStatus();
  }
  if (spec.kind == Kind::kBool) return absl::OkStatus();
  char* end = nullptr;
  errno = 0;
  if (spec.kind == Kind::kInt) {
    long long v = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || errno == ERANGE)
      return bad("must be an integer, got '" + value + "'");
    if (v < spec.min || v > spec.max) {
      return bad(absl::StrCat("must be in [", static_cast<int64_t>(spec.min), ", ",
                              static_cast<int64_t>(spec.max), "], got ", v));
    }
    return absl::OkStatus();
  }
  double v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || errno == ERANGE || v != v)
    return bad("must be a number, got '" + value + "'");
  if ((spec.min_exclusive ? v <= spec.min : v < spec.min) || v > spec.max) {
    return bad(absl::StrCat("must be in ", spec.min_exclusive ? "(" : "[", spec.min, ", ", spec.max,
                            "], got ", value));
  }
  return absl::OkStatus();
}

absl::Status FlagSet::Parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      return absl::OkStatus();
    }
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = specs_.find(name);
    if (it == specs_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(command_, ": unknown flag --", name, "\n", Usage()));
    }
    if (it->second.kind == Kind::kBool) {
      if (has_value && value != "true" && value != "false") {
        return absl::InvalidArgumentError(absl::StrCat(command_, ": --", name, " must be true or false"));
      }
      given_[name] = has_value ? value : "true";
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc)
        return absl::InvalidArgumentError(absl::StrCat(command_, ": --", name, " needs a value"));
      value = argv[++i];
    }
    absl::Status st = Check(name, it->second, value);
    if (!st.ok()) return st;
    given_[name] = value;
  }
  for (const auto& [name, spec] : specs_) {
    if (spec.required && !given_.count(name)) {
      return absl::InvalidArgumentError(absl::StrCat(command_, ": --", name, " is required\n", Usage()));
    }
  }
  return absl::OkStatus();
}

std::string FlagSet::GetString(const std::string& name) const {
  auto it = given_.find(name);
  return it != given_.end() ? it->second : specs_.at(name).default_value;
}
int64_t FlagSet::GetInt(const std::string& name) const {
  return std::strtoll(GetString(name).c_str(), nullptr, 10);
}
double FlagSet::GetFloat(const std::string& name) const {
  return std::strtod(GetString(name).c_str(), nullptr);
}
bool FlagSet::GetBool(const std::string& name) const { return GetString(name) == "true"; }

std::string FlagSet::Usage() const {
  std::string out = "usage: shardlm " + command_ + " [flags]\n";
  for (const std::string& name : order_) {
    const Spec& s = specs_.at(name);
    out += absl::StrCat("  --", name, s.kind == Kind::kBool ? "" : " VALUE", "  ", s.help);
    if (s.kind == Kind::kInt || s.kind == Kind::kFloat) {
      out += absl::StrCat(" (", s.min_exclusive ? "(" : "[", s.min, ", ", s.max, "], default ",
                          s.default_value, ")");
    } else if (!s.choices.empty()) {
      out += " (" + absl::StrJoin(s.choices, "|") + ")";
    }
    out += s.required ? " [required]\n" : "\n";
  }
  return out;
}

bool ParseCommandLine(FlagSet& flags, int argc, char** argv, size_t max_positional, int* exit_code) {
  absl::Status st = flags.Parse(argc, argv, 2);
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
    std::fprintf(stderr, "shardlm: %s\n", std::string(st.message()).c_str());
    *exit_code = 2;
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
