#include "model/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/elementwise.h"

namespace shardlm {
namespace {

float LogSumExp(const float* x, int64_t n) {
  // Vectorised where the CPU allows (kernels/cpu/elementwise.h): 32k scalar
  // exps per sampled token were most of a step's sampling time.
  if (const kernels::LogSumExpFn fn = kernels::LogSumExpKernel(kernels::ActiveIsa())) return fn(x, n);
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i] - m));
  return m + static_cast<float>(std::log(sum));
}

void ApplyPenalties(std::vector<float>& logits, const SampleRow& row) {
  const SamplingParams& p = *row.params;
  const PenaltyWindow window = PenaltyWindowOf(row);
  if (p.repetition_penalty != 1.0f) {
    std::vector<bool> seen(logits.size(), false);
    for (const auto& [ids, from] : {std::make_pair(row.prompt, window.prompt_from),
                                    std::make_pair(row.generated, window.generated_from)}) {
      if (ids == nullptr) continue;
      for (size_t k = from; k < ids->size(); ++k) seen[(*ids)[k]] = true;
    }
    for (size_t i = 0; i < logits.size(); ++i) {
      if (!seen[i]) continue;
      logits[i] = logits[i] > 0 ? logits[i] / p.repetition_penalty : logits[i] * p.repetition_penalty;
    }
  }
  if ((p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) && row.generated != nullptr) {
    std::unordered_map<int32_t, int32_t> counts;
    for (size_t k = window.generated_from; k < row.generated->size(); ++k) ++counts[(*row.generated)[k]];
    for (const auto& [id, n] : counts) {
      logits[id] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(n);
    }
  }
}

// The first largest logit, as std::max_element picks it; vectorised where the
// CPU allows (a scalar scan of 32k logits was most of a greedy row's time).
int32_t ArgMax(const float* x, int64_t n) {
  if (const kernels::ArgMaxFn fn = kernels::ArgMaxKernel(kernels::ActiveIsa()); fn != nullptr && n > 0) {
    if (const int64_t i = fn(x, n); i >= 0) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(std::max_element(x, x + n) - x);
}

// Word w of `row`'s mask, without bits past the vocabulary.
uint32_t MaskWord(const SampleRow& row, int64_t w, int64_t vocab) {
  if (w >= row.allowed_words) return 0u;
  const int64_t n = std::min<int64_t>(32, vocab - w * 32);
  return n == 32 ? row.allowed[w] : row.allowed[w] & ((1u << n) - 1u);
}

// A constraint's mask: disallowed tokens get -inf, so no later step can pick
// them. A mask that allows nothing in the vocabulary is left unapplied (the
// engine's matcher then refuses the token and ends the request).
void MaskDisallowed(std::vector<float>& logits, const SampleRow& row) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  const int64_t words = (vocab + 31) / 32;
  bool any = false;
  for (int64_t w = 0; w < words && !any; ++w) any = MaskWord(row, w, vocab) != 0;
  if (!any) return;
  for (int64_t w = 0; w < words; ++w) {
    const uint32_t bits = MaskWord(row, w, vocab);
    const int64_t n = std::min<int64_t>(32, vocab - w * 32);
    if (n == 32 && bits == ~0u) continue;
    for (int64_t b = 0; b < n; ++b) {
      if (!((bits >> b) & 1u)) logits[w * 32 + b] = -std::numeric_limits<float>::infinity();
    }
  }
}

// Nothing changes the logits before the choice (no bias, no penalty).
bool PlainLogits(const SamplingParams& p) {
  return p.logit_bias.empty() && p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
         p.frequency_penalty == 0.0f;
}

