// A generated sequence's text as a stream shows it: detokenized token by
// token (special tokens skipped) and cut before the earliest stop string. Text
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
//
// With a minimum indent (llama.cpp's n_indent, for fill-in-the-middle in
// editors: a gap's code should not end the block it sits in), a line after
// the first that starts with less indentation (spaces or tabs) before its
// first other character ends the text too, after the newline before it.
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
  StopText(const Tokenizer* tokenizer, std::vector<std::string> stops, int min_indent = 0);
  // Adds a token; returns the text that may be released now. Once stopped,
  // later tokens add nothing.
  std::string Add(int32_t token);
  // The rest: the held tail (nothing once stopped).
  std::string Finish();
  bool stopped() const { return stopped_; }

 private:
  std::string Push(const std::string& piece);
  // Where in held_ a line indented less than min_indent_ starts (after its
  // newline; npos: none), and how much of held_'s end must wait to be known.
  size_t DedentAt(size_t* undecided) const;

  std::vector<std::string> stops_;
  std::unique_ptr<IncrementalDetokenizer> detok_;
  std::string held_;  // a tail that may be the start of a stop string
  bool stopped_ = false;
  int min_indent_ = 0;
  bool held_at_line_start_ = false;  // held_ begins right after a newline already released
};

}  // namespace shardlm
