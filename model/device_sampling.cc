#include "model/device_sampling.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>
#include <random>
#include <unordered_map>

namespace shardlm {
namespace {

// (row, token, value) edits of the working logits, built on the host from
// the request's parameters and history, applied on the device in one call.
struct Edits {
  std::vector<int64_t> row, id;
  std::vector<float> value;
  void Add(int64_t r, int64_t i, float v) {
    row.push_back(r);
    id.push_back(i);
    value.push_back(v);
  }
  bool empty() const { return row.empty(); }
};

at::Tensor OnDevice(const std::vector<int64_t>& v, at::Device d) { return at::tensor(v, at::kLong).to(d); }
at::Tensor OnDevice(const std::vector<float>& v, at::Device d) { return at::tensor(v, at::kFloat).to(d); }

// Logit bias, then the repetition penalty, then presence and frequency: the
// order of ProcessRow.
at::Tensor ApplyEdits(const at::Tensor& logits, const std::vector<SampleRow>& rows) {
  const int64_t vocab = logits.size(1);
  Edits bias, repetition, counted;
  for (size_t r = 0; r < rows.size(); ++r) {
    const SampleRow& row = rows[r];
    if (!row.sample) continue;
    const SamplingParams& p = *row.params;
    for (const auto& [id, b] : p.logit_bias) {
      if (id >= 0 && id < vocab) bias.Add(r, id, b);
    }
    if (p.repetition_penalty != 1.0f) {
      std::vector<int32_t> seen;
      for (const auto* ids : {row.prompt, row.generated}) {
        if (ids != nullptr) seen.insert(seen.end(), ids->begin(), ids->end());
      }
      std::sort(seen.begin(), seen.end());
      seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
      for (int32_t id : seen) repetition.Add(r, id, p.repetition_penalty);
    }
    if ((p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) && row.generated != nullptr) {
      std::unordered_map<int32_t, int32_t> counts;
      for (int32_t id : *row.generated) ++counts[id];
      for (const auto& [id, n] : counts) {
        counted.Add(r, id, -(p.presence_penalty + p.frequency_penalty * static_cast<float>(n)));
      }
    }
  }
  if (bias.empty() && repetition.empty() && counted.empty()) return logits;
  const at::Device d = logits.device();
  at::Tensor work = logits.clone();
  if (!bias.empty()) {
    work.index_put_({OnDevice(bias.row, d), OnDevice(bias.id, d)}, OnDevice(bias.value, d),
                    /*accumulate=*/true);
  }
  if (!repetition.empty()) {
    at::Tensor r = OnDevice(repetition.row, d), i = OnDevice(repetition.id, d);
    at::Tensor f = OnDevice(repetition.value, d);
    at::Tensor cur = work.index({r, i});
    work.index_put_({r, i}, at::where(cur > 0, cur / f, cur * f));
  }
  if (!counted.empty()) {
    work.index_put_({OnDevice(counted.row, d), OnDevice(counted.id, d)}, OnDevice(counted.value, d),
                    /*accumulate=*/true);
  }
  return work;
}

// One row's draw (temperature > 0, top_k != 1) as a 0-d int64 token on the
// device; `uniform` is the row's number in [0, 1).
at::Tensor Draw(const at::Tensor& row_logits, const SamplingParams& p, double uniform) {
  const int64_t vocab = row_logits.size(0);
  const at::Device d = row_logits.device();
  // A true division, as ProcessRow's (CUDA turns division by a host scalar
  // into a multiplication by its reciprocal).
  at::Tensor l = row_logits / at::scalar_tensor(p.temperature, row_logits.options());
  const bool need_order = p.top_p < 1.0f;
  at::Tensor value, index;
  // Candidates: most likely first (ties: lower id first) under top-p, else in
  // vocabulary order. A stable sort, not topk, so that a tie at the k-th
  // value keeps the lower ids, as ProcessRow does.
  if (p.top_k > 0 && p.top_k < vocab) {
    std::tie(value, index) = at::sort(l, /*stable=*/true, /*dim=*/0, /*descending=*/true);
    index = index.narrow(0, 0, p.top_k);
    value = value.narrow(0, 0, p.top_k);
    if (!need_order) {
      std::tie(index, std::ignore) = at::sort(index);  // vocabulary order
      value = l.index_select(0, index);
    }
  } else if (need_order) {
    std::tie(value, index) = at::sort(l, /*stable=*/true, /*dim=*/0, /*descending=*/true);
  } else {
    value = l;
    index = at::arange(vocab, at::TensorOptions().dtype(at::kLong).device(d));
  }
  at::Tensor weight = (value - value.max()).to(at::kDouble).exp();
  if (need_order) {
    // top-p: the shortest most-likely prefix whose mass reaches p.
    at::Tensor cum = (weight / weight.sum()).cumsum(0);
    at::Tensor keep = ((cum < static_cast<double>(p.top_p)).sum() + 1).clamp_max(weight.size(0));
    at::Tensor pos = at::arange(weight.size(0), at::TensorOptions().dtype(at::kLong).device(d));
    weight = at::where(pos < keep, weight, at::zeros_like(weight));
  }
  // min-p: below min_p x the most likely token's weight (which is 1).
  if (p.min_p > 0) weight = at::where(weight < static_cast<double>(p.min_p), at::zeros_like(weight), weight);
  at::Tensor cum = weight.cumsum(0);
  at::Tensor u = cum.index({-1}) * uniform;
  // The first candidate whose running sum exceeds u, as ProcessRow's walk;
  // where rounding leaves u past the end, the last candidate with weight.
  at::Tensor pick = at::searchsorted(cum, u.unsqueeze(0), /*out_int32=*/false, /*right=*/true).squeeze(0);
  at::Tensor pos = at::arange(weight.size(0), at::TensorOptions().dtype(at::kLong).device(d));
  at::Tensor last = at::where(weight > 0, pos, at::zeros_like(pos)).max();
  pick = at::where(pick < weight.size(0), pick, last).clamp_max(weight.size(0) - 1);
  at::Tensor chosen = at::where(weight.index_select(0, pick.unsqueeze(0)).squeeze(0) > 0, pick, last);
  return index.index_select(0, chosen.unsqueeze(0)).squeeze(0);
}

}  // namespace

std::vector<RowResult> ProcessRowsOnDevice(const at::Tensor& logits, const std::vector<SampleRow>& rows) {
  const int64_t n = static_cast<int64_t>(rows.size());
  std::vector<RowResult> out(n);
  if (n == 0) return out;
  const int64_t vocab = logits.size(1);
  const at::Device d = logits.device();
  at::Tensor lse = at::logsumexp(logits, 1);  // f32[rows]

  std::vector<int64_t> targets(n, 0);
  int64_t n_top = 0;
  bool any_target = false, any_sample = false;
  for (int64_t r = 0; r < n; ++r) {
    if (rows[r].target >= 0 && rows[r].target < vocab) {
      targets[r] = rows[r].target;
      any_target = true;
    }
    if (rows[r].params != nullptr)
      n_top = std::max<int64_t>(n_top, std::min<int64_t>(rows[r].params->num_top_logprobs, vocab));
    any_sample |= rows[r].sample;
  }

  at::Tensor tokens = at::full({n}, -1, at::TensorOptions().dtype(at::kLong).device(d));
  if (any_sample) {
    at::Tensor work = ApplyEdits(logits, rows);
    at::Tensor greedy = work.argmax(1);
    for (int64_t r = 0; r < n; ++r) {
      if (!rows[r].sample) continue;
      const SamplingParams& p = *rows[r].params;
      if (p.temperature <= 0.0f || p.top_k == 1) {
        tokens.index_put_({r}, greedy.index({r}));
        continue;
      }
      // The number ProcessRow's draw takes from the same generator.
      std::mt19937_64 rng(rows[r].draw_seed);
      const double uniform = std::generate_canonical<double, std::numeric_limits<double>::digits>(rng);
      tokens.index_put_({r}, Draw(work.select(0, r), p, uniform));
    }
  }
  // Log-probabilities of the unmodified distribution; one copy back each.
  at::Tensor safe_tokens = tokens.clamp_min(0).unsqueeze(1);
  at::Tensor token_lp = (logits.gather(1, safe_tokens).squeeze(1) - lse).cpu();
  at::Tensor tokens_host = tokens.cpu();
  at::Tensor target_lp;
  if (any_target) target_lp = (logits.gather(1, OnDevice(targets, d).unsqueeze(1)).squeeze(1) - lse).cpu();
  at::Tensor top_lp, top_ids;
  if (n_top > 0) {
    // A stable sort, not topk: among equal logits the lower id comes first,
    // at the n-th place too, as ProcessRow does.
    at::Tensor v, i;
    std::tie(v, i) = at::sort(logits, /*stable=*/true, /*dim=*/1, /*descending=*/true);
    top_ids = i.narrow(1, 0, n_top).cpu();
    top_lp = (v.narrow(1, 0, n_top) - lse.unsqueeze(1)).cpu();
  }
  for (int64_t r = 0; r < n; ++r) {
    const SampleRow& row = rows[r];
    RowResult& res = out[r];
    if (row.target >= 0 && row.target < vocab) res.target_logprob = target_lp[r].item<float>();
    const int64_t k = row.params != nullptr ? std::min<int64_t>(row.params->num_top_logprobs, vocab) : 0;
    for (int64_t j = 0; j < k; ++j) {
      res.top_ids.push_back(static_cast<int32_t>(top_ids[r][j].item<int64_t>()));
      res.top_logprobs.push_back(top_lp[r][j].item<float>());
    }
    if (row.sample) {
      res.token = static_cast<int32_t>(tokens_host[r].item<int64_t>());
      res.logprob = token_lp[r].item<float>();
    }
  }
  return out;
}

}  // namespace shardlm