int32_t Draw(std::vector<float>& logits, const SampleRow& row) {
  const SamplingParams& p = *row.params;
  const int64_t vocab = static_cast<int64_t>(logits.size());
  for (float& l : logits) l /= p.temperature;
  // Candidates, most likely first when an order is needed. A token a mask
  // ruled out (-inf) weighs nothing wherever it would stand: it is left out.
  std::vector<int32_t> cand;
  cand.reserve(vocab);
  for (int32_t i = 0; i < vocab; ++i) {
    if (logits[i] != -std::numeric_limits<float>::infinity()) cand.push_back(i);
  }
  if (cand.empty()) {
    cand.resize(vocab);
    std::iota(cand.begin(), cand.end(), 0);
  }
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  const bool need_order = p.top_p < 1.0f;
  if (p.top_k > 0 && p.top_k < static_cast<int64_t>(cand.size())) {
    std::nth_element(cand.begin(), cand.begin() + p.top_k, cand.end(), by_logit);
    cand.resize(p.top_k);
    // Without top-p the draw walks the candidates in vocabulary order, as it
    // does with no top-k (nth_element leaves them in an unspecified order,
    // which the device sampler could not reproduce).
    if (!need_order) std::sort(cand.begin(), cand.end());
  }
  float max_logit = -std::numeric_limits<float>::infinity();
  for (int32_t c : cand) max_logit = std::max(max_logit, logits[c]);
  auto weight = [&](int32_t c) { return std::exp(static_cast<double>(logits[c] - max_logit)); };
  size_t keep = cand.size();
  if (need_order) {
    // top-p: the smallest most-likely prefix whose mass reaches p. Only that
    // prefix is ordered: the top 64 first, then 4x more while the mass falls
    // short, so the whole vocabulary is never sorted.
    double total = 0.0;
    for (int32_t c : cand) total += weight(c);
    for (size_t batch = std::min<size_t>(64, cand.size());; batch = std::min(cand.size(), batch * 4)) {
      std::partial_sort(cand.begin(), cand.begin() + batch, cand.end(), by_logit);
      double cum = 0.0;
      keep = 0;
      for (size_t i = 0; i < batch && keep == 0; ++i) {
        cum += weight(cand[i]) / total;
        if (cum >= p.top_p) keep = i + 1;
      }
      if (keep > 0) break;
      if (batch == cand.size()) {
        keep = batch;
        break;
      }
    }
  }
  std::vector<double> prob(keep);
  for (size_t i = 0; i < keep; ++i) prob[i] = weight(cand[i]);
  // min-p: drop tokens below min_p x the most likely one (whose weight is 1).
  const double floor = p.min_p > 0 ? p.min_p : 0.0;
  double kept_total = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    if (prob[i] < floor) prob[i] = 0.0;
    kept_total += prob[i];
  }
  std::mt19937_64 rng(row.draw_seed);
  double u = std::uniform_real_distribution<double>(0.0, kept_total)(rng);
  for (size_t i = 0; i < keep; ++i) {
    if (u < prob[i]) return cand[i];
    u -= prob[i];
  }
  for (size_t i = keep; i-- > 0;) {
    if (prob[i] > 0) return cand[i];  // rounding left u at the very end
  }
  return cand[0];
}

}  // namespace

RowResult ProcessRow(const float* logits, int64_t vocab, const SampleRow& row) {
  RowResult out;
  const float lse = LogSumExp(logits, vocab);
  if (row.target >= 0 && row.target < vocab) out.target_logprob = logits[row.target] - lse;
  const int32_t n_top = row.params != nullptr ? std::min<int64_t>(row.params->num_top_logprobs, vocab) : 0;
  if (n_top > 0) {
    std::vector<int32_t> idx(vocab);
    std::iota(idx.begin(), idx.end(), 0);
    auto cmp = [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    std::partial_sort(idx.begin(), idx.begin() + n_top, idx.end(), cmp);
    for (int32_t i = 0; i < n_top; ++i) {
      out.top_ids.push_back(idx[i]);
      out.top_logprobs.push_back(logits[idx[i]] - lse);
    }
  }
  if (row.sample) {
    const SamplingParams& p = *row.params;
    const bool greedy = p.temperature <= 0.0f || p.top_k == 1;
    if (greedy && PlainLogits(p) && row.allowed == nullptr) {
      out.token = ArgMax(logits, vocab);  // no copy of the row
      out.logprob = logits[out.token] - lse;
      return out;
    }
    std::vector<float> work(logits, logits + vocab);
    if (row.allowed != nullptr) MaskDisallowed(work, row);
    for (const auto& [id, bias] : row.params->logit_bias) {
      if (id >= 0 && id < vocab) work[id] += bias;
    }
    ApplyPenalties(work, row);
    out.token = greedy ? ArgMax(work.data(), vocab) : Draw(work, row);
    out.logprob = logits[out.token] - lse;
  }
  return out;
}

}  // namespace shardlm
