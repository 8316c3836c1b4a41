#include "kernels/fused.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <atomic>
#include <cmath>

#include "kernels/cpu/elementwise.h"
#include "kernels/cuda_fused.h"
#include "kernels/parallel.h"

namespace shardlm::kernels {
namespace {

std::atomic<bool> g_force_aten{false};

// The ATen-operator versions (see fused.h), rounding where the loops below do.
at::Tensor RmsNormAten(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor r = at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return (xf * r).to(x.scalar_type()) * weight;
}

}  // namespace

void ForceAtenOps(bool on) { g_force_aten.store(on); }
bool UseAtenOps(const at::Tensor& t) { return !t.device().is_cpu() || g_force_aten.load(); }

namespace {

// Rows per parallel task: element-wise work is tiny, so only large steps
// (prefill) are split across threads.
int64_t Grain(int64_t row_elems) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, row_elems)); }

template <typename Fn>
void DispatchDtype(at::ScalarType t, Fn&& fn) {
  if (t == at::kFloat) {
    fn(float{});
  } else {
    TORCH_CHECK(t == at::kBFloat16, "kernels support f32 and bf16, got ", t);
    fn(c10::BFloat16{});
  }
}

template <typename T>
void NormRow(const T* x, const T* w, T* out, int64_t dim, float eps) {
  float ss = 0.0f;
  for (int64_t i = 0; i < dim; ++i) {
    const float v = static_cast<float>(x[i]);
    ss += v * v;
  }
  const float r = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
  for (int64_t i = 0; i < dim; ++i) {
    // Cast to the dtype, then scale in it (as HF's `weight * x.to(dtype)`).
    const T normed = static_cast<T>(static_cast<float>(x[i]) * r);
    out[i] = static_cast<T>(static_cast<float>(normed) * static_cast<float>(w[i]));
  }
}

// The data of an f32 or bf16 tensor as the vector kernels take it (bf16 as its bits).
template <typename T>
T* Data(const at::Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// Runs fn(f32 kernel) or fn(bf16 kernel) where this CPU has the one for x's
// dtype (kernels/cpu/elementwise.h); false where it has neither.
template <typename F32Fn, typename Bf16Fn, typename Fn>
bool WithVectorKernel(const at::Tensor& x, F32Fn f32_kernel, Bf16Fn bf16_kernel, Fn&& fn) {
  const Isa isa = ActiveIsa();
  if (x.scalar_type() == at::kFloat && f32_kernel(isa) != nullptr) {
    fn(f32_kernel(isa), float{});
    return true;
  }
  if (x.scalar_type() == at::kBFloat16 && bf16_kernel(isa) != nullptr) {
    fn(bf16_kernel(isa), uint16_t{});
    return true;
  }
  return false;
}

}  // namespace

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.dim() == 2 && x.stride(1) == 1 && weight.is_contiguous() && weight.numel() == x.size(1),
              "rms_norm: x ", x.sizes(), " weight ", weight.sizes());
  if (UseAtenOps(x)) {
    if (at::Tensor y = CudaRmsNorm(x, weight, eps); y.defined()) return y;
    return RmsNormAten(x, weight, eps);
  }
  at::Tensor out = at::empty(x.sizes(), x.options());
  const int64_t rows = x.size(0), dim = x.size(1), ld = x.stride(0);
  const float feps = static_cast<float>(eps);
  const bool vector = WithVectorKernel(x, RmsNormF32Kernel, RmsNormBf16Kernel, [&](auto fn, auto tag) {
    using T = decltype(tag);
    const T* xp = Data<T>(x);
    const T* wp = Data<T>(weight);
    T* op = Data<T>(out);
    ParallelFor(0, rows, Grain(dim), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) fn(xp + r * ld, wp, op + r * dim, dim, feps);
    });
  });
  if (vector) return out;
  DispatchDtype(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data_ptr<T>();
    const T* wp = weight.data_ptr<T>();
    T* op = out.data_ptr<T>();
    ParallelFor(0, rows, Grain(dim), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) NormRow(xp + r * ld, wp, op + r * dim, dim, static_cast<float>(eps));
    });
  });
  return out;
}

