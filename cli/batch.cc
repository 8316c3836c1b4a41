// `shardlm batch`: a JSONL file of prompts through one engine at full
// throughput (seed 000's offline mode), or through a running server.
//
//   shardlm batch --model DIR [--tp N] --input prompts.jsonl --output results.jsonl
//       [--max-num-seqs 8] [--policy continuous|static] [--json-summary s.json]
//
// Input, one JSON object a line: "prompt" (text, needs tokenizer.json) or
// "prompt_ids"; optional "max_new_tokens" (16), "ignore_eos", "stop" (strings),
// "stop_token_ids", and the API's sampling fields at the top level
// ("temperature", "top_p", "top_k", "min_p", "seed", "repetition_penalty",
// "presence_penalty", "frequency_penalty"). Output, one line per input line
// in input order: {"index", "token_ids", "text", "finish_reason"}, or
// {"index", "error": "line N: ..."} for a line that could not run (the others
// go on; the exit code is then 1). Blank lines are skipped and not numbered
// in the output, but error messages give the file's line number.
//
// In-process, every line is submitted to one Engine at once (its queue limits
// lifted) and the engine steps until idle, so the scheduler, not the file
// order, decides what runs together. Progress goes to stderr: one redrawn
// line on a terminal, a plain line every 2 s otherwise.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/remote_client.h"
#include "common/status.h"
#include "tokenizer/incremental_detokenizer.h"

