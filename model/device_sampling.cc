#include "model/device_sampling.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>
#include <random>
#include <unordered_map>

#include "model/step_upload.h"

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
    const PenaltyWindow window = PenaltyWindowOf(row);
    if (p.repetition_penalty != 1.0f) {
      std::vector<int32_t> seen;
      for (const auto& [ids, from] : {std::make_pair(row.prompt, window.prompt_from),
                                      std::make_pair(row.generated, window.generated_from)}) {
        if (ids != nullptr)
          seen.insert(seen.end(), ids->begin() + static_cast<std::ptrdiff_t>(from), ids->end());
      }
      std::sort(seen.begin(), seen.end());
      seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
      for (int32_t id : seen) repetition.Add(r, id, p.repetition_penalty);
    }
    if ((p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) && row.generated != nullptr) {
      std::unordered_map<int32_t, int32_t> counts;
      for (size_t k = window.generated_from; k < row.generated->size(); ++k) ++counts[(*row.generated)[k]];
      for (const auto& [id, n] : counts) {
        counted.Add(r, id, -(p.presence_penalty + p.frequency_penalty * static_cast<float>(n)));
      }
    }
  }
  std::vector<int64_t> masked;  // rows with a constraint's mask
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r].sample && rows[r].allowed != nullptr) masked.push_back(static_cast<int64_t>(r));
  }
  if (bias.empty() && repetition.empty() && counted.empty() && masked.empty()) return logits;
  const at::Device d = logits.device();
  at::Tensor work = logits.clone();
  if (!masked.empty()) {
    // Expanded on the host to one byte per token, uploaded once, applied first
    // (ProcessRow's order); a mask allowing nothing is left unapplied, as there.
    at::Tensor allow = at::zeros({static_cast<int64_t>(masked.size()), vocab}, at::kBool);
    bool* a = allow.data_ptr<bool>();
    for (size_t m = 0; m < masked.size(); ++m) {
      bool any = false;
      for (int64_t i = 0; i < vocab; ++i) any |= (a[m * vocab + i] = Allowed(rows[masked[m]], i));
      if (!any) std::fill(a + m * vocab, a + (m + 1) * vocab, true);
    }
    at::Tensor idx = OnDevice(masked, d);
    at::Tensor sub = work.index_select(0, idx);
    sub.masked_fill_(allow.to(d).logical_not(), -std::numeric_limits<float>::infinity());
    work.index_copy_(0, idx, sub);
  }
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

