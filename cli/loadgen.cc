// `shardlm bench`: a load generator for a running server. It sends Generate
// streams of random token-id prompts (ids in [10, vocab), ignore_eos so each
// output has exactly the length asked for) and reports throughput, time to
// first token, time per output token, inter-token and end-to-end latency,
// and the errors by gRPC status code (docs/batch_and_loadgen.md).
//
//   shardlm bench --server localhost:50051 --rate 20 --num-requests 200
//       --prompt-len uniform:64:256 --output-len 128 --shared-prefix-frac 0.5
//   shardlm bench --server localhost:50051 --concurrency 8 --duration-s 60 --json
//
// Arrivals: a Poisson process at --rate requests/s (inf or 0: all at once);
// --concurrency C caps the streams in flight, so with no --rate it is C
// clients sending back to back. Streams run on gRPC's callback API.
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <iostream>
#include <limits>
#include <mutex>
#include <optional>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cli/api_client.h"
#include "cli/commands.h"
#include "cli/loadgen_report.h"
#include "cli/progress.h"
#include "common/grpc_status.h"
#include "common/status.h"

namespace shardlm {

namespace {

namespace pb = ::shardlm::v1;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// A length: "128", "uniform:64:256" (inclusive) or "normal:128:32" (rounded, at least 1).
struct LengthDist {
  enum Kind { kFixed, kUniform, kNormal } kind = kFixed;
  double a = 0, b = 0;
  std::string text;

  static absl::StatusOr<LengthDist> Parse(const std::string& flag, const std::string& text) {
    LengthDist d;
    d.text = text;
    std::vector<std::string> parts = absl::StrSplit(text, ':');
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, " '", text, "': ", why,
                                                     " (give N, uniform:MIN:MAX or normal:MEAN:STDDEV)"));
    };
    int64_t n = 0;
    if (parts.size() == 1) {
      if (!absl::SimpleAtoi(parts[0], &n) || n < 1 || n > (1 << 24)) return bad("N must be in [1, 16777216]");
      d.a = static_cast<double>(n);
      return d;
    }
    if (parts.size() != 3) return bad("malformed");
    if (!absl::SimpleAtod(parts[1], &d.a) || !absl::SimpleAtod(parts[2], &d.b)) return bad("not numbers");
    if (parts[0] == "uniform") {
      d.kind = kUniform;
      if (!(d.a >= 1 && d.b >= d.a && d.b <= (1 << 24))) return bad("need 1 <= MIN <= MAX <= 16777216");
    } else if (parts[0] == "normal") {
      d.kind = kNormal;
      if (!(d.a >= 1 && d.a <= (1 << 24) && d.b >= 0)) return bad("need MEAN in [1, 16777216], STDDEV >= 0");
    } else {
      return bad("unknown distribution '" + parts[0] + "'");
    }
    return d;
  }
  int32_t Draw(std::mt19937_64& rng) const {
    switch (kind) {
      case kFixed:
        return static_cast<int32_t>(a);
      case kUniform:
        return static_cast<int32_t>(
            std::uniform_int_distribution<int64_t>(static_cast<int64_t>(a), static_cast<int64_t>(b))(rng));
      case kNormal:
        return static_cast<int32_t>(
            std::clamp(std::round(std::normal_distribution<double>(a, b)(rng)), 1.0, double{1 << 24}));
    }
    return 1;
  }
};

// Draws the requests: lengths, ids (a shared prefix first) and arrival gaps.
class Workload {
 public:
  Workload(LengthDist prompt, LengthDist output, double prefix_frac, int64_t vocab, double rate,
           uint64_t seed)
      : prompt_(std::move(prompt)),
        output_(std::move(output)),
        prefix_frac_(prefix_frac),
        ids_(10, vocab - 1),
        rate_(rate),
        rng_(seed),
        prefix_rng_(seed ^ 0x9e3779b97f4a7c15ULL) {}

