// The flags several commands declare alike (commands.h): the model and its
// storage, the device, the collectives and the internal channel's security.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/grpc_security.h"
#include "common/logging.h"
#include "common/status.h"
#include "model/device.h"

namespace shardlm {

void AddInternalSecurityFlags(FlagSet& f, bool insecure_flag, InternalSecurityFlags* out) {
  f.String("internal-token-file", "shared secret every coordinator-worker call carries").To(&out->token_file);
  f.String("internal-tls-cert", "PEM certificate of this side (its server and its client identity)")
      .To(&out->tls.cert);
  f.String("internal-tls-key", "PEM private key for --internal-tls-cert").To(&out->tls.key);
  f.String("internal-tls-ca", "PEM CA that signed the other side's certificates (mutual TLS)")
      .To(&out->tls.client_ca);
  if (insecure_flag) {
    f.Bool("insecure-internal", "run without a token or TLS (trusted networks only)").To(&out->insecure);
  }
}

absl::StatusOr<InternalSecurity> ReadInternalSecurity(const InternalSecurityFlags& flags,
                                                      std::string fallback_token) {
  InternalSecurity s;
  s.tls = flags.tls;
  if (flags.token_file) {
    SHARDLM_ASSIGN_OR_RETURN(s.token, ReadTokenFile(*flags.token_file, "--internal-token-file"));
  } else {
    s.token = std::move(fallback_token);
  }
  if (s.token.empty() && !s.tls.enabled() && !flags.insecure) {
    return absl::InvalidArgumentError(
        "the coordinator-worker channel needs --internal-token-file or --internal-tls-cert/"
        "--internal-tls-key/--internal-tls-ca, so that only the group's members can register and run "
        "steps (or --insecure-internal on a trusted network)");
  }
  return s;
}

void AddModelFlags(FlagSet& f, ModelFlags* out) {
  f.String("model", "checkpoint directory (config.json, *.safetensors, tokenizer.json) or a .gguf file")
      .To(&out->model);
  f.String("server", "use a running shardlm server at HOST:PORT instead of loading the model")
      .To(&out->server);
  f.String("prompt", "prompt text").To(&out->prompt);
  f.String("prompt-ids", "prompt token ids, comma-separated").To(&out->prompt_ids);
  AddEngineFlags(f, &out->engine);
  AddDeviceFlags(f, &out->device, /*warmup_tokens=*/0);  // one request: a warm-up would only delay it
  f.Int("tp", "tensor-parallel worker processes to start for this call", 1, 1, 64).To(&out->tp);
  AddCollectivesFlag(f, &out->collectives);
  f.Bool("json", "print one JSON object").To(&out->json);
}

void AddEngineFlags(FlagSet& f, EngineFlags* out) {
  f.String("dtype", "compute dtype", false, "auto", {"auto", "f32", "bf16"}).To(&out->dtype);
  AddStorageFlags(f, &out->storage);
  f.Int("kv-cache-mb", "KV cache budget per rank in MiB", 256, 1, 1 << 20).To(&out->kv_cache_mb);
  f.Int("max-batch-tokens", "tokens per engine step", 2048, 1, 1 << 20).To(&out->max_batch_tokens);
  f.String(
       "speculative",
       "speculative decoding: none, ngram (prompt lookup: the tokens that followed the last earlier "
       "occurrence of the sequence's last 1-4 tokens are proposed and verified in one pass; the output is "
       "the same as without, greedy or sampled), or draft (--draft-model proposes greedily)",
       false, "none", {"none", "ngram", "draft"})
      .To(&out->speculative);
  f.String(
       "draft-model",
       "speculative decoding's draft model (a checkpoint directory or .gguf with the target's tokenizer), "
       "run in this process; implies --speculative draft")
      .To(&out->draft_model);
  f.String("draft-weights",
           "the draft model's --weights (default: --weights); q4_0 requantizes its projections and head at "
           "load, which makes each proposal cheaper to draft (docs/speculative_decoding.md)",
           false, "", {"auto", "blocks", "dense", "q8_0", "q4_0", "q4_1", "q4_k", "q5_k", "q6_k"})
      .To(&out->draft_weights);
  f.Int("draft-lookup-min",
        "with --draft-model: prompt lookup proposes first where the sequence's last N or more tokens "
        "occurred earlier (a copied passage, an edited function: no draft passes), the draft elsewhere; "
        "0: the draft alone",
        3, 0, 16)
      .To(&out->draft_lookup_min);
  f.Float("draft-p-min",
          "with --draft-model: a sequence's proposals end before the first token the draft gives less than "
          "this probability (as llama.cpp's --draft-p-min); 0: the proposal length alone decides",
          0, 0, 1)
      .To(&out->draft_p_min);
  f.Int("speculative-tokens", "with --speculative: tokens proposed per step at most", 5, 1, 16)
      .To(&out->speculative_tokens);
  f.Int("speculative-max-batch",
        "with --speculative: speculate only in steps of at most this many running sequences (past it the "
        "proposals' rows cost more than they save; docs/benchmarks.md); 0: 2 with prompt lookup, 1 with a "
        "draft model (the crossovers measured on a CPU)",
        0, 0, 65536)
      .To(&out->speculative_max_batch);
  f.Int("speculative-max-rows",
        "with --speculative: a step's decoding sequences and proposals together at most (proposals are "
        "nearly free while a step is bound by reading the weights; on a CPU that holds to about 8 rows)",
        8, 2, 65536)
      .To(&out->speculative_max_rows);
}

void ApplySpeculationFlags(const EngineFlags& engine, Engine::Options* options) {
  using Method = Engine::Options::Speculation::Method;
  options->speculation.method = engine.speculative == "ngram"                         ? Method::kNgram
                                : engine.speculative == "draft" || engine.draft_model ? Method::kDraft
                                                                                      : Method::kNone;
  options->speculation.tokens = static_cast<int32_t>(engine.speculative_tokens);
  options->speculation.max_batch = engine.speculative_max_batch > 0
                                       ? static_cast<int32_t>(engine.speculative_max_batch)
                                   : options->speculation.method == Method::kDraft ? 1
                                                                                   : 2;
  options->speculation.max_rows = static_cast<int32_t>(engine.speculative_max_rows);
  options->speculation.lookup_min_n = static_cast<int32_t>(engine.draft_lookup_min);
}

void AddSchedulingFlags(FlagSet& f, SchedulingFlags* out) {
  f.Int("max-num-seqs", "sequences running at once; more wait in the queue", 256, 1, 65536)
      .To(&out->max_num_seqs);
  f.String("policy",
           "scheduling: continuous (admit at every step) or static (batch to completion; a baseline)", false,
           "continuous", {"continuous", "static"})
      .To(&out->policy);
  f.Bool("no-overlap-steps",
         "wait for each step's tokens before sending the next (default: the next step is queued on "
         "the workers while one runs)")
      .To(&out->no_overlap_steps);
}

void ApplyWorkerFlags(const EngineFlags& engine, const DeviceFlags& device, WorkerGroupOptions* o) {
  o->dtype = engine.dtype;
  o->weights = engine.storage.weights;
  o->kv_dtype = engine.storage.kv_dtype;
  o->kv_cache_bytes = engine.kv_cache_mb << 20;
  o->device = device.device;
  o->cuda_graph_max_batch = device.cuda_graph_max_batch;
  o->warmup_tokens = device.warmup_tokens;
}

absl::Status ApplyWorkerFlags(const EngineFlags& engine, const DeviceFlags& device, RankWorkerOptions* o) {
  SHARDLM_RETURN_IF_ERROR(SetRankStorage(engine.dtype, engine.storage.weights, engine.storage.kv_dtype, o));
  SHARDLM_ASSIGN_OR_RETURN(o->device, ResolveDevice(device.device));
  o->kv_cache_bytes = engine.kv_cache_mb << 20;
  o->cuda_graph_max_batch = device.cuda_graph_max_batch;
  o->warmup_tokens = device.warmup_tokens;
  return absl::OkStatus();
}

void ApplySchedulingFlags(const SchedulingFlags& scheduling, const EngineFlags& engine,
                          Engine::Options* options) {
  options->max_batch_tokens = engine.max_batch_tokens;
  ApplySpeculationFlags(engine, options);
  options->max_num_seqs = scheduling.max_num_seqs;
  // The flag's choices are the policies' names: parsed once, here.
  CHECK(Scheduler::ParsePolicy(scheduling.policy, &options->policy).ok())
      << "unknown policy " << scheduling.policy;
  options->overlap_steps = !scheduling.no_overlap_steps;
}

void AddStorageFlags(FlagSet& f, StorageFlags* out) {
  f.String(
       "weights",
       "the projections' weights: auto (as the file has them: a GGUF's Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
       "Q4_K, Q5_K and Q6_K blocks stay quantized on the CPU, the embedding's too; Q2_K and Q3_K are "
       "dequantized at load; on a GPU every format is), blocks (the file's blocks kept on either device: "
       "on a GPU those formats too, for its few-row product, docs/gpu_quantized.md), dense (the compute "
       "dtype), or q8_0, q4_0, q4_1, q4_k, q5_k, q6_k (quantized at load where the file has another; on a "
       "GPU kept in blocks too)",
       false, "auto", {"auto", "blocks", "dense", "q8_0", "q4_0", "q4_1", "q4_k", "q5_k", "q6_k"})
      .To(&out->weights);
  f.String("kv-dtype",
           "the KV cache's dtype: auto (the compute dtype), f32 or bf16; bf16 under f32 compute halves the "
           "cache's "
           "bytes (twice the tokens in --kv-cache-mb) and rounds q, k and v to bf16 for attention (CPU only)",
           false, "auto", {"auto", "f32", "bf16"})
      .To(&out->kv_dtype);
}

void AddDeviceFlags(FlagSet& f, DeviceFlags* out, int64_t warmup_tokens) {
  f.String(
       "device",
       "compute device: auto (cuda when built with CUDA and a GPU is visible), cpu, cuda (rank r: GPU r mod "
       "the visible count) or cuda:N",
       false, "auto")
      .To(&out->device);
  f.Int("cuda-graph-max-batch",
        "on a GPU, steps of up to this many tokens (decodes) run on CUDA graphs captured at start-up, one "
        "per batch-size bucket; 0: every step eagerly",
        64, 0, 1024)
      .To(&out->cuda_graph_max_batch);
  f.Int("warmup-tokens",
        "each rank ends loading with a prompt step of this many tokens and a decode step, so the first "
        "request does not pay for cold memory and thread start-up; 0: none",
        warmup_tokens, 0, 1 << 16)
      .To(&out->warmup_tokens);
}

void AddCollectivesFlag(FlagSet& f, std::string* out) {
  f.String("collectives",
           "auto: NCCL between GPU ranks; between CPU ranks shared memory when every rank can map one "
           "segment (one host), else Gloo. gloo: CPU ranks always use Gloo. host: GPU ranks too use the "
           "CPU collectives, staged through host memory, so several ranks can share one GPU (slow, no "
           "CUDA graphs: for tests). nccl: as auto, and a GPU rank alone still runs its collectives "
           "through NCCL (for tests)",
           false, "auto", {"auto", "gloo", "host", "nccl"})
      .To(out);
}

absl::Status CheckLocalGpus(const std::string& device, int tp, const std::string& collectives) {
  SHARDLM_ASSIGN_OR_RETURN(c10::Device d, ResolveDevice(device, 0));
  if (!d.is_cuda()) return absl::OkStatus();
  const int gpus = VisibleCudaDevices();
  if (device == "cuda" || device == "auto") {
    if (tp > gpus && collectives != "host") {
      return absl::FailedPreconditionError(
          absl::StrCat("--tp ", tp, " --device ", device, ": one GPU per rank needed, ", gpus,
                       " visible (--collectives host shares one GPU between ranks)"));
    }
  } else if (tp > 1 && collectives != "host") {
    return absl::InvalidArgumentError(absl::StrCat("--device ", device, " names one GPU; --tp ", tp,
                                                   " needs one per rank: use --device cuda"));
  }
  return absl::OkStatus();
}

}  // namespace shardlm