void RmsNormHeadsInPlace(at::Tensor& x, int64_t first_head, int64_t heads, int64_t head_dim,
                         const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.dim() == 2 && x.stride(1) == 1 && (first_head + heads) * head_dim <= x.size(1) &&
                  weight.numel() == head_dim,
              "rms_norm heads: x ", x.sizes(), " heads ", first_head, "+", heads, " of ", head_dim);
  const int64_t rows = x.size(0), ld = x.stride(0);
  if (UseAtenOps(x)) {
    at::Tensor part = x.narrow(1, first_head * head_dim, heads * head_dim).view({rows, heads, head_dim});
    part.copy_(RmsNormAten(part, weight, eps));
    return;
  }
  const float feps = static_cast<float>(eps);
  const bool vector = WithVectorKernel(x, RmsNormF32Kernel, RmsNormBf16Kernel, [&](auto fn, auto tag) {
    using T = decltype(tag);
    T* xp = Data<T>(x);
    const T* wp = Data<T>(weight);
    ParallelFor(0, rows, Grain(heads * head_dim), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        for (int64_t h = first_head; h < first_head + heads; ++h) {
          T* row = xp + r * ld + h * head_dim;
          fn(row, wp, row, head_dim, feps);
        }
      }
    });
  });
  if (vector) return;
  DispatchDtype(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    T* xp = x.data_ptr<T>();
    const T* wp = weight.data_ptr<T>();
    ParallelFor(0, rows, Grain(heads * head_dim), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        for (int64_t h = first_head; h < first_head + heads; ++h) {
          T* row = xp + r * ld + h * head_dim;
          NormRow(row, wp, row, head_dim, static_cast<float>(eps));  // reads a value before writing it
        }
      }
    });
  });
}

void RotaryInPlace(at::Tensor& x, int64_t heads, int64_t head_dim, const at::Tensor& cos,
                   const at::Tensor& sin) {
  const int64_t half = head_dim / 2, rows = x.size(0), ld = x.stride(0);
  TORCH_CHECK(x.dim() == 2 && x.stride(1) == 1 && heads * head_dim <= x.size(1) && cos.is_contiguous() &&
                  sin.is_contiguous() && cos.scalar_type() == at::kFloat && cos.numel() == rows * half &&
                  sin.numel() == rows * half,
              "rotary: x ", x.sizes(), " cos ", cos.sizes());
  if (UseAtenOps(x)) {
    if (CudaRotaryInPlace(x, heads, head_dim, cos, sin)) return;
    // Rotate-half in f32, rounded once to the dtype, as the loop below does.
    at::Tensor heads_view = x.narrow(1, 0, heads * head_dim).view({rows, heads, head_dim});
    at::Tensor xf = heads_view.to(at::kFloat);
    at::Tensor x1 = xf.narrow(2, 0, half), x2 = xf.narrow(2, half, half);
    at::Tensor c = cos.view({rows, 1, half}), s = sin.view({rows, 1, half});
    heads_view.copy_(at::cat({x1 * c - x2 * s, x2 * c + x1 * s}, 2));
    return;
  }
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  const bool vector = WithVectorKernel(x, RotaryF32Kernel, RotaryBf16Kernel, [&](auto fn, auto tag) {
    using T = decltype(tag);
    T* xp = Data<T>(x);
    ParallelFor(0, rows, Grain(heads * head_dim), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) fn(xp + r * ld, heads, half, cp + r * half, sp + r * half);
    });
  });
  if (vector) return;
  DispatchDtype(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    T* xp = x.data_ptr<T>();
    ParallelFor(0, rows, Grain(heads * head_dim), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const float* c = cp + r * half;
        const float* s = sp + r * half;
        for (int64_t h = 0; h < heads; ++h) {
          T* v = xp + r * ld + h * head_dim;
          for (int64_t i = 0; i < half; ++i) {
            const float x1 = static_cast<float>(v[i]), x2 = static_cast<float>(v[i + half]);
            v[i] = static_cast<T>(x1 * c[i] - x2 * s[i]);
            v[i + half] = static_cast<T>(x2 * c[i] + x1 * s[i]);
          }
        }
      }
    });
  });
}

