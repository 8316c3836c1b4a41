// The CUDA variant: fused.h's and linear.h's device paths launch
// kernels/cuda/elementwise.cu and kernels/cuda/gemv.cu on libtorch's current stream.
#include "kernels/cuda_fused.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <atomic>

#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/quant_gemv.h"
#include "kernels/cuda/quant_planes.h"

namespace shardlm::kernels {
namespace {

namespace kc = cuda;

std::atomic<bool> g_enabled{true};
std::atomic<int64_t> g_gemv_max_rows{kDefaultCudaGemvMaxRows};

bool Enabled() { return g_enabled.load(std::memory_order_relaxed); }

bool Takes(const at::Tensor& t) {
  return Enabled() && t.is_cuda() && (t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16);
}

kc::DType DTypeOf(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat ? kc::DType::kF32 : kc::DType::kBF16;
}

void* StreamOf(const at::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }

// A product's bias (if any) and y, which the few-row kernels take in x's
// dtype and on its device: the bias contiguous with n values, y [rows, n]
// contiguous.
bool BiasFits(const at::Tensor& bias, const at::Tensor& x, int64_t n) {
  return !bias.defined() || (bias.scalar_type() == x.scalar_type() && bias.device() == x.device() &&
                             bias.is_contiguous() && bias.numel() == n);
}
bool OutputFits(const at::Tensor& y, const at::Tensor& x, int64_t n) {
  return y.dim() == 2 && y.is_contiguous() && y.scalar_type() == x.scalar_type() &&
         y.device() == x.device() && y.size(0) == x.size(0) && y.size(1) == n;
}

// The few-row kernel takes x, w (and bias, y) when all are CUDA tensors of one
// dtype on one device, w contiguous, and gemv.h's shape and alignment hold.
bool GemvTakes(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  if (!x.is_cuda() || x.dim() != 2 || x.size(0) > g_gemv_max_rows.load(std::memory_order_relaxed) ||
      w.dim() != 2 || x.stride(1) != 1 ||
      (x.scalar_type() != at::kFloat && x.scalar_type() != at::kBFloat16) ||
      w.scalar_type() != x.scalar_type() || w.device() != x.device() || !w.is_contiguous() ||
      w.size(1) != x.size(1)) {
    return false;
  }
  if (!BiasFits(bias, x, w.size(0))) return false;
  return kc::GemvTakes(DTypeOf(x), x.size(0), x.size(1), x.data_ptr(), x.stride(0), w.data_ptr());
}

void RunGemv(kc::GemvEpilogue e, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
             at::Tensor& y, int64_t n) {
  const c10::cuda::CUDAGuard guard(x.device());
  const char* err = kc::LaunchGemv(DTypeOf(x), e, x.data_ptr(), x.stride(0), w.data_ptr(),
                                   bias.defined() ? bias.data_ptr() : nullptr, y.data_ptr(), y.stride(0),
                                   x.size(0), n, x.size(1), StreamOf(x));
  TORCH_CHECK(err == nullptr, "CUDA gemv: ", err);
}

kc::QuantWeightPlanes PlanesOf(const CudaQuantWeight& w) {
  const kc::QuantPlanes offsets = kc::QuantPlanesOf(w.format, w.n, w.k);
  const uint8_t* base = static_cast<const uint8_t*>(w.planes->data_ptr()) + w.offset;
  auto at = [&](int64_t offset) -> const void* { return offset >= 0 ? base + offset : nullptr; };
  kc::QuantWeightPlanes p;
  p.format = w.format;
  p.quants = at(offsets.quants);
  p.high = at(offsets.high);
  p.d = at(offsets.d);
  p.m = at(offsets.m);
  p.sc = at(offsets.sc);
  return p;
}

// The quantized few-row kernel takes x (and bias) when they are CUDA tensors
// of f32 or bf16 on the weight's device and quant_gemv.h's shape holds.
bool QuantGemvTakes(const at::Tensor& x, const CudaQuantWeight& w, const at::Tensor& bias) {
  if (!Enabled() || !x.is_cuda() || x.dim() != 2 || x.stride(1) != 1 || x.size(1) != w.k ||
      x.size(0) > CudaQuantMaxRows(w.format) ||
      (x.scalar_type() != at::kFloat && x.scalar_type() != at::kBFloat16) ||
      x.device() != w.planes->device()) {
    return false;
  }
  if (!BiasFits(bias, x, w.n)) return false;
  return kc::QuantGemvTakes(DTypeOf(x), PlanesOf(w), std::min(x.size(0), kc::kGemvMaxRows), w.k, x.data_ptr(),
                            x.stride(0));
}

// y = epilogue(x w^T) in launches of up to kc::kGemvMaxRows rows.
void RunQuantGemv(kc::GemvEpilogue e, const at::Tensor& x, const CudaQuantWeight& w, const at::Tensor& bias,
                  at::Tensor& y, int64_t n) {
  const c10::cuda::CUDAGuard guard(x.device());
  const kc::QuantWeightPlanes planes = PlanesOf(w);
  for (int64_t r0 = 0; r0 < x.size(0); r0 += kc::kGemvMaxRows) {
    const int64_t rows = std::min(kc::kGemvMaxRows, x.size(0) - r0);
    const at::Tensor xs = x.narrow(0, r0, rows);
    at::Tensor ys = y.narrow(0, r0, rows);
    const char* err = kc::LaunchQuantGemv(DTypeOf(x), e, xs.data_ptr(), x.stride(0), planes,
                                          bias.defined() ? bias.data_ptr() : nullptr, ys.data_ptr(),
                                          y.stride(0), rows, n, w.k, StreamOf(x));
    TORCH_CHECK(err == nullptr, "CUDA quantized gemv: ", err);
  }
}

}  // namespace

void SetCudaFusedKernels(bool on) { g_enabled.store(on); }
void SetCudaGemvMaxRows(int64_t n) { g_gemv_max_rows.store(std::clamp<int64_t>(n, 0, kc::kGemvMaxRows)); }
int64_t CudaGemvMaxRows() { return g_gemv_max_rows.load(); }

at::Tensor CudaLinear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  if (!GemvTakes(x, w, bias)) return at::Tensor();
  at::Tensor y = at::empty({x.size(0), w.size(0)}, x.options());
  RunGemv(kc::GemvEpilogue::kStore, x, w, bias, y, w.size(0));
  return y;
}

