#include "formats/model_config.h"

#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "formats/gguf.h"
#include "formats/gguf_model.h"
#include "nlohmann/json.hpp"

namespace shardlm {
namespace {

using json = nlohmann::json;

constexpr char kSupported[] =
    "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM (GGUF)";

// Reads an integer field; `required` fields missing is InvalidArgument.
absl::Status GetInt(const json& root, const char* key, const std::string& label, bool required,
                    int64_t* out) {
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) {
    if (required) return absl::InvalidArgumentError(label + ": missing integer field '" + key + "'");
    return absl::OkStatus();
  }
  if (!it->is_number_integer()) {
    return absl::InvalidArgumentError(label + ": field '" + key + "' must be an integer");
  }
  *out = it->get<int64_t>();
  return absl::OkStatus();
}

absl::Status GetDouble(const json& root, const char* key, const std::string& label, double* out) {
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) {
    return absl::InvalidArgumentError(label + ": field '" + key + "' must be a number");
  }
  *out = it->get<double>();
  return absl::OkStatus();
}

// eos_token_id: an integer or a list of integers.
absl::Status GetIdList(const json& root, const char* key, const std::string& label,
                       std::vector<int64_t>* out) {
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) return absl::OkStatus();
  out->clear();
  if (it->is_number_integer()) {
    out->push_back(it->get<int64_t>());
    return absl::OkStatus();
  }
  if (it->is_array()) {
    for (const json& v : *it) {
      if (!v.is_number_integer()) {
        return absl::InvalidArgumentError(label + ": '" + key + "' must hold integers");
      }
      out->push_back(v.get<int64_t>());
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(label + ": '" + key + "' must be an integer or a list");
}

// rope_scaling (transformers < 5), or rope_parameters (transformers >= 5 writes this
// instead, with rope_theta inside it).
absl::Status ParseRopeScaling(const json& root, const std::string& label, ModelConfig* cfg) {
  const char* key = root.contains("rope_parameters") && !root["rope_parameters"].is_null() ? "rope_parameters"
                                                                                           : "rope_scaling";
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_object()) return absl::InvalidArgumentError(label + ": " + key + " must be an object");
  SHARDLM_RETURN_IF_ERROR(GetDouble(*it, "rope_theta", label, &cfg->rope_theta));
  std::string type;
  if (it->contains("rope_type") && (*it)["rope_type"].is_string()) {
    type = (*it)["rope_type"].get<std::string>();
  } else if (it->contains("type") && (*it)["type"].is_string()) {
    type = (*it)["type"].get<std::string>();
  }
  if (type == "default" || (type.empty() && std::string(key) == "rope_parameters")) return absl::OkStatus();
  if (type != "llama3") {
    return absl::InvalidArgumentError(label + ": " + key + " type '" + type +
                                      "' is not supported (supported: llama3, default)");
  }
  Llama3RopeScaling s;
  SHARDLM_RETURN_IF_ERROR(GetDouble(*it, "factor", label, &s.factor));
  SHARDLM_RETURN_IF_ERROR(GetDouble(*it, "low_freq_factor", label, &s.low_freq_factor));
  SHARDLM_RETURN_IF_ERROR(GetDouble(*it, "high_freq_factor", label, &s.high_freq_factor));
  SHARDLM_RETURN_IF_ERROR(
      GetInt(*it, "original_max_position_embeddings", label, false, &s.original_max_position_embeddings));
  if (s.factor <= 0 || s.low_freq_factor <= 0 || s.high_freq_factor <= s.low_freq_factor) {
    return absl::InvalidArgumentError(label + ": " + key +
                                      " needs factor > 0 and high_freq_factor > low_freq_factor > 0");
  }
  cfg->rope_scaling = s;
  return absl::OkStatus();
}

}  // namespace

bool LayerIsWindowed(const ModelConfig& cfg, int64_t layer) {
  if (!cfg.sliding_window) return false;
  return cfg.sliding_window_pattern <= 0 || (layer + 1) % cfg.sliding_window_pattern != 0;
}

const char* ArchName(Arch arch) {
  switch (arch) {
    case Arch::kLlama:
      return "llama";
    case Arch::kMistral:
      return "mistral";
    case Arch::kQwen2:
      return "qwen2";
    case Arch::kQwen3:
      return "qwen3";
    case Arch::kGemma3:
      return "gemma3";
  }
  return "?";
}

