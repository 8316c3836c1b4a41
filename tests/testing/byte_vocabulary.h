// A byte-level tokenizer.json for tiny test models of 256 ids: ids 0-254 are
// the bytes 0-254, id 255 is a special end-of-sequence token. Constrained
// decoding's tests compile their regexes and choices against it.
//   auto tokenizer = Tokenizer::FromJson(ByteVocabularyJson(), "bytes.json");
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/byte_level.h"

namespace shardlm::testing {

constexpr int32_t kByteVocabularyEos = 255;

inline std::string ByteVocabularyJson() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < kByteVocabularyEos; ++b) {
    vocab[ByteLevelTable::Get().Encode(static_cast<unsigned char>(b))] = b;
  }
  const nlohmann::json root = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens", {{{"id", kByteVocabularyEos}, {"content", "<|eos|>"}, {"special", true}}}},
  };
  return root.dump();
}

}  // namespace shardlm::testing
