// config.json and generation_config.json of a Hugging Face decoder-only model.
//
// Supported: LlamaForCausalLM (Llama 2, 3, 3.1, 3.2 incl. rope_scaling
// "llama3"), MistralForCausalLM (sliding_window), Qwen2ForCausalLM (q/k/v
// bias), Qwen3ForCausalLM (q_norm/k_norm, explicit head_dim), and from GGUF
// files Gemma3ForCausalLM (the text model). Anything else is InvalidArgument
// listing what is supported.
//
//   SHARDLM_ASSIGN_OR_RETURN(ModelConfig cfg, LoadModelConfig(dir));
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shardlm {

enum class Arch { kLlama, kMistral, kQwen2, kQwen3, kGemma3 };

// The MLP's gate activation: SiLU (SwiGLU) or tanh-approximated GELU (GeGLU, Gemma).
enum class Activation { kSilu, kGeluTanh };

// rope_scaling {"rope_type": "llama3", ...} (Llama 3.1 / 3.2).
struct Llama3RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string architecture;  // as written in config.json
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  // The FFN is split among ranks on multiples of this: a GGUF's down
  // projection block (32 weights, or a K-quant's 256), so that each rank's
  // columns of it are whole blocks, kept as the file has them.
  int64_t intermediate_block = 1;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<Llama3RopeScaling> rope_scaling;
  std::optional<int64_t> sliding_window;  // Mistral; nullopt = full attention
  bool attention_bias = false;            // q/k/v biases (Qwen2)
  bool qk_norm = false;                   // per-head RMSNorm of q and k (Qwen3)
  bool tie_word_embeddings = false;
  // Gemma 3 (from GGUF; docs/gemma3.md): GeGLU, embeddings scaled by
  // sqrt(hidden), RMSNorms of each block's output before its residual add, and
  // sliding-window layers (sliding_window) between full ones, one in every
  // `sliding_window_pattern`, each kind with its own RoPE base.
  Activation hidden_act = Activation::kSilu;
  double embedding_scale = 0.0;  // 0: none
  bool block_output_norms = false;
  int64_t sliding_window_pattern = 0;  // 0: every layer as sliding_window says
  double rope_local_theta = 0.0;       // the windowed layers' RoPE base; 0: rope_theta
  std::string torch_dtype = "float32";
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // generation_config.json wins over config.json
};

// Whether layer `layer` attends over a sliding window (cfg.sliding_window set;
// with a pattern, all but every pattern-th layer).
bool LayerIsWindowed(const ModelConfig& cfg, int64_t layer);

// Parses config.json text; `label` names the file in errors.
absl::StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& label);

// Reads DIR/config.json and, when present, DIR/generation_config.json; or, when
// `dir` is a GGUF file, the config its metadata describes (formats/gguf_model.h).
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& dir);

// "llama" / "mistral" / "qwen2" / "qwen3" / "gemma3".
const char* ArchName(Arch arch);

}  // namespace shardlm
