#include "formats/gguf_tokenizers.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace shardlm {
namespace {

using json = nlohmann::json;

constexpr char kSpace[] = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

// The split regexes of the tokenizers llama.cpp names in tokenizer.ggml.pre, written as
// the Hugging Face tokenizer.json of the same model declares them.
constexpr char kLlama3Split[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr char kQwen2Split[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

json Split(const char* regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
}
json ByteLevel(bool use_regex) {
  return {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", use_regex}};
}

// Byte offsets of the code points of `s` (and s.size() last).
std::vector<size_t> CodePointStarts(const std::string& s) {
  std::vector<size_t> at;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) at.push_back(i);
  }
  at.push_back(s.size());
  return at;
}

// A token of whitespace that holds a space is looked up as U+2581 per code
// point (the file stores a run of spaces as spaces).
std::string Respell(const std::string& t) {
  const bool blank = !t.empty() && std::all_of(t.begin(), t.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  });
  if (!blank || t.find(' ') == std::string::npos) return t;
  std::string out;
  for (size_t i = 0; i < t.size(); ++i) out += kSpace;
  return out;
}

// Every split of each token into two tokens of the vocabulary, in the order
// transformers ranks them: by the token's index, then the longer left part.
json DerivedMerges(const std::vector<std::string>& spelled,
                   const std::unordered_map<std::string, int64_t>& ids) {
  json merges = json::array();
  for (size_t t = 0; t < spelled.size(); ++t) {
    const std::string& token = spelled[t];
    if (ids.at(token) != static_cast<int64_t>(t)) continue;  // a later token of the same spelling
    const std::vector<size_t> at = CodePointStarts(token);
    if (at.size() < 3) continue;  // one code point: no split
    // Split points from the right: the longest left part first.
    for (size_t k = at.size() - 2; k >= 1; --k) {
      const std::string left = token.substr(0, at[k]), right = token.substr(at[k]);
      if (ids.count(left) && ids.count(right)) merges.push_back(json::array({left, right}));
    }
  }
  return merges;
}

json AddedTokens(const SentencePieceVocab& v, const std::unordered_map<std::string, int64_t>& ids) {
  json added = json::array();
  for (size_t id = 0; id < v.tokens->size(); ++id) {
    const std::string& token = (*v.tokens)[id];
    const int64_t type = v.types[id];
    // Control tokens are special; user-defined ones plain, where the vocabulary spells them so.
    if (type != 3 && !(type == 4 && ids.count(token))) continue;
    added.push_back(AddedTokenJson(static_cast<int64_t>(id), token, type == 3));
  }
  return added;
}

}  // namespace

// Fills normalizer, pre_tokenizer and model.ignore_merges for tokenizer.ggml.pre.
absl::Status GgufPreTokenizerInto(const std::string& pre, const std::string& label, nlohmann::json* root) {
  (*root)["normalizer"] = nullptr;
  bool ignore_merges = false;
  if (pre == "gpt-2") {
    (*root)["pre_tokenizer"] = ByteLevel(true);
  } else if (pre == "smollm") {  // Digits(individual_digits) then GPT-2's ByteLevel regex
    (*root)["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {Split("\\p{N}"), ByteLevel(true)}}};
  } else if (pre == "llama-bpe" || pre == "llama3") {
    (*root)["pre_tokenizer"] = {{"type", "Sequence"},
                                {"pretokenizers", {Split(kLlama3Split), ByteLevel(false)}}};
    ignore_merges = true;
  } else if (pre == "qwen2") {
    (*root)["normalizer"] = {{"type", "NFC"}};
    (*root)["pre_tokenizer"] = {{"type", "Sequence"},
                                {"pretokenizers", {Split(kQwen2Split), ByteLevel(false)}}};
  } else {
    return absl::InvalidArgumentError("GGUF file " + label + ": tokenizer.ggml.pre '" + pre +
                                      "' is not supported (supported: gpt-2, smollm, llama-bpe, qwen2)");
  }
  (*root)["model"]["ignore_merges"] = ignore_merges;
  return absl::OkStatus();
}

nlohmann::json AddedTokenJson(int64_t id, const std::string& content, bool special) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

absl::Status SentencePieceInto(const SentencePieceVocab& v, const std::string& label, nlohmann::json* root) {
  if (v.unk < 0)
    return absl::InvalidArgumentError(label + ": a SentencePiece vocabulary needs an unknown token");
  std::vector<std::string> spelled;
  spelled.reserve(v.tokens->size());
  std::unordered_map<std::string, int64_t> ids;
  for (size_t id = 0; id < v.tokens->size(); ++id) {
    spelled.push_back(Respell((*v.tokens)[id]));
    ids[spelled.back()] = static_cast<int64_t>(id);
  }
  json vocab = json::object();
  for (const auto& [token, id] : ids) vocab[token] = id;
  (*root)["added_tokens"] = AddedTokens(v, ids);
  (*root)["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}};
  (*root)["pre_tokenizer"] = nullptr;
  (*root)["model"] = {{"type", "BPE"},
                      {"dropout", nullptr},
                      {"unk_token", (*v.tokens)[v.unk]},
                      {"fuse_unk", true},
                      {"byte_fallback", true},
                      {"vocab", std::move(vocab)},
                      {"merges", DerivedMerges(spelled, ids)}};
  (*root)["decoder"] = {
      {"type", "Sequence"},
      {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                                {{"type", "ByteFallback"}},
                                {{"type", "Fuse"}}})}};
  return absl::OkStatus();
}

}  // namespace shardlm
