#include "formats/tiny_model.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace shardlm {
namespace {

using json = nlohmann::json;

struct TokenizerFacts {
  int64_t vocab_size;
  int64_t bos;
  std::vector<int64_t> eos;
};

TokenizerFacts FactsFor(const std::string& tokenizer) {
  if (tokenizer == "llama3") return {128256, 128000, {128001, 128009}};
  return {151936, 151643, {151645, 151643}};  // qwen3
}

uint16_t ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

class TensorWriter {
 public:
  TensorWriter(uint64_t seed, DType dtype, bool fast) : rng_(seed), seed_(seed), dtype_(dtype), fast_(fast) {}

  // Normal(mean, std) values of the given shape (uniform ones with that mean
  // and std when fast).
  void Add(const std::string& name, std::vector<int64_t> shape, double mean, double std) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    OwnedTensor t{name, dtype_, shape, {}};
    t.bytes.resize(n * DTypeSize(dtype_));
    if (fast_) {
      FillFast(t, n, static_cast<float>(mean), static_cast<float>(std));
    } else {
      std::normal_distribution<float> dist(static_cast<float>(mean), static_cast<float>(std));
      for (int64_t i = 0; i < n; ++i) Put(t, i, dist(rng_));
    }
    tensors_.push_back(std::move(t));
  }
  std::vector<OwnedTensor>& tensors() { return tensors_; }

 private:
  void Put(OwnedTensor& t, int64_t i, float v) const {
    if (dtype_ == DType::kF32) {
      std::memcpy(&t.bytes[i * 4], &v, 4);
    } else {
      const uint16_t b = ToBf16(v);
      std::memcpy(&t.bytes[i * 2], &b, 2);
    }
  }

  // splitmix64 of (seed, tensor, element) -> uniform on [mean - a, mean + a),
  // a = std * sqrt(3); threads take contiguous ranges.
  void FillFast(OwnedTensor& t, int64_t n, float mean, float std) {
    const uint64_t base = seed_ * 0x9E3779B97F4A7C15ull + tensors_.size() * 0xD1B54A32D192ED03ull;
    const float a = std * 1.7320508f;
    const int64_t threads = std::max(1u, std::thread::hardware_concurrency());
    std::vector<std::thread> pool;
    for (int64_t w = 0; w < threads; ++w) {
      pool.emplace_back([&, w] {
        for (int64_t i = n * w / threads; i < n * (w + 1) / threads; ++i) {
          uint64_t z = base + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
          z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
          z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
          z ^= z >> 31;
          const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
          Put(t, i, mean + a * (2.0f * u - 1.0f));
        }
      });
    }
    for (auto& th : pool) th.join();
  }

  std::mt19937_64 rng_;
  uint64_t seed_;
  DType dtype_;
  bool fast_;
  std::vector<OwnedTensor> tensors_;
};

const char* ArchitectureName(Arch arch) {
  switch (arch) {
    case Arch::kLlama:
      return "LlamaForCausalLM";
    case Arch::kMistral:
      return "MistralForCausalLM";
    case Arch::kQwen2:
      return "Qwen2ForCausalLM";
    case Arch::kQwen3:
      return "Qwen3ForCausalLM";
    case Arch::kGemma3:  // never written (--arch offers the others): Gemma 3 is read from GGUF only
      break;
  }
  return "?";
}

// The checkpoint's sizes, checked, and the tokenizer's facts.
struct TinySizes {
  TokenizerFacts facts;
  int64_t vocab = 0, head_dim = 0;
};

