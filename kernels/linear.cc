#include "kernels/linear.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>

#include "kernels/cpu/gemv.h"
#include "kernels/cpu/packed.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda_fused.h"
#include "kernels/fused.h"
#include "kernels/kernel_options.h"
#include "kernels/linear_gpu_quant.h"
#include "kernels/parallel.h"
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

// Activation rows per pass of the SIMD kernels: each group of weight rows
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
    ParallelFor(0, units, grain, [&](int64_t b, int64_t e) { fn(pass, b, e); });
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
// x @ w^T (+ bias) over a packed weight, through `epilogue` into out.
// With kSwiGlu a unit of work is a gate/up pair of panels.
template <typename T, typename Fn>
void RunPacked(Fn fn, const at::Tensor& x, const LinearWeight& w, const at::Tensor& bias, at::Tensor& out,
               PackedEpilogue epilogue = PackedEpilogue::kStore) {
  PackedArgs<T> a;
  a.x = reinterpret_cast<const T*>(x.data_ptr());
  a.ldx = x.stride(0);
  a.w = reinterpret_cast<const T*>(w.storage().data_ptr());
  a.bias = bias.defined() ? reinterpret_cast<const T*>(bias.data_ptr()) : nullptr;
  a.y = reinterpret_cast<T*>(out.data_ptr());
  a.ldy = out.stride(0);
  a.epilogue = epilogue;
  const bool pairs = epilogue == PackedEpilogue::kSwiGlu;
  a.n = pairs ? w.out_features() / 2 : w.out_features();
  a.k = w.in_features();
  const int64_t panels = (a.n + kPanelRows - 1) / kPanelRows;
  const int64_t unit_bytes = (pairs ? 2 : 1) * kPanelRows * a.k * static_cast<int64_t>(sizeof(T));
  if (!pairs) {
    InPasses(a, x.size(0), panels, UnitsPerTask(unit_bytes, 1), fn);
    return;
  }
  InPasses(a, x.size(0), panels, UnitsPerTask(unit_bytes, 1),
           [&](const PackedArgs<T>& pass, int64_t b, int64_t e) { fn(pass, 2 * b, 2 * e); });
}

// The checks and dtype conversions every packed product makes; x and bias
// in the weight's dtype.
struct PackedInputs {
  at::Tensor x, bias;
};
// x [m, k] and the bias [n] match w; x as `dtype` with unit column stride, the
// bias as `dtype` and contiguous.
PackedInputs OperandsIn(const at::Tensor& x_in, const LinearWeight& w, const at::Tensor& bias_in,
                        at::ScalarType dtype) {
  TORCH_CHECK(x_in.dim() == 2 && x_in.size(1) == w.in_features(), "linear: x ", x_in.sizes(), " and w [",
              w.out_features(), ", ", w.in_features(), "] do not match");
  TORCH_CHECK(!bias_in.defined() || bias_in.numel() == w.out_features(), "linear: bias of ", bias_in.numel(),
              " elements for ", w.out_features(), " outputs");
  PackedInputs in;
  in.x = x_in.scalar_type() == dtype ? x_in : x_in.to(dtype);
  if (in.x.stride(1) != 1) in.x = in.x.contiguous();
  in.bias = bias_in;
  if (in.bias.defined() && (in.bias.scalar_type() != dtype || !in.bias.is_contiguous()))
    in.bias = in.bias.to(dtype).contiguous();
  return in;
}

PackedInputs PackedOperands(const at::Tensor& x_in, const LinearWeight& w, const at::Tensor& bias_in) {
  return OperandsIn(x_in, w, bias_in, w.dtype());
}

void RunPackedAny(const at::Tensor& x, const LinearWeight& w, const at::Tensor& bias, at::Tensor& out,
                  PackedEpilogue epilogue) {
  if (x.size(0) == 0) return;
  const Isa isa = ActiveIsa();
  if (w.dtype() == at::kFloat) {
    RunPacked<float>(PackedF32(isa), x, w, bias, out, epilogue);
  } else {
    RunPacked<uint16_t>(PackedBf16(isa), x, w, bias, out, epilogue);
  }
}