at::Tensor CudaLinearSwiGlu(const at::Tensor& x, const at::Tensor& gate_up) {
  if (!GemvTakes(x, gate_up, at::Tensor()) || gate_up.size(0) % 2 != 0) return at::Tensor();
  const int64_t inter = gate_up.size(0) / 2;
  at::Tensor y = at::empty({x.size(0), inter}, x.options());
  RunGemv(kc::GemvEpilogue::kSwiGlu, x, gate_up, at::Tensor(), y, inter);
  return y;
}

bool CudaLinearAddTo(at::Tensor& y, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  if (!GemvTakes(x, w, bias) || !OutputFits(y, x, w.size(0))) return false;
  RunGemv(kc::GemvEpilogue::kAddTo, x, w, bias, y, w.size(0));
  return true;
}

at::Tensor CudaQuantLinear(const at::Tensor& x, const CudaQuantWeight& w, const at::Tensor& bias) {
  if (!QuantGemvTakes(x, w, bias)) return at::Tensor();
  at::Tensor y = at::empty({x.size(0), w.n}, x.options());
  RunQuantGemv(kc::GemvEpilogue::kStore, x, w, bias, y, w.n);
  return y;
}

at::Tensor CudaQuantLinearSwiGlu(const at::Tensor& x, const CudaQuantWeight& w) {
  if (w.n % 2 != 0 || !QuantGemvTakes(x, w, at::Tensor())) return at::Tensor();
  at::Tensor y = at::empty({x.size(0), w.n / 2}, x.options());
  RunQuantGemv(kc::GemvEpilogue::kSwiGlu, x, w, at::Tensor(), y, w.n / 2);
  return y;
}

bool CudaQuantLinearAddTo(at::Tensor& y, const at::Tensor& x, const CudaQuantWeight& w,
                          const at::Tensor& bias) {
  if (!QuantGemvTakes(x, w, bias) || !OutputFits(y, x, w.n)) return false;
  RunQuantGemv(kc::GemvEpilogue::kAddTo, x, w, bias, y, w.n);
  return true;
}