namespace shardlm {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Item {
  int line = 0; // in the file, from 1
  std::string error;
  PromptSpec prompt;
  GenerateRequest request;
  std::vector<std::string> stop;
  // Results.
  std::vector<int32_t> tokens;
  std::string text;
  std::string finish;
};

// Parses one line into `item` (request fields), or sets item.error.
void ParseLine(const std::string &text, Item &item) {
  auto fail = [&](const std::string &why) {
    item.error = absl::StrCat("line ", item.line, ": ", why);
  };
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return fail("not a JSON object");
  GenerateRequest &r = item.request;
  r.sampling.temperature = 1.0f;
  bool has_prompt = false;
  try {
    for (auto &[key, v] : j.items()) {
      if (key == "prompt") {
        if (!v.is_string())
          return fail("\"prompt\" must be a string");
        item.prompt.is_text = true;
        item.prompt.text = v.get<std::string>();
        has_prompt = true;
      } else if (key == "prompt_ids") {
        if (!v.is_array())
          return fail("\"prompt_ids\" must be an array of token ids");
        for (auto &id : v) {
          if (!id.is_number_integer())
            return fail("\"prompt_ids\" must hold integers");
          const int64_t x = id.get<int64_t>();
          if (x < 0 || x > std::numeric_limits<int32_t>::max())
            return fail("\"prompt_ids\" holds a negative or huge id");
          item.prompt.ids.push_back(static_cast<int32_t>(x));
        }
        has_prompt = true;
      } else if (key == "max_new_tokens") {
        if (!v.is_number_integer())
          return fail("\"max_new_tokens\" must be an integer");
        const int64_t x = v.get<int64_t>();
        if (x < 0 || x > (1 << 20))
          return fail("\"max_new_tokens\" must be in [0, 1048576]");
        r.max_new_tokens = static_cast<int32_t>(x);
      } else if (key == "ignore_eos") {
        if (!v.is_boolean())
          return fail("\"ignore_eos\" must be true or false");
        r.ignore_eos = v.get<bool>();
      } else if (key == "stop") {
        if (v.is_string())
          v = json::array({v});
        if (!v.is_array())
          return fail("\"stop\" must be a string or an array of strings");
        for (auto &s : v) {
          if (!s.is_string() || s.get<std::string>().empty())
            return fail("\"stop\" must hold non-empty strings");
          item.stop.push_back(s.get<std::string>());
        }
      } else if (key == "stop_token_ids") {
        if (!v.is_array())
          return fail("\"stop_token_ids\" must be an array");
        for (auto &id : v) {
          if (!id.is_number_integer())
            return fail("\"stop_token_ids\" must hold integers");
          r.stop_token_ids.push_back(id.get<int32_t>());
        }
      } else if (key == "seed") {
        if (!v.is_number_integer() || v.get<int64_t>() < 0)
          return fail("\"seed\" must be an integer >= 0");
        r.has_seed = true;
        r.sampling.seed = v.get<uint64_t>();
      } else if (key == "top_k") {
        if (!v.is_number_integer())
          return fail("\"top_k\" must be an integer");
        r.sampling.top_k = v.get<int32_t>();
      } else if (key == "temperature" || key == "top_p" || key == "min_p" ||
                 key == "repetition_penalty" || key == "presence_penalty" ||
                 key == "frequency_penalty") {
        if (!v.is_number())
          return fail(absl::StrCat("\"", key, "\" must be a number"));
        const float x = v.get<float>();
        if (key == "temperature")
          r.sampling.temperature = x;
        if (key == "top_p")
          r.sampling.top_p = x;
        if (key == "min_p")
          r.sampling.min_p = x;
        if (key == "repetition_penalty")
          r.sampling.repetition_penalty = x;
        if (key == "presence_penalty")
          r.sampling.presence_penalty = x;
        if (key == "frequency_penalty")
          r.sampling.frequency_penalty = x;
      } else {
        return fail(absl::StrCat("unknown key \"", key, "\""));
      }
    }
  } catch (const json::exception &e) {
    return fail(e.what());
  }
  if (!has_prompt)
    return fail("needs \"prompt\" or \"prompt_ids\"");
}

class Progress {
public:
  explicit Progress(size_t total)
      : total_(total), tty_(isatty(STDERR_FILENO) == 1), start_(Clock::now()) {}
  void Update(size_t done, int64_t tokens, bool last = false) {
    const auto now = Clock::now();
    if (!last && now - shown_ < (tty_ ? std::chrono::milliseconds(200)
                                      : std::chrono::seconds(2)))
      return;
    shown_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double rate = secs > 0 ? tokens / secs : 0;
    const double eta = done > 0 ? secs * (total_ - done) / done : 0;
    std::fprintf(stderr, "%s%zu/%zu requests  %.1f tok/s  ETA %.0f s%s",
                 tty_ ? "\r" : "", done, total_, rate, eta,
                 tty_ && !last ? "   " : "\n");
    std::fflush(stderr);
  }

private:
  size_t total_;
  bool tty_;
  Clock::time_point start_, shown_{};
};

// Runs the valid items on one local engine.
absl::Status RunLocal(const FlagSet &f, const CliEnv &env,
                      std::vector<Item> &items, Progress &progress,
                      int64_t *prompt_tokens) {
  Engine::Options eo;
  eo.max_num_seqs = static_cast<int32_t>(f.GetInt("max-num-seqs"));
  eo.policy = f.GetString("policy");
  eo.max_queued_requests =
      std::numeric_limits<int32_t>::max(); // the whole file queues at once
  eo.max_queued_tokens = std::numeric_limits<int64_t>::max();
  SHARDLM_ASSIGN_OR_RETURN(LocalModel m, OpenModel(f, env, eo));
  Engine &engine = *m.engine;
  std::map<int64_t, Item *> by_id;
  std::map<int64_t, std::unique_ptr<IncrementalDetokenizer>> detok;
  std::vector<int64_t> to_stop; // stop strings matched during a step
  int64_t out_tokens = 0;
  for (Item &item : items) {
    if (!item.error.empty())
      continue;
    if (item.prompt.is_text) {
      if (!m.tokenizer) {
        item.error = absl::StrCat(
            "line ", item.line,
            ": \"prompt\" needs tokenizer.json; give \"prompt_ids\"");
        continue;
      }
      auto ids =
          m.tokenizer->Encode(item.prompt.text, /*add_special_tokens=*/true);
      if (!ids.ok()) {
        item.error = absl::StrCat("line ", item.line,
                                  ": prompt: ", ids.status().message());
        continue;
      }
      item.request.prompt = *ids;
    } else {
      item.request.prompt = item.prompt.ids;
    }
    if (!item.stop.empty() && !m.tokenizer) {
      item.error =
          absl::StrCat("line ", item.line, ": \"stop\" needs tokenizer.json");
      continue;
    }
    item.request.on_token = [&, it = &item](int32_t token, float,
                                            const std::vector<TopLogprob> &) {
      it->tokens.push_back(token);
      ++out_tokens;
      if (it->stop.empty() || !it->finish.empty())
        return;
      it->text += detok.at(reinterpret_cast<intptr_t>(it))->Append(token);
      for (const std::string &s : it->stop) {
        const size_t at = it->text.find(s);
        if (at == std::string::npos)
          continue;
        it->text.resize(at);
        it->finish = "stop";
        for (auto &[id, p] : by_id) {
          if (p == it)
            to_stop.push_back(id);
        }
        break;
      }
    };
    if (!item.stop.empty()) {
      detok[reinterpret_cast<intptr_t>(&item)] =
          std::make_unique<IncrementalDetokenizer>(*m.tokenizer, true);
    }
    *prompt_tokens += static_cast<int64_t>(item.request.prompt.size());
    auto id = engine.Submit(item.request);
    if (!id.ok()) {
      item.error =
          absl::StrCat("line ", item.line, ": ", id.status().message());
      continue;
    }
    by_id[*id] = &item;
  }
  size_t done = 0;
  for (const Item &item : items)
    done += !item.error.empty();
  while (!engine.Idle()) {
    absl::Status st = engine.Step();
    for (int64_t id : to_stop)
      engine.Stop(id);
    to_stop.clear();
    for (auto &[id, r] : engine.TakeFinished()) {
      Item &item = *by_id.at(id);
      ++done;
      if (!r.status.ok()) {
        item.error = absl::StrCat("line ", item.line, ": ", r.status.message());
        continue;
      }
      if (item.finish.empty()) {
        item.finish = FinishReasonName(r.finish_reason);
        if (m.tokenizer)
          item.text =
              m.tokenizer->Decode(r.tokens, /*skip_special_tokens=*/true);
      }
      item.tokens = r.tokens;
    }
    progress.Update(done, out_tokens);
    if (!st.ok() && engine.Idle())
      break;
  }
  return absl::OkStatus();
}

// Sends the valid items to a server, --concurrency at a time.
void RunRemote(const FlagSet &f, std::vector<Item> &items, Progress &progress) {
  std::mutex mu;
  size_t next = 0, done = 0;
  int64_t tokens = 0;
  auto worker = [&] {
    while (true) {
      Item *item;
      {
        std::lock_guard<std::mutex> lock(mu);
        while (next < items.size() && !items[next].error.empty())
          ++next;
        if (next >= items.size())
          return;
        item = &items[next++];
      }
      auto r =
          RemoteGenerate(f.GetString("server"), item->prompt, item->request,
                         item->stop, [](const std::string &) {});
      std::lock_guard<std::mutex> lock(mu);
      if (!r.ok()) {
        item->error =
            absl::StrCat("line ", item->line, ": ", r.status().message());
      } else {
        item->tokens = r->first.tokens;
        item->text = r->second;
        item->finish = FinishReasonName(r->first.finish_reason);
        tokens += static_cast<int64_t>(item->tokens.size());
      }
      progress.Update(++done, tokens);
    }
  };
  std::vector<std::thread> threads;
  for (int64_t i = 0; i < f.GetInt("concurrency"); ++i)
    threads.emplace_back(worker);
  for (auto &t : threads)
    t.join();
}

} // namespace

