// The subcommands of the `shardlm` binary. Each returns the process exit code:
// 0 ok, 1 runtime failure, 2 bad flags or values.
#pragma once

#include <atomic>
#include <string>

#include "absl/status/status.h"

namespace shardlm {

// Paths main() resolved from the environment and the executable's location.
struct CliEnv {
  std::string npm_dir;                      // .../third_party/npm/node_modules (tokenizer fixtures)
  std::string exe;                          // this binary, to start worker processes
  const std::atomic<bool>* stop = nullptr;  // set by SIGINT / SIGTERM
  std::string internal_token;               // $SHARDLM_INTERNAL_TOKEN (set by serve for its workers)
};

// Prints `st` to stderr; returns the exit code (2 for InvalidArgument, else 1).
int Fail(const absl::Status& st);

int RunGenerate(int argc, char** argv, const CliEnv& env);
int RunScore(int argc, char** argv, const CliEnv& env);
int RunPrefill(int argc, char** argv, const CliEnv& env);
int RunTokenize(int argc, char** argv, const CliEnv& env);
int RunMakeTinyModel(int argc, char** argv, const CliEnv& env);
int RunWorker(int argc, char** argv, const CliEnv& env);
int RunServe(int argc, char** argv, const CliEnv& env);
int RunCoordinator(int argc, char** argv, const CliEnv& env);

}  // namespace shardlm
