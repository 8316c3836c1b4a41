#include "kernels/linear_gpu_quant.h"

#include <ATen/ATen.h>

#include "kernels/cuda/quant_planes.h"
#include "kernels/cuda_fused.h"
#include "kernels/fused.h"
#include "kernels/step_profile.h"

namespace shardlm::kernels {

LinearWeight LinearWeight::PrepareGpuQuantized(BlockFormat format, const at::Tensor& rows, int64_t k,
                                               at::Device device) {
  TORCH_CHECK(cuda::GpuQuantFormat(format), "LinearWeight: ", BlockFormatName(format),
              " is not kept in its blocks on a GPU (Q8_0, Q4_0 and Q4_1 are)");
  const int64_t row_bytes = k / 32 * BlockLayoutOf(format).bytes;
  TORCH_CHECK(k > 0 && k % 32 == 0 && rows.dim() == 2 && rows.scalar_type() == at::kByte &&
                  rows.device().is_cpu() && rows.size(1) == row_bytes,
              "LinearWeight: ", BlockFormatName(format), " rows of ", k, " weights are ", row_bytes,
              " bytes of whole blocks of 32, got ", rows.sizes());
  const at::Tensor src = rows.contiguous();
  const int64_t n = src.size(0);
  at::Tensor planes = at::empty({cuda::QuantPlanesOf(format, n, k).bytes}, at::kByte);
  cuda::RepackToPlanes(format, src.data_ptr<uint8_t>(), n, k, planes.data_ptr<uint8_t>());
  LinearWeight lw;
  lw.out_ = n;
  lw.in_ = k;
  lw.data_ = planes.to(device);
  lw.gpu_format_ = format;
  return lw;
}

namespace internal {
namespace {

CudaQuantWeight PlanesOf(const LinearWeight& w) {
  CudaQuantWeight q;
  q.format = w.gpu_format();
  q.planes = &w.storage();
  q.n = w.out_features();
  q.k = w.in_features();
  return q;
}

// The whole weight in x's dtype, for a product of more rows than the kernel takes.
at::Tensor Dequantized(const at::Tensor& x, const LinearWeight& w) {
  TORCH_CHECK(x.is_cuda(), "linear: a weight kept in blocks on ", w.storage().device(), " with x on ",
              x.device());
  at::Tensor dense = CudaQuantRows(PlanesOf(w), at::Tensor(), x.scalar_type());
  TORCH_CHECK(dense.defined(), "linear: this build has no CUDA kernels for a weight kept in blocks");
  return dense;
}

}  // namespace

at::Tensor GpuQuantLinear(const at::Tensor& x, const LinearWeight& w, const at::Tensor& bias) {
  StepPartTimer timer(StepPart::kProjections);
  if (at::Tensor y = CudaQuantLinear(x, PlanesOf(w), bias); y.defined()) return y;
  const at::Tensor dense = Dequantized(x, w);
  return bias.defined() ? at::linear(x, dense, bias) : at::linear(x, dense);
}

at::Tensor GpuQuantLinearSwiGlu(const at::Tensor& x, const LinearWeight& gate_up) {
  {
    StepPartTimer timer(StepPart::kProjections);
    if (at::Tensor y = CudaQuantLinearSwiGlu(x, PlanesOf(gate_up)); y.defined()) return y;
  }
  at::Tensor gu = GpuQuantLinear(x, gate_up, at::Tensor());
  StepPartTimer timer(StepPart::kElementwise);
  return SiluMul(gu.contiguous());
}

void GpuQuantLinearAddTo(at::Tensor& y, const at::Tensor& x, const LinearWeight& w, const at::Tensor& bias) {
  {
    StepPartTimer timer(StepPart::kProjections);
    if (CudaQuantLinearAddTo(y, x, PlanesOf(w), bias)) return;
  }
  at::Tensor partial = GpuQuantLinear(x, w, bias);
  StepPartTimer timer(StepPart::kElementwise);
  AddInPlace(y, partial);
}

at::Tensor GpuQuantRows(const LinearWeight& w, const at::Tensor& index) {
  at::Tensor rows = CudaQuantRows(PlanesOf(w), index.clamp(0, w.out_features() - 1), at::kFloat);
  TORCH_CHECK(rows.defined(), "LinearWeight: this build has no CUDA kernels for a weight kept in blocks");
  return rows;
}

}  // namespace internal
}  // namespace shardlm::kernels
