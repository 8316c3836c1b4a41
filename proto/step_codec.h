// StepInput <-> shardlm.worker.v1.StepRequest, and RowResults back.
//
// The coordinator encodes once per step and sends the same bytes to every
// rank. A worker decodes and bounds-checks every field from the wire before
// use (token ids inside the vocabulary, block ids inside its pool, rows and
// sequence indices inside the message), so a malformed request is an
// InvalidArgument, never an out-of-range read.
//
//   shardlm::worker::v1::StepRequest req = EncodeStep(step, /*step_id=*/7);
//   SHARDLM_ASSIGN_OR_RETURN(auto decoded, DecodeStep(req, limits));
//   worker->Execute(decoded->step);
#pragma once

#include <deque>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "shardlm/worker/v1/worker.pb.h"
#include "step/step.h"

namespace shardlm {

namespace wpb = ::shardlm::worker::v1;

// after_step_id: the step the ranks must have run first (0: none).
wpb::StepRequest EncodeStep(const StepInput& step, uint64_t step_id, uint64_t after_step_id = 0,
                            uint64_t epoch = 0);

// A decoded step and the storage its SampleRow pointers refer to.
struct DecodedStep {
  StepInput step;
  std::vector<SamplingParams> params;              // per sequence
  std::vector<std::vector<int32_t>> prompts;       // per sequence
  std::vector<std::vector<int32_t>> generated;     // per sequence
  std::vector<std::vector<uint32_t>> allowed;      // per sequence: a constraint's mask, or empty
  std::deque<std::vector<int32_t>> row_generated;  // a row's own history (generated_suffix)
};

struct StepLimits {
  int64_t vocab_size = 0;
  int64_t num_blocks = 0;
  int64_t block_size = 16;
  int64_t max_position = 0;  // exclusive
};

absl::StatusOr<std::unique_ptr<DecodedStep>> DecodeStep(const wpb::StepRequest& request,
                                                        const StepLimits& limits);

// The masks that follow step `step_id` (step/step_masks.h). Decoding checks
// only the bytes; PointRowsAtMasks checks them against the step's rows.
wpb::StepMasksRequest EncodeMasks(const std::vector<RowMask>& masks, uint64_t step_id, uint64_t epoch = 0);
absl::StatusOr<std::vector<RowMask>> DecodeMasks(const wpb::StepMasksRequest& request);

void EncodeRows(const std::vector<RowResult>& rows, wpb::StepResponse* response);
std::vector<RowResult> DecodeRows(const wpb::StepResponse& response);

}  // namespace shardlm
