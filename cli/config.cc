#include "cli/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/url_password.h"

extern char** environ;

namespace shardlm {

const char* const kReservedEnvVars[2] = {"SHARDLM_INTERNAL_TOKEN", "SHARDLM_NPM_DIR"};

namespace {

using Kind = FlagSpec::Kind;

absl::Status Bad(const std::string& message) { return absl::InvalidArgumentError(message); }

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

const FlagSpec* Find(const std::vector<FlagSpec>& specs, const std::string& name) {
  for (const FlagSpec& s : specs) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::vector<std::string> Names(const std::vector<FlagSpec>& specs) {
  std::vector<std::string> names;
  names.reserve(specs.size());
  for (const FlagSpec& s : specs) names.push_back(s.name);
  return names;
}

// "serve.yaml:3", or "serve.yaml" where yaml-cpp knows no line.
std::string Where(const std::string& path, const YAML::Mark& mark) {
  return mark.line >= 0 ? absl::StrCat(path, ":", mark.line + 1) : path;
}

const char* Shape(const YAML::Node& n) {
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  if (n.IsScalar()) return "a single value";
  return "nothing";
}

// A value as YAML that reads back as the same text (strings quoted where
// plain text would change meaning).
std::string Scalar(const FlagSpec& spec, const std::string& value) {
  if (spec.kind != Kind::kString) return value;
  YAML::Emitter out;
  out << value;
  return out.c_str();
}

// Optimal string alignment distance: edits, with a swap of neighbours as one.
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] =
          std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::string ClosestName(const std::string& name, const std::vector<std::string>& names) {
  std::string best;
  size_t best_distance = 0;
  for (const std::string& candidate : names) {
    const size_t d = EditDistance(name, candidate);
    if (d * 3 > std::max(name.size(), candidate.size())) continue;  // too far to be a typo
    if (best.empty() || d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

absl::StatusOr<std::map<std::string, std::string>> ReadConfigFile(const std::string& path,
                                                                  const std::vector<FlagSpec>& specs) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return Bad(absl::StrCat("cannot read --config file '", path, "': it is a directory"));
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  if (in) text << in.rdbuf();
  if (!in || in.bad()) {
    return Bad(absl::StrCat("cannot read --config file '", path, "': ", std::strerror(errno)));
  }
  YAML::Node root;
  try {
    root = YAML::Load(text.str());
  } catch (const YAML::Exception& e) {
    return Bad(absl::StrCat(Where(path, e.mark), ": not valid YAML: ", e.msg));
  }
  std::map<std::string, std::string> out;
  if (root.IsNull()) return out;  // an empty file sets nothing
  if (!root.IsMap()) {
    return Bad(absl::StrCat(Where(path, root.Mark()),
                            ": expected 'key: value' lines (like 'kv-cache-mb: 512'), got ", Shape(root)));
  }
  std::map<std::string, int> lines;  // name -> line it was set on
  for (const auto& entry : root) {
    const YAML::Node& k = entry.first;
    const YAML::Node& v = entry.second;
    const std::string where = Where(path, k.Mark());
    if (!k.IsScalar()) return Bad(absl::StrCat(where, ": a key must be a setting's name, got ", Shape(k)));
    const std::string key = k.Scalar();
    std::string name = key;
    std::replace(name.begin(), name.end(), '_', '-');  // kv_cache_mb is kv-cache-mb
    const FlagSpec* spec = Find(specs, name);
    if (spec == nullptr) {
      const std::string near = ClosestName(name, Names(specs));
      return Bad(absl::StrCat(where, ": unknown key '", key, "'",
                              near.empty() ? "" : absl::StrCat(" (did you mean ", near, "?)")));
    }
    if (auto [it, fresh] = lines.emplace(name, k.Mark().line + 1); !fresh) {
      return Bad(absl::StrCat(where, ": ", key, " is set twice (also on line ", it->second, ")"));
    }
    if (v.IsNull()) continue;  // "key:" or "key: ~" leaves the setting to the default
    if (!v.IsScalar()) return Bad(absl::StrCat(where, ": ", key, " must be a single value, got ", Shape(v)));
    std::string value = spec->kind == Kind::kBool ? Lower(v.Scalar()) : v.Scalar();
    if (absl::Status st = spec->Validate(&value); !st.ok()) {
      return Bad(absl::StrCat(where, ": ", key, " ", st.message()));
    }
    out[name] = value;
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> ReadConfigEnvironment(
    const std::string& command, const std::map<std::string, std::string>& env,
    const std::vector<FlagSpec>& specs) {
  std::map<std::string, std::string> out;
  for (const FlagSpec& s : specs) {
    const std::string var = s.EnvName();
    for (const char* reserved : kReservedEnvVars) {
      if (var == reserved) {
        return absl::InternalError(absl::StrCat(command, ": the setting ", s.name, " would be read from ",
                                                var, ", which main() reads for itself; rename the setting"));
      }
    }
    auto it = env.find(var);
    if (it == env.end()) continue;
    std::string value = it->second;
    if (s.kind == Kind::kBool) {
      value = Lower(value);
      if (value == "1" || value == "0") value = value == "1" ? "true" : "false";
      if (value != "true" && value != "false") {
        return Bad(absl::StrCat(command, ": ", var, " must be 1, 0, true or false, got '", it->second, "'"));
      }
    }
    if (absl::Status st = s.Validate(&value); !st.ok()) {
      return Bad(absl::StrCat(command, ": ", var, " ", st.message()));
    }
    out[s.name] = value;
  }
  return out;
}

std::map<std::string, std::string> ShardlmEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (entry.rfind("SHARDLM_", 0) == 0 && eq != std::string::npos) {
      env[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
  }
  return env;
}

std::string RenderConfig(const FlagSet& flags) {
  std::vector<std::pair<std::string, std::string>> rows;  // (line, where it came from)
  for (const FlagSpec& s : flags.specs()) {
    if (flags.Has(s.name)) {
      // A URL's password is never printed (give it in PGPASSWORD or ~/.pgpass instead).
      rows.emplace_back(absl::StrCat(s.name, ": ", Scalar(s, WithoutUrlPassword(flags.GetString(s.name)))),
                        flags.SourceLabel(s.name));
    } else if (s.required) {
      rows.emplace_back(absl::StrCat("# ", s.name, ":"), "required, not set");
    } else if (s.kind == Kind::kString && s.default_value.empty()) {
      rows.emplace_back(absl::StrCat("# ", s.name, ":"), "default (unset)");
    } else {
      rows.emplace_back(absl::StrCat("# ", s.name, ": ", Scalar(s, s.default_value)), "default");
    }
  }
  size_t width = 0;
  for (const auto& row : rows) width = std::max(width, std::min<size_t>(row.first.size(), 40));
  std::string out = absl::StrCat("# shardlm ", flags.command(),
                                 ": the effective configuration (--config reads it back).\n"
                                 "# Settings at their defaults are commented out.\n");
  for (const auto& [line, source] : rows) {
    out += line;
    out.append(line.size() < width ? width - line.size() : 0, ' ');
    out += "  # " + source + "\n";
  }
  return out;
}

}  // namespace shardlm
