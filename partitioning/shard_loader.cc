#include "partitioning/shard_loader.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace shardlm {
namespace {

at::ScalarType ToScalarType(DType d) {
  switch (d) {
    case DType::kF32:
      return at::kFloat;
    case DType::kF16:
      return at::kHalf;
    case DType::kBF16:
      return at::kBFloat16;
  }
  return at::kFloat;
}

// f32[rows, cols] of a block-quantized tensor viewed as [numel / row_len, row_len]:
// rows [row_start, row_start + rows), columns [col_start, col_start + cols). Only
// the blocks that hold those columns are dequantized (a column slice need not
// start on a block: the covering blocks are dequantized, then narrowed).
at::Tensor DequantizeRange(const TensorView& view, int64_t row_start, int64_t rows, int64_t col_start,
                           int64_t cols) {
  const int64_t row_len = view.shape.back();
  const BlockLayout layout = BlockLayoutOf(view.block);
  const int64_t row_bytes = row_len / layout.elements * layout.bytes;
  const int64_t first_block = col_start / layout.elements;
  const int64_t span =
      ((col_start + cols + layout.elements - 1) / layout.elements - first_block) * layout.elements;
  at::Tensor out = at::empty({rows, span}, at::TensorOptions().dtype(at::kFloat));
  float* dst = out.data_ptr<float>();
  const uint8_t* src = view.data + first_block * layout.bytes;
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      DequantizeBlocks(view.block, src + (row_start + r) * row_bytes, span, dst + r * span);
    }
  });
  const int64_t skip = col_start - first_block * layout.elements;
  return skip == 0 && span == cols ? out : out.narrow(1, skip, cols);
}

// The slice of a block-quantized tensor, dequantized to f32: a rank reads and
// dequantizes only its rows (dim 0) or its columns (dim 1) of a matrix.
at::Tensor DequantizeSlice(const TensorView& view, const SliceSpec& slice) {
  const int64_t row_len = view.shape.back(), rows = view.numel() / row_len;
  if (view.shape.size() == 2 && slice.dim == 0)
    return DequantizeRange(view, slice.start, slice.length, 0, row_len);
  if (view.shape.size() == 2 && slice.dim == 1)
    return DequantizeRange(view, 0, rows, slice.start, slice.length);
  at::Tensor full = DequantizeRange(view, 0, rows, 0, row_len).view(view.shape);
  return slice.dim >= 0 ? full.narrow(slice.dim, slice.start, slice.length) : full;
}

// llama.cpp's converter stores each q/k head's rows as (pair j, half i) -> row 2j + i;
// Hugging Face's order is row i * head_dim / 2 + j. `rows` is [heads.tp * head_dim, ...].
at::Tensor UndoRotaryPermutation(const at::Tensor& rows, int64_t head_dim) {
  std::vector<int64_t> shape = {rows.size(0) / head_dim, head_dim / 2, 2};
  for (int64_t d = 1; d < rows.dim(); ++d) shape.push_back(rows.size(d));
  return rows.reshape(shape).transpose(1, 2).reshape(rows.sizes());
}

absl::Status CheckShape(const Checkpoint& ckpt, const TensorView& view, const std::string& name,
                        const std::vector<int64_t>& expected_shape) {
  if (view.shape == expected_shape) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' in ", ckpt.dir(), " has shape [",
                                                 absl::StrJoin(view.shape, ", "), "], expected [",
                                                 absl::StrJoin(expected_shape, ", "), "]"));
}

// `part` (rows of tensor `name`, sliced by `slice`) in the rotary order the
// model computes in, where the file keeps q and k projections in GGUF's
// permuted order; whole heads only.
absl::StatusOr<at::Tensor> InRotaryOrder(const TensorView& view, const SliceSpec& slice,
                                         const std::string& name, at::Tensor part) {
  if (view.rope_permuted_head_dim <= 0) return part;
  if (slice.dim > 0 || part.size(0) % view.rope_permuted_head_dim != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': a slice of ", part.size(0),
                                                   " rows is not a whole number of heads of ",
                                                   view.rope_permuted_head_dim));
  }
  return UndoRotaryPermutation(part, view.rope_permuted_head_dim);
}

}  // namespace

