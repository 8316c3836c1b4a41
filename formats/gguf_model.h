// A GGUF file seen as a Hugging Face model: the same config, tensor names,
// shapes, tokenizer.json and tokenizer_config.json a model directory has, so
// that everything downstream (ParseModelConfig, the shard plan and loader,
// Tokenizer::FromJson, ChatTemplate::FromConfig) reads either without a
// second code path.
//
// What is translated:
//   config      general.architecture + "<arch>.*" keys -> config.json fields
//               (llama -> LlamaForCausalLM, qwen2 -> Qwen2ForCausalLM, qwen3 -> Qwen3ForCausalLM);
//               tie_word_embeddings when the file has no output.weight.
//   tensors     token_embd -> model.embed_tokens, blk.N.attn_q -> model.layers.N.self_attn.q_proj,
//               ... (kTensorNames in gguf_model.cc); ggml dims reversed into PyTorch order;
//               llama's q/k rows flagged as rotary-permuted (llama.cpp's convert script
//               interleaves each head's two halves; LoadShard undoes it).
//   tokenizer   tokenizer.ggml.{model=gpt2, tokens, merges, token_type, pre, bos/eos ids,
//               add_bos_token} -> a byte-level BPE tokenizer.json; control tokens become
//               special added tokens; `pre` picks the split regex (gpt-2, smollm, llama-bpe,
//               qwen2).
//   template    tokenizer.chat_template + the bos/eos token texts -> tokenizer_config.json.
//
//   SHARDLM_ASSIGN_OR_RETURN(auto file, GgufFile::Open(path));
//   SHARDLM_ASSIGN_OR_RETURN(std::string config_json, GgufConfigJson(file->header(), path));
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"

namespace shardlm {

// The block format of a ggml tensor type (Q8_0, Q4_K, ...); kNone for element types
// (F32, F16, BF16) and for types this engine cannot read.
BlockFormat GgmlBlockFormat(uint32_t type);

// The most weights per block among the file's FFN down projections (1 when
// none is block-quantized): the granule of the FFN's split (ModelConfig).
int64_t GgufFfnBlock(const GgufHeader& h);

// A config.json (text) for ParseModelConfig.
absl::StatusOr<std::string> GgufConfigJson(const GgufHeader& h, const std::string& label);

// Every tensor under its Hugging Face name, shape in PyTorch order, data in the mapping.
// InvalidArgument naming the tensor for a type this engine cannot load.
absl::StatusOr<std::map<std::string, TensorView>> GgufTensorViews(const GgufHeader& h,
                                                                  const std::string& label);

// tokenizer.json text; NotFound when the file has no tokenizer.
absl::StatusOr<std::string> GgufTokenizerJson(const GgufHeader& h, const std::string& label);

// tokenizer_config.json text (chat_template, bos_token, eos_token, ...); NotFound when
// the file has no tokenizer.
absl::StatusOr<std::string> GgufTokenizerConfigJson(const GgufHeader& h, const std::string& label);

}  // namespace shardlm
