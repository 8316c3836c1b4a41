#include "formats/gguf_model.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "formats/gguf_tokenizers.h"
#include "nlohmann/json.hpp"

namespace shardlm {
namespace {

// std::map-backed: ordered_json looks keys up linearly, which is quadratic over a 49k-token vocabulary.
using json = nlohmann::json;

// GGUF tensor name (after "blk.N.") -> Hugging Face name (after "model.layers.N.").
constexpr std::pair<const char*, const char*> kLayerTensorNames[] = {
    {"attn_norm", "input_layernorm"},    {"ffn_norm", "post_attention_layernorm"},
    {"attn_q", "self_attn.q_proj"},      {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},      {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"}, {"attn_k_norm", "self_attn.k_norm"},
    {"ffn_gate", "mlp.gate_proj"},       {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
};
constexpr std::pair<const char*, const char*> kModelTensorNames[] = {
    {"token_embd", "model.embed_tokens"},
    {"output_norm", "model.norm"},
    {"output", "lm_head"},
};

constexpr std::pair<const char*, const char*> kArchitectures[] = {
    {"llama", "LlamaForCausalLM"},
    {"qwen2", "Qwen2ForCausalLM"},
    {"qwen3", "Qwen3ForCausalLM"},
    {"gemma3", "Gemma3ForCausalLM"},
};

// Gemma 3's norms: "ffn_norm" is the norm before its MLP, and each block's
// output has a norm of its own (Hugging Face's Gemma3 names).
constexpr std::pair<const char*, const char*> kGemma3LayerNorms[] = {
    {"ffn_norm", "pre_feedforward_layernorm"},
    {"post_attention_norm", "post_attention_layernorm"},
    {"post_ffw_norm", "post_feedforward_layernorm"},
};

absl::Status BadGguf(const std::string& label, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("GGUF file ", label, ": ", what));
}

// JSON text of `root`; InvalidArgument naming `what` when a string in it is not UTF-8.
absl::StatusOr<std::string> Dump(const json& root, const std::string& label, const std::string& what) {
  try {
    return root.dump();
  } catch (const nlohmann::json::exception& e) {
    return BadGguf(label, what + " is not valid UTF-8 (" + e.what() + ")");
  }
}

absl::StatusOr<std::string> GetString(const GgufHeader& h, const std::string& key, const std::string& label) {
  const GgufValue* v = h.Find(key);
  if (v == nullptr) return BadGguf(label, "missing metadata '" + key + "'");
  if (v->type != GgufValueType::kString) return BadGguf(label, "metadata '" + key + "' must be a string");
  return v->s;
}

// An integer key; `fallback` when absent (or InvalidArgument when fallback < 0).
absl::StatusOr<int64_t> GetInt(const GgufHeader& h, const std::string& key, const std::string& label,
                               int64_t fallback = -1) {
  const GgufValue* v = h.Find(key);
  if (v == nullptr) {
    if (fallback < 0) return BadGguf(label, "missing metadata '" + key + "'");
    return fallback;
  }
  if (!v->is_integer()) return BadGguf(label, "metadata '" + key + "' must be an integer");
  return v->i;
}

const GgufTensorInfo* FindTensor(const GgufHeader& h, const std::string& name) {
  for (const GgufTensorInfo& t : h.tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

// "blk.12.attn_q.weight" -> "model.layers.12.self_attn.q_proj.weight"; unknown names stay as they are.
std::string HfName(const std::string& name, bool gemma3) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return name;
  const std::string stem = name.substr(0, dot), suffix = name.substr(dot);  // ".weight" / ".bias"
  for (const auto& [gguf, hf] : kModelTensorNames) {
    if (stem == gguf) return hf + suffix;
  }
  if (stem.rfind("blk.", 0) == 0) {
    const size_t second = stem.find('.', 4);
    if (second != std::string::npos) {
      const std::string layer = stem.substr(4, second - 4), rest = stem.substr(second + 1);
      for (const auto& [gguf, hf] : kGemma3LayerNorms) {
        if (gemma3 && rest == gguf) return "model.layers." + layer + "." + hf + suffix;
      }
      for (const auto& [gguf, hf] : kLayerTensorNames) {
        if (rest == gguf) return "model.layers." + layer + "." + hf + suffix;
      }
    }
  }
  return name;
}

struct GgufVocab {
  const std::vector<std::string>* tokens = nullptr;
  std::vector<int64_t> types;  // 1 normal, 3 control, 4 user-defined, ...
  int64_t bos = -1, eos = -1, unk = -1, pad = -1;
};

absl::StatusOr<GgufVocab> ReadVocab(const GgufHeader& h, const std::string& label) {
  const GgufValue* tokens = h.Find("tokenizer.ggml.tokens");
  if (tokens == nullptr)
    return absl::NotFoundError("GGUF file " + label + " has no tokenizer (tokenizer.ggml.tokens)");
  if (tokens->type != GgufValueType::kArray || tokens->array_type != GgufValueType::kString) {
    return BadGguf(label, "tokenizer.ggml.tokens must be an array of strings");
  }
  GgufVocab v;
  v.tokens = &tokens->strings;
  const int64_t n = static_cast<int64_t>(tokens->strings.size());
  if (const GgufValue* types = h.Find("tokenizer.ggml.token_type")) {
    if (types->type != GgufValueType::kArray || static_cast<int64_t>(types->ints.size()) != n) {
      return BadGguf(label,
                     absl::StrCat("tokenizer.ggml.token_type must be an integer array of ", n, " entries"));
    }
    v.types = types->ints;
  } else {
    v.types.assign(n, 1);
  }
  for (auto [key, out] :
       {std::pair{"bos", &v.bos}, {"eos", &v.eos}, {"unknown", &v.unk}, {"padding", &v.pad}}) {
    const std::string k = absl::StrCat("tokenizer.ggml.", key, "_token_id");
    auto id = GetInt(h, k, label, /*fallback=*/n);
    if (!id.ok()) return id.status();
    if (*id > n) return BadGguf(label, absl::StrCat(k, " ", *id, " is outside the vocabulary of ", n));
    *out = *id < n ? *id : -1;
  }
  return v;
}

bool GetBool(const GgufHeader& h, const std::string& key, bool fallback) {
  const GgufValue* v = h.Find(key);
  return v != nullptr && v->type == GgufValueType::kBool ? v->i != 0 : fallback;
}

}  // namespace

namespace {

// architectures and model_type from general.architecture (one llama.cpp knows
// and this engine runs).
absl::Status ArchitectureInto(const std::string& label, const std::string& arch, json& cfg) {
  std::string architecture;
  std::vector<std::string> known;
  for (const auto& [name, hf] : kArchitectures) {
    if (arch == name) architecture = hf;
    known.push_back(name);
  }
  if (architecture.empty()) {
    return BadGguf(label, "general.architecture '" + arch +
                              "' is not supported (supported: " + absl::StrJoin(known, ", ") + ")");
  }
  cfg["architectures"] = {architecture};
  cfg["model_type"] = arch;
  return absl::OkStatus();
}

// The layer sizes and heads under the architecture's prefix `a` ("llama.").
absl::Status ShapeInto(const GgufHeader& h, const std::string& label, const std::string& a, json& cfg) {
  for (auto [hf, key] : {std::pair{"hidden_size", "embedding_length"},
                         {"intermediate_size", "feed_forward_length"},
                         {"num_hidden_layers", "block_count"},
                         {"num_attention_heads", "attention.head_count"},
                         {"max_position_embeddings", "context_length"}}) {
    SHARDLM_ASSIGN_OR_RETURN(int64_t v, GetInt(h, a + key, label));
    cfg[hf] = v;
  }
  const int64_t heads = cfg["num_attention_heads"].get<int64_t>();
  SHARDLM_ASSIGN_OR_RETURN(int64_t kv_heads, GetInt(h, a + "attention.head_count_kv", label, heads));
  cfg["num_key_value_heads"] = kv_heads;
  const int64_t default_head_dim = heads > 0 ? cfg["hidden_size"].get<int64_t>() / heads : 1;
  SHARDLM_ASSIGN_OR_RETURN(int64_t head_dim, GetInt(h, a + "attention.key_length", label, default_head_dim));
  cfg["head_dim"] = head_dim;
  SHARDLM_ASSIGN_OR_RETURN(int64_t value_dim, GetInt(h, a + "attention.value_length", label, head_dim));
  if (value_dim != head_dim) {
    return BadGguf(
        label, absl::StrCat(a, "attention.value_length (", value_dim, ") != key_length (", head_dim, ")"));
  }
  return absl::OkStatus();
}

// Rotary embedding (full head size, no scaling), norm epsilon, rope base and
// sliding window.
absl::Status PositionsInto(const GgufHeader& h, const std::string& label, const std::string& a, json& cfg) {
  const int64_t head_dim = cfg["head_dim"].get<int64_t>();
  SHARDLM_ASSIGN_OR_RETURN(int64_t rope_dims, GetInt(h, a + "rope.dimension_count", label, head_dim));
  if (rope_dims != head_dim) {
    return BadGguf(label, absl::StrCat(a, "rope.dimension_count (", rope_dims, ") must equal the head size (",
                                       head_dim, "): partial rotary embeddings are not supported"));
  }
  if (const GgufValue* v = h.Find(a + "rope.scaling.type");
      v != nullptr && (v->type != GgufValueType::kString || v->s != "none")) {
    return BadGguf(label, a + "rope.scaling.type '" + v->s + "' is not supported");
  }
  if (FindTensor(h, "rope_freqs.weight") != nullptr) {
    return BadGguf(
        label, "rope_freqs.weight (Llama 3.1-style rope scaling factors) is not supported in GGUF files yet");
  }
  for (auto [hf, key] :
       {std::pair{"rms_norm_eps", "attention.layer_norm_rms_epsilon"}, {"rope_theta", "rope.freq_base"}}) {
    if (const GgufValue* v = h.Find(a + key)) {
      if (!v->is_float()) return BadGguf(label, "metadata '" + a + key + "' must be a float");
      cfg[hf] = v->f;
    }
  }
  if (const GgufValue* v = h.Find(a + "attention.sliding_window")) {
    if (!v->is_integer())
      return BadGguf(label, "metadata '" + a + "attention.sliding_window' must be an integer");
    cfg["sliding_window"] = v->i;
    cfg["use_sliding_window"] = true;
  }
  return absl::OkStatus();
}

// The vocabulary's size (the token embedding's rows, else the token list's
// length, unless the metadata says), the special token ids, and what the
// tensors present say (tied head, q/k/v biases).
absl::Status VocabularyInto(const GgufHeader& h, const std::string& label, const std::string& a, json& cfg) {
  int64_t vocab = -1;
  if (const GgufValue* tokens = h.Find("tokenizer.ggml.tokens"))
    vocab = static_cast<int64_t>(tokens->strings.size());
  if (const GgufTensorInfo* embd = FindTensor(h, "token_embd.weight");
      embd != nullptr && embd->dims.size() == 2) {
    vocab = embd->dims[1];
  }
  SHARDLM_ASSIGN_OR_RETURN(int64_t vocab_size, GetInt(h, a + "vocab_size", label, vocab < 0 ? 0 : vocab));
  cfg["vocab_size"] = vocab_size;
  cfg["tie_word_embeddings"] = FindTensor(h, "output.weight") == nullptr;
  cfg["attention_bias"] = FindTensor(h, "blk.0.attn_q.bias") != nullptr;
  for (auto [hf, key] : {std::pair{"bos_token_id", "tokenizer.ggml.bos_token_id"},
                         {"eos_token_id", "tokenizer.ggml.eos_token_id"}}) {
    if (const GgufValue* v = h.Find(key); v != nullptr && v->is_integer()) cfg[hf] = v->i;
  }
  // A chat model's end-of-turn token ends generation as EOS does.
  if (const GgufValue* eot = h.Find("tokenizer.ggml.eot_token_id"); eot != nullptr && eot->is_integer()) {
    if (!cfg.contains("eos_token_id")) {
      cfg["eos_token_id"] = eot->i;
    } else if (cfg["eos_token_id"].get<int64_t>() != eot->i) {
      cfg["eos_token_id"] = {cfg["eos_token_id"].get<int64_t>(), eot->i};
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> GgufConfigJson(const GgufHeader& h, const std::string& label) {
  SHARDLM_ASSIGN_OR_RETURN(std::string arch, GetString(h, "general.architecture", label));
  const std::string a = arch + ".";
  json cfg = json::object();
  SHARDLM_RETURN_IF_ERROR(ArchitectureInto(label, arch, cfg));
  SHARDLM_RETURN_IF_ERROR(ShapeInto(h, label, a, cfg));
  SHARDLM_RETURN_IF_ERROR(PositionsInto(h, label, a, cfg));
  SHARDLM_RETURN_IF_ERROR(VocabularyInto(h, label, a, cfg));
  cfg["hidden_act"] = arch == "gemma3" ? "gelu_pytorch_tanh" : "silu";
  // Quantized files compute in f32 (their blocks kept on the CPU, dequantized
  // to f32 elsewhere: --weights); F16/BF16 files in bf16 by default.
  const int64_t file_type = GetInt(h, "general.file_type", label, 0).value_or(0);
  cfg["torch_dtype"] = file_type == 1 || file_type == 32 ? "bfloat16" : "float32";
  return Dump(cfg, label, "the model metadata");
}

int64_t GgufFfnBlock(const GgufHeader& h) {
  int64_t block = 1;
  for (const GgufTensorInfo& t : h.tensors) {
    if (t.name.rfind("blk.", 0) != 0 || t.name.find(".ffn_down.weight") == std::string::npos) continue;
    block = std::max(block, BlockLayoutOf(GgmlBlockFormat(t.type)).elements);
  }
  return block;
}

BlockFormat GgmlBlockFormat(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kQ8_0:
      return BlockFormat::kQ8_0;
    case GgmlType::kQ4_0:
      return BlockFormat::kQ4_0;
    case GgmlType::kQ4_1:
      return BlockFormat::kQ4_1;
    case GgmlType::kQ5_0:
      return BlockFormat::kQ5_0;
    case GgmlType::kQ5_1:
      return BlockFormat::kQ5_1;
    case GgmlType::kQ2_K:
      return BlockFormat::kQ2_K;
    case GgmlType::kQ3_K:
      return BlockFormat::kQ3_K;
    case GgmlType::kQ4_K:
      return BlockFormat::kQ4_K;
    case GgmlType::kQ5_K:
      return BlockFormat::kQ5_K;
    case GgmlType::kQ6_K:
      return BlockFormat::kQ6_K;
    default:
      return BlockFormat::kNone;
  }
}

absl::StatusOr<std::map<std::string, TensorView>> GgufTensorViews(const GgufHeader& h,
                                                                  const std::string& label) {
  auto arch = GetString(h, "general.architecture", label);
  if (!arch.ok()) return arch.status();
  int64_t head_dim = 0;
  if (*arch == "llama") {  // llama.cpp's converter permutes llama's q/k rows only
    auto hidden = GetInt(h, "llama.embedding_length", label);
    auto heads = GetInt(h, "llama.attention.head_count", label);
    if (!hidden.ok()) return hidden.status();
    if (!heads.ok()) return heads.status();
    if (*heads <= 0) return BadGguf(label, "llama.attention.head_count must be > 0");
    auto key_length = GetInt(h, "llama.attention.key_length", label, *hidden / *heads);
    if (!key_length.ok()) return key_length.status();
    head_dim = *key_length;
  }
  std::map<std::string, TensorView> views;
  for (const GgufTensorInfo& t : h.tensors) {
    TensorView v;
    v.name = HfName(t.name, *arch == "gemma3");
    v.shape.assign(t.dims.rbegin(), t.dims.rend());
    v.data = t.data;
    v.nbytes = t.nbytes;
    v.offset = t.offset;
    v.block = GgmlBlockFormat(t.type);
    switch (v.block != BlockFormat::kNone ? GgmlType::kF32 : static_cast<GgmlType>(t.type)) {
      case GgmlType::kF32:
        v.dtype = DType::kF32;
        break;
      case GgmlType::kF16:
        v.dtype = DType::kF16;
        break;
      case GgmlType::kBF16:
        v.dtype = DType::kBF16;
        break;
      default:
        return BadGguf(label, "tensor '" + t.name + "' is " + GgmlTypeName(t.type) +
                                  "; supported types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, "
                                  "Q3_K, Q4_K, Q5_K, Q6_K");
    }
    const bool rotary = t.name.rfind("blk.", 0) == 0 && (t.name.find(".attn_q.") != std::string::npos ||
                                                         t.name.find(".attn_k.") != std::string::npos);
    if (rotary && head_dim > 0) {
      if (head_dim % 2 != 0 || v.shape[0] % head_dim != 0) {
        return BadGguf(label, absl::StrCat("tensor '", t.name, "' has ", v.shape[0],
                                           " rows, not a whole number of heads of ", head_dim));
      }
      v.rope_permuted_head_dim = head_dim;
    }
    const std::string name = v.name;
    if (!views.emplace(name, std::move(v)).second) {
      return BadGguf(label, "two tensors map to the name '" + name + "'");
    }
  }
  return views;
}

namespace {

// A byte-level BPE's vocabulary, merges, added tokens, pre-tokenizer and decoder into `root`.
absl::Status ByteLevelInto(const GgufHeader& h, const GgufVocab& vocab, const std::string& label,
                           json* root) {
  json added = json::array();
  json vocab_obj = json::object();
  for (size_t id = 0; id < vocab.tokens->size(); ++id) {
    const std::string& token = (*vocab.tokens)[id];
    vocab_obj[token] = id;
    const int64_t type = vocab.types[id];
    if (type == 3 || type == 4) {  // control, user-defined: matched whole in the text
      added.push_back(AddedTokenJson(static_cast<int64_t>(id), token, type == 3));
    }
  }
  (*root)["added_tokens"] = std::move(added);
  json merges = json::array();
  if (const GgufValue* m = h.Find("tokenizer.ggml.merges")) {
    if (m->type != GgufValueType::kArray || m->array_type != GgufValueType::kString) {
      return BadGguf(label, "tokenizer.ggml.merges must be an array of strings");
    }
    for (const std::string& s : m->strings) merges.push_back(s);
  }
  (*root)["model"] = {{"type", "BPE"},
                      {"dropout", nullptr},
                      {"unk_token", nullptr},
                      {"fuse_unk", false},
                      {"byte_fallback", false},
                      {"vocab", std::move(vocab_obj)},
                      {"merges", std::move(merges)}};
  std::string pre = "gpt-2";
  if (const GgufValue* p = h.Find("tokenizer.ggml.pre")) pre = p->s;
  SHARDLM_RETURN_IF_ERROR(GgufPreTokenizerInto(pre, label, root));
  (*root)["decoder"] = {
      {"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  return absl::OkStatus();
}

// BOS and EOS around the text where the file says to add them (TemplateProcessing), or null.
json PostProcessor(const GgufHeader& h, const GgufVocab& vocab) {
  json single = json::array();
  json specials = json::object();
  const bool add_bos = GetBool(h, "tokenizer.ggml.add_bos_token", false) && vocab.bos >= 0;
  const bool add_eos = GetBool(h, "tokenizer.ggml.add_eos_token", false) && vocab.eos >= 0;
  if (add_bos) {
    const std::string& text = (*vocab.tokens)[vocab.bos];
    single.push_back({{"SpecialToken", {{"id", text}, {"type_id", 0}}}});
    specials[text] = {{"id", text}, {"ids", {vocab.bos}}, {"tokens", {text}}};
  }
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (add_eos) {
    const std::string& text = (*vocab.tokens)[vocab.eos];
    single.push_back({{"SpecialToken", {{"id", text}, {"type_id", 0}}}});
    specials[text] = {{"id", text}, {"ids", {vocab.eos}}, {"tokens", {text}}};
  }
  if (!add_bos && !add_eos) return json(nullptr);
  return {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", specials}};
}

}  // namespace

absl::StatusOr<std::string> GgufTokenizerJson(const GgufHeader& h, const std::string& label) {
  auto vocab = ReadVocab(h, label);
  if (!vocab.ok()) return vocab.status();
  auto model = GetString(h, "tokenizer.ggml.model", label);
  if (!model.ok()) return model.status();
  const GgufValue* arch = h.Find("general.architecture");
  json root = json::object();
  root["version"] = "1.0";
  if (*model == "llama" && arch != nullptr && arch->s == "gemma3") {
    SHARDLM_RETURN_IF_ERROR(SentencePieceInto({vocab->tokens, vocab->types, vocab->unk}, label, &root));
  } else if (*model == "gpt2") {
    SHARDLM_RETURN_IF_ERROR(ByteLevelInto(h, *vocab, label, &root));
  } else {
    return BadGguf(label,
                   "tokenizer.ggml.model '" + *model +
                       "' is not supported (supported: gpt2, byte-level BPE; SentencePiece 'llama' for "
                       "gemma3 only)");
  }
  root["post_processor"] = PostProcessor(h, *vocab);
  return Dump(root, label, "the tokenizer metadata");
}

absl::StatusOr<std::string> GgufTokenizerConfigJson(const GgufHeader& h, const std::string& label) {
  auto vocab = ReadVocab(h, label);
  if (!vocab.ok()) return vocab.status();
  json cfg = json::object();
  for (auto [key, id] : {std::pair{"bos_token", vocab->bos},
                         {"eos_token", vocab->eos},
                         {"unk_token", vocab->unk},
                         {"pad_token", vocab->pad}}) {
    if (id >= 0) cfg[key] = (*vocab->tokens)[id];
  }
  cfg["add_bos_token"] = GetBool(h, "tokenizer.ggml.add_bos_token", false);
  if (const GgufValue* t = h.Find("tokenizer.chat_template")) {
    if (t->type != GgufValueType::kString) return BadGguf(label, "tokenizer.chat_template must be a string");
    cfg["chat_template"] = t->s;
  }
  return Dump(cfg, label, "the chat template or a special token");
}

}  // namespace shardlm
