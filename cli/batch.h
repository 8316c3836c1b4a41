// The pieces of `shardlm batch` that its two modes share: the input lines, the
// in-order writer of result lines with the counts and the progress, and the
// two runners (cli/batch_local.cc: one Engine in this process or over --tp
// worker processes; cli/batch_remote.cc: Generate streams to --server).
//
//   std::vector<BatchLine> lines = ...;           // non-blank lines of --input
//   BatchResults results(out, &lines);
//   SHARDLM_RETURN_IF_ERROR(RunLocalBatch(flags, env, lines, results, &info));
//   // every line has its result in `out`, in input order
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cli/api_client.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/progress.h"

namespace shardlm {

struct BatchLine {
  int64_t line_no;   // in the input file, from 1 (error messages name it)
  std::string text;  // the line, without its newline
};

// What the summary reports beside the counts.
struct BatchRunInfo {
  std::string mode;   // "in-process", "tp N" or "server ADDR"
  double load_s = 0;  // opening the model (in-process), before the clock starts
  int64_t engine_steps = 0;
  int64_t preemptions = 0;
  // Decode throughput (in-process): tokens after each request's first over the
  // span from the first first token to the last token.
  double decode_tokens_per_s = 0;
  int64_t proposed_tokens = 0;  // speculative decoding (in-process)
  int64_t accepted_tokens = 0;
  int64_t lookup_proposed_tokens = 0;  // of those, prompt lookup's
  int64_t lookup_accepted_tokens = 0;
};

// Takes each line's outcome, in any order, and writes the result lines to
// `out` in input order as soon as every earlier line has its own. Single
// threaded: the runners call it from their main thread.
class BatchResults {
 public:
  BatchResults(std::FILE* out, const std::vector<BatchLine>* lines);

  // Starts the clock and the progress line (after the model is loaded).
  void Start();
  // Line `slot` (a position in `lines`: blank lines are not counted) succeeded:
  // {"index": slot, "token_ids", "text", "finish_reason"}.
  void Ok(size_t slot, const std::vector<int32_t>& token_ids, const std::string& text,
          const std::string& finish_reason, int64_t prompt_tokens);
  // Line `slot` failed: {"index": slot, "error": "line N: <message>"}, N
  // its line number in the file.
  void Error(size_t slot, const absl::Status& status);
  // Redraws the progress when it is time to.
  void ShowProgress();
  void Finish();

  int64_t done() const { return done_; }
  int64_t failed() const { return failed_; }
  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t output_tokens() const { return output_tokens_; }
  // From Start to the last line's outcome (the rates' denominator): shutting
  // the engine down afterwards (worker processes, freeing the weights) is
  // not the file's run time. Until then, the time so far.
  double wall_s() const;

 private:
  void Put(size_t slot, std::string line);
  std::string Detail() const;

  std::FILE* out_;
  const std::vector<BatchLine>* lines_;
  std::map<size_t, std::string> ready_;  // finished, waiting for an earlier line
  size_t next_ = 0;                      // the next slot to write
  int64_t done_ = 0, failed_ = 0, prompt_tokens_ = 0, output_tokens_ = 0;
  std::unique_ptr<Progress> progress_;
  double final_wall_s_ = -1;  // set when the last line is done
};

// The message of a failed line after "line N: ": an INVALID_ARGUMENT's own
// message (it names the field), any other code's name and message.
std::string BatchErrorText(const absl::Status& status);

// batch's settings, each bound to its flag where it is declared (batch.cc).
struct BatchFlags {
  ModelFlags local;  // --model, --tp, the engine's, device and collectives flags
  SchedulingFlags scheduling;
  ApiClientFlags remote;  // --server and the connection's flags
  std::string input;
  std::string output;
  std::optional<std::string> json_summary;
  int concurrency = 0;
  double timeout_s = 0;
};

// Runs every line on a model in this process (or its --tp workers).
absl::Status RunLocalBatch(const BatchFlags& f, const CliEnv& env, const std::vector<BatchLine>& lines,
                           BatchResults& results, BatchRunInfo* info);
// Sends every line to --server, at most --concurrency streams at once.
absl::Status RunRemoteBatch(const BatchFlags& f, const CliEnv& env, const std::vector<BatchLine>& lines,
                            BatchResults& results, BatchRunInfo* info);

}  // namespace shardlm