absl::StatusOr<QuantShard> LoadQuantShard(const Checkpoint& ckpt, const ShardPlan& plan,
                                          const std::string& name,
                                          const std::vector<int64_t>& expected_shape) {
  SHARDLM_ASSIGN_OR_RETURN(const TensorView* view, ckpt.Get(name));
  SHARDLM_RETURN_IF_ERROR(CheckShape(ckpt, *view, name, expected_shape));
  QuantShard shard;
  // Formats the kernels do not keep are loaded dense (LoadShard): no copy of their blocks here.
  if (view->block == BlockFormat::kNone || !HasQuantKernels(view->block) || view->shape.size() != 2)
    return shard;
  const BlockLayout layout = BlockLayoutOf(view->block);
  const SliceSpec slice = plan.SliceFor(name);
  int64_t row0 = 0, rows = view->shape[0], col0 = 0, cols = view->shape[1];
  if (slice.dim == 0) {
    row0 = slice.start;
    rows = slice.length;
  } else if (slice.dim == 1) {
    col0 = slice.start;
    cols = slice.length;
  }
  if (col0 % layout.elements != 0 || cols % layout.elements != 0) return shard;
  const int64_t row_bytes = view->shape[1] / layout.elements * layout.bytes;
  const int64_t out_bytes = cols / layout.elements * layout.bytes;
  const int64_t skip = col0 / layout.elements * layout.bytes;
  absl::Status st = CatchTorchErrors("loading " + name, [&]() -> absl::Status {
    at::Tensor out = at::empty({rows, out_bytes}, at::kByte);
    uint8_t* dst = out.data_ptr<uint8_t>();
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(dst + r * out_bytes, view->data + (row0 + r) * row_bytes + skip,
                  static_cast<size_t>(out_bytes));
    }
    SHARDLM_ASSIGN_OR_RETURN(out, InRotaryOrder(*view, slice, name, std::move(out)));
    shard.rows = out.contiguous();
    return absl::OkStatus();
  });
  SHARDLM_RETURN_IF_ERROR(st);
  shard.format = view->block;
  shard.cols = cols;
  return shard;
}

at::Tensor QuantizeRows(BlockFormat format, const at::Tensor& rows) {
  const at::Tensor src = rows.to(at::kFloat).contiguous();
  const int64_t n = src.size(0), k = src.size(1);
  const BlockLayout layout = BlockLayoutOf(format);
  const int64_t row_bytes = k / layout.elements * layout.bytes;
  at::Tensor out = at::empty({n, row_bytes}, at::kByte);
  const float* s = src.data_ptr<float>();
  uint8_t* d = out.data_ptr<uint8_t>();
  at::parallel_for(0, n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) QuantizeBlocks(format, s + r * k, k, d + r * row_bytes);
  });
  return out;
}

absl::StatusOr<at::Tensor> LoadShard(const Checkpoint& ckpt, const ShardPlan& plan, const std::string& name,
                                     const std::vector<int64_t>& expected_shape, at::ScalarType dtype) {
  SHARDLM_ASSIGN_OR_RETURN(const TensorView* view, ckpt.Get(name));
  SHARDLM_RETURN_IF_ERROR(CheckShape(ckpt, *view, name, expected_shape));
  const SliceSpec slice = plan.SliceFor(name);
  at::Tensor result;
  absl::Status st = CatchTorchErrors("loading " + name, [&]() -> absl::Status {
    at::Tensor part;
    if (view->block != BlockFormat::kNone) {
      part = DequantizeSlice(*view, slice);
    } else {
      const auto src_type = ToScalarType(view->dtype);
      // The mapping is read-only; from_blob wants void*, and nothing writes through it.
      void* base = const_cast<uint8_t*>(view->data);
      at::Tensor full = at::from_blob(base, view->shape, at::TensorOptions().dtype(src_type));
      part = slice.dim >= 0 ? full.narrow(slice.dim, slice.start, slice.length) : full;
    }
    SHARDLM_ASSIGN_OR_RETURN(part, InRotaryOrder(*view, slice, name, std::move(part)));
    // Always an owned copy (converted to the compute dtype on the way), so
    // the mapping can be dropped after loading and the rank's resident
    // memory is its shard, not every page the slicing touched.
    result = at::empty(part.sizes(), at::TensorOptions().dtype(dtype));
    result.copy_(part);
    return absl::OkStatus();
  });
  SHARDLM_RETURN_IF_ERROR(st);
  return result;
}

}  // namespace shardlm
