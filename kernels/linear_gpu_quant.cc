#include "kernels/linear_gpu_quant.h"

#include <ATen/ATen.h>

#include "kernels/cuda/quant_planes.h"
#include "kernels/cuda_fused.h"
#include "kernels/fused.h"
#include "kernels/step_profile.h"

namespace shardlm::kernels {

LinearWeight LinearWeight::PrepareGpuQuantized(BlockFormat format, const at::Tensor& rows, int64_t k,
                                               at::Device device) {
  return PrepareGpuQuantized(std::vector<QuantRows>{{format, rows}}, k, device);
}

LinearWeight LinearWeight::PrepareGpuQuantized(const std::vector<QuantRows>& parts, int64_t k,
                                               at::Device device) {
  TORCH_CHECK(!parts.empty(), "LinearWeight: no rows to keep in blocks");
  // Consecutive parts of one format become one segment.
  std::vector<std::pair<BlockFormat, std::vector<at::Tensor>>> runs;
  for (const QuantRows& part : parts) {
    const BlockFormat format = part.format;
    TORCH_CHECK(cuda::GpuQuantFormat(format), "LinearWeight: ", BlockFormatName(format),
                " is not kept in its blocks on a GPU (Q2_K and Q3_K are dequantized at load)");
    const BlockLayout layout = BlockLayoutOf(format);
    const int64_t row_bytes = k / layout.elements * layout.bytes;
    TORCH_CHECK(k > 0 && k % layout.elements == 0 && part.rows.dim() == 2 &&
                    part.rows.scalar_type() == at::kByte && part.rows.device().is_cpu() &&
                    part.rows.size(1) == row_bytes,
                "LinearWeight: ", BlockFormatName(format), " rows of ", k, " weights are ", row_bytes,
                " bytes of whole blocks of ", layout.elements, ", got ", part.rows.sizes());
    if (runs.empty() || runs.back().first != format) runs.push_back({format, {}});
    runs.back().second.push_back(part.rows);
  }
  LinearWeight lw;
  int64_t bytes = 0, row0 = 0;
  std::vector<at::Tensor> sources;
  for (auto& [format, tensors] : runs) {
    at::Tensor src = (tensors.size() == 1 ? tensors[0] : at::cat(tensors, 0)).contiguous();
    const int64_t n = src.size(0);
    lw.segments_.push_back({format, row0, n, bytes});
    bytes += cuda::QuantPlanesOf(format, n, k).bytes;  // a multiple of 256: the next starts aligned
    row0 += n;
    sources.push_back(std::move(src));
  }
  at::Tensor planes = at::empty({bytes}, at::kByte);
  for (size_t i = 0; i < sources.size(); ++i) {
    const QuantSegment& seg = lw.segments_[i];
    cuda::RepackToPlanes(seg.format, sources[i].data_ptr<uint8_t>(), seg.rows, k,
                         planes.data_ptr<uint8_t>() + seg.offset);
  }
  lw.out_ = row0;
  lw.in_ = k;
  lw.data_ = planes.to(device);
  lw.gpu_quantized_ = true;
  lw.gpu_format_ = runs.size() == 1 ? runs[0].first : BlockFormat::kNone;
  return lw;
}

namespace internal {
namespace {

CudaQuantWeight SegmentOf(const LinearWeight& w, const LinearWeight::QuantSegment& seg) {
  CudaQuantWeight q;
  q.format = seg.format;
  q.planes = &w.storage();
  q.n = seg.rows;
  q.k = w.in_features();
  q.offset = seg.offset;
  return q;
}

// A weight of one segment, as the glue takes it.
const LinearWeight::QuantSegment* OnlySegment(const LinearWeight& w) {
  return w.quant_segments().size() == 1 ? &w.quant_segments()[0] : nullptr;
}

// The whole weight in x's dtype, for a product of more rows than the kernel takes.
at::Tensor Dequantized(const at::Tensor& x, const LinearWeight& w) {
  TORCH_CHECK(x.is_cuda(), "linear: a weight kept in blocks on ", w.storage().device(), " with x on ",
              x.device());
  std::vector<at::Tensor> parts;
  for (const auto& seg : w.quant_segments()) {
    at::Tensor dense = CudaQuantRows(SegmentOf(w, seg), at::Tensor(), x.scalar_type());
    TORCH_CHECK(dense.defined(), "linear: this build has no CUDA kernels for a weight kept in blocks");
    parts.push_back(std::move(dense));
  }
  return parts.size() == 1 ? parts[0] : at::cat(parts, 0);
}

// y = x w^T + bias (add: y += it) by the few-row product, one launch per
// segment into its columns of y; false, nothing done, where a segment's
// product does not take x.
bool SegmentsInto(at::Tensor& y, const at::Tensor& x, const LinearWeight& w, const at::Tensor& bias,
                  bool add) {
  if (x.dim() != 2 || !CudaRowsView(y, x, w.out_features())) return false;
  for (const auto& seg : w.quant_segments()) {
    const at::Tensor b = bias.defined() ? bias.narrow(0, seg.row0, seg.rows) : bias;
    if (!CudaQuantTakes(x, SegmentOf(w, seg), b)) return false;
  }
  for (const auto& seg : w.quant_segments()) {
    at::Tensor columns = y.narrow(1, seg.row0, seg.rows);
    const at::Tensor b = bias.defined() ? bias.narrow(0, seg.row0, seg.rows) : bias;
    TORCH_CHECK(CudaQuantLinearInto(columns, x, SegmentOf(w, seg), b, add), "linear: segment ", seg.row0,
                " of a weight kept in blocks refused a product it takes");
  }
  return true;
}

}  // namespace

at::Tensor GpuQuantLinear(const at::Tensor& x, const LinearWeight& w, const at::Tensor& bias) {
  StepPartTimer timer(StepPart::kProjections);
  if (const auto* seg = OnlySegment(w)) {
    if (at::Tensor y = CudaQuantLinear(x, SegmentOf(w, *seg), bias); y.defined()) return y;
  } else if (x.dim() == 2) {
    at::Tensor y = at::empty({x.size(0), w.out_features()}, x.options());
    if (SegmentsInto(y, x, w, bias, /*add=*/false)) return y;
  }
  const at::Tensor dense = Dequantized(x, w);
  return bias.defined() ? at::linear(x, dense, bias) : at::linear(x, dense);
}

at::Tensor GpuQuantLinearSwiGlu(const at::Tensor& x, const LinearWeight& gate_up) {
  if (const auto* seg = OnlySegment(gate_up)) {
    StepPartTimer timer(StepPart::kProjections);
    if (at::Tensor y = CudaQuantLinearSwiGlu(x, SegmentOf(gate_up, *seg)); y.defined()) return y;
  }
  // Gate and up in different formats, or more rows: the product, then SiLU(gate) * up.
  at::Tensor gu = GpuQuantLinear(x, gate_up, at::Tensor());
  StepPartTimer timer(StepPart::kElementwise);
  return SiluMul(gu.contiguous());
}

void GpuQuantLinearAddTo(at::Tensor& y, const at::Tensor& x, const LinearWeight& w, const at::Tensor& bias) {
  {
    StepPartTimer timer(StepPart::kProjections);
    if (const auto* seg = OnlySegment(w)) {
      if (CudaQuantLinearAddTo(y, x, SegmentOf(w, *seg), bias)) return;
    } else if (SegmentsInto(y, x, w, bias, /*add=*/true)) {
      return;
    }
  }
  at::Tensor partial = GpuQuantLinear(x, w, bias);
  StepPartTimer timer(StepPart::kElementwise);
  AddInPlace(y, partial);
}

at::Tensor GpuQuantRows(const LinearWeight& w, const at::Tensor& index) {
  const auto* seg = OnlySegment(w);
  TORCH_CHECK(seg != nullptr, "LinearWeight: rows of a weight kept in blocks of several formats on a GPU");
  at::Tensor rows = CudaQuantRows(SegmentOf(w, *seg), index.clamp(0, w.out_features() - 1), at::kFloat);
  TORCH_CHECK(rows.defined(), "LinearWeight: this build has no CUDA kernels for a weight kept in blocks");
  return rows;
}

}  // namespace internal
}  // namespace shardlm::kernels