  pb::GenerateRequest Next() {
    const int32_t len = prompt_.Draw(rng_);
    const int32_t shared = static_cast<int32_t>(std::lround(prefix_frac_ * len));
    while (static_cast<int32_t>(prefix_.size()) < shared) prefix_.push_back(ids_(prefix_rng_));
    pb::GenerateRequest req;
    auto* ids = req.mutable_prompt()->mutable_token_ids()->mutable_ids();
    ids->Add(prefix_.begin(), prefix_.begin() + shared);
    for (int32_t i = shared; i < len; ++i) ids->Add(ids_(rng_));
    req.set_max_new_tokens(output_.Draw(rng_));
    req.set_ignore_eos(true);
    return req;
  }
  // Seconds until the next arrival (0: all at once).
  double Gap() { return rate_ > 0 ? std::exponential_distribution<double>(rate_)(rng_) : 0.0; }

 private:
  LengthDist prompt_, output_;
  double prefix_frac_;
  std::uniform_int_distribution<int32_t> ids_;
  double rate_;
  std::mt19937_64 rng_, prefix_rng_;
  std::vector<int32_t> prefix_;
};

struct PhaseLimits {
  int64_t requests = std::numeric_limits<int64_t>::max();
  double duration_s = 0;                      // 0: none
  int cap = std::numeric_limits<int>::max();  // streams in flight
};

// Sends requests from `work` until a limit is reached and every stream has
// ended; each record goes to `rec`. Returns the seconds from the first send to
// the last end.
double RunPhase(const std::string& label, GenerateStreams& streams, Workload& work, const PhaseLimits& lim,
                const CliEnv& env, BenchRecorder* rec) {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<StreamRecord> ended;
  int in_flight = 0;
  int64_t issued = 0;
  Progress progress(
      label, lim.duration_s > 0 && lim.requests == std::numeric_limits<int64_t>::max() ? 0 : lim.requests);
  const Clock::time_point t0 = Clock::now();
  Clock::time_point next_arrival = t0, last_end = t0;
  bool stopped = false;
  while (true) {
    const Clock::time_point now = Clock::now();
    if (!stopped && env.stop != nullptr && env.stop->load()) {
      stopped = true;
      streams.CancelAll();
    }
    const bool more =
        !stopped && issued < lim.requests &&
        (lim.duration_s <= 0 || std::chrono::duration<double>(now - t0).count() < lim.duration_s);
    int flying;
    {
      std::lock_guard<std::mutex> lock(mu);
      flying = in_flight;
    }
    if (more && flying < lim.cap && now >= next_arrival) {
      {
        std::lock_guard<std::mutex> lock(mu);
        ++in_flight;
      }
      ++issued;
      next_arrival += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(work.Gap()));
      streams.Start(work.Next(), [&mu, &cv, &ended](StreamRecord r) {
        std::lock_guard<std::mutex> lock(mu);
        ended.push_back(std::move(r));
        cv.notify_one();
      });
      continue;
    }
    std::deque<StreamRecord> batch;
    {
      std::unique_lock<std::mutex> lock(mu);
      if (!more && in_flight == 0 && ended.empty()) break;
      Clock::time_point wake = now + std::chrono::milliseconds(100);
      if (more && in_flight < lim.cap) wake = std::min(wake, next_arrival);
      cv.wait_until(lock, wake, [&] { return !ended.empty(); });
      batch.swap(ended);
      in_flight -= static_cast<int>(batch.size());
      flying = in_flight;
    }
    for (const StreamRecord& r : batch) {
      last_end = std::max(last_end, r.end);
      rec->Add(r);
    }
    progress.Update(rec->done(), absl::StrCat("in flight ", flying, ", errors ", rec->failed()));
  }
  progress.Finish(rec->done(), absl::StrCat("in flight 0, errors ", rec->failed()));
  return std::chrono::duration<double>(last_end - t0).count();
}

absl::StatusOr<double> ParseRate(const std::string& text) {
  if (text == "inf") return 0.0;
  double rate = 0;
  if (!absl::SimpleAtod(text, &rate) || !(rate >= 0) || std::isinf(rate) || std::isnan(rate)) {
    return absl::InvalidArgumentError(
        "--rate must be requests/s >= 0, or inf (0 and inf: all at once), got '" + text + "'");
  }
  return rate;
}

}  // namespace

