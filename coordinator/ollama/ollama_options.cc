// Ollama's `options` (docs/ollama.md "Options"): the sampling keys honoured
// with Ollama's defaults, runtime keys accepted and ignored, the rest refused.
#include <algorithm>
#include <cstdint>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "coordinator/ollama/ollama_parse.h"
#include "coordinator/serving/request_limits.h"
#include "step/sampling_limits.h"

namespace shardlm {
namespace ollama {
namespace {

using openai::Params;

// How llama.cpp's runner is set up: no meaning for a model served here.
const std::set<std::string> kIgnored = {
    "num_keep",     "num_batch",   "num_gpu",        "main_gpu",         "use_mmap",
    "use_mlock",    "num_thread",  "low_vram",       "f16_kv",           "numa",
    "logits_all",   "vocab_only",  "embedding_only", "penalize_newline", "draft_num_predict",
    "mirostat_tau", "mirostat_eta"};
const std::set<std::string> kHonoured = {"temperature",
                                         "top_k",
                                         "top_p",
                                         "min_p",
                                         "typical_p",
                                         "repeat_last_n",
                                         "repeat_penalty",
                                         "presence_penalty",
                                         "frequency_penalty",
                                         "seed",
                                         "stop",
                                         "num_predict",
                                         "num_ctx",
                                         "mirostat",
                                         "tfs_z",
                                         "n_indent"};  // llama.cpp's, for fill-in-the-middle (docs/ollama.md)

// A sampling method shardlm does not implement, accepted at its "off" value.
bool OnlyOff(Params& p, const std::string& key, double off, const std::string& what) {
  auto v = p.Number(key, -1e9, 1e9, false);
  if (v && *v != off)
    return p.Fail(key, absl::StrCat(key, " must be ", off, ": ", what, " is not supported"));
  return !p.failed();
}

bool StopOf(Params& p, GenerateJob& job) {
  int64_t indent = 0;
  if (!p.Integer("n_indent", 0, 1024, &indent)) return false;
  job.min_indent = static_cast<int>(indent);
  if (!p.Has("stop")) return true;
  const Json& v = p.At("stop");
  if (!v.is_array()) return p.Fail("stop", "stop must be a list of strings");
  if (v.size() > static_cast<size_t>(kMaxStopStrings))
    return p.Fail("stop", absl::StrCat("stop holds at most ", kMaxStopStrings, " strings, got ", v.size()));
  for (size_t k = 0; k < v.size(); ++k) {
    if (!v[k].is_string() || v[k].get_ref<const std::string&>().empty() ||
        v[k].get_ref<const std::string&>().size() > static_cast<size_t>(kMaxStopStringBytes))
      return p.Fail("stop",
                    absl::StrCat("stop[", k, "] must be a string of 1 to ", kMaxStopStringBytes, " bytes"));
    job.stop.push_back(v[k].get<std::string>());
  }
  return true;
}

// repeat_last_n: 0 turns every penalty off, -1 is the whole context, n the last n tokens.
bool PenaltiesOf(Params& p, const openai::ModelContext& model, SamplingParams& s) {
  if (auto v = p.Bounded("repeat_penalty", kRepetitionPenaltyBound)) s.repetition_penalty = *v;
  if (auto v = p.Bounded("presence_penalty", kPresencePenaltyBound)) s.presence_penalty = *v;
  if (auto v = p.Bounded("frequency_penalty", kFrequencyPenaltyBound)) s.frequency_penalty = *v;
  int64_t last_n = 64;
  if (!p.Integer("repeat_last_n", -1, model.max_context, &last_n)) return false;
  if (last_n == 0) {
    s.repetition_penalty = 1.0f;
    s.presence_penalty = s.frequency_penalty = 0.0f;
  }
  s.penalty_last_n = last_n > 0 ? static_cast<int32_t>(last_n) : 0;
  return !p.failed();
}

bool SamplingOf(Params& p, const openai::ModelContext& model, EngineRequest& r) {
  SamplingParams& s = r.sampling;
  s.temperature = p.Bounded("temperature", kTemperatureBound).value_or(0.8f);
  s.top_p = p.Bounded("top_p", kTopPBound).value_or(0.9f);
  s.min_p = p.Bounded("min_p", kMinPBound).value_or(0.0f);
  int64_t top_k = 40;
  if (p.Integer("top_k", -1, model.vocab_size, &top_k))
    s.top_k = static_cast<int32_t>(std::max<int64_t>(top_k, 0));
  // seed: any 64-bit integer, signed or not; -1 draws a random one.
  if (p.Has("seed")) {
    const Json& v = p.At("seed");
    if (v.is_number_unsigned()) {
      s.seed = v.get<uint64_t>();
      r.has_seed = true;
    } else {
      int64_t seed = -1;  // signed, or an integral float (42.0) as Python clients may send
      if (!p.Integer("seed", INT64_MIN, INT64_MAX, &seed)) return false;
      if (seed != -1) {
        s.seed = static_cast<uint64_t>(seed);
        r.has_seed = true;
      }
    }
  }
  if (!OnlyOff(p, "typical_p", 1, "locally typical sampling")) return false;
  if (!OnlyOff(p, "mirostat", 0, "Mirostat sampling")) return false;
  if (!OnlyOff(p, "tfs_z", 1, "tail-free sampling")) return false;
  return PenaltiesOf(p, model, s);
}

bool LengthsOf(Params& p, const openai::ModelContext& model, Lengths* lengths) {
  lengths->context = model.max_context;
  if (p.Has("num_ctx")) {
    int64_t n = 0;
    if (!p.Integer("num_ctx", 1, INT64_MAX, &n)) return false;
    if (n > model.max_context) {
      return p.Fail("num_ctx", absl::StrCat("num_ctx is ", n, "; this server's context for the model holds ",
                                            model.max_context, " tokens"));
    }
    lengths->context = n;
  }
  return p.Integer("num_predict", -2, model.max_context, &lengths->num_predict);
}

// Every key known: honoured or ignored; nulls are skipped, as Ollama does.
bool KnownKeys(Params& p, const Json& options) {
  for (auto it = options.begin(); it != options.end(); ++it) {
    if (kHonoured.count(it.key()) || kIgnored.count(it.key()) || it.value().is_null()) continue;
    return p.Fail(it.key(), absl::StrCat(it.key(), " is not an option this server knows"));
  }
  return true;
}

}  // namespace

bool OptionsInto(Params& outer, const openai::ModelContext& model, GenerateJob& job, Lengths* lengths) {
  static const Json kNone = Json::object();
  const Json* options = &kNone;
  if (outer.Has("options")) {
    if (!outer.At("options").is_object()) return outer.Fail("options", "options must be an object");
    options = &outer.At("options");
  }
  openai::ApiError inner;
  const Tokenizer::StopCheck no_stop;  // nothing is tokenized here
  Params p(*options, &inner, no_stop);
  if (KnownKeys(p, *options) && SamplingOf(p, model, job.request) && StopOf(p, job) &&
      LengthsOf(p, model, lengths) && !p.failed()) {
    return true;
  }
  const std::string name = "options." + inner.param;
  return outer.Fail(name, "options." + inner.message);
}

}  // namespace ollama
}  // namespace shardlm