void AddInPlace(at::Tensor& x, const at::Tensor& y) {
  TORCH_CHECK(
      x.is_contiguous() && y.is_contiguous() && x.numel() == y.numel() && x.scalar_type() == y.scalar_type(),
      "add: x ", x.sizes(), " y ", y.sizes());
  if (UseAtenOps(x)) {
    x.add_(y);  // in f32, rounded once to the dtype
    return;
  }
  const int64_t n = x.numel();
  const bool vector = WithVectorKernel(x, AddF32Kernel, AddBf16Kernel, [&](auto fn, auto tag) {
    using T = decltype(tag);
    T* xp = Data<T>(x);
    const T* yp = Data<T>(y);
    ParallelFor(0, n, 1 << 16, [&](int64_t b, int64_t e) { fn(xp + b, yp + b, e - b); });
  });
  if (vector) return;
  DispatchDtype(x.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    T* xp = x.data_ptr<T>();
    const T* yp = y.data_ptr<T>();
    ParallelFor(0, n, 1 << 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        xp[i] = static_cast<T>(static_cast<float>(xp[i]) + static_cast<float>(yp[i]));
    });
  });
}

namespace {

// SiLU x up through a vector kernel (kernels/cpu/elementwise.h), row by row:
// gate_up row r is [gate | up], each `inter` long.
template <typename T, typename Fn>
void SiluMulRows(Fn fn, const T* gate_up, T* out, int64_t rows, int64_t inter) {
  ParallelFor(0, rows, Grain(inter), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      fn(gate_up + r * 2 * inter, gate_up + r * 2 * inter + inter, out + r * inter, inter);
  });
}

}  // namespace

at::Tensor SiluMul(const at::Tensor& gate_up) {
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.is_contiguous() && gate_up.size(1) % 2 == 0,
              "silu_mul: ", gate_up.sizes());
  const int64_t rows = gate_up.size(0), inter = gate_up.size(1) / 2;
  if (UseAtenOps(gate_up)) {
    if (at::Tensor y = CudaSiluMul(gate_up); y.defined()) return y;
    // silu rounded to the dtype, then the product (HF: act_fn(gate) * up).
    return at::silu(gate_up.narrow(1, 0, inter)) * gate_up.narrow(1, inter, inter);
  }
  at::Tensor out = at::empty({rows, inter}, gate_up.options());
  const Isa isa = ActiveIsa();
  if (gate_up.scalar_type() == at::kFloat && SiluMulF32Kernel(isa) != nullptr) {
    SiluMulRows(SiluMulF32Kernel(isa), gate_up.data_ptr<float>(), out.data_ptr<float>(), rows, inter);
    return out;
  }
  if (gate_up.scalar_type() == at::kBFloat16 && SiluMulBf16Kernel(isa) != nullptr) {
    SiluMulRows(SiluMulBf16Kernel(isa), static_cast<const uint16_t*>(gate_up.data_ptr()),
                static_cast<uint16_t*>(out.data_ptr()), rows, inter);
    return out;
  }
  DispatchDtype(gate_up.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    const T* gp = gate_up.data_ptr<T>();
    T* op = out.data_ptr<T>();
    ParallelFor(0, rows, Grain(inter), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* g = gp + r * 2 * inter;
        const T* u = g + inter;
        T* o = op + r * inter;
        for (int64_t i = 0; i < inter; ++i) {
          const float gv = static_cast<float>(g[i]);
          // silu rounded to the dtype, then the product (HF: act_fn(gate) * up).
          const T act = static_cast<T>(gv / (1.0f + std::exp(-gv)));
          o[i] = static_cast<T>(static_cast<float>(act) * static_cast<float>(u[i]));
        }
      }
    });
  });
  return out;
}

at::Tensor ToFloat32(const at::Tensor& x) {
  if (x.scalar_type() == at::kFloat) return x;
  if (UseAtenOps(x) || x.scalar_type() != at::kBFloat16 || !x.is_contiguous()) return x.to(at::kFloat);
  at::Tensor out = at::empty(x.sizes(), x.options().dtype(at::kFloat));
  const uint16_t* xp = Data<uint16_t>(x);
  float* op = out.data_ptr<float>();
  ParallelFor(0, x.numel(), 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) op[i] = Bf16ToFloat(xp[i]);
  });
  return out;
}

}  // namespace shardlm::kernels
