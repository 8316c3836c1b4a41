// The CUDA variant: fused.h's device path launches kernels/cuda/elementwise.cu
// on libtorch's current stream.
#include "kernels/cuda_fused.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <atomic>

#include "kernels/cuda/elementwise.h"

namespace shardlm::kernels {
namespace {

namespace kc = cuda;

std::atomic<bool> g_enabled{true};

bool Enabled() { return g_enabled.load(std::memory_order_relaxed); }

bool Takes(const at::Tensor& t) {
  return Enabled() && t.is_cuda() && (t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16);
}

kc::DType DTypeOf(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat ? kc::DType::kF32 : kc::DType::kBF16;
}

void* StreamOf(const at::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

}  // namespace

void SetCudaFusedKernels(bool on) { g_enabled.store(on); }

at::Tensor CudaRmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (!Takes(x) || x.dim() != 2 || x.stride(1) != 1 || weight.scalar_type() != x.scalar_type() ||
      !weight.is_contiguous() || weight.numel() != x.size(1) || weight.device() != x.device()) {
    return at::Tensor();
  }
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = at::empty({x.size(0), x.size(1)}, x.options());
  const char* err =
      kc::LaunchRmsNorm(DTypeOf(x), x.data_ptr(), x.stride(0), weight.data_ptr(), out.data_ptr(), x.size(0),
                        x.size(1), static_cast<float>(eps), StreamOf(x));
  TORCH_CHECK(err == nullptr, "CUDA rms norm: ", err);
  return out;
}

bool CudaRotaryInPlace(at::Tensor& x, int64_t heads, int64_t head_dim, const at::Tensor& cos,
                       const at::Tensor& sin) {
  if (!Takes(x) || cos.device() != x.device() || sin.device() != x.device()) return false;
  const c10::cuda::CUDAGuard guard(x.device());
  const char* err = kc::LaunchRotary(DTypeOf(x), x.data_ptr(), x.stride(0), x.size(0), heads, head_dim,
                                     cos.data_ptr<float>(), sin.data_ptr<float>(), StreamOf(x));
  TORCH_CHECK(err == nullptr, "CUDA rotary: ", err);
  return true;
}

at::Tensor CudaSiluMul(const at::Tensor& gate_up) {
  if (!Takes(gate_up)) return at::Tensor();
  const c10::cuda::CUDAGuard guard(gate_up.device());
  const int64_t rows = gate_up.size(0), inter = gate_up.size(1) / 2;
  at::Tensor out = at::empty({rows, inter}, gate_up.options());
  const char* err =
      kc::LaunchSiluMul(DTypeOf(gate_up), gate_up.data_ptr(), out.data_ptr(), rows, inter, StreamOf(gate_up));
  TORCH_CHECK(err == nullptr, "CUDA silu_mul: ", err);
  return out;
}

}  // namespace shardlm::kernels