int RunBatch(int argc, char **argv, const CliEnv &env) {
  FlagSet f("batch");
  f.String("model", "checkpoint directory");
  f.String("server",
           "send the file to a running shardlm server at HOST:PORT instead");
  f.String("input", "JSONL prompts, one object a line", true);
  f.String("output", "JSONL results, one line per input line in input order",
           true);
  f.Int("tp", "tensor-parallel worker processes to start", 1, 1, 64);
  f.String("dtype", "compute dtype", false, "auto", {"auto", "f32", "bf16"});
  f.Int("kv-cache-mb", "KV cache budget per rank in MiB", 256, 1, 1 << 20);
  f.Int("max-batch-tokens", "tokens per engine step", 2048, 1, 1 << 20);
  f.Int("max-num-seqs", "sequences running at once", 256, 1, 65536);
  f.String("policy", "scheduling: continuous or static (a baseline)", false,
           "continuous", {"continuous", "static"});
  f.Int("concurrency", "with --server: requests in flight", 64, 1, 4096);
  f.String("json-summary", "also write the summary as JSON to this file");
  int code = 0;
  if (!ParseCommandLine(f, argc, argv, 0, &code))
    return code;
  if (f.Has("model") == f.Has("server"))
    return Fail(
        absl::InvalidArgumentError("give exactly one of --model or --server"));
  std::ifstream in(f.GetString("input"));
  if (!in)
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--input: cannot read ", f.GetString("input"))));
  std::vector<Item> items;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    Item item;
    item.line = n;
    ParseLine(line, item);
    items.push_back(std::move(item));
  }
  Progress progress(items.size());
  const auto t0 = Clock::now();
  int64_t prompt_tokens = 0;
  if (f.Has("server")) {
    RunRemote(f, items, progress);
  } else if (absl::Status st =
                 RunLocal(f, env, items, progress, &prompt_tokens);
             !st.ok()) {
    return Fail(st);
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  std::ofstream out(f.GetString("output"));
  if (!out)
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--output: cannot write ", f.GetString("output"))));
  int64_t out_tokens = 0;
  int failed = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const Item &item = items[i];
    json j = {{"index", i}};
    if (!item.error.empty()) {
      j["error"] = item.error;
      ++failed;
    } else {
      j["token_ids"] = item.tokens;
      j["text"] = item.text;
      j["finish_reason"] = item.finish;
      out_tokens += static_cast<int64_t>(item.tokens.size());
    }
    out << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  }
  progress.Update(items.size(), out_tokens, /*last=*/true);
  json summary = {{"requests", items.size()},
                  {"failed", failed},
                  {"prompt_tokens", prompt_tokens},
                  {"output_tokens", out_tokens},
                  {"seconds", secs},
                  {"requests_per_s", items.size() / secs},
                  {"output_tokens_per_s", out_tokens / secs},
                  {"policy", f.GetString("policy")},
                  {"max_num_seqs", f.GetInt("max-num-seqs")}};
  std::fprintf(stderr,
               "batch: %zu requests (%d failed), %lld prompt and %lld output "
               "tokens in %.2f s: %.2f req/s, %.1f output tok/s\n",
               items.size(), failed, static_cast<long long>(prompt_tokens),
               static_cast<long long>(out_tokens), secs, items.size() / secs,
               out_tokens / secs);
  if (f.Has("json-summary"))
    std::ofstream(f.GetString("json-summary")) << summary.dump(2) << "\n";
  if (failed > 0) {
    std::fprintf(stderr,
                 "batch: %d of %zu lines failed; see their \"error\" in %s\n",
                 failed, items.size(), f.GetString("output").c_str());
    return 1;
  }
  return 0;
}

} // namespace shardlm