absl::StatusOr<TinySizes> SizesOf(const TinyModelOptions& o) {
  const bool has_tokenizer = !o.tokenizer.empty();
  if (has_tokenizer && o.tokenizer != "llama3" && o.tokenizer != "qwen3") {
    return absl::InvalidArgumentError("--tokenizer must be llama3 or qwen3, got '" + o.tokenizer + "'");
  }
  TinySizes t;
  t.facts = has_tokenizer ? FactsFor(o.tokenizer) : TokenizerFacts{512, 0, {1}};
  t.vocab = o.vocab_size > 0 ? o.vocab_size : t.facts.vocab_size;
  if (has_tokenizer && t.vocab < t.facts.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("--vocab-size ", t.vocab, " is smaller than the ",
                                                   o.tokenizer, " tokenizer's ", t.facts.vocab_size));
  }
  if (!has_tokenizer) t.facts.eos = {t.vocab - 1};
  const int64_t H = o.hidden_size, nh = o.num_heads, nkv = o.num_kv_heads;
  t.head_dim = o.head_dim > 0 ? o.head_dim : (nh > 0 ? H / nh : 0);
  if (H <= 0 || o.num_layers <= 0 || nh <= 0 || nkv <= 0 || o.intermediate_size <= 0 || t.vocab <= 0 ||
      t.head_dim <= 0 || t.head_dim % 2 != 0 || nh % nkv != 0) {
    return absl::InvalidArgumentError(
        "sizes must be positive, head_dim even, and num_heads a multiple of num_kv_heads");
  }
  if (o.shards < 1 || o.shards > 99) return absl::InvalidArgumentError("--shards must be in [1, 99]");
  return t;
}

// config.json and generation_config.json.
absl::Status WriteConfigs(const std::string& dir, const TinyModelOptions& o, const TinySizes& t) {
  json cfg = {{"architectures", {ArchitectureName(o.arch)}},
              {"model_type", ArchName(o.arch)},
              {"vocab_size", t.vocab},
              {"hidden_size", o.hidden_size},
              {"intermediate_size", o.intermediate_size},
              {"num_hidden_layers", o.num_layers},
              {"num_attention_heads", o.num_heads},
              {"num_key_value_heads", o.num_kv_heads},
              {"head_dim", t.head_dim},
              {"max_position_embeddings", o.max_position_embeddings},
              {"rms_norm_eps", 1e-6},
              {"rope_theta", 10000.0},
              {"hidden_act", "silu"},
              {"tie_word_embeddings", o.tie_embeddings},
              {"torch_dtype", o.dtype == DType::kF32 ? "float32" : "bfloat16"},
              {"bos_token_id", t.facts.bos},
              {"eos_token_id", t.facts.eos.front()}};
  if (o.arch == Arch::kMistral) cfg["sliding_window"] = o.sliding_window;
  if (o.arch == Arch::kQwen2) cfg["use_sliding_window"] = false;
  if (o.rope_scaling_llama3) {
    cfg["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", 8.0},
                           {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0},
                           {"original_max_position_embeddings", 64}};
    cfg["rope_theta"] = 500000.0;
  }
  SHARDLM_RETURN_IF_ERROR(WriteStringToFile(dir + "/config.json", cfg.dump(2) + "\n"));
  json gen = {{"bos_token_id", t.facts.bos}, {"eos_token_id", t.facts.eos}};
  return WriteStringToFile(dir + "/generation_config.json", gen.dump(2) + "\n");
}

