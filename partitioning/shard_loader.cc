#include "partitioning/shard_loader.h"

#include <ATen/ATen.h>

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

}  // namespace

absl::StatusOr<at::Tensor> LoadShard(const Checkpoint& ckpt, const ShardPlan& plan, const std::string& name,
                                     const std::vector<int64_t>& expected_shape, at::ScalarType dtype) {
  SHARDLM_ASSIGN_OR_RETURN(const TensorView* view, ckpt.Get(name));
  if (view->shape != expected_shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' in ", ckpt.dir(), " has shape [",
                                                   absl::StrJoin(view->shape, ", "), "], expected [",
                                                   absl::StrJoin(expected_shape, ", "), "]"));
  }
  const SliceSpec slice = plan.SliceFor(name);
  at::Tensor result;
  absl::Status st = CatchTorchErrors("loading " + name, [&]() -> absl::Status {
    const auto src_type = ToScalarType(view->dtype);
    // The mapping is read-only; from_blob wants void*, and nothing writes through it.
    void* base = const_cast<uint8_t*>(view->data);
    at::Tensor full = at::from_blob(base, view->shape, at::TensorOptions().dtype(src_type));
    at::Tensor part = full;
    if (slice.dim >= 0) part = full.narrow(slice.dim, slice.start, slice.length);
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