namespace {

// bench's settings, each bound to its flag where it is declared.
struct BenchFlags {
  ApiClientFlags client;  // --server and the connection's flags
  std::optional<int64_t> num_requests;
  std::optional<double> duration_s;
  std::string rate;
  int concurrency = 0;
  std::string prompt_len;
  std::string output_len;
  double shared_prefix_frac = 0;
  uint64_t seed = 0;
  int64_t warmup = 0;
  double timeout_s = 0;
  std::optional<int64_t> vocab_size;
  bool json = false;
};

constexpr int64_t kDefaultRequests = 100;

void AddBenchFlags(FlagSet& f, BenchFlags* o) {
  f.String("server", "the shardlm server to load, HOST:PORT", /*required=*/true).To(&o->client.server);
  f.Int("num-requests", "requests to send (with --duration-s: at most this many)", kDefaultRequests, 1,
        int64_t{1} << 40)
      .To(&o->num_requests);
  f.Float("duration-s", "send for this long instead of a fixed number", 0, 0, 1e7, /*min_exclusive=*/true)
      .To(&o->duration_s);
  f.String("rate", "Poisson arrivals, requests/s (inf or 0: all at once)", false, "inf").To(&o->rate);
  f.Int("concurrency", "streams in flight at most (0: no cap); alone: C clients back to back", 0, 0, 1000000)
      .To(&o->concurrency);
  f.String("prompt-len", "prompt tokens: N, uniform:MIN:MAX or normal:MEAN:STDDEV", false, "128")
      .To(&o->prompt_len);
  f.String("output-len", "tokens generated per request, same syntax", false, "128").To(&o->output_len);
  f.Float("shared-prefix-frac", "this share of each prompt is one prefix common to all requests", 0, 0, 1)
      .To(&o->shared_prefix_frac);
  f.Int("seed", "seed of the lengths, ids and arrivals", 0, 0, INT64_MAX).To(&o->seed);
  f.Int("warmup", "requests sent (and awaited) first, not counted", 0, 0, 1 << 20).To(&o->warmup);
  f.Float("timeout-s", "deadline of each request", 600, 0, 1e7, /*min_exclusive=*/true).To(&o->timeout_s);
  f.Int("vocab-size", "draw ids from [10, N) (default: the server's vocab_size from GetModelInfo)", 0, 0,
        int64_t{1} << 31)
      .To(&o->vocab_size);
  f.Bool("json", "print one JSON object instead of the table").To(&o->json);
  AddApiClientFlags(f, &o->client);
}

// How much to send: --num-requests, or --duration-s (with a finite rate or a
// concurrency cap), and the cap.
absl::StatusOr<PhaseLimits> LimitsOf(const BenchFlags& f, double rate) {
  PhaseLimits lim;
  if (f.duration_s) {
    lim.duration_s = *f.duration_s;
    if (f.num_requests) lim.requests = *f.num_requests;
    if (rate == 0 && f.concurrency == 0) {
      return absl::InvalidArgumentError("--duration-s needs a finite --rate or a --concurrency");
    }
  } else {
    lim.requests = f.num_requests.value_or(kDefaultRequests);
  }
  if (f.concurrency > 0) lim.cap = f.concurrency;
  return lim;
}

// The ids' range: --vocab-size, else the server's vocabulary (GetModelInfo).
absl::StatusOr<int64_t> VocabOf(const BenchFlags& f, ApiClient& client) {
  if (f.vocab_size) {
    const int64_t vocab = *f.vocab_size;
    if (vocab <= 10) {
      return absl::InvalidArgumentError(
          absl::StrCat("--vocab-size must be > 10 (ids start at 10), got ", vocab));
    }
    return vocab;
  }
  pb::ModelInfo info;
  grpc::ClientContext ctx;
  client.Prepare(ctx, 30);
  grpc::Status st = client.stub().GetModelInfo(&ctx, pb::GetModelInfoRequest(), &info);
  if (!st.ok()) {
    return absl::Status(FromGrpcStatus(st).code(),
                        absl::StrCat("GetModelInfo at ", client.server(), ": ", GrpcCodeName(st.error_code()),
                                     ": ", st.error_message()));
  }
  if (info.vocab_size() <= 10)
    return absl::FailedPreconditionError("the server's vocabulary has no ids past 10");
  return info.vocab_size();
}

// --warmup requests sent and awaited first, their errors reported, not counted.
void Warmup(int64_t requests, GenerateStreams& streams, Workload warm, const PhaseLimits& lim,
            const CliEnv& env) {
  PhaseLimits wl;
  wl.requests = requests;
  wl.cap = lim.cap;
  BenchRecorder wrec;
  RunPhase("bench warmup", streams, warm, wl, env, &wrec);
  BenchReport w = wrec.Report(0);
  for (const auto& [c, ce] : w.errors) {
    std::fprintf(stderr, "bench: warmup: %lld %s, e.g. %s\n", static_cast<long long>(ce.first), c.c_str(),
                 ce.second.c_str());
  }
}

}  // namespace

