// Writes a complete Hugging Face checkpoint directory with random weights:
// config.json, model.safetensors (or K shards + index), generation_config.json
// and, when a tokenizer is chosen, tokenizer.json / tokenizer_config.json.
//
// Weights are scaled so the attention and MLP outputs, not the residual
// stream, decide the next token: block output projections are drawn larger
// than the embedding, so a model that only echoes its input fails the tests.
//
//   TinyModelOptions o; o.arch = Arch::kQwen3; o.tokenizer_dir = ".../models";
//   SHARDLM_RETURN_IF_ERROR(WriteTinyModel("/tmp/tiny", o));
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "formats/model_config.h"
#include "formats/safetensors.h"

namespace shardlm {

struct TinyModelOptions {
  Arch arch = Arch::kLlama;
  uint64_t seed = 0;
  DType dtype = DType::kF32;
  int64_t vocab_size = 0;  // 0: the tokenizer's size, or 512 without one
  int64_t hidden_size = 128;
  int64_t num_layers = 2;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 2;
  int64_t head_dim = 0;  // 0: hidden_size / num_heads
  int64_t intermediate_size = 256;
  int64_t max_position_embeddings = 4096;
  int64_t sliding_window = 16;  // Mistral only
  bool tie_embeddings = false;
  bool rope_scaling_llama3 = false;
  int shards = 1;
  // Uniform values with each tensor's mean and std from a counter hash, on
  // every core, instead of normal draws from one generator: for multi-GB
  // benchmark checkpoints (a Llama-3-8B shape in seconds, not minutes).
  bool fast_random = false;
  std::string tokenizer;      // "", "llama3" or "qwen3"
  std::string tokenizer_dir;  // folder with that tokenizer's tokenizer.json
};

absl::Status WriteTinyModel(const std::string& dir, const TinyModelOptions& options);

}  // namespace shardlm