template <typename T>
at::Tensor PackTensor(const at::Tensor& w) {
  at::Tensor packed = at::empty({PackedElements<T>(w.size(0), w.size(1))}, w.options());
  PackWeight<T>(reinterpret_cast<const T*>(w.data_ptr()), w.size(0), w.size(1),
                reinterpret_cast<T*>(packed.data_ptr()));
  return packed;
}

template <typename T>
at::Tensor PackGatedTensor(const at::Tensor& w) {
  const int64_t inter = w.size(0) / 2;
  at::Tensor packed = at::empty({PackedGatedElements<T>(inter, w.size(1))}, w.options());
  PackGatedWeight<T>(reinterpret_cast<const T*>(w.data_ptr()), inter, w.size(1),
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

bool PackingWanted() { return CurrentKernelOptions().pack_weights; }

// Off: the SwiGLU and the residual adds as separate passes (for comparisons;
// docs/cpu_kernels.md).
bool FusionWanted() { return CurrentKernelOptions().fused_epilogues; }

bool Packable(const at::Tensor& w) {
  return w.device().is_cpu() && ActiveIsa() >= Isa::kAvx2 && PackingWanted() &&
         (w.scalar_type() == at::kFloat || w.scalar_type() == at::kBFloat16) && w.numel() > 0;
}

// x's rows quantized per block for a quantized product (cpu/quant.h).
struct QuantizedX {
  at::Tensor qx, dx, sx, sx16;
  QuantActivations view() const {
    return {qx.data_ptr<int8_t>(), dx.data_ptr<float>(), sx.data_ptr<int32_t>(), sx16.data_ptr<int32_t>()};
  }
};

template <typename T>
QuantizedX QuantizeX(const at::Tensor& x) {
  const int64_t m = x.size(0), k = x.size(1), blocks = k / kQuantBlock;
  QuantizedX q{at::empty({m, k}, at::kChar), at::empty({m, blocks}, at::kFloat),
               at::empty({m, blocks}, at::kInt), at::empty({m, 2 * blocks}, at::kInt)};
  const T* px = reinterpret_cast<const T*>(x.data_ptr());
  int8_t* qx = q.qx.data_ptr<int8_t>();
  float* dx = q.dx.data_ptr<float>();
  int32_t* sx = q.sx.data_ptr<int32_t>();
  int32_t* sx16 = q.sx16.data_ptr<int32_t>();
  ParallelFor(0, m, std::max<int64_t>(1, (64 << 10) / std::max<int64_t>(1, k)), [&](int64_t b, int64_t e) {
    QuantizeActivationRows<T>(px, x.stride(0), k, b, e, qx, dx, sx, sx16);
  });
  return q;
}

// y = x @ w^T (+ bias), or y += it, over a quantized weight: x's rows
// quantized once, then the panels of every segment shared among the threads.
template <typename T, typename Fn>
void RunQuantTyped(Fn fn, const at::Tensor& x, const LinearWeight& w, const at::Tensor& bias, at::Tensor& y,
                   QuantEpilogue epilogue) {
  const QuantizedX q = QuantizeX<T>(x);
  const std::vector<LinearWeight::QuantSegment>& segs = w.quant_segments();
  std::vector<QuantArgs<T>> args(segs.size());
  std::vector<int64_t> first_panel(segs.size() + 1, 0);
  int64_t unit_bytes = 0;
  // A panel's work grows with the row groups that pass over it: a prompt
  // chunk's panels are compute, not a stream of a few KB each.
  const int64_t groups = (x.size(0) + 7) / 8;
  for (size_t i = 0; i < segs.size(); ++i) {
    QuantArgs<T>& a = args[i];
    a.format = segs[i].format;
    a.a = q.view();
    a.w = w.storage().data_ptr<uint8_t>() + segs[i].offset;
    a.bias = bias.defined() ? reinterpret_cast<const T*>(bias.data_ptr()) + segs[i].row0 : nullptr;
    a.y = reinterpret_cast<T*>(y.data_ptr()) + segs[i].row0;
    a.ldy = y.stride(0);
    a.m = x.size(0);
    a.n = segs[i].rows;
    a.k = w.in_features();
    a.epilogue = epilogue;
    first_panel[i + 1] = first_panel[i] + (a.n + kQuantPanelRows - 1) / kQuantPanelRows;
    unit_bytes = std::max(unit_bytes, QuantPackedBytes(a.format, kQuantPanelRows, a.k) * groups);
  }
  // Threads take runs of panels of at most 1 MB, shrinking to 256 KB toward
  // the end: shorter runs restart the hardware prefetchers too often, halves
  // fixed in advance wait on the slower thread (docs/quantized_weights.md).
  const int64_t grain = UnitsPerTask(unit_bytes, 1);
  const int64_t most = std::max<int64_t>(grain, (1 << 20) / std::max<int64_t>(1, unit_bytes));
  ParallelForGuided(0, first_panel.back(), grain, most, [&](int64_t b, int64_t e) {
    for (size_t i = 0; i < args.size(); ++i) {
      const int64_t lo = std::max(b, first_panel[i]), hi = std::min(e, first_panel[i + 1]);
      if (lo < hi) fn(args[i], lo - first_panel[i], hi - first_panel[i]);
    }
  });
}

// The operands of a quantized product: x in f32 or bf16 with unit column
// stride, the bias in x's dtype.
// `rows` are n rows of `format`'s GGUF blocks, k weights each, that a kernel keeps.
void CheckQuantRows(BlockFormat format, const at::Tensor& rows, int64_t k) {
  TORCH_CHECK(HasQuantKernels(format), "LinearWeight: no kernel keeps ", BlockFormatName(format), " blocks");
  const int64_t unit = QuantUnit(format);
  TORCH_CHECK(k > 0 && k % unit == 0, "LinearWeight: a ", BlockFormatName(format),
              " weight's rows must be whole blocks of ", unit, ", got ", k);
  TORCH_CHECK(rows.dim() == 2 && rows.scalar_type() == at::kByte && rows.device().is_cpu() &&
                  rows.size(1) == k / unit * BlockLayoutOf(format).bytes,
              "LinearWeight: ", BlockFormatName(format), " rows of ", k, " weights are ",
              k / unit * BlockLayoutOf(format).bytes, " bytes, got ", rows.sizes());
}

PackedInputs QuantOperands(const at::Tensor& x_in, const LinearWeight& w, const at::Tensor& bias_in) {
  TORCH_CHECK(x_in.device().is_cpu(), "linear: a quantized weight runs on the CPU only");
  const at::ScalarType dtype = x_in.scalar_type() == at::kBFloat16 ? at::kBFloat16 : at::kFloat;
  return OperandsIn(x_in, w, bias_in, dtype);
}

void RunQuant(const at::Tensor& x, const LinearWeight& w, const at::Tensor& bias, at::Tensor& y,
              QuantEpilogue epilogue) {
  if (x.size(0) == 0) return;
  const Isa isa = ActiveIsa();
  if (x.scalar_type() == at::kFloat) {
    RunQuantTyped<float>(QuantF32(isa), x, w, bias, y, epilogue);
  } else {
    RunQuantTyped<uint16_t>(QuantBf16(isa), x, w, bias, y, epilogue);
  }
}

at::Tensor QuantLinear(const at::Tensor& x_in, const LinearWeight& w, const at::Tensor& bias_in) {
  StepPartTimer timer(StepPart::kProjections);
  const PackedInputs in = QuantOperands(x_in, w, bias_in);
  at::Tensor out = at::empty({in.x.size(0), w.out_features()}, in.x.options());
  RunQuant(in.x, w, in.bias, out, QuantEpilogue::kStore);
  return out;
}

}  // namespace

LinearWeight LinearWeight::PrepareQuantized(BlockFormat format, const at::Tensor& rows, int64_t k) {
  return PrepareQuantized(std::vector<QuantRows>{{format, rows}}, k);
}

LinearWeight LinearWeight::PrepareQuantized(const std::vector<QuantRows>& parts, int64_t k) {
  TORCH_CHECK(!parts.empty(), "LinearWeight: a quantized weight needs rows");
  LinearWeight lw;
  lw.in_ = k;
  // Consecutive parts of one format are one segment (q and k both Q4_K).
  std::vector<std::vector<at::Tensor>> runs;
  for (const QuantRows& part : parts) {
    CheckQuantRows(part.format, part.rows, k);
    if (lw.segments_.empty() || lw.segments_.back().format != part.format) {
      lw.segments_.push_back({part.format, lw.out_, 0, 0});
      runs.emplace_back();
    }
    lw.segments_.back().rows += part.rows.size(0);
    runs.back().push_back(part.rows);
    lw.out_ += part.rows.size(0);
  }
  int64_t bytes = 0;
  for (QuantSegment& seg : lw.segments_) {
    seg.offset = bytes;
    bytes += QuantPackedBytes(seg.format, seg.rows, k);
  }
  lw.data_ = at::empty({bytes}, at::kByte);
  for (size_t i = 0; i < runs.size(); ++i) {
    const QuantSegment& seg = lw.segments_[i];
    const at::Tensor src = (runs[i].size() == 1 ? runs[i][0] : at::cat(runs[i], 0)).contiguous();
    PackQuantWeight(seg.format, src.data_ptr<uint8_t>(), seg.rows, k,
                    lw.data_.data_ptr<uint8_t>() + seg.offset);
  }
  lw.quantized_ = true;
  return lw;
}

LinearWeight LinearWeight::Prepare(at::Tensor w) {
  TORCH_CHECK(w.dim() == 2, "LinearWeight: the weight must be 2-D, got ", w.sizes());
  LinearWeight lw;
  lw.out_ = w.size(0);
  lw.in_ = w.size(1);
  if (!Packable(w)) {
    lw.data_ = std::move(w);
    return lw;
  }
  w = w.contiguous();
  lw.data_ = w.scalar_type() == at::kFloat ? PackTensor<float>(w) : PackTensor<uint16_t>(w);
  lw.packed_ = true;
  return lw;
}

LinearWeight LinearWeight::PrepareGated(at::Tensor gate_up) {
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.size(0) % 2 == 0,
              "LinearWeight: a gate/up weight must be 2-D with an even number of rows, got ",
              gate_up.sizes());
  if (!Packable(gate_up) || !FusionWanted()) return Prepare(std::move(gate_up));
  LinearWeight lw;
  lw.out_ = gate_up.size(0);
  lw.in_ = gate_up.size(1);
  gate_up = gate_up.contiguous();
  lw.data_ = gate_up.scalar_type() == at::kFloat ? PackGatedTensor<float>(gate_up)
                                                 : PackGatedTensor<uint16_t>(gate_up);
  lw.packed_ = true;
  lw.gated_ = true;
  return lw;
}

