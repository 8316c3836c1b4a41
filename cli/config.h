// The sources of a config-enabled command's settings other than its command
// line: a YAML file (--config), SHARDLM_* environment variables, and the
// --print-config rendering of the result (docs/configuration.md).
//
// A file is a flat mapping whose keys are the flag names (dashes or
// underscores); a variable is SHARDLM_ plus the name in upper case with
// underscores:
//
//   # serve.yaml                      # the same through the environment
//   model: /models/llama-3-8b         SHARDLM_MODEL=/models/llama-3-8b
//   kv-cache-mb: 2048                 SHARDLM_KV_CACHE_MB=2048
//   no-reflection: true               SHARDLM_NO_REFLECTION=1
//
// Both readers check every value they find against the FlagSet's table, so a
// mistake is reported even where a flag would override it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/flags.h"

namespace shardlm {

// Variables that main() reads for itself (a secret, a fixture path); no
// setting may be named so that its variable is one of these.
extern const char* const kReservedEnvVars[2];

// The settings the YAML file at `path` sets, {name: canonical value}. Errors
// name the file, the line and the key: "serve.yaml:3: kv-cache-mb must be in
// [1, 1048576], got 0", "serve.yaml:5: unknown key 'kv-cahce-mb' (did you mean
// kv-cache-mb?)". A key with an empty or ~ value sets nothing.
absl::StatusOr<std::map<std::string, std::string>> ReadConfigFile(const std::string& path,
                                                                  const std::vector<FlagSpec>& specs);

// The settings `env` sets through SHARDLM_<NAME> variables, {name: canonical
// value}; other variables are ignored. Bools take 1/0/true/false. Errors name
// the variable: "serve: SHARDLM_TP must be in [1, 64], got 0".
absl::StatusOr<std::map<std::string, std::string>> ReadConfigEnvironment(
    const std::string& command, const std::map<std::string, std::string>& env,
    const std::vector<FlagSpec>& specs);

// The process's SHARDLM_* variables.
std::map<std::string, std::string> ShardlmEnvironment();

// The effective configuration as YAML that --config reads back: every
// setting in table order, each with a comment saying where its value came
// from. Settings left at their defaults are commented out (a default written
// as a value would count as set when read back: --rank would be pinned,
// --metrics-port switched on):
//
//   model: /models/m                # flag
//   tp: 2                           # env SHARDLM_TP
//   kv-cache-mb: 512                # file serve.yaml
//   # host: 127.0.0.1               # default
//   # tls-cert:                     # default (unset)
std::string RenderConfig(const FlagSet& flags);

// The name among `names` closest to the misspelt `name` (at most about one
// edit in three characters away), or "" when none is close.
std::string ClosestName(const std::string& name, const std::vector<std::string>& names);

}  // namespace shardlm
