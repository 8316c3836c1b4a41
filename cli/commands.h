// The subcommands of the `shardlm` binary. Each returns the process exit code:
// 0 ok, 1 runtime failure, 2 bad flags or values.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/flags.h"
#include "common/grpc_security.h"
#include "constraints/constraint_compiler.h"
#include "coordinator/engine/engine.h"
#include "coordinator/group/worker_group.h"
#include "tokenizer/tokenizer.h"
#include "worker/rank_worker.h"

namespace shardlm {

// Paths main() resolved from the environment and the executable's location.
struct CliEnv {
  std::string npm_dir;                      // .../third_party/npm/node_modules (tokenizer fixtures)
  std::string exe;                          // this binary, to start worker processes
  const std::atomic<bool>* stop = nullptr;  // set by SIGINT / SIGTERM
  std::string internal_token;               // $SHARDLM_INTERNAL_TOKEN (set by serve for its workers)
  std::string state_home;  // $XDG_STATE_HOME/shardlm, else $HOME/.local/state/shardlm; empty: neither is set
};

// Prints `st` to stderr; returns the exit code (2 for InvalidArgument, else 1).
int Fail(const absl::Status& st);

// The flag groups several commands share. Each Add*Flags declares its flags
// once, bound to the fields of its struct (cli/flags.h FlagBinding), so the
// commands read typed fields after parsing, never a flag by its name.

// The coordinator-worker channel's security, shared by `serve`,
// `coordinator` and `worker`: --internal-token-file, --internal-tls-cert,
// --internal-tls-key, --internal-tls-ca and, with `insecure_flag`,
// --insecure-internal.
struct InternalSecurityFlags {
  std::optional<std::string> token_file;
  TlsFiles tls;
  bool insecure = false;
};
void AddInternalSecurityFlags(FlagSet& f, bool insecure_flag, InternalSecurityFlags* out);
struct InternalSecurity {
  std::string token;  // empty: none
  TlsFiles tls;
};
// The channel's security from them. Without a token file, `fallback_token` is
// used (serve's random one, a worker's $SHARDLM_INTERNAL_TOKEN). With neither
// token nor TLS, an InvalidArgument unless --insecure-internal was given.
absl::StatusOr<InternalSecurity> ReadInternalSecurity(const InternalSecurityFlags& flags,
                                                      std::string fallback_token);

// --weights (what the projections' weights are kept as, model/llama_model.h)
// and --kv-dtype (the KV cache's dtype, worker/rank_worker.h).
struct StorageFlags {
  std::string weights;
  std::string kv_dtype;
};
void AddStorageFlags(FlagSet& f, StorageFlags* out);

// The flags of every command that runs an engine in this process (or on its
// own workers): --dtype, the storage flags, --kv-cache-mb, --max-batch-tokens.
struct EngineFlags {
  std::string dtype;
  StorageFlags storage;
  int64_t kv_cache_mb = 0;
  int64_t max_batch_tokens = 0;
  std::string speculative;                   // none, ngram or draft (docs/speculative_decoding.md)
  std::optional<std::string> draft_model;    // --draft-model: implies --speculative draft
  std::optional<std::string> draft_weights;  // --draft-weights: the draft's --weights (default: --weights)
  double draft_p_min = 0;                    // --draft-p-min: proposals end before an unsure token
  int64_t draft_lookup_min = 0;              // --draft-lookup-min: prompt lookup first, the draft elsewhere
  int64_t speculative_tokens = 0;
  int64_t speculative_max_batch = 0;
  int64_t speculative_max_rows = 0;
};
void AddEngineFlags(FlagSet& f, EngineFlags* out);
// --speculative, --speculative-tokens and --speculative-max-batch into the engine's options.
void ApplySpeculationFlags(const EngineFlags& engine, Engine::Options* options);

// --device (model/device.h), the same on every command that computes, with
// --cuda-graph-max-batch and --warmup-tokens. A server warms up by default (its
// first request then costs what later ones do); a one-shot command does not
// (the warm-up would only delay its first token): `warmup_tokens` is the default.
struct DeviceFlags {
  std::string device;
  int64_t cuda_graph_max_batch = 0;
  int64_t warmup_tokens = 0;
};
void AddDeviceFlags(FlagSet& f, DeviceFlags* out, int64_t warmup_tokens = 256);

// The engine and device flags into the options of the workers a group starts
// (the worker protocol carries them in the flags' words; each worker parses them).
void ApplyWorkerFlags(const EngineFlags& engine, const DeviceFlags& device, WorkerGroupOptions* o);
// The same into an in-process rank's options, parsed once here (errors name the flag).
absl::Status ApplyWorkerFlags(const EngineFlags& engine, const DeviceFlags& device, RankWorkerOptions* o);

// The scheduler's flags of serve and batch: --max-num-seqs, --policy,
// --no-overlap-steps; ApplySchedulingFlags puts them (and --max-batch-tokens)
// into the engine's options.
struct SchedulingFlags {
  int32_t max_num_seqs = 0;
  std::string policy;
  bool no_overlap_steps = false;
};
void AddSchedulingFlags(FlagSet& f, SchedulingFlags* out);
void ApplySchedulingFlags(const SchedulingFlags& scheduling, const EngineFlags& engine,
                          Engine::Options* options);

// `--device` for `tp` local workers: a CUDA device needs a GPU per rank
// (rank r takes GPU r), checked before any worker starts.
absl::Status CheckLocalGpus(const std::string& device, int tp, const std::string& collectives);
// --collectives (auto, gloo, host) of worker, serve and the in-process commands with --tp.
void AddCollectivesFlag(FlagSet& f, std::string* out);

// Flags shared by the commands that run the model: --model, --server,
// --prompt, --prompt-ids, the engine's, the device's, --tp, --collectives,
// --json.
struct ModelFlags {
  std::optional<std::string> model;
  std::optional<std::string> server;
  std::optional<std::string> prompt;
  std::optional<std::string> prompt_ids;
  EngineFlags engine;
  DeviceFlags device;
  std::optional<int> tp;  // given: run on that many local worker processes
  std::string collectives;
  bool json = false;
};
void AddModelFlags(FlagSet& f, ModelFlags* out);

// An engine over a checkpoint, plus its tokenizer when present. Without
// --tp the model runs in this process; with --tp N on N worker processes.
struct DraftModel;
struct LocalModel {
  LocalModel();
  LocalModel(LocalModel&&) noexcept;
  ~LocalModel();
  std::unique_ptr<RankWorker> worker;  // in-process
  std::unique_ptr<WorkerGroup> group;  // --tp
  std::unique_ptr<DraftModel> draft;   // --draft-model: in-process, proposing for `engine`
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the directory has none
  // Built on the first constrained request (cli/constraint_flags.h); it
  // calls back into `tokenizer`, so it goes first.
  std::unique_ptr<ConstraintCompiler> compiler;
};
// Opens --model (on --tp workers when given) with `options`; the flags set
// max_batch_tokens.
absl::StatusOr<LocalModel> OpenModel(const ModelFlags& flags, const CliEnv& env,
                                     Engine::Options options = {});

int RunGenerate(int argc, char** argv, const CliEnv& env);
int RunBatch(int argc, char** argv, const CliEnv& env);
int RunScore(int argc, char** argv, const CliEnv& env);
int RunPrefill(int argc, char** argv, const CliEnv& env);
int RunTokenize(int argc, char** argv, const CliEnv& env);
int RunMakeTinyModel(int argc, char** argv, const CliEnv& env);
int RunExportTokenizer(int argc, char** argv, const CliEnv& env);
int RunWorker(int argc, char** argv, const CliEnv& env);
int RunServe(int argc, char** argv, const CliEnv& env);
int RunCoordinator(int argc, char** argv, const CliEnv& env);
// cli/loadgen.cc: a load generator for a running server.
int RunBench(int argc, char** argv, const CliEnv& env);

}  // namespace shardlm
