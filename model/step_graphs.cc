#include "model/step_graphs.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "kernels/cuda_attention.h"
#include "model/step_upload.h"

namespace shardlm {

// A step's arrays padded to a bucket, on the host.
struct StepGraphs::Staged {
  std::vector<int64_t> ids, rows, slots, key_slots;  // int64[bucket] but key_slots
  std::vector<float> cos, sin;                       // f32[bucket, head_dim / 2]
  std::vector<int32_t> positions, seq;               // int32[bucket]
  std::vector<int32_t> tables;                       // int32[seqs + 1, width]
  int32_t width = 1;
  AttentionBatch batch;  // host fields over the arrays above, and the runs

  // The arrays in one upload, the tables last (`table_entries` at `table_width`:
  // this step's, or the buffer's capacity).
  StepUpload Pack(int32_t table_width, const std::vector<int32_t>& table_entries) const;
};

namespace {

// The upload's regions, in the order every bucket's buffer holds them; the
// tables go last, so that a step's narrower tables fill the start of theirs.
enum Region { kIds, kCos, kSin, kRows, kSlots, kPositions, kSeq, kStride, kTables };

}  // namespace

StepGraphs::StepGraphs(LlamaModel& model, KvPool& pool, const Options& options)
    : model_(model), pool_(pool), options_(options) {}

std::vector<int64_t> StepGraphs::Buckets(int64_t max_batch) {
  std::vector<int64_t> sizes;
  for (int64_t b : {1, 2, 4}) {
    if (b < max_batch) sizes.push_back(b);
  }
  for (int64_t b = 8; b < max_batch; b += 8) sizes.push_back(b);
  if (max_batch >= 1) sizes.push_back(max_batch);
  return sizes;
}

absl::StatusOr<std::unique_ptr<StepGraphs>> StepGraphs::Create(LlamaModel& model, KvPool& pool,
                                                               const Options& options) {
  if (options.max_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA graphs: max_batch must be >= 1, got ", options.max_batch));
  }
  if (pool.scratch_block() < 0) {
    return absl::FailedPreconditionError("CUDA graphs: the KV pool has no scratch block for padding rows");
  }
  std::unique_ptr<StepGraphs> g(new StepGraphs(model, pool, options));
  if (options.capture) {
    g->graphs_ = MakeCudaGraphs(pool.k().device());
    if (g->graphs_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("CUDA graphs: no graphs on ", pool.k().device().str(), " in this build"));
    }
    if (!CudaPagedAttentionTakes(pool.k(), model.config().head_dim)) {
      return absl::FailedPreconditionError(
          absl::StrCat("CUDA graphs: head size ", model.config().head_dim, " has no CUDA attention kernel"));
    }
  }
  const int64_t bs = pool.shape().block_size;
  g->max_width_ = std::max<int64_t>(
      1, std::min<int64_t>((model.config().max_position_embeddings + bs - 1) / bs, pool.shape().num_blocks));
  g->sizes_ = Buckets(options.max_batch);
  g->buckets_.resize(g->sizes_.size());
  for (size_t i = 0; i < g->sizes_.size(); ++i) g->buckets_[i].size = g->sizes_[i];
  return g;
}