// The weights, drawn in checkpoint order. Scales: inputs to every projection
// are RMS-normalised (unit per element), so 1/sqrt(fan_in) keeps activations
// near unit scale; output projections are drawn 2x larger so each block
// outweighs the unit-scale embedding.
void DrawWeights(const TinyModelOptions& o, const TinySizes& t, TensorWriter& w) {
  const int64_t H = o.hidden_size, nh = o.num_heads, nkv = o.num_kv_heads, d = t.head_dim;
  const int64_t I = o.intermediate_size;
  const double in_std = 1.0 / std::sqrt(static_cast<double>(H));
  w.Add("model.embed_tokens.weight", {t.vocab, H}, 0.0, 1.0);
  for (int64_t i = 0; i < o.num_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    w.Add(p + "input_layernorm.weight", {H}, 1.0, 0.1);
    w.Add(p + "self_attn.q_proj.weight", {nh * d, H}, 0.0, in_std);
    w.Add(p + "self_attn.k_proj.weight", {nkv * d, H}, 0.0, in_std);
    w.Add(p + "self_attn.v_proj.weight", {nkv * d, H}, 0.0, in_std);
    if (o.arch == Arch::kQwen2) {
      w.Add(p + "self_attn.q_proj.bias", {nh * d}, 0.0, 0.1);
      w.Add(p + "self_attn.k_proj.bias", {nkv * d}, 0.0, 0.1);
      w.Add(p + "self_attn.v_proj.bias", {nkv * d}, 0.0, 0.1);
    }
    if (o.arch == Arch::kQwen3) {
      w.Add(p + "self_attn.q_norm.weight", {d}, 1.0, 0.1);
      w.Add(p + "self_attn.k_norm.weight", {d}, 1.0, 0.1);
    }
    w.Add(p + "self_attn.o_proj.weight", {H, nh * d}, 0.0, 2.0 / std::sqrt(static_cast<double>(nh * d)));
    w.Add(p + "post_attention_layernorm.weight", {H}, 1.0, 0.1);
    w.Add(p + "mlp.gate_proj.weight", {I, H}, 0.0, in_std);
    w.Add(p + "mlp.up_proj.weight", {I, H}, 0.0, in_std);
    w.Add(p + "mlp.down_proj.weight", {H, I}, 0.0, 2.0 / std::sqrt(static_cast<double>(I)));
  }
  w.Add("model.norm.weight", {H}, 1.0, 0.1);
  if (!o.tie_embeddings) w.Add("lm_head.weight", {t.vocab, H}, 0.0, 4.0 * in_std);
}

// One model.safetensors, or `shards` files and their index (tensors dealt
// round-robin).
absl::Status WriteShards(const std::string& dir, int shards, std::vector<OwnedTensor>& all) {
  if (shards == 1) return WriteSafetensors(dir + "/model.safetensors", all, {{"format", "pt"}});
  json weight_map = json::object();
  size_t total = 0;
  for (int s = 0; s < shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", s + 1, shards);
    std::vector<OwnedTensor> part;
    for (size_t i = s; i < all.size(); i += shards) {
      weight_map[all[i].name] = name;
      total += all[i].bytes.size();
      part.push_back(std::move(all[i]));
    }
    SHARDLM_RETURN_IF_ERROR(WriteSafetensors(dir + "/" + name, part, {{"format", "pt"}}));
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  return WriteStringToFile(dir + "/model.safetensors.index.json", index.dump(2));
}

absl::Status CopyTokenizer(const std::string& dir, const std::string& from) {
  namespace fs = std::filesystem;
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    std::error_code ec;
    fs::copy_file(from + "/" + f, dir + "/" + f, fs::copy_options::overwrite_existing, ec);
    if (ec) {
      return absl::NotFoundError(
          absl::StrCat("cannot copy ", from, "/", f, ": ", ec.message(), " (run scripts/setup.sh)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteTinyModel(const std::string& dir, const TinyModelOptions& o) {
  SHARDLM_ASSIGN_OR_RETURN(TinySizes t, SizesOf(o));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::PermissionDeniedError("cannot create " + dir + ": " + ec.message());
  SHARDLM_RETURN_IF_ERROR(WriteConfigs(dir, o, t));
  TensorWriter w(o.seed, o.dtype, o.fast_random);
  DrawWeights(o, t, w);
  SHARDLM_RETURN_IF_ERROR(WriteShards(dir, o.shards, w.tensors()));
  if (!o.tokenizer.empty()) SHARDLM_RETURN_IF_ERROR(CopyTokenizer(dir, o.tokenizer_dir));
  return absl::OkStatus();
}

}  // namespace shardlm
