#include "collectives/uneven.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace shardlm {
namespace {

bool AllEqual(const std::vector<int64_t>& parts) {
  return std::all_of(parts.begin(), parts.end(), [&](int64_t p) { return p == parts.front(); });
}

// `size`: this rank's part (all-gather, gather) or the whole (reduce-scatter) along the dimension.
absl::Status CheckParts(const Communicator& comm, const std::vector<int64_t>& parts, const char* op,
                        int64_t size, bool whole) {
  if (static_cast<int64_t>(parts.size()) != comm.rank_info().world_size) {
    return absl::InternalError(
        absl::StrCat(op, ": ", parts.size(), " parts for a world size of ", comm.rank_info().world_size));
  }
  int64_t sum = 0;
  for (int64_t p : parts) sum += p;
  const int64_t want = whole ? sum : parts[comm.rank_info().rank];
  if (size != want) {
    return absl::InternalError(absl::StrCat(op, ": rank ", comm.rank_info().rank, " holds ", size,
                                            " along the dimension, ",
                                            whole ? "the parts sum to " : "its part is ", want));
  }
  return absl::OkStatus();
}

// `t` padded with zeros along `dim` to `length`.
at::Tensor PadTo(const at::Tensor& t, int64_t dim, int64_t length) {
  if (t.size(dim) == length) return t;
  std::vector<int64_t> shape = t.sizes().vec();
  shape[dim] = length - t.size(dim);
  return at::cat({t, at::zeros(shape, t.options())}, dim);
}

// The parts of a gathered tensor of equal chunks of `max` along `dim`, without the padding.
at::Tensor Unpad(const at::Tensor& gathered, int64_t dim, const std::vector<int64_t>& parts, int64_t max) {
  std::vector<at::Tensor> pieces;
  for (size_t r = 0; r < parts.size(); ++r) {
    pieces.push_back(gathered.narrow(dim, static_cast<int64_t>(r) * max, parts[r]));
  }
  return at::cat(pieces, dim);
}

}  // namespace

absl::StatusOr<at::Tensor> AllGatherParts(Communicator& comm, const at::Tensor& shard, int64_t dim,
                                          const std::vector<int64_t>& parts) {
  if (absl::Status st = CheckParts(comm, parts, "all-gather", shard.size(dim), false); !st.ok()) return st;
  if (AllEqual(parts)) return comm.AllGather(shard, dim);
  const int64_t max = *std::max_element(parts.begin(), parts.end());
  absl::StatusOr<at::Tensor> gathered = comm.AllGather(PadTo(shard, dim, max).contiguous(), dim);
  if (!gathered.ok()) return gathered.status();
  return Unpad(*gathered, dim, parts, max);
}

absl::StatusOr<at::Tensor> GatherParts(Communicator& comm, const at::Tensor& shard, int64_t dim, int root,
                                       const std::vector<int64_t>& parts) {
  if (absl::Status st = CheckParts(comm, parts, "gather", shard.size(dim), false); !st.ok()) return st;
  if (AllEqual(parts)) return comm.Gather(shard, dim, root);
  const int64_t max = *std::max_element(parts.begin(), parts.end());
  absl::StatusOr<at::Tensor> gathered = comm.Gather(PadTo(shard, dim, max).contiguous(), dim, root);
  if (!gathered.ok() || !gathered->defined()) return gathered;
  return Unpad(*gathered, dim, parts, max);
}

absl::StatusOr<at::Tensor> ReduceScatterParts(Communicator& comm, const at::Tensor& partial, int64_t dim,
                                              const std::vector<int64_t>& parts) {
  if (absl::Status st = CheckParts(comm, parts, "reduce-scatter", partial.size(dim), true); !st.ok())
    return st;
  if (AllEqual(parts)) return comm.ReduceScatter(partial, dim);
  const int64_t max = *std::max_element(parts.begin(), parts.end());
  // Each rank's part at r * max, padded with zeros to max.
  std::vector<at::Tensor> pieces;
  int64_t offset = 0;
  for (int64_t p : parts) {
    pieces.push_back(PadTo(partial.narrow(dim, offset, p), dim, max));
    offset += p;
  }
  absl::StatusOr<at::Tensor> mine = comm.ReduceScatter(at::cat(pieces, dim), dim);
  if (!mine.ok()) return mine.status();
  return mine->narrow(dim, 0, parts[comm.rank_info().rank]).contiguous();
}

}  // namespace shardlm