namespace {

// architectures[0]: one of the supported Hugging Face classes.
absl::Status ArchitectureInto(const json& root, const std::string& label, ModelConfig& cfg) {
  if (!root.contains("architectures") || !root["architectures"].is_array() || root["architectures"].empty() ||
      !root["architectures"][0].is_string()) {
    return absl::InvalidArgumentError(label + ": missing 'architectures' (supported: " + kSupported + ")");
  }
  cfg.architecture = root["architectures"][0].get<std::string>();
  if (cfg.architecture == "LlamaForCausalLM") {
    cfg.arch = Arch::kLlama;
  } else if (cfg.architecture == "MistralForCausalLM") {
    cfg.arch = Arch::kMistral;
  } else if (cfg.architecture == "Qwen2ForCausalLM") {
    cfg.arch = Arch::kQwen2;
    cfg.attention_bias = true;
  } else if (cfg.architecture == "Qwen3ForCausalLM") {
    cfg.arch = Arch::kQwen3;
    cfg.qk_norm = true;
  } else if (cfg.architecture == "Gemma3ForCausalLM") {
    cfg.arch = Arch::kGemma3;
    cfg.qk_norm = true;
    cfg.block_output_norms = true;
  } else {
    return absl::InvalidArgumentError(label + ": architecture '" + cfg.architecture +
                                      "' is not supported (supported: " + kSupported + ")");
  }
  return absl::OkStatus();
}

// The sizes, each positive, the heads grouped whole, head_dim even; the norm
// epsilon and the rotary embedding.
absl::Status SizesInto(const json& root, const std::string& label, ModelConfig& cfg) {
  SHARDLM_RETURN_IF_ERROR(GetInt(root, "vocab_size", label, true, &cfg.vocab_size));
  SHARDLM_RETURN_IF_ERROR(GetInt(root, "hidden_size", label, true, &cfg.hidden_size));
  SHARDLM_RETURN_IF_ERROR(GetInt(root, "intermediate_size", label, true, &cfg.intermediate_size));
  SHARDLM_RETURN_IF_ERROR(GetInt(root, "num_hidden_layers", label, true, &cfg.num_layers));
  SHARDLM_RETURN_IF_ERROR(GetInt(root, "num_attention_heads", label, true, &cfg.num_heads));
  cfg.num_kv_heads = cfg.num_heads;
  SHARDLM_RETURN_IF_ERROR(GetInt(root, "num_key_value_heads", label, false, &cfg.num_kv_heads));
  cfg.max_position_embeddings = 2048;
  SHARDLM_RETURN_IF_ERROR(
      GetInt(root, "max_position_embeddings", label, false, &cfg.max_position_embeddings));
  SHARDLM_RETURN_IF_ERROR(GetDouble(root, "rms_norm_eps", label, &cfg.rms_norm_eps));
  SHARDLM_RETURN_IF_ERROR(GetDouble(root, "rope_theta", label, &cfg.rope_theta));
  SHARDLM_RETURN_IF_ERROR(ParseRopeScaling(root, label, &cfg));
  for (auto [name, value] : {std::pair<const char*, int64_t>{"vocab_size", cfg.vocab_size},
                             {"hidden_size", cfg.hidden_size},
                             {"intermediate_size", cfg.intermediate_size},
                             {"num_hidden_layers", cfg.num_layers},
                             {"num_attention_heads", cfg.num_heads},
                             {"num_key_value_heads", cfg.num_kv_heads},
                             {"max_position_embeddings", cfg.max_position_embeddings}}) {
    if (value <= 0)
      return absl::InvalidArgumentError(absl::StrCat(label, ": ", name, " must be > 0, got ", value));
  }
  if (cfg.num_heads % cfg.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": num_attention_heads (", cfg.num_heads,
                                                   ") must be a multiple of num_key_value_heads (",
                                                   cfg.num_kv_heads, ")"));
  }
  cfg.head_dim = cfg.hidden_size / cfg.num_heads;
  SHARDLM_RETURN_IF_ERROR(GetInt(root, "head_dim", label, false, &cfg.head_dim));
  if (cfg.head_dim <= 0 || cfg.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": head_dim must be even and > 0, got ", cfg.head_dim));
  }
  return absl::OkStatus();
}

// Gemma 3's text model (docs/gemma3.md), with Gemma3TextConfig's defaults for
// what a GGUF does not say: embeddings scaled by sqrt(hidden) (in f32), one
// full-attention layer in six, RoPE base 10000 on the windowed ones; a query
// scale other than 1/sqrt(head_dim) and logit soft-capping are refused.
absl::Status GemmaInto(const json& root, const std::string& label, ModelConfig& cfg) {
  cfg.embedding_scale = static_cast<float>(std::sqrt(static_cast<double>(cfg.hidden_size)));
  cfg.sliding_window_pattern = 6;
  SHARDLM_RETURN_IF_ERROR(GetInt(root, "sliding_window_pattern", label, false, &cfg.sliding_window_pattern));
  cfg.rope_local_theta = 10000.0;
  SHARDLM_RETURN_IF_ERROR(GetDouble(root, "rope_local_base_freq", label, &cfg.rope_local_theta));
  double scalar = static_cast<double>(cfg.head_dim);
  SHARDLM_RETURN_IF_ERROR(GetDouble(root, "query_pre_attn_scalar", label, &scalar));
  if (scalar != static_cast<double>(cfg.head_dim)) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": query_pre_attn_scalar ", scalar,
                                                   " other than head_dim (", cfg.head_dim,
                                                   ") is not supported"));
  }
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"}) {
    if (root.contains(key) && !root[key].is_null())
      return absl::InvalidArgumentError(label + ": " + key + " is not supported");
  }
  if (cfg.sliding_window_pattern < 1)
    return absl::InvalidArgumentError(label + ": sliding_window_pattern must be >= 1");
  return absl::OkStatus();
}