at::Tensor LinearWeight::Rows(const at::Tensor& index) const {
  TORCH_CHECK(!gated_, "LinearWeight: rows of a packed gate/up weight");
  if (gpu_quantized_) return internal::GpuQuantRows(*this, index);
  if (quantized_) {
    at::Tensor idx = index.to(at::kLong).contiguous();
    at::Tensor out = at::empty({idx.numel(), in_}, at::kFloat);
    const int64_t* ip = idx.data_ptr<int64_t>();
    for (int64_t i = 0; i < idx.numel(); ++i) {
      const int64_t row = std::clamp<int64_t>(ip[i], 0, out_ - 1);
      for (const QuantSegment& seg : segments_) {
        if (row < seg.row0 || row >= seg.row0 + seg.rows) continue;
        const int64_t local = row - seg.row0;
        UnpackQuantRows(seg.format, data_.data_ptr<uint8_t>() + seg.offset, seg.rows, in_, &local, 1,
                        out.data_ptr<float>() + i * in_);
      }
    }
    return out;
  }
  if (!packed_) return data_.index_select(0, index.clamp(0, out_ - 1));
  return dtype() == at::kFloat ? UnpackTensor<float>(data_, out_, in_, index)
                               : UnpackTensor<uint16_t>(data_, out_, in_, index);
}

