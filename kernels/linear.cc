#include "kernels/linear.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "kernels/cpu/gemv.h"
#include "kernels/step_profile.h"

namespace shardlm::kernels {
namespace {

// Output rows per task: each task streams at least 256 KB of weight (a few
// microseconds), so a small product (a tiny model's, a narrow shard's) runs
// on one thread. Every parallel region ends in a barrier, and on a busy host
// a barrier can wait a whole scheduler slice for a descheduled thread.
int64_t RowsPerTask(int64_t row_bytes) {
  constexpr int64_t kTaskBytes = 256 << 10;
  return std::max<int64_t>(32, kTaskBytes / std::max<int64_t>(1, row_bytes));
}

// Activation rows per pass of the AVX-512 kernels: each group of weight rows
// meets every activation row of the pass, which must stay in L2 (256 rows of
// 768 f32 features are 768 KB). Larger products go through in passes, each
// streaming the weight again, a small cost beside 256 rows of compute.
constexpr int64_t kRowsPerPass = 256;

template <typename T, typename Fn>
void RunGemv(Fn fn, const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias, at::Tensor& out) {
  GemvArgs<T> a;
  a.x = reinterpret_cast<const T*>(x.data_ptr());
  a.ldx = x.stride(0);
  a.w = reinterpret_cast<const T*>(w.data_ptr());
  a.bias = bias.defined() ? reinterpret_cast<const T*>(bias.data_ptr()) : nullptr;
  a.y = reinterpret_cast<T*>(out.data_ptr());
  a.ldy = out.stride(0);
  a.k = x.size(1);
  for (int64_t i0 = 0; i0 < x.size(0); i0 += kRowsPerPass) {
    GemvArgs<T> pass = a;
    pass.x = a.x + i0 * a.ldx;
    pass.y = a.y + i0 * a.ldy;
    pass.m = std::min(kRowsPerPass, x.size(0) - i0);
    at::parallel_for(0, w.size(0), RowsPerTask(a.k * static_cast<int64_t>(sizeof(T))),
                     [&](int64_t b, int64_t e) { fn(pass, b, e); });
  }
}

at::Tensor LinearImpl(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias);

}  // namespace

at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  StepPartTimer timer(StepPart::kProjections);
  return LinearImpl(x, w, bias);
}

int64_t GemvMaxRows(at::ScalarType dtype) {
  static const long env = [] {
    const char* v = std::getenv("SHARDLM_GEMV_MAX_ROWS");
    return v == nullptr ? -1L : std::strtol(v, nullptr, 10);
  }();
  const bool avx512 = ActiveIsa() == Isa::kAvx512;
  if (env >= 0) return avx512 ? env : std::min<int64_t>(env, kMaxGemvRows);
  // Measured cut-overs (bench/kernels_bench.cc, docs/cpu_kernels.md). The
  // AVX-512 kernels read the weight once for any number of rows: in f32 they
  // beat OpenBLAS at every size measured (up to 256 rows, 233 against 199
  // GFLOP/s), in bf16 oneDNN's GEMM wins from 32 rows on. The AVX2 kernels
  // stream the weight once per 8 rows: f32 up to 8, bf16 up to 4.
  if (avx512) return dtype == at::kBFloat16 ? 16 : std::numeric_limits<int64_t>::max();
  return dtype == at::kBFloat16 ? 4 : kMaxGemvRows;
}

namespace {

at::Tensor LinearImpl(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
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

}  // namespace

}  // namespace shardlm::kernels