// The draws of rows `which` (temperature > 0, top_k != 1), all at once:
// int64[which.size()] tokens on the device. Each row keeps its own
// parameters; a few operators over [rows, vocab] serve every row, so a batch
// of sampled rows costs what one does in launches.
at::Tensor DrawRows(const at::Tensor& work, const std::vector<int64_t>& which,
                    const std::vector<SampleRow>& rows) {
  const int64_t m = static_cast<int64_t>(which.size()), vocab = work.size(1);
  std::vector<float> temperature(m);
  std::vector<double> top_p(m), min_p(m), uniform(m);
  std::vector<int64_t> top_k(m), ordered(m);
  for (int64_t i = 0; i < m; ++i) {
    const SampleRow& row = rows[which[i]];
    const SamplingParams& p = *row.params;
    temperature[i] = p.temperature;
    top_k[i] = p.top_k > 0 && p.top_k < vocab ? p.top_k : vocab;
    top_p[i] = p.top_p;
    min_p[i] = p.min_p > 0 ? p.min_p : 0.0;
    ordered[i] = p.top_p < 1.0f;  // top-p walks the most likely first, else vocabulary order
    // The number ProcessRow's draw takes from the same generator.
    std::mt19937_64 rng(row.draw_seed);
    uniform[i] = std::generate_canonical<double, std::numeric_limits<double>::digits>(rng);
  }
  StepUpload up;
  const int i_which = up.Add(which), i_temp = up.Add(temperature), i_k = up.Add(top_k), i_p = up.Add(top_p);
  const int i_min = up.Add(min_p), i_u = up.Add(uniform), i_ord = up.Add(ordered);
  up.Upload(work.device());
  const at::Tensor k = up.Get(i_k).unsqueeze(1), p_top = up.Get(i_p).unsqueeze(1);
  const at::Tensor ord = up.Get(i_ord).unsqueeze(1) != 0;
  // A true division, as ProcessRow's (CUDA turns division by a host scalar
  // into a multiplication by its reciprocal).
  at::Tensor l = work.index_select(0, up.Get(i_which)) / up.Get(i_temp).unsqueeze(1);
  // Most likely first; among equals the lower id first (a stable sort, as
  // ProcessRow's comparison): top-k is the first k.
  at::Tensor sv, si;
  std::tie(sv, si) = at::sort(l, /*stable=*/true, /*dim=*/1, /*descending=*/true);
  const at::Tensor rank =
      at::arange(vocab, at::TensorOptions().dtype(at::kLong).device(work.device())).unsqueeze(0);
  const at::Tensor cand = rank < k;
  at::Tensor w = at::where(cand, (sv - sv.narrow(1, 0, 1)).to(at::kDouble).exp(),
                           at::zeros({}, sv.options().dtype(at::kDouble)));
  // top-p: the shortest most-likely prefix whose mass reaches p.
  const at::Tensor cum = (w / w.sum(1, /*keepdim=*/true)).cumsum(1);
  const at::Tensor keep = at::minimum(((cum < p_top) & cand).sum(1, /*keepdim=*/true) + 1, k);
  w = at::where(ord & (rank >= keep), at::zeros_like(w), w);
  // min-p: below min_p x the most likely token's weight (which is 1).
  w = at::where(w < up.Get(i_min).unsqueeze(1), at::zeros_like(w), w);
  // The walk: sorted order under top-p, else the weights back in vocabulary order.
  const at::Tensor walk = at::where(ord, w, at::zeros_like(w).scatter_(1, si, w));
  const at::Tensor run = walk.cumsum(1);
  const at::Tensor u = run.narrow(1, vocab - 1, 1) * up.Get(i_u).unsqueeze(1);
  // The first place whose running sum exceeds u, as ProcessRow's walk; where
  // rounding leaves u past the end, the last place with weight.
  at::Tensor pick = at::searchsorted(run, u, /*out_int32=*/false, /*right=*/true).squeeze(1);
  const at::Tensor last = std::get<0>(at::where(walk > 0, rank, at::zeros_like(rank)).max(1));
  pick = at::where(pick < vocab, pick, last);
  pick = at::where(walk.gather(1, pick.unsqueeze(1)).squeeze(1) > 0, pick, last);
  return at::where(ord.squeeze(1), si.gather(1, pick.unsqueeze(1)).squeeze(1), pick);
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
    std::vector<int64_t> greedy_rows, draw_rows;
    for (int64_t r = 0; r < n; ++r) {
      if (!rows[r].sample) continue;
      const SamplingParams& p = *rows[r].params;
      (p.temperature <= 0.0f || p.top_k == 1 ? greedy_rows : draw_rows).push_back(r);
    }
    if (!greedy_rows.empty()) {
      const at::Tensor g = OnDevice(greedy_rows, d);
      tokens.index_put_({g}, work.index_select(0, g).argmax(1));
    }
    if (!draw_rows.empty()) tokens.index_put_({OnDevice(draw_rows, d)}, DrawRows(work, draw_rows, rows));
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
    top_ids = i.narrow(1, 0, n_top).cpu().contiguous();
    top_lp = (v.narrow(1, 0, n_top) - lse.unsqueeze(1)).cpu().contiguous();
  }
  // Host copies, read through pointers (a tensor op per element would cost
  // more than the step's sampling).
  const int64_t* tok = tokens_host.data_ptr<int64_t>();
  const float* tok_lp = token_lp.data_ptr<float>();
  const float* tgt_lp = any_target ? target_lp.data_ptr<float>() : nullptr;
  const int64_t* top_id = n_top > 0 ? top_ids.data_ptr<int64_t>() : nullptr;
  const float* top_lps = n_top > 0 ? top_lp.data_ptr<float>() : nullptr;
  for (int64_t r = 0; r < n; ++r) {
    const SampleRow& row = rows[r];
    RowResult& res = out[r];
    if (row.target >= 0 && row.target < vocab) res.target_logprob = tgt_lp[r];
    const int64_t k = row.params != nullptr ? std::min<int64_t>(row.params->num_top_logprobs, vocab) : 0;
    for (int64_t j = 0; j < k; ++j) {
      res.top_ids.push_back(static_cast<int32_t>(top_id[r * n_top + j]));
      res.top_logprobs.push_back(top_lps[r * n_top + j]);
    }
    if (row.sample) {
      res.token = static_cast<int32_t>(tok[r]);
      res.logprob = tok_lp[r];
    }
  }
  return out;
}

}  // namespace shardlm