at::Tensor Linear(const at::Tensor& x_in, const LinearWeight& w, const at::Tensor& bias_in) {
  if (w.gpu_quantized()) return internal::GpuQuantLinear(x_in, w, bias_in);
  if (w.quantized()) return QuantLinear(x_in, w, bias_in);
  if (!w.packed()) return Linear(x_in, w.plain(), bias_in);
  TORCH_CHECK(!w.gated(), "linear: a packed gate/up weight goes through LinearSwiGlu");
  StepPartTimer timer(StepPart::kProjections);
  const PackedInputs in = PackedOperands(x_in, w, bias_in);
  at::Tensor out = at::empty({in.x.size(0), w.out_features()}, in.x.options());
  RunPackedAny(in.x, w, in.bias, out, PackedEpilogue::kStore);
  return out;
}

at::Tensor LinearSwiGlu(const at::Tensor& x_in, const LinearWeight& gate_up) {
  if (gate_up.gpu_quantized()) return internal::GpuQuantLinearSwiGlu(x_in, gate_up);
  if (!gate_up.gated()) {
    if (x_in.is_cuda()) {
      StepPartTimer timer(StepPart::kProjections);
      if (at::Tensor y = CudaLinearSwiGlu(x_in, gate_up.plain()); y.defined()) return y;
    }
    at::Tensor gu = Linear(x_in, gate_up);
    StepPartTimer timer(StepPart::kElementwise);
    return SiluMul(gu.contiguous());
  }
  StepPartTimer timer(StepPart::kProjections);
  const PackedInputs in = PackedOperands(x_in, gate_up, at::Tensor());
  at::Tensor out = at::empty({in.x.size(0), gate_up.out_features() / 2}, in.x.options());
  RunPackedAny(in.x, gate_up, at::Tensor(), out, PackedEpilogue::kSwiGlu);
  return out;
}