// Each launch of 8 rows streams the weight again; up to here that costs less
// than the other path, the weight dequantized to bf16 (written, then read by
// cuBLAS): 8 launches x b bytes a weight against b + 2 + 2, so up to
// 8 * floor((b + 4) / b) rows, b the planes' bytes a weight (Q4_0 0.56: 64;
// Q4_K 0.58: 56; Q6_K 0.82: 40; Q8_0 1.06: 32).
int64_t CudaQuantMaxRows(BlockFormat format) {
  const kc::QuantPlanes p = kc::QuantPlanesOf(format, 1024, 4096);
  const double b = static_cast<double>(p.bytes) / (1024.0 * 4096.0);
  return kc::kGemvMaxRows * static_cast<int64_t>((b + 4.0) / b);
}

bool CudaQuantTakes(const at::Tensor& x, const CudaQuantWeight& w, const at::Tensor& bias) {
  return QuantGemvTakes(x, w, bias);
}

bool CudaQuantLinearInto(at::Tensor& y, const at::Tensor& x, const CudaQuantWeight& w, const at::Tensor& bias,
                         bool add) {
  if (!QuantGemvTakes(x, w, bias) || !CudaRowsView(y, x, w.n)) return false;
  RunQuantGemv(add ? kc::GemvEpilogue::kAddTo : kc::GemvEpilogue::kStore, x, w, bias, y, w.n);
  return true;
}

at::Tensor CudaQuantRows(const CudaQuantWeight& w, const at::Tensor& index, at::ScalarType dtype) {
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kBFloat16, "CUDA quantized rows: f32 or bf16, not ", dtype);
  const at::Device device = w.planes->device();
  const c10::cuda::CUDAGuard guard(device);
  at::Tensor idx;
  if (index.defined()) idx = index.to(device, at::kLong).contiguous();
  const int64_t count = idx.defined() ? idx.numel() : w.n;
  at::Tensor out = at::empty({count, w.k}, at::TensorOptions().dtype(dtype).device(device));
  if (count == 0) return out;
  const char* err = kc::LaunchQuantRows(DTypeOf(out), PlanesOf(w), w.n, w.k,
                                        idx.defined() ? idx.data_ptr<int64_t>() : nullptr, count,
                                        out.data_ptr(), StreamOf(out));
  TORCH_CHECK(err == nullptr, "CUDA quantized rows: ", err);
  return out;
}

bool CudaRotaryKvInPlace(at::Tensor& qkv, int64_t heads, int64_t kv_heads, int64_t head_dim,
                         const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& slots,
                         at::Tensor& k_layer, at::Tensor& v_layer) {
  if (!Takes(qkv) || qkv.dim() != 2 || qkv.stride(1) != 1 ||
      qkv.size(1) < (heads + 2 * kv_heads) * head_dim || cos.device() != qkv.device() ||
      sin.device() != qkv.device() || !slots.defined() || slots.device() != qkv.device() ||
      slots.scalar_type() != at::kLong || !slots.is_contiguous() || slots.numel() != qkv.size(0)) {
    return false;
  }
  for (const at::Tensor* c : {&k_layer, &v_layer}) {
    if (c->scalar_type() != qkv.scalar_type() || c->device() != qkv.device() || !c->is_contiguous() ||
        c->dim() != 4 || c->size(2) != kv_heads || c->size(3) != head_dim) {
      return false;
    }
  }
  const c10::cuda::CUDAGuard guard(qkv.device());
  const char* err =
      kc::LaunchRotaryKv(DTypeOf(qkv), qkv.data_ptr(), qkv.stride(0), qkv.size(0), heads, kv_heads, head_dim,
                         cos.data_ptr<float>(), sin.data_ptr<float>(), slots.data_ptr<int64_t>(),
                         k_layer.data_ptr(), v_layer.data_ptr(), StreamOf(qkv));
  TORCH_CHECK(err == nullptr, "CUDA rotary_kv: ", err);
  return true;
}

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
