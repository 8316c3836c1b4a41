// Reading tokenizer.json into the BPE tokenizer (bpe_tokenizer.h): the
// model's vocabulary and merges, the normalizers, the pre-tokenizer steps,
// the post-processor's special tokens and the added tokens, each refused
// with the file's name and the field when it is not one this engine runs.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/utf8.h"
#include "formats/gguf.h"
#include "formats/model_files.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_level.h"

namespace shardlm {
namespace bpe {
namespace {

// The bytes a SentencePiece-style token stands for: U+2581 a space, <0xXX>
// the byte (the Replace, ByteFallback and Fuse decoders).
std::string SentencePieceBytes(const std::string& token) {
  if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>' &&
      std::isxdigit(static_cast<unsigned char>(token[3])) &&
      std::isxdigit(static_cast<unsigned char>(token[4]))) {
    return std::string(1, static_cast<char>(std::stoi(token.substr(3, 2), nullptr, 16)));
  }
  std::string out;
  for (size_t i = 0; i < token.size();) {
    if (token.compare(i, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      i += 3;
    } else {
      out += token[i++];
    }
  }
  return out;
}

// GPT-2's split pattern, used by ByteLevel pre-tokenizers with use_regex.
constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

absl::Status BpeTokenizer::InitModel(const json& model, const std::string& label) {
  if (!model.is_object() || model.value("type", "") != "BPE") {
    return absl::InvalidArgumentError(label + ": model.type must be BPE (byte-level BPE is supported)");
  }
  byte_fallback_ = model.contains("byte_fallback") && model["byte_fallback"].is_boolean() &&
                   model["byte_fallback"].get<bool>();
  ignore_merges_ = model.contains("ignore_merges") && model["ignore_merges"].is_boolean() &&
                   model["ignore_merges"].get<bool>();
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return absl::InvalidArgumentError(label + ": model.vocab must be an object");
  }
  const ByteLevelTable& table = ByteLevelTable::Get();
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    if (!it.value().is_number_integer())
      return absl::InvalidArgumentError(label + ": vocab ids must be integers");
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id > (1 << 24))
      return absl::InvalidArgumentError(absl::StrCat(label, ": vocab id ", id, " out of range"));
    vocab_[it.key()] = static_cast<int32_t>(id);
    if (static_cast<size_t>(id) >= token_bytes_.size()) token_bytes_.resize(id + 1);
    std::string bytes;
    if (byte_fallback_) {
      bytes = SentencePieceBytes(it.key());
    } else if (!table.Decode(it.key(), &bytes)) {
      bytes = it.key();  // not byte-level spelled: keep as is
    }
    token_bytes_[id] = std::move(bytes);
  }
  if (byte_fallback_) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      auto it = vocab_.find(name);
      if (it == vocab_.end())
        return absl::InvalidArgumentError(
            absl::StrCat(label, ": byte_fallback without the byte token ", name));
      byte_tokens_[b] = it->second;
    }
  }
  if (!model.contains("merges") || !model["merges"].is_array()) {
    return absl::InvalidArgumentError(label + ": model.merges must be an array");
  }
  int32_t rank = 0;
  for (const json& m : model["merges"]) {
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos)
        return absl::InvalidArgumentError(label + ": merge '" + s + "' has no space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      return absl::InvalidArgumentError(label + ": merges must be \"a b\" strings or [a, b] pairs");
    }
    auto ia = vocab_.find(a), ib = vocab_.find(b), im = vocab_.find(a + b);
    if (ia == vocab_.end() || ib == vocab_.end() || im == vocab_.end()) {
      return absl::InvalidArgumentError(label + ": merge '" + a + " " + b + "' uses tokens not in the vocab");
    }
    merges_.emplace(PairKey(ia->second, ib->second), std::make_pair(rank++, im->second));
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::InitNormalizer(const json& node, const std::string& label) {
  if (node.is_null()) return absl::OkStatus();
  const std::string type = node.value("type", "");
  NormStep step;
  if (type == "NFC" || type == "NFKC") {
    step.unicode = type == "NFC" ? NormKind::kNfc : NormKind::kNfkc;
  } else if (type == "Replace" && node.contains("pattern") && node["pattern"].contains("String") &&
             node["pattern"]["String"].is_string() && node.contains("content") &&
             node["content"].is_string()) {
    step.kind = NormStep::kReplace;
    step.pattern = node["pattern"]["String"].get<std::string>();
    step.content = node["content"].get<std::string>();
    if (step.pattern.empty()) return absl::InvalidArgumentError(label + ": Replace with an empty pattern");
  } else if (type == "Prepend" && node.contains("prepend") && node["prepend"].is_string()) {
    step.kind = NormStep::kPrepend;
    step.content = node["prepend"].get<std::string>();
  } else if (type == "Sequence" && node.contains("normalizers") && node["normalizers"].is_array()) {
    for (const json& n : node["normalizers"]) SHARDLM_RETURN_IF_ERROR(InitNormalizer(n, label));
    return absl::OkStatus();
  } else {
    return absl::InvalidArgumentError(
        label + ": normalizer '" + type +
        "' is not supported (supported: none, NFC, NFKC, Replace of a string, Prepend, Sequence)");
  }
  normalizers_.push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status BpeTokenizer::InitPreTokenizer(const json& node, const std::string& label) {
  if (node.is_null()) return absl::OkStatus();
  const std::string type = node.value("type", "");
  if (type == "Sequence" && node.contains("pretokenizers") && node["pretokenizers"].is_array()) {
    for (const json& n : node["pretokenizers"]) SHARDLM_RETURN_IF_ERROR(InitPreTokenizer(n, label));
    return absl::OkStatus();
  }
  PreTokStep step;
  if (type == "Split") {
    step.kind = PreTokStep::kSplit;
    const std::string behavior = node.value("behavior", "");
    if (behavior != "Isolated" && behavior != "Removed") {
      return absl::InvalidArgumentError(label + ": Split behavior '" + behavior +
                                        "' is not supported (supported: Isolated, Removed)");
    }
    if (node.value("invert", false))
      return absl::InvalidArgumentError(label + ": Split invert=true is not supported");
    step.remove_matches = behavior == "Removed";
    const json& pattern = node.contains("pattern") ? node["pattern"] : json();
    std::string regex;
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      regex = pattern["Regex"].get<std::string>();
    } else if (pattern.contains("String") && pattern["String"].is_string()) {
      // A literal string: quote it for PCRE2.
      regex = "\\Q" + pattern["String"].get<std::string>() + "\\E";
    } else {
      return absl::InvalidArgumentError(label + ": Split needs a Regex or String pattern");
    }
    SHARDLM_ASSIGN_OR_RETURN(step.regex, CompileRegex(regex, label));
  } else if (type == "ByteLevel") {
    step.kind = PreTokStep::kByteLevel;
    step.add_prefix_space = node.value("add_prefix_space", false);
    if (node.value("use_regex", true)) {
      SHARDLM_ASSIGN_OR_RETURN(step.regex, CompileRegex(kGpt2Pattern, label));
    }
  } else {
    return absl::InvalidArgumentError(label + ": pre-tokenizer '" + type +
                                      "' is not supported (supported: Sequence, Split, ByteLevel)");
  }
  pretok_.push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status BpeTokenizer::InitPostProcessor(const json& node, const std::string& label) {
  if (node.is_null()) return absl::OkStatus();
  const std::string type = node.value("type", "");
  if (type == "Sequence" && node.contains("processors") && node["processors"].is_array()) {
    for (const json& n : node["processors"]) SHARDLM_RETURN_IF_ERROR(InitPostProcessor(n, label));
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing") return absl::OkStatus();  // ByteLevel etc. add no tokens
  if (!node.contains("single") || !node["single"].is_array()) {
    return absl::InvalidArgumentError(label + ": TemplateProcessing needs 'single'");
  }
  bool after_sequence = false;
  for (const json& item : node["single"]) {
    if (item.contains("Sequence")) {
      after_sequence = true;
      continue;
    }
    if (!item.contains("SpecialToken")) continue;
    const std::string name = item["SpecialToken"].value("id", "");
    const json& specials = node.contains("special_tokens") ? node["special_tokens"] : json();
    if (!specials.contains(name) || !specials[name].contains("ids") || !specials[name]["ids"].is_array()) {
      return absl::InvalidArgumentError(label + ": TemplateProcessing special token '" + name +
                                        "' has no ids");
    }
    for (const json& id : specials[name]["ids"]) {
      (after_sequence ? suffix_ids_ : prefix_ids_).push_back(id.get<int32_t>());
    }
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::Init(const json& root, const std::string& label) {
  SHARDLM_RETURN_IF_ERROR(InitModel(root.contains("model") ? root["model"] : json(), label));
  SHARDLM_RETURN_IF_ERROR(InitNormalizer(root.contains("normalizer") ? root["normalizer"] : json(), label));
  SHARDLM_RETURN_IF_ERROR(
      InitPreTokenizer(root.contains("pre_tokenizer") ? root["pre_tokenizer"] : json(), label));
  SHARDLM_RETURN_IF_ERROR(
      InitPostProcessor(root.contains("post_processor") ? root["post_processor"] : json(), label));
  if (root.contains("decoder") && !root["decoder"].is_null()) {
    const std::string type = root["decoder"].value("type", "");
    if (type != "ByteLevel" && type != "Sequence") {
      return absl::InvalidArgumentError(label + ": decoder '" + type +
                                        "' is not supported (supported: ByteLevel, Sequence)");
    }
  }
  if (root.contains("added_tokens") && root["added_tokens"].is_array()) {
    for (const json& t : root["added_tokens"]) {
      AddedToken a;
      a.content = t.value("content", "");
      a.id = t.value("id", -1);
      a.special = t.value("special", false);
      a.lstrip = t.value("lstrip", false);
      a.rstrip = t.value("rstrip", false);
      if (a.content.empty() || a.id < 0 || a.id > (1 << 24)) {
        return absl::InvalidArgumentError(label + ": added token with empty content or bad id");
      }
      if (static_cast<size_t>(a.id) >= token_bytes_.size()) token_bytes_.resize(a.id + 1);
      token_bytes_[a.id] = a.content;
      if (a.special) special_ids_.insert(a.id);
      added_.push_back(std::move(a));
    }
  }
  for (size_t i = 0; i < added_.size(); ++i) {
    added_by_first_byte_[static_cast<unsigned char>(added_[i].content[0])].push_back(i);
  }
  for (const std::string& bytes : token_bytes_) {
    max_token_bytes_ = std::max<int64_t>(max_token_bytes_, static_cast<int64_t>(bytes.size()));
  }
  for (auto& [byte, list] : added_by_first_byte_) {
    std::sort(list.begin(), list.end(),
              [&](size_t a, size_t b) { return added_[a].content.size() > added_[b].content.size(); });
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::Bpe(const std::string& spelled, std::vector<int32_t>* ids,
                               const StopCheck& stop) const {
  if (ignore_merges_) {
    auto whole = vocab_.find(spelled);
    if (whole != vocab_.end()) {
      ids->push_back(whole->second);
      return absl::OkStatus();
    }
  }
  const bool cacheable = spelled.size() <= 256;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(spelled);
    if (it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return absl::OkStatus();
    }
  }
  // Start from one symbol per code point, then merge the lowest-rank pair
  // (leftmost on ties) until no pair has a merge. The symbols are a linked
  // list and the candidate pairs a min-heap of (rank, position), as in Hugging
  // Face's tokenizers: O(n log n) in the piece's length, where rescanning the
  // list for every merge was quadratic (64k repeated letters took 7 s).
  std::vector<int32_t> syms;
  for (size_t i = 0; i < spelled.size();) {
    size_t len = 1;
    while (i + len < spelled.size() && (static_cast<unsigned char>(spelled[i + len]) & 0xC0) == 0x80) ++len;
    auto it = vocab_.find(spelled.substr(i, len));
    if (it != vocab_.end()) {
      syms.push_back(it->second);
    } else if (byte_fallback_) {
      for (size_t b = i; b < i + len; ++b)
        syms.push_back(byte_tokens_[static_cast<unsigned char>(spelled[b])]);
    }
    i += len;
  }
  SHARDLM_RETURN_IF_ERROR(MergeSymbols(syms, stop));
  ids->insert(ids->end(), syms.begin(), syms.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() > 100000) cache_.clear();
    cache_.emplace(spelled, std::move(syms));
  }
  return absl::OkStatus();
}

}  // namespace bpe

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(const std::string& text,
                                                               const std::string& label) {
  bpe::json root = bpe::json::parse(text, nullptr, false);
  if (root.is_discarded() || !root.is_object())
    return absl::InvalidArgumentError(label + ": not a JSON object");
  auto tok = std::make_unique<bpe::BpeTokenizer>();
  absl::Status st;
  try {
    st = tok->Init(root, label);
  } catch (const bpe::json::exception& e) {
    st = absl::InvalidArgumentError(label + ": " + e.what());
  }
  if (!st.ok()) return st;
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::ForModel(const std::string& model) {
  SHARDLM_ASSIGN_OR_RETURN(std::string text, ReadTokenizerJson(model));
  return FromJson(text, IsGgufFile(model) ? model : model + "/tokenizer.json");
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  SHARDLM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return FromJson(text, path);
}

}  // namespace shardlm
