// Constraint masks that follow their step (docs/structured_outputs.md): the
// coordinator starts a step before the masks of its constrained rows are
// known (they need the token the step before samples) and sends them on
// their own; rank 0 waits for them only before sampling.
//
//   MaskMailbox mailbox;                                   // the worker's
//   mailbox.Put({epoch, step_id}, masks);                  // the masks' RPC
//   step.await_masks = AwaitMasks(&mailbox, {epoch, step_id}, vocab, [&] { return ctx->IsCancelled(); });
//   ... rank 0's sampling calls step.await_masks(rows) ...
//   mailbox.DropThrough({epoch, step_id});                 // the step has run
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "step/step.h"

namespace shardlm {

// Points the rows marked mask_follows at `masks`, which must hold exactly one
// mask per such row (by row index), each within a vocabulary of `vocab_size`.
// `masks` must outlive the rows' use.
absl::Status PointRowsAtMasks(const std::vector<RowMask>& masks, int64_t vocab_size,
                              std::vector<SampleRow>& rows);

// A step by group formation (epoch) and id: ids start again in each epoch.
using StepKey = std::pair<uint64_t, uint64_t>;

// Masks by step, from the thread that receives them to the one that samples.
class MaskMailbox {
 public:
  // Kept until taken or dropped; a step already dropped is ignored. An
  // error (masks that could not be read) fails the step that takes it.
  void Put(StepKey step, absl::StatusOr<std::vector<RowMask>> masks);
  // Waits for the step's masks; an error once `give_up` says so (asked every 20 ms).
  absl::StatusOr<std::vector<RowMask>> Take(StepKey step, const std::function<bool()>& give_up);
  // Forgets the masks of steps up to `step` (run or refused), now and when they arrive later.
  void DropThrough(StepKey step);
  // Forgets everything: a new group formation, whose coordinator (perhaps a
  // new process) may count epochs and steps from 1 again.
  void Reset();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<StepKey, absl::StatusOr<std::vector<RowMask>>> masks_;
  StepKey dropped_through_{0, 0};
};

// StepInput::await_masks for `step`: takes its masks from `mailbox` and
// points the rows at them.
std::function<absl::Status(std::vector<SampleRow>&)> AwaitMasks(MaskMailbox* mailbox, StepKey step,
                                                                int64_t vocab_size,
                                                                std::function<bool()> give_up);

}  // namespace shardlm