void LinearAddTo(at::Tensor& y, const at::Tensor& x_in, const LinearWeight& w, const at::Tensor& bias_in) {
  if (w.gpu_quantized()) return internal::GpuQuantLinearAddTo(y, x_in, w, bias_in);
  if (w.quantized() && FusionWanted() && y.is_contiguous() && y.scalar_type() == x_in.scalar_type()) {
    StepPartTimer timer(StepPart::kProjections);
    const PackedInputs in = QuantOperands(x_in, w, bias_in);
    TORCH_CHECK(y.dim() == 2 && y.size(0) == in.x.size(0) && y.size(1) == w.out_features() &&
                    y.scalar_type() == in.x.scalar_type(),
                "linear_add_to: y ", y.sizes(), " for x ", in.x.sizes(), " and ", w.out_features(),
                " outputs");
    RunQuant(in.x, w, in.bias, y, QuantEpilogue::kAddTo);
    return;
  }
  if (!w.packed() || w.gated() || !FusionWanted()) {
    if (x_in.is_cuda() && !w.packed()) {
      StepPartTimer timer(StepPart::kProjections);
      if (CudaLinearAddTo(y, x_in, w.plain(), bias_in)) return;
    }
    at::Tensor partial = Linear(x_in, w, bias_in);
    StepPartTimer timer(StepPart::kElementwise);
    AddInPlace(y, partial);
    return;
  }
  StepPartTimer timer(StepPart::kProjections);
  const PackedInputs in = PackedOperands(x_in, w, bias_in);
  TORCH_CHECK(y.dim() == 2 && y.is_contiguous() && y.size(0) == in.x.size(0) &&
                  y.size(1) == w.out_features() && y.scalar_type() == w.dtype(),
              "linear_add_to: y ", y.sizes(), " for x ", in.x.sizes(), " and ", w.out_features(), " outputs");
  RunPackedAny(in.x, w, in.bias, y, PackedEpilogue::kAddTo);
}

at::Tensor Linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  StepPartTimer timer(StepPart::kProjections);
  return LinearImpl(x, w, bias);
}

int64_t GemvMaxRows(at::ScalarType dtype) {
  const int64_t env = CurrentKernelOptions().gemv_max_rows;
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
  // Off the CPU (CUDA), a few rows go to kernels/cuda/gemv.cu, the rest to ATen (cuBLAS).
  if (x.is_cuda()) {
    if (at::Tensor y = CudaLinear(x, w, bias); y.defined()) return y;
  }
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
