// One step of the engine: the flattened batch every rank runs, and what comes
// back. Built by the coordinator's scheduler, executed by each worker.
//
// Tokens of all sequences are concatenated without padding: a prompt chunk
// contributes many rows, a decoding sequence one. A sequence's rows in a step
// are consecutive positions, and its block table covers them.
//
//   step.token_ids    = {5, 6, 7,   42}        // seq 0: prompt chunk; seq 1: decode
//   step.positions    = {0, 1, 2,   17}
//   step.seq_of_token = {0, 0, 0,   1}
//   step.block_tables = {{3}, {0, 1}}          // block_size 16
//   step.rows         = {{.row = 2, .sample = true, ...}, {.row = 3, .sample = true, ...}}
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardlm {

// Per-request sampling, as users of vLLM / TGI expect. temperature 0 = greedy.
struct SamplingParams {
  float temperature = 1.0f;
  int32_t top_k = 0;                // 0 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // HF: divide positive logits, multiply negative ones
  float presence_penalty = 0.0f;    // OpenAI: minus this once per token seen in the output
  float frequency_penalty = 0.0f;   // OpenAI: minus this per occurrence in the output
  // > 0: the penalties see only the sequence's last n tokens (llama.cpp's
  // penalty_last_n, Ollama's repeat_last_n); 0: all of them.
  int32_t penalty_last_n = 0;
  uint64_t seed = 0;
  int32_t num_top_logprobs = 0;                       // top-n alternatives reported per token
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, added to its logit)
};

// A row of the step whose next-token distribution is wanted.
struct SampleRow {
  int32_t row = 0;                                  // index into the step's tokens
  int32_t seq = 0;                                  // index into the step's sequences (block_tables)
  int32_t target = -1;                              // scoring: report log p(target | prefix)
  bool sample = false;                              // draw a next token
  const SamplingParams* params = nullptr;           // required when sample or top-n wanted
  const std::vector<int32_t>* prompt = nullptr;     // for repetition penalty
  const std::vector<int32_t>* generated = nullptr;  // for all penalties
  uint64_t draw_seed = 0;  // seeds this draw's random numbers (reproducible per request)
  // A constraint's mask (docs/structured_outputs.md): token i may be drawn
  // only when bit i % 32 of allowed[i / 32] is set; ids past the mask's
  // allowed_words * 32 never. Null: every token.
  const uint32_t* allowed = nullptr;
  int64_t allowed_words = 0;
  // The mask is computed after the step was started, from the token the step
  // before samples, and sent on its own (PendingStep::SendMasks): rank 0
  // waits for it before sampling this row (StepInput::await_masks).
  bool mask_follows = false;
};

// A mask that follows its step: for rows[row] of that step.
struct RowMask {
  int32_t row = 0;
  std::vector<uint32_t> allowed;  // as SampleRow::allowed; empty: every token
};

// Whether token `id`'s bit is set in the mask of `words` 32-bit words at
// `allowed` (laid out as SampleRow::allowed); ids past it never.
inline bool MaskAllows(const uint32_t* allowed, int64_t words, int64_t id) {
  return id >= 0 && id / 32 < words && ((allowed[id / 32] >> (id % 32)) & 1u) != 0;
}
// Whether `row`'s mask lets token `id` be drawn.
inline bool Allowed(const SampleRow& row, int64_t id) {
  return row.allowed == nullptr || MaskAllows(row.allowed, row.allowed_words, id);
}

// Where the tokens the penalties see begin in `row`'s prompt and generated
// tokens: all of them, or with penalty_last_n only the sequence's last n.
struct PenaltyWindow {
  size_t prompt_from = 0;
  size_t generated_from = 0;
};
inline PenaltyWindow PenaltyWindowOf(const SampleRow& row) {
  PenaltyWindow w;
  const size_t n = row.params->penalty_last_n > 0 ? static_cast<size_t>(row.params->penalty_last_n) : 0;
  if (n == 0) return w;
  const size_t generated = row.generated != nullptr ? row.generated->size() : 0;
  const size_t prompt = row.prompt != nullptr ? row.prompt->size() : 0;
  w.generated_from = generated > n ? generated - n : 0;
  const size_t left = n > generated ? n - generated : 0;
  w.prompt_from = prompt > left ? prompt - left : 0;
  return w;
}