// What the layers have besides their sizes (biases, activation, tied head,
// sliding window), the checkpoint's dtype and the special tokens.
absl::Status FeaturesInto(const json& root, const std::string& label, ModelConfig& cfg) {
  if (root.contains("attention_bias") && root["attention_bias"].is_boolean()) {
    cfg.attention_bias = root["attention_bias"].get<bool>() || cfg.arch == Arch::kQwen2;
  }
  if (root.contains("mlp_bias") && root["mlp_bias"].is_boolean() && root["mlp_bias"].get<bool>()) {
    return absl::InvalidArgumentError(label + ": mlp_bias=true is not supported");
  }
  for (const char* key : {"hidden_act", "hidden_activation"}) {
    if (!root.contains(key) || !root[key].is_string()) continue;
    const std::string act = root[key].get<std::string>();
    if (act == "gelu_pytorch_tanh") {
      cfg.hidden_act = Activation::kGeluTanh;
    } else if (act != "silu") {
      return absl::InvalidArgumentError(label + ": " + key + " '" + act +
                                        "' is not supported (supported: silu, gelu_pytorch_tanh)");
    }
  }
  if (root.contains("tie_word_embeddings") && root["tie_word_embeddings"].is_boolean()) {
    cfg.tie_word_embeddings = root["tie_word_embeddings"].get<bool>();
  }
  // Mistral and Gemma 3 honour sliding_window; Qwen2/3 only when use_sliding_window is true.
  const bool use_window = cfg.arch == Arch::kMistral || cfg.arch == Arch::kGemma3 ||
                          (root.contains("use_sliding_window") && root["use_sliding_window"].is_boolean() &&
                           root["use_sliding_window"].get<bool>());
  if (use_window) {
    int64_t window = 0;
    SHARDLM_RETURN_IF_ERROR(GetInt(root, "sliding_window", label, false, &window));
    if (window > 0) cfg.sliding_window = window;
  }
  // transformers >= 5 writes "dtype" where earlier versions wrote "torch_dtype".
  for (const char* key : {"dtype", "torch_dtype"}) {
    if (root.contains(key) && root[key].is_string()) cfg.torch_dtype = root[key].get<std::string>();
  }
  if (cfg.arch == Arch::kGemma3) SHARDLM_RETURN_IF_ERROR(GemmaInto(root, label, cfg));
  int64_t bos = -1;
  SHARDLM_RETURN_IF_ERROR(GetInt(root, "bos_token_id", label, false, &bos));
  if (bos >= 0) cfg.bos_token_id = bos;
  return GetIdList(root, "eos_token_id", label, &cfg.eos_token_ids);
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& text, const std::string& label) {
  json root = json::parse(text, nullptr, false);
  if (root.is_discarded() || !root.is_object())
    return absl::InvalidArgumentError(label + ": not a JSON object");
  ModelConfig cfg;
  SHARDLM_RETURN_IF_ERROR(ArchitectureInto(root, label, cfg));
  SHARDLM_RETURN_IF_ERROR(SizesInto(root, label, cfg));
  SHARDLM_RETURN_IF_ERROR(FeaturesInto(root, label, cfg));
  return cfg;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& dir) {
  ModelConfig cfg;
  const std::string gen_path = dir + "/generation_config.json";
  if (IsGgufFile(dir)) {
    SHARDLM_ASSIGN_OR_RETURN(auto file, GgufFile::Open(dir));
    SHARDLM_ASSIGN_OR_RETURN(std::string text, GgufConfigJson(file->header(), dir));
    SHARDLM_ASSIGN_OR_RETURN(cfg, ParseModelConfig(text, dir));
    cfg.intermediate_block = GgufFfnBlock(file->header());
  } else {
    const std::string path = dir + "/config.json";
    SHARDLM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
    SHARDLM_ASSIGN_OR_RETURN(cfg, ParseModelConfig(text, path));
    if (cfg.arch == Arch::kGemma3) {
      return absl::InvalidArgumentError(path +
                                        ": Gemma 3 is read from GGUF files only (a checkpoint's norm "
                                        "weights hold w where the engine multiplies by the GGUF's 1 + w)");
    }
  }
  if (!IsGgufFile(dir) && std::filesystem::exists(gen_path)) {
    SHARDLM_ASSIGN_OR_RETURN(std::string gen_text, ReadFileToString(gen_path));
    json gen = json::parse(gen_text, nullptr, false);
    if (gen.is_discarded() || !gen.is_object()) {
      return absl::InvalidArgumentError(gen_path + ": not a JSON object");
    }
    SHARDLM_RETURN_IF_ERROR(GetIdList(gen, "eos_token_id", gen_path, &cfg.eos_token_ids));
  }
  for (int64_t id : cfg.eos_token_ids) {
    if (id < 0 || id >= cfg.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir, ": eos_token_id ", id, " is outside the vocabulary [0, ", cfg.vocab_size, ")"));
    }
  }
  return cfg;
}

}  // namespace shardlm