void StepGraphs::Stage(const StepInput* step, int64_t bucket, Staged& s) const {
  const int64_t T = step != nullptr ? static_cast<int64_t>(step->token_ids.size()) : 0;
  const int64_t S = step != nullptr ? static_cast<int64_t>(step->block_tables.size()) : 0;
  s.width = 1;
  if (step != nullptr) {
    for (const auto& t : step->block_tables)
      s.width = std::max<int32_t>(s.width, static_cast<int32_t>(t.size()));
  }
  s.ids.assign(bucket, 0);
  s.positions.assign(bucket, 0);
  s.seq.assign(bucket, static_cast<int32_t>(S));  // padding rows: sequence S
  s.rows.resize(bucket);
  for (int64_t r = 0; r < bucket; ++r) s.rows[r] = r;
  for (int64_t t = 0; t < T; ++t) {
    s.ids[t] = step->token_ids[t];
    s.positions[t] = step->positions[t];
    s.seq[t] = step->seq_of_token[t];
  }
  s.tables.assign((S + 1) * s.width, 0);
  for (int64_t q = 0; q < S; ++q) {
    std::copy(step->block_tables[q].begin(), step->block_tables[q].end(), s.tables.begin() + q * s.width);
  }
  s.tables[S * s.width] = static_cast<int32_t>(pool_.scratch_block());
  s.batch = AttentionBatch();
  s.batch.positions = &s.positions;
  s.batch.seq_of_token = &s.seq;
  s.batch.block_tables = s.tables.data();
  s.batch.max_blocks = s.width;
  s.batch.block_size = pool_.shape().block_size;
  model_.SetAttentionLayout(s.batch);
  // The graphs' attention kernel reads the tables; the eager ATen path of the
  // CPU tests needs the runs' key slots.
  PrepareDeviceBatch(s.batch, s.slots, s.key_slots, /*with_keys=*/!options_.capture);
  model_.RotaryTables(s.positions, s.cos, s.sin);
}

StepUpload StepGraphs::Staged::Pack(int32_t table_width, const std::vector<int32_t>& table_entries) const {
  StepUpload up;
  // In Region's order.
  up.Add(ids);
  up.Add(cos);
  up.Add(sin);
  up.Add(rows);
  up.Add(slots);
  up.Add(positions);
  up.Add(seq);
  up.Add(&table_width, 1);
  up.Add(table_entries);
  return up;
}

absl::Status StepGraphs::Prepare(Bucket& b) {
  Staged s;
  Stage(nullptr, b.size, s);  // padding only: what the warm-up and the capture run
  // The buffer holds the widest tables a step can have: a row per sequence and the padding's.
  std::vector<int32_t> full((b.size + 1) * max_width_, 0);
  full[0] = static_cast<int32_t>(pool_.scratch_block());
  StepUpload up = s.Pack(1, full);
  const int64_t half = model_.config().head_dim / 2;
  SHARDLM_RETURN_IF_ERROR(CatchTorchErrors("allocating a CUDA graph's inputs", [&] {
    b.buffer = at::empty({up.bytes()}, at::TensorOptions().dtype(at::kByte).device(pool_.k().device()));
    up.UploadInto(b.buffer);
    b.in.ids = up.Get(kIds);
    b.in.cos = up.Get(kCos).view({b.size, half});
    b.in.sin = up.Get(kSin).view({b.size, half});
    b.in.row_index = up.Get(kRows);
    b.batch.block_size = pool_.shape().block_size;
    model_.SetAttentionLayout(b.batch);
    b.batch.max_blocks = max_width_;
    b.batch.slots = up.Get(kSlots);
    b.batch.positions_dev = up.Get(kPositions);
    b.batch.seq_of_token_dev = up.Get(kSeq);
    b.batch.table_stride_dev = up.Get(kStride);
    b.batch.block_tables_dev = up.Get(kTables);
    return absl::OkStatus();
  }));
  if (graphs_ == nullptr) return absl::OkStatus();
  auto forward = [&]() -> absl::Status {
    SHARDLM_ASSIGN_OR_RETURN(b.logits, model_.ForwardTensors(b.in, b.batch, pool_));
    return absl::OkStatus();
  };
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<int> graph = graphs_->Capture(forward);
  if (!graph.ok()) {
    return absl::Status(graph.status().code(),
                        absl::StrCat("CUDA graph of bucket ", b.size, ": ", graph.status().message()));
  }
  b.graph = *graph;
  LOG(INFO) << "CUDA graph for steps of up to " << b.size << " tokens captured in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start)
                   .count()
            << " ms";
  return absl::OkStatus();
}