struct StepInput {
  std::vector<int32_t> token_ids;                  // int32[tokens]
  std::vector<int32_t> positions;                  // int32[tokens]
  std::vector<int32_t> seq_of_token;               // int32[tokens], index into block_tables
  std::vector<std::vector<int32_t>> block_tables;  // per sequence
  // KV blocks copied (src -> dst, every layer) before the forward pass:
  // copy-on-write of a shared, partly filled block.
  std::vector<std::pair<int32_t, int32_t>> block_copies;
  std::vector<SampleRow> rows;
  // Per sequence, for logs only (may be empty): the request id it serves,
  // and whether this step is its first (after arrival or a preemption).
  std::vector<std::string> request_ids;
  std::vector<bool> starts;
  // Overlapped steps (docs/scheduler.md): tokens not known when the step was
  // planned. (token index, row of the previous step): the token at that index
  // is the one the previous step sampled for that row; token_ids holds a
  // placeholder there, and the sequence's penalty history lacks it.
  std::vector<std::pair<int32_t, int32_t>> feedback;
  // Rank 0, when rows have mask_follows: waits for their masks and points
  // those rows' `allowed` at them (storage kept by the function). Set by
  // whoever delivers the step to the rank (the worker's Step handler).
  std::function<absl::Status(std::vector<SampleRow>& rows)> await_masks;
};

// Whether any row's mask follows the step.
inline bool MasksFollow(const StepInput& step) {
  for (const SampleRow& r : step.rows) {
    if (r.mask_follows) return true;
  }
  return false;
}

// Logprobs are of the model's own distribution (before temperature and
// penalties), as vLLM and TGI report them.
struct RowResult {
  int32_t token = -1;           // sampled token, when asked
  float logprob = 0.0f;         // log p(token)
  float target_logprob = 0.0f;  // log p(target), when asked
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
};

}  // namespace shardlm

namespace shardlm {

// A step started on the ranks; Wait returns its rows (once).
class PendingStep {
 public:
  virtual ~PendingStep() = default;
  virtual absl::StatusOr<std::vector<RowResult>> Wait() = 0;
  // The masks of the rows started with mask_follows, once, before Wait.
  // Only executors that overlap steps are given such rows.
  virtual void SendMasks(std::vector<RowMask> masks) = 0;
};

// What the coordinator drives: every rank (in-process or remote) behind one call.
class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  // One RowResult per step.rows entry, in order.
  virtual absl::StatusOr<std::vector<RowResult>> Execute(const StepInput& step) = 0;

  // Whether StartStep returns before the step has run, so that the next step can
  // be queued behind it (and feed back its tokens: StepInput::feedback).
  virtual bool Overlaps() const { return false; }
  // Starts `step` behind those started before and not yet waited for; the
  // ranks run steps in the order started. Here: Wait runs it (so a caller
  // that waits without its lock computes without it); `step` must outlive it.
  virtual std::unique_ptr<PendingStep> StartStep(const StepInput& step) {
    class Later final : public PendingStep {
     public:
      Later(StepExecutor* exec, const StepInput* step) : exec_(exec), step_(step) {}
      absl::StatusOr<std::vector<RowResult>> Wait() override { return exec_->Execute(*step_); }
      // Not overlapped: every mask is known when the step is planned.
      void SendMasks(std::vector<RowMask>) override {}

     private:
      StepExecutor* exec_;
      const StepInput* step_;
    };
    return std::make_unique<Later>(this, &step);
  }
};

}  // namespace shardlm
