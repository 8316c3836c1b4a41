// One line of a `shardlm batch` input file. Both the in-process and the
// --server mode parse lines here, so a bad line gets the same message either
// way. (Stop strings are cut by tokenizer/stop_text.h, as in the API.)
//
// A line is a JSON object (docs/batch_and_loadgen.md):
//   {"prompt": "Once upon a time", "max_new_tokens": 32, "stop": ["\n"],
//    "temperature": 0.7, "top_p": 0.9, "seed": 1}
//   {"prompt_ids": [128000, 9906, 1917], "ignore_eos": true}
//   {"prompt": "Name a colour:", "choice": ["red", "green"]}
// A constraint is one of "json_schema" (an object, or its JSON text),
// "json_object" (true), "regex", "grammar" (Lark) and "choice" (strings).
//
//   SHARDLM_ASSIGN_OR_RETURN(BatchItem item, ParseBatchLine(line));
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "constraints/constraint.h"
#include "coordinator/engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace shardlm {

struct BatchItem {
  bool is_text = false;
  std::string text;               // "prompt" (tokenized with special tokens, as the API does)
  EngineRequest request;          // prompt ids (for "prompt_ids"), limits, sampling, stop ids
  std::vector<std::string> stop;  // stop strings: the text ends before the first one found
  ConstraintSpec constraint;      // compiled by whoever runs the line (kNone: none)
};

// The keys a line may hold, in the order the docs list them.
const std::vector<std::string>& BatchLineKeys();

// Parses one line. InvalidArgument naming the key and what it must be: bad
// JSON, a value of the wrong type, an unknown key, no or both prompts, an
// empty prompt, too many or too long stop strings. Ranges that the engine
// checks (temperature, vocabulary, context length) are left to it, so that
// its message, the same in-process and from a server, is the one reported.
// A null value counts as absent.
absl::StatusOr<BatchItem> ParseBatchLine(const std::string& line);

}  // namespace shardlm