absl::StatusOr<bool> StepGraphs::AllRanksAgree(bool ok) {
  if (graphs_ == nullptr || options_.comm == nullptr || options_.comm->rank_info().world_size == 1) return ok;
  at::Tensor flag;
  SHARDLM_RETURN_IF_ERROR(CatchTorchErrors("agreeing on a capture", [&] {
    flag = at::full({1}, ok ? 1.0f : 0.0f, at::TensorOptions().dtype(at::kFloat).device(pool_.k().device()));
    return absl::OkStatus();
  }));
  SHARDLM_RETURN_IF_ERROR(options_.comm->AllReduce(flag));
  float sum = 0.0f;
  SHARDLM_RETURN_IF_ERROR(CatchTorchErrors("agreeing on a capture", [&] {
    sum = flag.item<float>();
    return absl::OkStatus();
  }));
  SHARDLM_RETURN_IF_ERROR(options_.comm->AsyncError());
  return sum == static_cast<float>(options_.comm->rank_info().world_size);
}

bool StepGraphs::Takes(const StepInput& step) const {
  const int64_t T = static_cast<int64_t>(step.token_ids.size());
  if (failed_ || T < 1 || sizes_.empty() || T > sizes_.back()) return false;
  if (static_cast<int64_t>(step.block_tables.size()) > T) return false;
  for (const auto& t : step.block_tables) {
    if (static_cast<int64_t>(t.size()) > max_width_) return false;
  }
  return true;
}

absl::StatusOr<at::Tensor> StepGraphs::Run(const StepInput& step) {
  if (!Takes(step)) return absl::InternalError("CUDA graphs: a step no bucket takes");
  const int64_t T = static_cast<int64_t>(step.token_ids.size());
  const size_t i = std::lower_bound(sizes_.begin(), sizes_.end(), T) - sizes_.begin();
  Bucket& b = buckets_[i];
  if (!b.buffer.defined()) {
    const absl::Status st = Prepare(b);
    // Every rank captures this bucket at this step; they replay only if all
    // succeeded, or else all run every step eagerly from here on, this one
    // too, so that their collectives keep the same shapes.
    SHARDLM_ASSIGN_OR_RETURN(const bool all_ok, AllRanksAgree(st.ok()));
    if (!all_ok) {
      LOG(ERROR) << (st.ok() ? absl::UnavailableError("a CUDA graph capture failed on another rank") : st)
                 << "; CUDA graphs are off from here on";
      failed_ = true;
      return model_.Forward(step, pool_);
    }
  }
  Staged s;
  Stage(&step, b.size, s);
  StepUpload up = s.Pack(s.width, s.tables);
  at::Tensor logits;
  SHARDLM_RETURN_IF_ERROR(CatchTorchErrors("a CUDA graph's inputs", [&] {
    up.UploadInto(b.buffer);
    return absl::OkStatus();
  }));
  if (graphs_ != nullptr) {
    SHARDLM_RETURN_IF_ERROR(graphs_->Replay(b.graph));
    logits = b.logits;
  } else {
    // Eagerly over the same buffers; the host fields are this step's.
    AttentionBatch batch = b.batch;
    batch.positions = &s.positions;
    batch.seq_of_token = &s.seq;
    batch.block_tables = s.tables.data();
    batch.max_blocks = s.width;
    batch.runs = s.batch.runs;
    SHARDLM_RETURN_IF_ERROR(CatchTorchErrors("the key slots", [&] {
      batch.key_slots = at::tensor(s.key_slots, at::kLong).to(pool_.k().device());
      return absl::OkStatus();
    }));
    SHARDLM_ASSIGN_OR_RETURN(logits, model_.ForwardTensors(b.in, batch, pool_));
  }
  if (!logits.defined()) return logits;  // not the sampling rank
  // The step's rows, in its order.
  const int64_t n = static_cast<int64_t>(step.rows.size());
  bool in_order = true;
  std::vector<int64_t> rows(n);
  for (int64_t r = 0; r < n; ++r) {
    rows[r] = step.rows[r].row;
    in_order = in_order && rows[r] == r;
  }
  at::Tensor out;
  SHARDLM_RETURN_IF_ERROR(CatchTorchErrors("the graph's rows", [&] {
    out = in_order ? logits.narrow(0, 0, n)
                   : logits.index_select(0, at::tensor(rows, at::kLong).to(logits.device()));
    return absl::OkStatus();
  }));
  return out;
}

}  // namespace shardlm
