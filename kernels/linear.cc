#include "kernels/linear.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>

#include "kernels/cpu/gemv.h"

namespace shardlm::kernels {
namespace {

// Output rows per task: small enough that two or more threads share even the
// narrowest projection, large enough that each streams several KB of weight.
constexpr int64_t kRowsPerTask = 32;

template <typename T, typename Fn>
void RunGemv(Fn fn, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias, at::Tensor& out) {
  GemvArgs<T> a;
  a.x = reinterpret_cast<const T*>(x.data_ptr());
  a.ldx = x.stride(0);
  a.w = reinterpret_cast<const T*>(w.data_ptr());
  a.bias = bias.defined() ? reinterpret_cast<const T*>(bias.data_ptr()) : nullptr;
  a.y = reinterpret_cast<T*>(out.data_ptr());
  a.ldy = out.stride(0);
  a.m = x.size(0);
  a.k = x.size(1);
  at::parallel_for(0, w.size(0), kRowsPerTask, [&](int64_t b, int64_t e) { fn(a, b, e); });
}

}  // namespace

int64_t GemvMaxRows(at::ScalarType dtype) {
  static const long env = [] {
    const char* v = std::getenv("SHARDLM_GEMV_MAX_ROWS");
    return v == nullptr ? -1L : std::strtol(v, nullptr, 10);
  }();
  if (env >= 0) return std::min<int64_t>(env, kMaxGemvRows);
  // Measured cut-overs (bench/kernels_bench.cc): f32 GEMV beats OpenBLAS up
  // to 8 rows; for bf16, oneDNN's GEMM wins from 8 rows on.
  return dtype == at::kBFloat16 ? 4 : kMaxGemvRows;
}

at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1), "linear: x ", x.sizes(), " and w ",
              w.sizes(), " do not match");
  const at::ScalarType dtype = x.scalar_type();
  const Isa isa = ActiveIsa();
  const bool gemv = x.size(0) <= GemvMaxRows(dtype) && isa != Isa::kScalar && w.scalar_type() == dtype &&
                    (!bias.defined() || (bias.scalar_type() == dtype && bias.is_contiguous())) &&
                    w.is_contiguous() && x.stride(1) == 1 && (dtype == at::kFloat || dtype == at::kBFloat16);
  if (!gemv) return bias.defined() ? at::linear(x, w, bias) : at::linear(x, w);
  at::Tensor out = at::empty({x.size(0), w.size(0)}, x.options());
  if (dtype == at::kFloat) {
    RunGemv<float>(GemvF32(isa), x, w, bias, out);
  } else {
    RunGemv<uint16_t>(GemvBf16(isa), x, w, bias, out);
  }
  return out;
}

}  // namespace shardlm::kernels
