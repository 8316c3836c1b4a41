#include "kernels/linear.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>

#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed.h"
#include "kernels/step_profile.h"

namespace shardlm::kernels {
namespace {

// Each parallel task streams at least 256 KB of weight (a few microseconds),
// so a small product (a tiny model's, a narrow shard's) runs on one thread.
// Every parallel region ends in a barrier, and on a busy host a barrier can
// wait a whole scheduler slice for a descheduled thread.
int64_t UnitsPerTask(int64_t unit_bytes, int64_t min_units) {
  constexpr int64_t kTaskBytes = 256 << 10;
  return std::max<int64_t>(min_units, kTaskBytes / std::max<int64_t>(1, unit_bytes));
}

// Activation rows per pass of the AVX-512 kernels: each group of weight rows
// meets every activation row of the pass, which must stay in L2 (256 rows of
// 768 f32 features are 768 KB). Larger products go through in passes, each
// streaming the weight again, a small cost beside 256 rows of compute.
constexpr int64_t kRowsPerPass = 256;

// Runs fn(pass, begin, end) over the weight's units [0, units) (rows or
// panels), in parallel tasks of `grain`, once for each pass of kRowsPerPass
// of the m activation rows that `a` (GemvArgs or PackedArgs) points at.
template <typename Args, typename Fn>
void InPasses(const Args& a, int64_t m, int64_t units, int64_t grain, Fn fn) {
  for (int64_t i0 = 0; i0 < m; i0 += kRowsPerPass) {
    Args pass = a;
    pass.x = a.x + i0 * a.ldx;
    pass.y = a.y + i0 * a.ldy;
    pass.m = std::min(kRowsPerPass, m - i0);
    at::parallel_for(0, units, grain, [&](int64_t b, int64_t e) { fn(pass, b, e); });
  }
}

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
  InPasses(a, x.size(0), w.size(0), UnitsPerTask(a.k * static_cast<int64_t>(sizeof(T)), 32), fn);
}

at::Tensor LinearImpl(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias);

// x @ w^T (+ bias) over a packed weight, panels shared among the threads.
template <typename T, typename Fn>
void RunPacked(Fn fn, const at::Tensor& x, const LinearWeight& w, const at::Tensor& bias, at::Tensor& out) {
  PackedArgs<T> a;
  a.x = reinterpret_cast<const T*>(x.data_ptr());
  a.ldx = x.stride(0);
  a.w = reinterpret_cast<const T*>(w.storage().data_ptr());
  a.bias = bias.defined() ? reinterpret_cast<const T*>(bias.data_ptr()) : nullptr;
  a.y = reinterpret_cast<T*>(out.data_ptr());
  a.ldy = out.stride(0);
  a.n = w.out_features();
  a.k = w.in_features();
  const int64_t panels = (a.n + kPanelRows - 1) / kPanelRows;
  const int64_t panel_bytes = kPanelRows * a.k * static_cast<int64_t>(sizeof(T));
  InPasses(a, x.size(0), panels, UnitsPerTask(panel_bytes, 1), fn);
}

template <typename T>
at::Tensor PackTensor(const at::Tensor& w) {
  at::Tensor packed = at::empty({PackedElements<T>(w.size(0), w.size(1))}, w.options());
  PackWeight<T>(reinterpret_cast<const T*>(w.data_ptr()), w.size(0), w.size(1),
                reinterpret_cast<T*>(packed.data_ptr()));
  return packed;
}

template <typename T>
at::Tensor UnpackTensor(const at::Tensor& packed, int64_t n, int64_t k, const at::Tensor& index) {
  at::Tensor idx = index.to(at::kLong).contiguous();
  at::Tensor out = at::empty({idx.numel(), k}, packed.options());
  UnpackRows<T>(reinterpret_cast<const T*>(packed.data_ptr()), n, k, idx.data_ptr<int64_t>(), idx.numel(),
                reinterpret_cast<T*>(out.data_ptr()));
  return out;
}

bool PackingWanted() {
  static const bool wanted = [] {
    const char* v = std::getenv("SHARDLM_PACK_WEIGHTS");
    return v == nullptr || std::string(v) != "0";
  }();
  return wanted;
}

}  // namespace

LinearWeight LinearWeight::Prepare(at::Tensor w) {
  TORCH_CHECK(w.dim() == 2, "LinearWeight: the weight must be 2-D, got ", w.sizes());
  LinearWeight lw;
  lw.out_ = w.size(0);
  lw.in_ = w.size(1);
  const bool pack = w.device().is_cpu() && ActiveIsa() == Isa::kAvx512 && PackingWanted() &&
                    (w.scalar_type() == at::kFloat || w.scalar_type() == at::kBFloat16) && w.numel() > 0;
  if (!pack) {
    lw.data_ = std::move(w);
    return lw;
  }
  w = w.contiguous();
  lw.data_ = w.scalar_type() == at::kFloat ? PackTensor<float>(w) : PackTensor<uint16_t>(w);
  lw.packed_ = true;
  return lw;
}

at::Tensor LinearWeight::Rows(const at::Tensor& index) const {
  if (!packed_) return data_.index_select(0, index.clamp(0, out_ - 1));
  return dtype() == at::kFloat ? UnpackTensor<float>(data_, out_, in_, index)
                               : UnpackTensor<uint16_t>(data_, out_, in_, index);
}

at::Tensor Linear(const at::Tensor& x_in, const LinearWeight& w, const at::Tensor& bias_in) {
  if (!w.packed()) return Linear(x_in, w.plain(), bias_in);
  StepPartTimer timer(StepPart::kProjections);
  TORCH_CHECK(x_in.dim() == 2 && x_in.size(1) == w.in_features(), "linear: x ", x_in.sizes(), " and w [",
              w.out_features(), ", ", w.in_features(), "] do not match");
  TORCH_CHECK(!bias_in.defined() || bias_in.numel() == w.out_features(), "linear: bias of ", bias_in.numel(),
              " elements for ", w.out_features(), " outputs");
  const at::ScalarType dtype = w.dtype();
  at::Tensor x = x_in.scalar_type() == dtype ? x_in : x_in.to(dtype);
  if (x.stride(1) != 1) x = x.contiguous();
  at::Tensor bias = bias_in;
  if (bias.defined() && (bias.scalar_type() != dtype || !bias.is_contiguous()))
    bias = bias.to(dtype).contiguous();
  at::Tensor out = at::empty({x.size(0), w.out_features()}, x.options());
  if (x.size(0) == 0) return out;
  const Isa isa = ActiveIsa();
  if (dtype == at::kFloat) {
    RunPacked<float>(PackedF32(isa), x, w, bias, out);
  } else {
    RunPacked<uint16_t>(PackedBf16(isa), x, w, bias, out);
  }
  return out;
}

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
  // Off the CPU (CUDA) the product is ATen's (cuBLAS).
  const bool gemv = x.device().is_cpu() && x.size(0) <= GemvMaxRows(dtype) && isa != Isa::kScalar &&
                    w.scalar_type() == dtype &&
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