int RunBench(int argc, char** argv, const CliEnv& env) {
  BenchFlags f;
  FlagSet flags("bench");
  AddBenchFlags(flags, &f);
  int code = 0;
  if (!ParseCommandLine(flags, argc, argv, 0, &code)) return code;
  auto rate = ParseRate(f.rate);
  if (!rate.ok()) return Fail(rate.status());
  auto prompt_len = LengthDist::Parse("prompt-len", f.prompt_len);
  if (!prompt_len.ok()) return Fail(prompt_len.status());
  auto output_len = LengthDist::Parse("output-len", f.output_len);
  if (!output_len.ok()) return Fail(output_len.status());
  auto limits = LimitsOf(f, *rate);
  if (!limits.ok()) return Fail(limits.status());
  const PhaseLimits lim = *limits;
  auto client = ApiClient::Connect(f.client);
  if (!client.ok()) return Fail(client.status());
  auto vocab_or = VocabOf(f, **client);
  if (!vocab_or.ok()) return Fail(vocab_or.status());
  const int64_t vocab = *vocab_or;
  const double prefix_frac = f.shared_prefix_frac;
  const uint64_t seed = f.seed;
  GenerateStreams streams(client->get(), f.timeout_s);

  if (f.warmup > 0) {
    Warmup(f.warmup, streams, Workload(*prompt_len, *output_len, prefix_frac, vocab, 0, seed + 1), lim, env);
  }
  Workload work(*prompt_len, *output_len, prefix_frac, vocab, *rate, seed);
  BenchRecorder rec;
  const double duration = RunPhase("bench", streams, work, lim, env, &rec);
  BenchReport report = rec.Report(duration);

  json config = {{"server", (*client)->server()},
                 {"num_requests",
                  lim.requests == std::numeric_limits<int64_t>::max() ? json(nullptr) : json(lim.requests)},
                 {"duration_s", lim.duration_s > 0 ? json(lim.duration_s) : json(nullptr)},
                 {"rate", *rate > 0 ? json(*rate) : json("inf")},
                 {"concurrency", f.concurrency},
                 {"prompt_len", prompt_len->text},
                 {"output_len", output_len->text},
                 {"shared_prefix_frac", prefix_frac},
                 {"seed", seed},
                 {"warmup", f.warmup},
                 {"vocab_size", vocab}};
  if (f.json) {
    std::cout << report.Json(config).dump() << std::endl;
  } else {
    std::cout << report.Table(absl::StrFormat(
        "shardlm bench: %s, rate %s, concurrency %s, prompt %s, output %s, shared prefix %.2f",
        (*client)->server(), *rate > 0 ? absl::StrFormat("%g/s", *rate) : "inf",
        lim.cap == std::numeric_limits<int>::max() ? "unlimited" : absl::StrCat(lim.cap), prompt_len->text,
        output_len->text, prefix_frac));
    std::cout.flush();
  }
  if (env.stop != nullptr && env.stop->load()) {
    std::fprintf(stderr, "bench: interrupted; the requests in flight were cancelled\n");
    return 1;
  }
  if (report.failed > 0) {
    std::fprintf(stderr, "bench: %lld of %lld requests failed\n", static_cast<long long>(report.failed),
                 static_cast<long long>(report.failed) + report.completed);
    return 1;
  }
  return 0;
}

}  // namespace shardlm
