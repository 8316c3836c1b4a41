// CUDA graphs for small steps (decodes): one graph per batch-size bucket.
//
// A step of T tokens, T no more than the largest bucket, runs on the graph
// of the smallest bucket B >= T. Its arrays are padded to B rows and copied
// in one upload into that bucket's static input buffer; the graph (the whole
// forward pass, NCCL collectives included) is replayed; the logits of the
// step's rows are read from the graph's static output.
//
// A bucket's graph is captured on its first step, not when the rank loads:
// every rank gets the same steps, so every rank captures at the same step,
// while at load time the ranks finish reading their weights at different
// moments and a capture's warm-up collectives would wait for the slowest
// past the collective timeout. That first step costs two more forward passes
// and the graph's instantiation.
//
// Padding rows are token 0 at position 0 of one extra sequence whose block
// table holds only the pool's scratch block (KvPool's scratch_blocks), so
// they write and read that block alone; each row of a forward pass depends
// on no other row, so they change nothing else.
//
// The block tables go last in the upload, as int32[seqs + 1, width] with
// the step's own width, which the attention kernel reads from the device
// (AttentionBatch::table_stride_dev): a graph serves every context length up
// to the model's, and a step uploads only the table entries it has.
//
//   StepGraphs::Options o;
//   o.max_batch = 64;
//   SHARDLM_ASSIGN_OR_RETURN(auto graphs, StepGraphs::Create(model, pool, o));
//   absl::StatusOr<at::Tensor> logits =
//       graphs->Takes(step) ? graphs->Run(step) : model.Forward(step, pool);
//
// Without capture (Options::capture false) the same padded buffers go
// through the forward pass eagerly: how tests check the padding, the layout
// and the row selection on the CPU.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "kernels/attention.h"
#include "kv/kv_pool.h"
#include "model/cuda_graph.h"
#include "model/llama_model.h"
#include "step/step.h"

namespace shardlm {

class StepGraphs {
 public:
  struct Options {
    int64_t max_batch = 64;  // the largest bucket, in tokens
    bool capture = true;     // false: run the buckets' buffers eagerly (tests on the CPU)
    // The group's communicator: the ranks agree on each capture's outcome
    // through it, so that they all replay or all run eagerly. May be null at
    // world size 1.
    Communicator* comm = nullptr;
  };

  // The buckets, none captured yet. The pool needs a scratch block.
  // FailedPrecondition when the graphs cannot serve this model here (capture
  // on a device without the CUDA attention kernel for its head size, or a
  // build without CUDA).
  static absl::StatusOr<std::unique_ptr<StepGraphs>> Create(LlamaModel& model, KvPool& pool,
                                                            const Options& options);

  // 1, 2, 4, 8, then every multiple of 8 up to max_batch (and max_batch itself).
  static std::vector<int64_t> Buckets(int64_t max_batch);

  // Whether `step` runs on a graph: at most the largest bucket's tokens and
  // sequences, block tables no wider than the model's context, and no capture
  // has failed.
  bool Takes(const StepInput& step) const;
  // The step through its bucket (captured first if this is its first step):
  // f32[rows, vocab] on rank 0, one row per
  // step.rows entry in order (a view of the graph's output, good until the
  // next Run), undefined on the other ranks.
  absl::StatusOr<at::Tensor> Run(const StepInput& step);

  const std::vector<int64_t>& bucket_sizes() const { return sizes_; }

 private:
  struct Bucket {
    int64_t size = 0;
    at::Tensor buffer;           // uint8: the static inputs, StepUpload's layout at capacity
    LlamaModel::StepTensors in;  // views of buffer; row_index = every row
    AttentionBatch batch;        // its device arrays: views of buffer
    at::Tensor logits;           // f32[size, vocab] on rank 0: the graph's output
    int graph = -1;
  };
  struct Staged;

  StepGraphs(LlamaModel& model, KvPool& pool, const Options& options);
  // Pads `step` (nullptr: padding only) to `bucket` rows into `s`.
  void Stage(const StepInput* step, int64_t bucket, Staged& s) const;
  // Allocates the bucket's buffers and, with capture, captures its graph: a
  // padding-only forward pass, twice (warm-up and capture), on every rank.
  absl::Status Prepare(Bucket& b);
  // Whether every rank's `ok` is true (one all-reduce).
  absl::StatusOr<bool> AllRanksAgree(bool ok);

  LlamaModel& model_;
  KvPool& pool_;
  Options options_;
  int64_t max_width_ = 0;  // table entries per sequence at most: the model's context in blocks
  std::vector<int64_t> sizes_;
  std::vector<Bucket> buckets_;
  std::unique_ptr<CudaGraphs> graphs_;  // null without capture
  bool failed_ = false;                 // a capture failed: every step eager
};

}  // namespace shardlm
