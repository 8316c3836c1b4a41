// A generated sequence's text as a stream shows it: detokenized token by
// token (special tokens skipped) and cut before the first stop string. Text
// that could still turn into a stop string is held back, so a reader never
// sees part of one. The Generate API and `shardlm batch` both use it, so a
// stop string ends the text at the same place in-process and from a server.
//
//   StopText text(&tokenizer, {"\n\n", "###"});
//   for (int32_t id : generated) {
//     send(text.Add(id));           // what may be shown now
//     if (text.stopped()) break;    // a stop string appeared: end the sequence
//   }
//   send(text.Finish());            // the held tail, unless stopped
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {

class StopText {
 public:
  // `tokenizer` may be null: the text is then empty.
  StopText(const Tokenizer* tokenizer, std::vector<std::string> stops);
  // Adds a token; returns the text that may be released now. Once stopped,
  // later tokens add nothing.
  std::string Add(int32_t token);
  // The rest: the held tail (nothing once stopped).
  std::string Finish();
  bool stopped() const { return stopped_; }

 private:
  std::string Push(const std::string& piece);

  std::vector<std::string> stops_;
  std::unique_ptr<IncrementalDetokenizer> detok_;
  std::string held_;  // a tail that may be the start of a stop string
  bool stopped_ = false;
};

}  // namespace shardlm
