// `shardlm batch`: runs a JSON-lines file of prompts at full throughput and
// writes one result line per input line, in input order.
//
//   shardlm batch --model DIR --input prompts.jsonl --output results.jsonl
//       --max-num-seqs 64 --policy continuous --json-summary summary.json
//   shardlm batch --server localhost:50051 --concurrency 64 --input p.jsonl --output r.jsonl
//
// In-process every line goes to one Engine, which is stepped until all are
// done; with --server each line is one Generate stream. The formats, the
// error lines and the summary are in docs/batch_and_loadgen.md.
#include "cli/batch.h"

#include <algorithm>
#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/api_client.h"
#include "cli/commands.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace shardlm {

namespace {

using json = nlohmann::json;

// A result line, its keys in the documented order.
std::string Dump(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

absl::StatusOr<std::vector<BatchLine>> ReadLines(const std::string& path) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) return absl::NotFoundError("--input: cannot read '" + path + "'");
    in = &file;
  }
  std::vector<BatchLine> lines;
  std::string line;
  for (int64_t line_no = 1; std::getline(*in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank: no request, no output
    lines.push_back({line_no, std::move(line)});
  }
  if (in->bad()) return absl::DataLossError("--input: error reading '" + path + "'");
  return lines;
}

// Flags that only one of the two modes reads; given to the other, an error.
absl::Status CheckMode(const FlagSet& f) {
  if (f.Has("model") == f.Has("server"))
    return absl::InvalidArgumentError("give exactly one of --model or --server");
  const bool remote = f.Has("server");
  static const std::vector<const char*> kLocal = {
      "tp",           "dtype",   "device",           "kv-cache-mb",          "max-batch-tokens",
      "max-num-seqs", "policy",  "no-overlap-steps", "cuda-graph-max-batch", "warmup-tokens",
      "collectives",  "weights", "kv-dtype",         "speculative",          "draft-model"};
  static const std::vector<const char*> kRemote = {"concurrency", "timeout-s", "tls-ca",
                                                   "tls-cert",    "tls-key",   "api-key-file"};
  for (const char* name : remote ? kLocal : kRemote) {
    if (f.Has(name)) {
      return absl::InvalidArgumentError(
          remote ? absl::StrCat("--", name, " sets up a local engine; a server has its own settings")
                 : absl::StrCat("--", name, " goes with --server"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string BatchErrorText(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kInvalidArgument) return std::string(status.message());
  return absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message());
}

BatchResults::BatchResults(std::FILE* out, const std::vector<BatchLine>* lines) : out_(out), lines_(lines) {}

void BatchResults::Start() { progress_ = std::make_unique<Progress>("batch", lines_->size()); }

double BatchResults::wall_s() const {
  if (final_wall_s_ >= 0) return final_wall_s_;
  return progress_ ? progress_->elapsed_s() : 0.0;
}

void BatchResults::Ok(size_t slot, const std::vector<int32_t>& token_ids, const std::string& text,
                      const std::string& finish_reason, int64_t prompt_tokens) {
  prompt_tokens_ += prompt_tokens;
  output_tokens_ += static_cast<int64_t>(token_ids.size());
  Put(slot,
      Dump({{"index", slot}, {"token_ids", token_ids}, {"text", text}, {"finish_reason", finish_reason}}));
}

void BatchResults::Error(size_t slot, const absl::Status& status) {
  ++failed_;
  const int64_t line_no = (*lines_)[slot].line_no;
  Put(slot, Dump({{"index", slot}, {"error", absl::StrCat("line ", line_no, ": ", BatchErrorText(status))}}));
}

void BatchResults::Put(size_t slot, std::string line) {
  ++done_;
  if (done_ == static_cast<int64_t>(lines_->size())) final_wall_s_ = wall_s();
  ready_.emplace(slot, std::move(line));
  for (auto it = ready_.begin(); it != ready_.end() && it->first == next_; it = ready_.erase(it), ++next_) {
    std::fputs(it->second.c_str(), out_);
    std::fputc('\n', out_);
  }
}

std::string BatchResults::Detail() const {
  const double s = std::max(wall_s(), 1e-9);
  std::string d = absl::StrFormat("%.1f output tok/s", static_cast<double>(output_tokens_) / s);
  if (failed_ > 0) absl::StrAppend(&d, ", ", failed_, " failed");
  return d;
}

void BatchResults::ShowProgress() {
  if (progress_) progress_->Update(done_, Detail());
}

void BatchResults::Finish() {
  if (progress_) progress_->Finish(done_, Detail());
  std::fflush(out_);
}

namespace {

void AddBatchFlags(FlagSet& f, BatchFlags* o) {
  f.String("model", "checkpoint directory: run the file on an engine in this process").To(&o->local.model);
  f.String("server", "send the file to a running shardlm server at HOST:PORT instead").To(&o->remote.server);
  f.String("input", "JSON lines, one request each ('-': stdin)", /*required=*/true).To(&o->input);
  f.String("output", "JSON lines, one result per input line in input order ('-': stdout)", /*required=*/true)
      .To(&o->output);
  f.String("json-summary", "also write the summary (counts, tokens, wall time, rates) as JSON here")
      .To(&o->json_summary);
  f.Int("tp", "tensor-parallel worker processes to start (in-process mode)", 1, 1, 64).To(&o->local.tp);
  AddEngineFlags(f, &o->local.engine);
  AddDeviceFlags(f, &o->local.device);
  AddCollectivesFlag(f, &o->local.collectives);
  AddSchedulingFlags(f, &o->scheduling);
  f.Int("concurrency", "Generate streams in flight at once (--server)", 64, 1, 100000).To(&o->concurrency);
  f.Float("timeout-s", "deadline of each request (--server)", 600, 0, 1e7, /*min_exclusive=*/true)
      .To(&o->timeout_s);
  AddApiClientFlags(f, &o->remote);
}

// The run's summary (the --json-summary file), and its line on stderr.
json Summary(const BatchFlags& f, const BatchResults& results, const BatchRunInfo& info, int64_t total) {
  const double wall = std::max(results.wall_s(), 1e-9);
  json summary = {
      {"mode", info.mode},
      {"requests", total},
      {"succeeded", total - results.failed()},
      {"failed", results.failed()},
      {"prompt_tokens", results.prompt_tokens()},
      {"output_tokens", results.output_tokens()},
      {"wall_s", wall},
      {"load_s", info.load_s},
      {"requests_per_s", static_cast<double>(total) / wall},
      {"output_tokens_per_s", static_cast<double>(results.output_tokens()) / wall},
      {"total_tokens_per_s", static_cast<double>(results.prompt_tokens() + results.output_tokens()) / wall}};
  if (!f.local.model) {
    summary["concurrency"] = f.concurrency;
  } else {
    summary["policy"] = f.scheduling.policy;
    summary["max_num_seqs"] = f.scheduling.max_num_seqs;
    summary["engine_steps"] = info.engine_steps;
    summary["preemptions"] = info.preemptions;
    summary["decode_tokens_per_s"] = info.decode_tokens_per_s;
    if (info.proposed_tokens > 0) {
      summary["speculation"] = {{"proposed_tokens", info.proposed_tokens},
                                {"accepted_tokens", info.accepted_tokens},
                                {"lookup_proposed_tokens", info.lookup_proposed_tokens},
                                {"lookup_accepted_tokens", info.lookup_accepted_tokens},
                                {"acceptance_rate", static_cast<double>(info.accepted_tokens) /
                                                        static_cast<double>(info.proposed_tokens)}};
    }
  }
  std::fprintf(stderr,
               "batch: %lld requests (%lld failed), %lld prompt tokens, %lld output tokens in %.2f s: "
               "%.2f requests/s, %.1f output tokens/s\n",
               static_cast<long long>(total), static_cast<long long>(results.failed()),
               static_cast<long long>(results.prompt_tokens()),
               static_cast<long long>(results.output_tokens()), wall, static_cast<double>(total) / wall,
               static_cast<double>(results.output_tokens()) / wall);
  return summary;
}

}  // namespace

int RunBatch(int argc, char** argv, const CliEnv& env) {
  BatchFlags f;
  FlagSet flags("batch");
  AddBatchFlags(flags, &f);
  int code = 0;
  if (!ParseCommandLine(flags, argc, argv, 0, &code)) return code;
  if (absl::Status st = CheckMode(flags); !st.ok()) return Fail(st);

  auto lines = ReadLines(f.input);
  if (!lines.ok()) return Fail(lines.status());
  const std::string& out_path = f.output;
  std::FILE* out = out_path == "-" ? stdout : std::fopen(out_path.c_str(), "wb");
  if (out == nullptr) return Fail(absl::NotFoundError("--output: cannot write '" + out_path + "'"));
  BatchResults results(out, &*lines);
  BatchRunInfo info;
  const absl::Status st = f.local.model ? RunLocalBatch(f, env, *lines, results, &info)
                                        : RunRemoteBatch(f, env, *lines, results, &info);
  results.Finish();
  const bool write_failed = std::ferror(out) != 0 || (out != stdout && std::fclose(out) != 0);
  if (write_failed) return Fail(absl::DataLossError("--output: error writing '" + out_path + "'"));
  if (!st.ok() && results.done() < static_cast<int64_t>(lines->size())) return Fail(st);

  const int64_t total = static_cast<int64_t>(lines->size());
  const json summary = Summary(f, results, info, total);
  if (f.json_summary) {
    std::ofstream js(*f.json_summary, std::ios::binary | std::ios::trunc);
    js << summary.dump(2) << "\n";
    if (!js.good())
      return Fail(absl::DataLossError("--json-summary: cannot write '" + *f.json_summary + "'"));
  }
  if (!st.ok()) return Fail(st);  // e.g. interrupted: the lines not run say CANCELLED
  if (results.failed() > 0) {
    std::fprintf(stderr, "batch: %lld of %lld lines failed (their output lines hold \"error\")\n",
                 static_cast<long long>(results.failed()), static_cast<long long>(total));
    return 1;
  }
  return 0;
}

}  // namespace shardlm
