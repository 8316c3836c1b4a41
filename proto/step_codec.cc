#include "proto/step_codec.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "step/sampling_limits.h"

namespace shardlm {
namespace {

void EncodeParams(const SamplingParams& p, wpb::SamplingParams* out) {
  out->set_temperature(p.temperature);
  out->set_top_k(p.top_k);
  out->set_top_p(p.top_p);
  out->set_min_p(p.min_p);
  out->set_repetition_penalty(p.repetition_penalty);
  out->set_presence_penalty(p.presence_penalty);
  out->set_frequency_penalty(p.frequency_penalty);
  out->set_seed(p.seed);
  out->set_num_top_logprobs(p.num_top_logprobs);
  out->set_penalty_last_n(p.penalty_last_n);
  for (const auto& [id, bias] : p.logit_bias) {
    auto* b = out->add_logit_bias();
    b->set_id(id);
    b->set_bias(bias);
  }
}

SamplingParams DecodeParams(const wpb::SamplingParams& p) {
  SamplingParams out;
  out.temperature = p.temperature();
  out.top_k = p.top_k();
  out.top_p = p.top_p();
  out.min_p = p.min_p();
  out.repetition_penalty = p.repetition_penalty();
  out.presence_penalty = p.presence_penalty();
  out.frequency_penalty = p.frequency_penalty();
  out.seed = p.seed();
  out.num_top_logprobs = p.num_top_logprobs();
  out.penalty_last_n = p.penalty_last_n();
  for (const auto& b : p.logit_bias()) out.logit_bias.emplace_back(b.id(), b.bias());
  return out;
}

bool NeedsHistory(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

absl::Status Bad(const std::string& what) { return absl::InvalidArgumentError("step request: " + what); }

}  // namespace

wpb::StepRequest EncodeStep(const StepInput& step, uint64_t step_id, uint64_t after_step_id, uint64_t epoch) {
  wpb::StepRequest req;
  req.set_step_id(step_id);
  req.set_after_step_id(after_step_id);
  req.set_epoch(epoch);
  for (const auto& [token, prev_row] : step.feedback) {
    wpb::TokenFeedback* f = req.add_feedback();
    f->set_token(token);
    f->set_prev_row(prev_row);
  }
  req.mutable_token_ids()->Add(step.token_ids.begin(), step.token_ids.end());
  req.mutable_positions()->Add(step.positions.begin(), step.positions.end());
  req.mutable_seq_of_token()->Add(step.seq_of_token.begin(), step.seq_of_token.end());
  for (size_t i = 0; i < step.block_tables.size(); ++i) {
    wpb::Sequence* seq = req.add_sequences();
    seq->mutable_block_table()->Add(step.block_tables[i].begin(), step.block_tables[i].end());
    if (i < step.request_ids.size()) seq->set_request_id(step.request_ids[i]);
    if (i < step.starts.size()) seq->set_starts(step.starts[i]);
  }
  for (const auto& [src, dst] : step.block_copies) {
    wpb::BlockCopy* c = req.add_block_copies();
    c->set_src(src);
    c->set_dst(dst);
  }
  for (const SampleRow& r : step.rows) {
    wpb::SampleRow* row = req.add_rows();
    row->set_row(r.row);
    row->set_seq(r.seq);
    row->set_target(r.target);
    row->set_sample(r.sample);
    row->set_draw_seed(r.draw_seed);
    row->set_mask_follows(r.mask_follows);
    if (r.params == nullptr) continue;
    row->set_has_params(true);
    wpb::Sequence* seq = req.mutable_sequences(r.seq);
    if (seq->has_params()) {  // one sequence, one set of parameters and history
      // A later row whose history runs on past the sequence's: the rest.
      if (NeedsHistory(*r.params) && r.generated != nullptr &&
          static_cast<int>(r.generated->size()) > seq->generated_ids_size()) {
        row->mutable_generated_suffix()->Add(r.generated->begin() + seq->generated_ids_size(),
                                             r.generated->end());
      }
      continue;
    }
    EncodeParams(*r.params, seq->mutable_params());
    if (r.sample && r.allowed != nullptr) {
      seq->set_allowed_tokens(std::string(reinterpret_cast<const char*>(r.allowed),
                                          static_cast<size_t>(r.allowed_words) * sizeof(uint32_t)));
    }
    if (NeedsHistory(*r.params)) {
      if (r.prompt) seq->mutable_prompt_ids()->Add(r.prompt->begin(), r.prompt->end());
      if (r.generated) seq->mutable_generated_ids()->Add(r.generated->begin(), r.generated->end());
    }
  }
  return req;
}

namespace {

// The step's sequences: block tables inside the pool, parameters, histories
// and masks inside the vocabulary.
absl::Status DecodeSequences(const wpb::StepRequest& req, const StepLimits& lim, DecodedStep* d) {
  StepInput& s = d->step;
  const int seqs = req.sequences_size();
  d->params.resize(seqs);
  d->prompts.resize(seqs);
  d->generated.resize(seqs);
  d->allowed.resize(seqs);
  for (int i = 0; i < seqs; ++i) {
    const wpb::Sequence& q = req.sequences(i);
    for (int32_t b : q.block_table()) {
      if (b < 0 || b >= lim.num_blocks) {
        return Bad(
            absl::StrCat("sequence ", i, " block id ", b, " outside the pool [0, ", lim.num_blocks, ")"));
      }
    }
    s.block_tables.emplace_back(q.block_table().begin(), q.block_table().end());
    d->params[i] = DecodeParams(q.params());
    for (const auto& [id, bias] : d->params[i].logit_bias) {
      if (id < 0 || id >= lim.vocab_size || !(bias >= -100.0f && bias <= 100.0f)) {
        return Bad(absl::StrCat("sequence ", i, " logit bias for id ", id, " is invalid"));
      }
    }
    for (const auto* ids : {&q.prompt_ids(), &q.generated_ids()}) {
      for (int32_t id : *ids) {
        if (id < 0 || id >= lim.vocab_size)
          return Bad(absl::StrCat("sequence ", i, " history id ", id, " outside the vocabulary"));
      }
    }
    const std::string& mask = q.allowed_tokens();
    if (mask.size() % sizeof(uint32_t) != 0 ||
        static_cast<int64_t>(mask.size() / sizeof(uint32_t)) > (lim.vocab_size + 31) / 32) {
      return Bad(absl::StrCat("sequence ", i, " token mask of ", mask.size(),
                              " bytes does not fit a vocabulary of ", lim.vocab_size));
    }
    d->allowed[i].resize(mask.size() / sizeof(uint32_t));
    if (!mask.empty()) std::memcpy(d->allowed[i].data(), mask.data(), mask.size());  // little-endian hosts
    d->prompts[i].assign(q.prompt_ids().begin(), q.prompt_ids().end());
    d->generated[i].assign(q.generated_ids().begin(), q.generated_ids().end());
  }
  return absl::OkStatus();
}

// Each token's id, position and sequence, inside the vocabulary, the context
// and the sequence's block table.
absl::Status CheckTokens(const wpb::StepRequest& req, const StepLimits& lim, const StepInput& s) {
  const int tokens = req.token_ids_size();
  const int seqs = req.sequences_size();
  for (int t = 0; t < tokens; ++t) {
    const int32_t id = req.token_ids(t), pos = req.positions(t), seq = req.seq_of_token(t);
    if (id < 0 || id >= lim.vocab_size) {
      return Bad(absl::StrCat("token ", t, " id ", id, " outside the vocabulary [0, ", lim.vocab_size, ")"));
    }
    if (seq < 0 || seq >= seqs) return Bad(absl::StrCat("token ", t, " names sequence ", seq, " of ", seqs));
    if (pos < 0 || pos >= lim.max_position) {
      return Bad(absl::StrCat("token ", t, " position ", pos, " outside [0, ", lim.max_position, ")"));
    }
    if (pos / lim.block_size >= static_cast<int64_t>(s.block_tables[seq].size())) {
      return Bad(absl::StrCat("token ", t, " position ", pos, " is past sequence ", seq, "'s block table"));
    }
  }
  return absl::OkStatus();
}

// Block copies inside the pool, and feedback that names the step before.
absl::Status DecodeCopiesAndFeedback(const wpb::StepRequest& req, const StepLimits& lim, StepInput& s) {
  const int tokens = req.token_ids_size();
  for (const wpb::BlockCopy& c : req.block_copies()) {
    if (c.src() < 0 || c.src() >= lim.num_blocks || c.dst() < 0 || c.dst() >= lim.num_blocks) {
      return Bad(absl::StrCat("block copy ", c.src(), " -> ", c.dst(), " outside the pool [0, ",
                              lim.num_blocks, ")"));
    }
    s.block_copies.emplace_back(c.src(), c.dst());
  }
  if (req.feedback_size() > 0 && req.after_step_id() == 0) {
    return Bad("feedback needs the step it comes from (after_step_id)");
  }
  for (const wpb::TokenFeedback& f : req.feedback()) {
    if (f.token() < 0 || f.token() >= tokens || f.prev_row() < 0) {
      return Bad(absl::StrCat("feedback for token ", f.token(), " from row ", f.prev_row(),
                              " is outside the step's ", tokens, " tokens"));
    }
    s.feedback.emplace_back(f.token(), f.prev_row());
  }
  return absl::OkStatus();
}

// The rows: inside the step, with parameters within bounds, pointing into
// `d`'s per-sequence storage.
absl::Status DecodeSampleRows(const wpb::StepRequest& req, const StepLimits& lim, DecodedStep* d) {
  StepInput& s = d->step;
  const int tokens = req.token_ids_size();
  const int seqs = req.sequences_size();
  for (const wpb::SampleRow& r : req.rows()) {
    if (r.row() < 0 || r.row() >= tokens)
      return Bad(absl::StrCat("row ", r.row(), " outside [0, ", tokens, ")"));
    if (r.seq() < 0 || r.seq() >= seqs)
      return Bad(absl::StrCat("row names sequence ", r.seq(), " of ", seqs));
    if (r.target() >= lim.vocab_size)
      return Bad(absl::StrCat("row target ", r.target(), " outside the vocabulary"));
    if (r.sample() && !r.has_params()) return Bad("a sampling row needs parameters");
    SampleRow row;
    row.row = r.row();
    row.seq = r.seq();
    row.target = r.target();
    row.sample = r.sample();
    row.draw_seed = r.draw_seed();
    row.mask_follows = r.mask_follows();
    if (r.mask_follows() && !r.sample()) return Bad("a row waits for a mask but samples nothing");
    if (r.has_params()) {
      const SamplingParams& p = d->params[r.seq()];
      if (p.num_top_logprobs < 0 || p.num_top_logprobs > kMaxTopLogprobs ||
          !kTemperatureBound.Contains(p.temperature) || p.top_k < 0 || p.penalty_last_n < 0) {
        return Bad(absl::StrCat("sequence ", r.seq(), " has invalid sampling parameters"));
      }
      row.params = &p;
      row.prompt = &d->prompts[r.seq()];
      row.generated = &d->generated[r.seq()];
      if (r.generated_suffix_size() > 0) {
        for (int32_t id : r.generated_suffix()) {
          if (id < 0 || id >= lim.vocab_size)
            return Bad(absl::StrCat("row ", r.row(), " history id ", id, " outside the vocabulary"));
        }
        std::vector<int32_t>& own = d->row_generated.emplace_back(d->generated[r.seq()]);
        own.insert(own.end(), r.generated_suffix().begin(), r.generated_suffix().end());
        row.generated = &own;
      }
      if (r.sample() && !d->allowed[r.seq()].empty()) {
        row.allowed = d->allowed[r.seq()].data();
        row.allowed_words = static_cast<int64_t>(d->allowed[r.seq()].size());
      }
    }
    s.rows.push_back(row);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DecodedStep>> DecodeStep(const wpb::StepRequest& req, const StepLimits& lim) {
  const int tokens = req.token_ids_size();
  if (tokens == 0) return Bad("no tokens");
  if (req.positions_size() != tokens || req.seq_of_token_size() != tokens) {
    return Bad(absl::StrCat("token_ids (", tokens, "), positions (", req.positions_size(),
                            ") and seq_of_token (", req.seq_of_token_size(), ") differ in length"));
  }
  auto d = std::make_unique<DecodedStep>();
  StepInput& s = d->step;
  SHARDLM_RETURN_IF_ERROR(DecodeSequences(req, lim, d.get()));
  SHARDLM_RETURN_IF_ERROR(CheckTokens(req, lim, s));
  SHARDLM_RETURN_IF_ERROR(DecodeCopiesAndFeedback(req, lim, s));
  s.token_ids.assign(req.token_ids().begin(), req.token_ids().end());
  s.positions.assign(req.positions().begin(), req.positions().end());
  s.seq_of_token.assign(req.seq_of_token().begin(), req.seq_of_token().end());
  SHARDLM_RETURN_IF_ERROR(DecodeSampleRows(req, lim, d.get()));
  return d;
}

wpb::StepMasksRequest EncodeMasks(const std::vector<RowMask>& masks, uint64_t step_id, uint64_t epoch) {
  wpb::StepMasksRequest req;
  req.set_step_id(step_id);
  req.set_epoch(epoch);
  for (const RowMask& m : masks) {
    wpb::RowMask* out = req.add_masks();
    out->set_row(m.row);
    out->set_allowed_tokens(
        std::string(reinterpret_cast<const char*>(m.allowed.data()), m.allowed.size() * sizeof(uint32_t)));
  }
  return req;
}

absl::StatusOr<std::vector<RowMask>> DecodeMasks(const wpb::StepMasksRequest& req) {
  std::vector<RowMask> masks(req.masks_size());
  for (int i = 0; i < req.masks_size(); ++i) {
    const std::string& bytes = req.masks(i).allowed_tokens();
    if (bytes.size() % sizeof(uint32_t) != 0) {
      return Bad(absl::StrCat("masks: row ", req.masks(i).row(), "'s mask of ", bytes.size(),
                              " bytes is not whole 32-bit words"));
    }
    masks[i].row = req.masks(i).row();
    masks[i].allowed.resize(bytes.size() / sizeof(uint32_t));
    if (!bytes.empty())
      std::memcpy(masks[i].allowed.data(), bytes.data(), bytes.size());  // little-endian hosts
  }
  return masks;
}

void EncodeRows(const std::vector<RowResult>& rows, wpb::StepResponse* response) {
  for (const RowResult& r : rows) {
    wpb::RowResult* out = response->add_rows();
    out->set_token(r.token);
    out->set_logprob(r.logprob);
    out->set_target_logprob(r.target_logprob);
    out->mutable_top_ids()->Add(r.top_ids.begin(), r.top_ids.end());
    out->mutable_top_logprobs()->Add(r.top_logprobs.begin(), r.top_logprobs.end());
  }
}

std::vector<RowResult> DecodeRows(const wpb::StepResponse& response) {
  std::vector<RowResult> rows;
  rows.reserve(response.rows_size());
  for (const wpb::RowResult& r : response.rows()) {
    RowResult out;
    out.token = r.token();
    out.logprob = r.logprob();
    out.target_logprob = r.target_logprob();
    out.top_ids.assign(r.top_ids().begin(), r.top_ids().end());
    out.top_logprobs.assign(r.top_logprobs().begin(), r.top_logprobs().end());
    rows.push_back(std::move(out));
  }
  return rows;
}

}  // namespace shardlm
