// The draft-model proposer (docs/speculative_decoding.md): a small model with
// the target's tokenizer proposes each speculating sequence's next tokens
// greedily, on a StepExecutor of its own (the coordinator's in-process draft
// rank) with a KV cache of its own.
//
// The draft keeps, per sequence, the tokens its cache holds K/V for. A call
// feeds each sequence what its cache lacks (the tokens after the longest
// prefix the cache and the sequence share: the prompt the first time, then
// the one or two tokens the last verification kept) and then one token per
// pass, its own argmax, for k passes. Rejected proposals need no rollback
// here: the next call's shared prefix ends before them.
//
//   DraftModelProposer draft(worker.get(), num_blocks, block_size, cfg.eos_token_ids);
//   std::vector<std::vector<int32_t>> p = draft.Propose({{.id = 7, .tokens = &tokens, .k = 4}});
//   draft.Forget(7);  // the sequence ended: its blocks go back
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "constraints/matcher.h"
#include "step/step.h"

namespace shardlm {

// One sequence's request for proposals: up to `k` tokens after `tokens`,
// each allowed by `constraint` (its state after `tokens`) when it has one.
struct DraftAsk {
  int64_t id = 0;
  const std::vector<int32_t>* tokens = nullptr;
  int32_t k = 0;
  const Matcher* constraint = nullptr;
};

class DraftModelProposer {
 public:
  struct Options {
    // Tokens a call feeds to catch sequences' caches up, over all of them:
    // a long prompt is fed over several calls (its sequence proposes
    // nothing until its cache has caught up), so that no call holds the
    // engine much longer than a decode step.
    int32_t max_catch_up = 128;
    // The draft's context (its max_position_embeddings): a sequence longer
    // than that proposes nothing. 0: no bound.
    int64_t max_position = 0;
    // A sequence's proposals end before the first token the draft gives
    // less than this probability (its own softmax, as llama.cpp's
    // --draft-p-min): an unsure guess is seldom accepted, and its row and
    // the passes after it would be spent for nothing. 0: every pass counts.
    double min_probability = 0;
  };
  struct Stats {
    int64_t passes = 0;         // draft forward passes run
    int64_t fed_tokens = 0;     // tokens fed from the sequences (not the draft's own proposals)
    int64_t failed_passes = 0;  // passes the executor failed (their proposals dropped)
    int64_t evictions = 0;      // sequences' caches dropped for room
    double pass_ms = 0;         // a pass of one token per sequence (moving average)
    int64_t unsure_stops = 0;   // proposals ended below Options::min_probability
  };

  // `executor` runs the draft model over a pool of `num_blocks` blocks of
  // `block_size` tokens; its argmax stops at `eos_token_ids`.
  DraftModelProposer(StepExecutor* executor, int32_t num_blocks, int32_t block_size,
                     std::vector<int64_t> eos_token_ids, Options options);
  DraftModelProposer(StepExecutor* executor, int32_t num_blocks, int32_t block_size,
                     std::vector<int64_t> eos_token_ids)
      : DraftModelProposer(executor, num_blocks, block_size, std::move(eos_token_ids), Options()) {}

  // The proposals for each ask, in order: up to its k tokens (fewer after an
  // end-of-sequence token, none while its cache is still catching up or
  // when the pool cannot hold it, none for every ask when a pass fails).
  std::vector<std::vector<int32_t>> Propose(const std::vector<DraftAsk>& asks);
  // The sequence ended: its cache's blocks go back to the pool.
  void Forget(int64_t id);

  Stats stats() const { return stats_; }
  int32_t free_blocks() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_blocks() const { return num_blocks_; }

 private:
  // A sequence's cache: its blocks, the tokens whose K/V they hold, and the
  // call that last used it (evictions take the least recent first).
  struct Cache {
    std::vector<int32_t> blocks;
    std::vector<int32_t> fed;
    int64_t used = 0;
  };
  // Blocks for `tokens` positions in `cache`, taking free ones and evicting
  // caches no ask of this call uses; false (and nothing taken) if the pool
  // cannot hold them.
  bool Reserve(Cache& cache, int32_t tokens);
  // Keeps the first `tokens` fed tokens and the blocks they need.
  void Truncate(Cache& cache, int32_t tokens);
  bool IsEos(int32_t token) const;
  // A call's constrained asks: each one's copy of its constraint, walked
  // through its proposals, and the mask of its next one (by ask).
  struct Walks {
    std::vector<std::unique_ptr<Matcher>> matchers;
    std::vector<std::vector<uint32_t>> masks;
  };
  // Points `row` at ask i's mask for its next proposal; false when its
  // constraint allows nothing more to propose (ended or failed).
  bool MaskRow(size_t i, Walks& walks, SampleRow& row);
  // Propose's passes: the first feeds what each cache lacks, with a
  // sampling row at each proposing sequence's last token (`going`: their
  // asks, row by row); each next one feeds every proposal the last drew
  // (into `out`) to the asks that want more.
  StepInput FirstPass(const std::vector<DraftAsk>& asks, Walks& walks, std::vector<size_t>& going);
  StepInput NextPass(const StepInput& step, const std::vector<RowResult>& rows,
                     const std::vector<DraftAsk>& asks, Walks& walks, std::vector<size_t>& going,
                     std::vector<std::vector<int32_t>>& out);
  // Drops every cache (after a failed pass their contents are unknown).
  void DropAll();

  StepExecutor* executor_;
  int32_t num_blocks_;
  int32_t block_size_;
  std::vector<int64_t> eos_;
  Options options_;
  std::vector<int32_t> free_;
  std::map<int64_t, Cache> caches_;
  int64_t calls_ = 0;
  Stats stats_;
};

}  // namespace shardlm
