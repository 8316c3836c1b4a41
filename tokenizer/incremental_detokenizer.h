// Streaming detokenizer: turns generated ids into text pieces as they come.
//
// Every piece is valid UTF-8 and non-empty; bytes of a character split across
// tokens are held until the character completes (seed 003's bug: emitting
// broken or empty deltas). The concatenation of all pieces plus Finish()
// equals Tokenizer::Decode of the whole sequence.
//
//   IncrementalDetokenizer detok(tok, /*skip_special=*/true);
//   for (int32_t id : ids) if (auto piece = detok.Append(id); !piece.empty()) Emit(piece);
//   if (auto tail = detok.Finish(); !tail.empty()) Emit(tail);
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace shardlm {

class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}

  // Text completed by `id`; empty when it only extends an unfinished character.
  std::string Append(int32_t id);
  // Flushes held bytes (an unfinished character becomes U+FFFD).
  std::string Finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes of an unfinished character
};

}  // namespace shardlm
